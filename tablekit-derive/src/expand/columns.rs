//! The `{Name}Columns` block: the typed column handles of the query DSL, for
//! structs and enums alike.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Type;

use super::{d, tk};
use crate::ast::{Container, Data, Field, Kind};
use crate::ty;

/// The value type of a field's column: the field's type without an outer
/// `Option`. Decided from the syntax, not through the `Property` trait, so an
/// unsupported field type is reported once (at the field), not again in the
/// columns type.
pub(super) fn column_value_type(f: &Field) -> TokenStream {
    let inner: &Type = ty::strip_option(f.ty);
    quote!(#inner)
}

/// Fields with a column: the stored ones that are one property each.
pub(super) fn column_fields<'c, 'a>(c: &'c Container<'a>) -> impl Iterator<Item = &'c Field<'a>> {
    c.fields()
        .iter()
        .filter(|f| f.is_stored() && !matches!(f.kind, Kind::Flatten))
}

/// The `{Name}Columns` block of a struct or an enum (whose columns are the key
/// and Timestamp ones only): the type's definition, which sits beside the
/// entity type, and its impls, which go inside the `const _` block.
pub(super) fn columns(c: &Container) -> (TokenStream, TokenStream) {
    let tk = tk(c);
    let d = d(c);
    let ident = c.ident;
    let vis = c.vis;
    let columns_ident = format_ident!("{}Columns", ident);
    let mut defs = Vec::new();
    let mut inits = Vec::new();
    for f in column_fields(c) {
        let fi = f.ident;
        let v = column_value_type(f);
        let name = &f.name;
        let doc = format!(" The `{}` property (field `{}`).", f.name, f.rust_name());
        if f.attrs.encrypt.is_some() {
            let doc = format!(
                " The `{}` property (field `{}`), stored encrypted: no filter can compare it.",
                f.name,
                f.rust_name()
            );
            defs.push(quote! {
                #[doc = #doc]
                pub #fi: #tk::__private_0_1::EncryptedColumn<#ident, #v>
            });
            inits.push(quote!(#fi: #tk::__private_0_1::EncryptedColumn::new(#name)));
            continue;
        }
        defs.push(quote! {
            #[doc = #doc]
            pub #fi: #tk::__private_0_1::Column<#ident, #v>
        });
        inits.push(match f.kind {
            Kind::Edm(edm) => {
                let edm = format_ident!("{}", edm);
                quote!(#fi: #tk::__private_0_1::Column::with_edm(#name, #tk::__private_0_1::EdmType::#edm))
            }
            _ => quote!(#fi: #tk::__private_0_1::Column::new(#name)),
        });
    }
    let doc = match c.data {
        Data::Enum(_) => {
            format!(" The typed column handles of [`{ident}`]: the key and Timestamp columns.")
        }
        _ => format!(
            " The typed column handles of [`{ident}`], one per stored property plus the key and Timestamp columns, for the query DSL (`<{ident} as tablekit::filter::EntityColumns>::columns()`)."
        ),
    };
    let def = quote! {
        #[doc = #doc]
        #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::marker::Copy)]
        #[allow(private_interfaces)]
        #vis struct #columns_ident {
            /// The PartitionKey.
            pub partition_key: #tk::__private_0_1::Column<#ident, #d::String>,
            /// The RowKey.
            pub row_key: #tk::__private_0_1::Column<#ident, #d::String>,
            /// The service's Timestamp: when the entity was last written.
            pub timestamp: #tk::__private_0_1::Column<#ident, #d::DateTime<#d::Utc>>,
            #(#defs,)*
        }
    };
    let imp = quote! {
        #[automatically_derived]
        impl #d::DerivedColumns for #columns_ident {
            const COLUMNS: Self = #columns_ident {
                partition_key: #tk::__private_0_1::Column::new("PartitionKey"),
                row_key: #tk::__private_0_1::Column::new("RowKey"),
                timestamp: #tk::__private_0_1::Column::new("Timestamp"),
                #(#inits,)*
            };
        }

        static __TK_COLUMNS: #columns_ident = <#columns_ident as #d::DerivedColumns>::COLUMNS;

        #[automatically_derived]
        impl #tk::__private_0_1::EntityColumns for #ident {
            type Columns = #columns_ident;
            fn columns() -> &'static #columns_ident {
                &__TK_COLUMNS
            }
        }
    };
    (def, imp)
}
