//! Code generation. Reads only the IR ([`crate::ast`]), after the check pass.
//!
//! One job per module: [`entity`] (the `TableEntity` impl of a struct),
//! [`properties`] (the `TableProperties` impl), [`enums`] (the `TableEntity`
//! impl of an enum), built from [`keys`] (key text, checks and builders),
//! [`encode`] and [`decode`] (the property walks), [`columns`] (the
//! `{Name}Columns` block) and [`projection`] (compile-time projection checks).
//!
//! Generated code names only `::tablekit::...` (support items under
//! `::tablekit::__private_0_1`) and `::core::...` paths, prefixes its local names
//! with `__tk_`, and sits in `const _: () = { ... };` except for the public
//! `{Name}Columns` type. With `#[tablekit(crate = "path")]`, `path` takes the
//! place of `::tablekit` everywhere (`tk`).

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{DeriveInput, Ident};

use crate::ast::{Container, Data, KeyKind, Mode};
use crate::check;
use crate::ctxt::Ctxt;
use crate::fallback;

mod columns;
mod decode;
mod encode;
mod entity;
mod enums;
mod keys;
mod projection;
mod properties;

/// The whole derive: parse, check, then generate (or report and stub).
pub(crate) fn derive(input: TokenStream, mode: Mode) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(i) => i,
        Err(e) => return e.to_compile_error(),
    };
    let cx = Ctxt::default();
    let c = Container::from_ast(&cx, &input, mode);
    // The check pass runs even after parse errors, on what did parse, so that
    // every mistake of one build is reported at once.
    check::check(&cx, &c);
    if let Some(errors) = cx.into_compile_errors() {
        let stub = fallback::stub(&c);
        return quote! { #errors #stub };
    }
    match (&c.data, mode) {
        (Data::Struct(_), Mode::Entity) => entity::entity_struct(&c),
        (Data::Struct(_), Mode::Properties) => properties::properties_struct(&c),
        (Data::Enum(_), _) => enums::entity_enum(&c),
        (Data::Unsupported, _) => TokenStream::new(),
    }
}

/// The path of the tablekit crate (`::tablekit` unless `crate = "..."`).
fn tk<'c>(c: &'c Container) -> &'c syn::Path {
    &c.krate
}

/// The support module of the generated code.
fn d(c: &Container) -> TokenStream {
    let tk = tk(c);
    quote!(#tk::__private_0_1)
}

/// `Result<T, tablekit::Error>`.
fn result(c: &Container, t: TokenStream) -> TokenStream {
    let tk = tk(c);
    quote!(::core::result::Result<#t, #tk::Error>)
}

/// `tablekit::error::KeyKind` of a key.
fn key_kind_path(c: &Container, k: KeyKind) -> TokenStream {
    let tk = tk(c);
    match k {
        KeyKind::Partition => quote!(#tk::__private_0_1::KeyKind::PartitionKey),
        KeyKind::Row => quote!(#tk::__private_0_1::KeyKind::RowKey),
    }
}

/// The marker type of an Edm type chosen with `edm = "..."`.
fn edm_marker(c: &Container, name: &str) -> TokenStream {
    let d = d(c);
    let ident = Ident::new(name, Span::call_site());
    quote!(#d::as_edm::#ident)
}

/// The `TABLE_NAME` const of a type with `table = "..."`.
fn table_const(c: &Container) -> TokenStream {
    let Some(t) = &c.attrs.table else {
        return TokenStream::new();
    };
    let vis = c.vis;
    let t = &t.value;
    quote! {
        /// The name of the table this type is stored in.
        #vis const TABLE_NAME: &'static ::core::primitive::str = #t;
    }
}
