//! Writing: the walk of a value's stored fields into a `PropertyWriter`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::keys::{key_checks, Source};
use super::{d, edm_marker, tk};
use crate::ast::{Container, Field, Kind, Mode};
use crate::ty;

/// Writes one stored field.
fn write_field(c: &Container, f: &Field) -> TokenStream {
    let d = d(c);
    let ident = f.ident;
    let ty = f.ty;
    let name = &f.name;
    let span = ty.span();
    match &f.kind {
        Kind::Native => quote_spanned! {span=>
            <#ty as #d::Property>::write_to(&self.#ident, #name, __tk_out)?;
        },
        Kind::Edm(m) => {
            let m = edm_marker(c, m);
            quote_spanned! {span=>
                <#ty as #d::PropertyAs<#m>>::write_as(&self.#ident, #name, __tk_out)?;
            }
        }
        Kind::Json | Kind::AsStr => {
            let func = if matches!(f.kind, Kind::Json) {
                quote!(write_json)
            } else {
                quote!(write_display)
            };
            if ty::option_inner(ty).is_some() {
                quote_spanned! {span=>
                    if let ::core::option::Option::Some(__tk_v) = &self.#ident {
                        #d::#func(__tk_v, #name, __tk_out)?;
                    }
                }
            } else {
                quote_spanned! {span=> #d::#func(&self.#ident, #name, __tk_out)?; }
            }
        }
        Kind::With(path) => quote_spanned! {path.span()=>
            #path::write(&self.#ident, #name, __tk_out)?;
        },
        Kind::Flatten => quote_spanned! {span=>
            <#ty as #d::TableProperties>::write_properties(
                &self.#ident,
                &mut #d::Prefixed::new(#name, __tk_out),
            )?;
        },
        Kind::Skip | Kind::ETag | Kind::Timestamp => TokenStream::new(),
    }
}

pub(super) fn write_body(c: &Container) -> TokenStream {
    let tk = tk(c);
    let mut body = TokenStream::new();
    if c.mode == Mode::Entity {
        for s in c.partition_keys.iter().chain(&c.row_keys).take(2) {
            body.extend(key_checks(c, s, Source::SelfFields));
        }
    }
    for f in c.fields().iter().filter(|f| f.is_stored()) {
        body.extend(write_field(c, f));
    }
    if let Some((version, name)) = c.version_property() {
        body.extend(quote!(#tk::__private_0_1::PropertyWriter::int32(__tk_out, #name, #version)?;));
    }
    body
}
