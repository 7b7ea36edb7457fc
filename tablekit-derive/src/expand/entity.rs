//! `#[derive(TableEntity)]` on a struct: the `TableEntity` impl, the inherent
//! items (key builders, consts, the current-schema decoder) and the columns.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::columns::{column_fields, columns};
use super::decode::decode_body;
use super::encode::write_body;
use super::keys::{key_builders, key_value, Source};
use super::projection::projection_checks;
use super::{d, result, table_const, tk};
use crate::ast::{Container, Kind};

pub(super) fn entity_struct(c: &Container) -> TokenStream {
    let tk = tk(c);
    let d = d(c);
    let ident = c.ident;
    let vis = c.vis;
    let fields = c.fields();
    let (Some(pk), Some(rk)) = (c.partition_keys.first(), c.row_keys.first()) else {
        return TokenStream::new();
    };
    let pk_value = key_value(c, pk, Source::SelfFields);
    let rk_value = key_value(c, rk, Source::SelfFields);
    let write = write_body(c);
    let body = decode_body(c, false);
    let entity = quote!(__tk_entity: &#tk::__private_0_1::RawEntity<'_>);
    let ret_self = result(c, quote!(Self));

    let mut inherent = key_builders(c);
    let decode = match (c.version_property(), &c.attrs.upgrade) {
        (Some((version, name)), Some(upgrade)) => {
            let hook = &upgrade.value;
            let doc = format!(
                " Decodes an entity with the current schema (version {version}), without the upgrade hook: what the hook calls for the parts that did not change."
            );
            inherent.extend(quote! {
                #[doc = #doc]
                #vis fn decode_current_schema(#entity) -> #ret_self {
                    #body
                }
            });
            let call = quote_spanned!(hook.span()=> #hook(__tk_entity, __tk_stored));
            quote! {
                let __tk_stored: ::core::primitive::i32 = match #tk::__private_0_1::RawEntity::get(__tk_entity, #name) {
                    ::core::option::Option::Some(__tk_v) => #d::read_version(__tk_v)?,
                    ::core::option::Option::None => 0,
                };
                if __tk_stored < #version {
                    return #call;
                }
                Self::decode_current_schema(__tk_entity)
            }
        }
        _ => body,
    };
    if let Some((version, name)) = c.version_property() {
        inherent.extend(quote! {
            /// The schema version this type writes.
            #vis const SCHEMA_VERSION: ::core::primitive::i32 = #version;
            /// The property that stores the schema version.
            #vis const VERSION_PROPERTY: &'static ::core::primitive::str = #name;
        });
    }
    inherent.extend(table_const(c));

    let etag_field = fields.iter().find(|f| matches!(f.kind, Kind::ETag));
    let ts_field = fields.iter().find(|f| matches!(f.kind, Kind::Timestamp));
    let mut extra = TokenStream::new();
    if let Some(f) = etag_field {
        let fi = f.ident;
        extra.extend(quote! {
            fn etag(&self) -> ::core::option::Option<&#tk::ETag> {
                ::core::option::Option::as_ref(&self.#fi)
            }
            fn set_etag(&mut self, etag: #tk::ETag) {
                self.#fi = ::core::option::Option::Some(etag);
            }
        });
    }
    if let Some(f) = ts_field {
        let fi = f.ident;
        extra.extend(quote! {
            fn set_timestamp(&mut self, timestamp: #d::DateTime<#d::Utc>) {
                self.#fi = ::core::option::Option::Some(::core::convert::From::from(timestamp));
            }
        });
    }
    // A derived type converts by its schema, so it needs no type annotations.
    // Query answers without metadata carry no ETag, so a type that keeps the
    // ETag asks for annotations (minimal metadata) to get it.
    let needs = etag_field.is_some();
    // Flattened names are built at run time (`Outer_Inner`): only a struct
    // without them has every name checked, and unique, at compile time.
    let names_checked = !fields.iter().any(|f| matches!(f.kind, Kind::Flatten));
    extra.extend(quote! {
        fn needs_type_annotations() -> ::core::primitive::bool { #needs }
        fn property_names_checked() -> ::core::primitive::bool { #names_checked }
        fn unique_property_names() -> ::core::primitive::bool { #names_checked }
    });
    // The properties stored encrypted (client-side encryption).
    let encrypted: Vec<&str> = column_fields(c)
        .filter(|f| f.attrs.encrypt.is_some())
        .map(|f| f.name.as_str())
        .collect();
    if !encrypted.is_empty() {
        extra.extend(quote! {
            fn encrypted_properties() -> &'static [&'static ::core::primitive::str] {
                &[#(#encrypted),*]
            }
        });
    }
    // The RowKey template's leading literal (`empid_`), when it has one.
    if let Some(crate::ast::KeyPart::Lit(prefix)) = rk.parts.first() {
        extra.extend(quote! {
            fn row_key_prefix() -> &'static ::core::primitive::str { #prefix }
        });
    }
    let mut projection = TokenStream::new();
    if let Some(src) = &c.attrs.projection_of {
        let has_flatten = fields.iter().any(|f| matches!(f.kind, Kind::Flatten));
        if !has_flatten {
            let mut names: Vec<String> = column_fields(c).map(|f| f.name.clone()).collect();
            if let Some((_, v)) = c.version_property() {
                names.push(v);
            }
            let names = names.iter();
            extra.extend(quote! {
                fn select() -> ::core::option::Option<&'static [&'static ::core::primitive::str]> {
                    ::core::option::Option::Some(&[#(#names),*])
                }
            });
        }
        projection = projection_checks(c, &src.value);
    }
    let (columns_def, columns_impl) = columns(c);

    quote! {
        #columns_def

        #[allow(clippy::needless_question_mark)]
        const _: () = {
            #[automatically_derived]
            impl #tk::TableEntity for #ident {
                fn partition_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    #pk_value
                }
                fn row_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    #rk_value
                }
                fn write_properties<__TkW: #tk::__private_0_1::PropertyWriter + ?::core::marker::Sized>(
                    &self,
                    __tk_out: &mut __TkW,
                ) -> #d::Result<()> {
                    #write
                    ::core::result::Result::Ok(())
                }
                fn decode(#entity) -> #ret_self {
                    #decode
                }
                #extra
            }

            #[automatically_derived]
            impl #ident {
                #inherent
            }

            #columns_impl
            #projection
        };
    }
}
