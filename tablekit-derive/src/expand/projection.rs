//! `projection_of`: compile-time checks of a projection's fields against the
//! type it projects.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::columns::{column_fields, column_value_type};
use super::{d, tk};
use crate::ast::{Container, Kind};

/// Compile-time checks of a projection against the type it projects: each
/// field exists there (`no field` error listing the candidates), with the same
/// value type (`mismatched types`) and the same property name (a failed
/// constant assertion), each reported at the projection's field.
pub(super) fn projection_checks(c: &Container, src: &syn::Path) -> TokenStream {
    let tk = tk(c);
    let d = d(c);
    let mut checks = Vec::new();
    for f in column_fields(c).filter(|f| !f.in_key()) {
        let fi = f.ident;
        let name = &f.name;
        let msg = format!(
            "{}.{} is stored as {:?}, but {} stores its `{}` under another name: rename the projection's field to match",
            c.ident,
            f.rust_name(),
            f.name,
            quote!(#src),
            f.rust_name()
        );
        let span = fi.span();
        let source = respan(
            quote!(<<#src as #tk::__private_0_1::EntityColumns>::Columns as #d::DerivedColumns>::COLUMNS.#fi),
            span,
        );
        let v = column_value_type(f);
        let annot = quote_spanned!(f.ty.span()=> #tk::__private_0_1::Column<#src, #v>);
        // The stored Edm type must agree too when either side overrides it
        // (`edm = "Int64"` on an i32): the same Rust type could read the other
        // side's values wrongly.
        let (edm_pattern, edm_text) = match f.kind {
            Kind::Edm(edm) => {
                let e = format_ident!("{}", edm);
                (
                    quote!(::core::option::Option::Some(#tk::__private_0_1::EdmType::#e)),
                    format!("Edm.{edm}"),
                )
            }
            _ => (
                quote!(::core::option::Option::None),
                "its natural Edm type".to_owned(),
            ),
        };
        let edm_msg = format!(
            "{}.{} is stored as {edm_text}, but {} stores its `{}` as another Edm type: give the projection's field the same `edm`",
            c.ident,
            f.rust_name(),
            quote!(#src),
            f.rust_name()
        );
        let assert = quote_spanned! {span=>
            ::core::assert!(#d::str_eq(__TK_COLUMN.name(), #name), #msg);
            ::core::assert!(::core::matches!(__TK_COLUMN.edm(), #edm_pattern), #edm_msg);
        };
        checks.push(quote! {
            const _: () = {
                const __TK_COLUMN: #annot = #source;
                #assert
            };
        });
    }
    quote!(#(#checks)*)
}

/// `tokens` with every span set to `span`, so a compiler error about them
/// points at one place.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let proc_macro2::TokenTree::Group(g) = &tt {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = proc_macro2::TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
