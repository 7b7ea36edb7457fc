//! `#[derive(TableEntity)]` on an enum: heterogeneous entity types in one
//! table, told apart by a discriminator property or a RowKey prefix.

use proc_macro2::TokenStream;
use quote::quote;
use syn::Ident;

use super::columns::columns;
use super::{d, table_const, tk};
use crate::ast::{Container, Data};

pub(super) fn entity_enum(c: &Container) -> TokenStream {
    let tk = tk(c);
    let d = d(c);
    let ident = c.ident;
    let vis = c.vis;
    let Data::Enum(variants) = &c.data else {
        return TokenStream::new();
    };
    let by_prefix = c.attrs.row_key_prefix.is_some();
    let disc = c.discriminator();
    let each = |body: &dyn Fn(&Ident) -> TokenStream| -> Vec<TokenStream> {
        variants
            .iter()
            .map(|v| {
                let vi = v.ident;
                let b = body(vi);
                quote!(Self::#vi(__tk_v) => #b)
            })
            .collect()
    };
    let pk = each(&|_| quote!(#tk::TableEntity::partition_key(__tk_v)));
    let rk = each(&|_| quote!(#tk::TableEntity::row_key(__tk_v)));
    let etag = each(&|_| quote!(#tk::TableEntity::etag(__tk_v)));
    let set_etag = each(&|_| quote!(#tk::TableEntity::set_etag(__tk_v, etag)));
    let set_ts = each(&|_| quote!(#tk::TableEntity::set_timestamp(__tk_v, timestamp)));
    let write: Vec<TokenStream> = variants
        .iter()
        .map(|v| {
            let vi = v.ident;
            let tag = &v.tag;
            if by_prefix || v.attrs.unknown.is_some() {
                quote!(Self::#vi(__tk_v) => #tk::TableEntity::write_properties(__tk_v, __tk_out))
            } else {
                quote!(Self::#vi(__tk_v) => {
                    #tk::TableEntity::write_properties(__tk_v, __tk_out)?;
                    #tk::__private_0_1::PropertyWriter::string(__tk_out, #disc, #tag)
                })
            }
        })
        .collect();
    let known: Vec<_> = variants
        .iter()
        .filter(|v| v.attrs.unknown.is_none())
        .collect();
    let unknown = variants.iter().find(|v| v.attrs.unknown.is_some());
    let ty_name = ident.to_string();
    let source = if by_prefix {
        "RowKey prefix".to_owned()
    } else {
        format!("property {disc:?}")
    };
    let fallback = |value: TokenStream| match unknown {
        Some(v) => {
            let vi = v.ident;
            let vt = v.ty;
            quote!(::core::result::Result::Ok(Self::#vi(<#vt as #tk::TableEntity>::decode(__tk_entity)?)))
        }
        None => quote!(::core::result::Result::Err(#d::unknown_variant(#ty_name, #source, #value))),
    };
    let decode = if by_prefix {
        let tests = known.iter().map(|v| {
            let vi = v.ident;
            let vt = v.ty;
            let tag = &v.tag;
            quote! {
                if ::core::primitive::str::starts_with(__tk_rk, #tag) {
                    return ::core::result::Result::Ok(Self::#vi(<#vt as #tk::TableEntity>::decode(__tk_entity)?));
                }
            }
        });
        let fb = fallback(quote!(::core::option::Option::Some(__tk_rk)));
        quote! {
            let __tk_rk = #tk::__private_0_1::RawEntity::row_key(__tk_entity);
            #(#tests)*
            #fb
        }
    } else {
        let arms = known.iter().map(|v| {
            let vi = v.ident;
            let vt = v.ty;
            let tag = &v.tag;
            quote!(::core::option::Option::Some(#tag) => ::core::result::Result::Ok(Self::#vi(<#vt as #tk::TableEntity>::decode(__tk_entity)?)))
        });
        let fb = fallback(quote!(__tk_other));
        quote! {
            let __tk_tag = match #tk::__private_0_1::RawEntity::get(__tk_entity, #disc) {
                ::core::option::Option::Some(__tk_p) => ::core::option::Option::Some(#tk::__private_0_1::PropertyValue::as_str(&__tk_p)?),
                ::core::option::Option::None => ::core::option::Option::None,
            };
            match __tk_tag {
                #(#arms,)*
                __tk_other => #fb,
            }
        }
    };
    let needs = variants
        .iter()
        .filter_map(|v| v.ty)
        .map(|t| quote!(|| <#t as #tk::TableEntity>::needs_type_annotations()));
    let variant_types: Vec<_> = variants.iter().filter_map(|v| v.ty).collect();
    let encrypted = quote! {
        fn encrypted_properties() -> &'static [&'static ::core::primitive::str] {
            static __TK_ENCRYPTED: #d::OnceLock<#d::NameList> = #d::OnceLock::new();
            #d::union_names(
                &__TK_ENCRYPTED,
                &[#(<#variant_types as #tk::TableEntity>::encrypted_properties()),*],
            )
        }
    };
    let tag_doc = format!(
        " The discriminator value of each variant ({}).",
        if by_prefix {
            "its RowKey prefix".to_owned()
        } else {
            format!("its `{disc}` property")
        }
    );
    let tag_arms = variants
        .iter()
        .filter(|v| v.attrs.unknown.is_none())
        .map(|v| {
            let vi = v.ident;
            let tag = &v.tag;
            quote!(Self::#vi(_) => ::core::option::Option::Some(#tag))
        });
    let table_const = table_const(c);
    let tag_rest = unknown.map(|v| {
        let vi = v.ident;
        quote!(Self::#vi(_) => ::core::option::Option::None,)
    });
    let (columns_def, columns_impl) = columns(c);
    quote! {
        #columns_def

        #[allow(clippy::needless_question_mark)]
        const _: () = {
            #[automatically_derived]
            impl #tk::TableEntity for #ident {
                fn partition_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    match self { #(#pk,)* }
                }
                fn row_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    match self { #(#rk,)* }
                }
                fn write_properties<__TkW: #tk::__private_0_1::PropertyWriter + ?::core::marker::Sized>(
                    &self,
                    __tk_out: &mut __TkW,
                ) -> #d::Result<()> {
                    match self { #(#write,)* }
                }
                fn decode(__tk_entity: &#tk::__private_0_1::RawEntity<'_>) -> #d::Result<Self> {
                    #decode
                }
                fn etag(&self) -> ::core::option::Option<&#tk::ETag> {
                    match self { #(#etag,)* }
                }
                fn set_etag(&mut self, etag: #tk::ETag) {
                    match self { #(#set_etag,)* }
                }
                fn set_timestamp(&mut self, timestamp: #d::DateTime<#d::Utc>) {
                    match self { #(#set_ts,)* }
                }
                fn needs_type_annotations() -> ::core::primitive::bool {
                    false #(#needs)*
                }
                #encrypted
            }

            #[automatically_derived]
            impl #ident {
                #[doc = #tag_doc]
                #vis fn discriminator(&self) -> ::core::option::Option<&'static ::core::primitive::str> {
                    match self { #(#tag_arms,)* #tag_rest }
                }
                #table_const
            }

            #columns_impl
        };
    }
}
