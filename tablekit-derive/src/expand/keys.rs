//! Keys: the key text of a value, the checks that make a field's text safe in
//! a key, the generated key builders, and the split of a stored key back into
//! its fields.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Ident;

use super::{d, key_kind_path, result, tk};
use crate::ast::{Container, Field, KeyKind, KeyPart, KeySource};
use crate::ty;

/// How a key field travels through a key builder's parameters.
enum Pass {
    /// `&str` for a `String` field.
    Str,
    /// By value (integers, bool, char).
    Copy,
    /// By reference.
    Ref,
}

fn pass(f: &Field) -> Pass {
    if ty::is_string(f.ty) {
        Pass::Str
    } else if ty::is_copy_scalar(f.ty) {
        Pass::Copy
    } else {
        Pass::Ref
    }
}

/// Where key fields are read from: the value (`self.f`) or builder parameters.
#[derive(Clone, Copy)]
pub(super) enum Source {
    SelfFields,
    Params,
}

/// The checks that make a field's text safe in a key, naming the field on failure.
pub(super) fn key_checks(c: &Container, s: &KeySource, src: Source) -> TokenStream {
    let d = d(c);
    let kind = key_kind_path(c, s.kind);
    let fields = c.fields();
    let mut out = TokenStream::new();
    for (i, part) in s.parts.iter().enumerate() {
        let KeyPart::Field { index, width } = part else {
            continue;
        };
        let Some(f) = fields.get(*index) else {
            continue;
        };
        let ident = f.ident;
        let name = f.rust_name();
        let next_lit = match s.parts.get(i + 1) {
            Some(KeyPart::Lit(l)) => Some(l),
            _ => None,
        };
        // When writing a value, the runtime checks the whole key's characters
        // and length before its properties; what only the template knows is a
        // field holding the separator that follows it (and fixed widths).
        if matches!(src, Source::SelfFields) && next_lit.is_none() && width.is_none() {
            continue;
        }
        let sep = match next_lit {
            Some(l) => quote!(::core::option::Option::Some(#l)),
            None => quote!(::core::option::Option::None),
        };
        let span = f.ty.span();
        let check = match (pass(f), width, src) {
            (Pass::Copy, Some(w), Source::SelfFields) if ty::is_integer(f.ty) => {
                quote_spanned!(span=> #d::check_key_width(#kind, #name, self.#ident, #w)?;)
            }
            (Pass::Copy, Some(w), Source::Params) if ty::is_integer(f.ty) => {
                quote_spanned!(span=> #d::check_key_width(#kind, #name, #ident, #w)?;)
            }
            // Digits and a sign are always safe in a key.
            (Pass::Copy, _, _) if ty::is_integer(f.ty) => continue,
            (Pass::Str, _, Source::SelfFields) => {
                quote_spanned!(span=> #d::check_key_text(#kind, #name, &self.#ident, #sep)?;)
            }
            (Pass::Str, _, Source::Params) => {
                quote_spanned!(span=> #d::check_key_text(#kind, #name, #ident, #sep)?;)
            }
            (_, _, Source::SelfFields) => {
                quote_spanned!(span=> #d::check_key_display(#kind, #name, &self.#ident, #sep)?;)
            }
            (Pass::Copy, _, Source::Params) => {
                quote_spanned!(span=> #d::check_key_display(#kind, #name, &#ident, #sep)?;)
            }
            (Pass::Ref, _, Source::Params) => {
                quote_spanned!(span=> #d::check_key_display(#kind, #name, #ident, #sep)?;)
            }
        };
        out.extend(check);
    }
    out
}

/// The `format!` string of a resolved template.
fn format_string(parts: &[KeyPart]) -> String {
    let mut s = String::new();
    for p in parts {
        match p {
            KeyPart::Lit(l) => s.push_str(&l.replace('{', "{{").replace('}', "}}")),
            KeyPart::Field { width: Some(w), .. } => s.push_str(&format!("{{:0{w}}}")),
            KeyPart::Field { width: None, .. } => s.push_str("{}"),
        }
    }
    s
}

/// The key text as a `Cow<str>`, borrowing when the key is one `String` field or a literal.
pub(super) fn key_value(c: &Container, s: &KeySource, src: Source) -> TokenStream {
    let d = d(c);
    let fields = c.fields();
    match s.parts.as_slice() {
        [] => quote!(#d::Cow::Borrowed("")),
        [KeyPart::Lit(l)] => quote!(#d::Cow::Borrowed(#l)),
        [KeyPart::Field { index, width: None }]
            if fields.get(*index).is_some_and(|f| ty::is_string(f.ty)) =>
        {
            let ident = fields[*index].ident;
            match src {
                Source::SelfFields => quote!(#d::Cow::Borrowed(
                    ::core::convert::AsRef::<::core::primitive::str>::as_ref(&self.#ident)
                )),
                Source::Params => quote!(#d::Cow::Borrowed(#ident)),
            }
        }
        parts => {
            let fmt = format_string(parts);
            let args = parts.iter().filter_map(|p| match p {
                KeyPart::Field { index, .. } => fields.get(*index).map(|f| {
                    let ident = f.ident;
                    match src {
                        Source::SelfFields => quote_spanned!(f.ty.span()=> self.#ident),
                        Source::Params => quote_spanned!(f.ty.span()=> #ident),
                    }
                }),
                KeyPart::Lit(_) => None,
            });
            quote!(#d::Cow::Owned(#d::format!(#fmt, #(#args),*)))
        }
    }
}

/// The parameters of a key builder: the template's fields, each once, in order.
fn builder_params(c: &Container, indexes: &[usize]) -> Vec<TokenStream> {
    let fields = c.fields();
    indexes
        .iter()
        .filter_map(|i| fields.get(*i))
        .map(|f| {
            let ident = f.ident;
            let ty = f.ty;
            match pass(f) {
                Pass::Str => quote!(#ident: &::core::primitive::str),
                Pass::Copy => quote!(#ident: #ty),
                Pass::Ref => quote!(#ident: &#ty),
            }
        })
        .collect()
}

fn key_builder(c: &Container, s: &KeySource) -> TokenStream {
    let d = d(c);
    let vis = c.vis;
    let kind = key_kind_path(c, s.kind);
    let key = s.kind.service_name();
    let fn_name = match s.kind {
        KeyKind::Partition => format_ident!("partition_key"),
        KeyKind::Row => format_ident!("row_key"),
    };
    let params = builder_params(c, &s.field_indexes());
    let checks = key_checks(c, s, Source::Params);
    let value = key_value(c, s, Source::Params);
    let ret = result(c, quote!(#d::String));
    let doc = format!(
        " The {key} of a `{}` built from the template `{}`, checked against the service's key rules (at most 1024 characters, none of `/ \\ # ?` or control characters); an error names the offending field.",
        c.ident, s.text
    );
    quote! {
        #[doc = #doc]
        #vis fn #fn_name(#(#params),*) -> #ret {
            #checks
            let __tk_key: #d::String = #d::Cow::<::core::primitive::str>::into_owned(#value);
            #d::check_key(#kind, &__tk_key)?;
            ::core::result::Result::Ok(__tk_key)
        }
    }
}

pub(super) fn key_builders(c: &Container) -> TokenStream {
    let tk = tk(c);
    let (Some(pk), Some(rk)) = (c.partition_keys.first(), c.row_keys.first()) else {
        return TokenStream::new();
    };
    let vis = c.vis;
    let pk_builder = key_builder(c, pk);
    let rk_builder = key_builder(c, rk);
    let mut all = pk.field_indexes();
    for i in rk.field_indexes() {
        if !all.contains(&i) {
            all.push(i);
        }
    }
    let params = builder_params(c, &all);
    let fields = c.fields();
    let args = |s: &KeySource| -> Vec<&Ident> {
        s.field_indexes()
            .iter()
            .filter_map(|i| fields.get(*i).map(|f| f.ident))
            .collect()
    };
    let pk_args = args(pk);
    let rk_args = args(rk);
    let ret = result(c, quote!(#tk::EntityKey));
    let doc = format!(
        " The key of a `{}`: PartitionKey `{}` and RowKey `{}`, both checked.",
        c.ident, pk.text, rk.text
    );
    quote! {
        #pk_builder
        #rk_builder
        #[doc = #doc]
        #vis fn key(#(#params),*) -> #ret {
            ::core::result::Result::Ok(#tk::EntityKey::new(
                Self::partition_key(#(#pk_args),*)?,
                Self::row_key(#(#rk_args),*)?,
            ))
        }
    }
}

/// Splits the keys into the text of their fields; returns the statements and,
/// per field index, the variable holding its text.
pub(super) fn split_keys(c: &Container) -> (TokenStream, Vec<Option<(KeyKind, Ident)>>) {
    let tk = tk(c);
    let d = d(c);
    let fields = c.fields();
    let mut vars: Vec<Option<(KeyKind, Ident)>> = vec![None; fields.len()];
    let mut out = TokenStream::new();
    for s in c
        .partition_keys
        .iter()
        .take(1)
        .chain(c.row_keys.iter().take(1))
    {
        let (kind, prefix, getter) = match s.kind {
            KeyKind::Partition => (s.kind, "__tk_pk", quote!(partition_key)),
            KeyKind::Row => (s.kind, "__tk_rk", quote!(row_key)),
        };
        let kind_path = key_kind_path(c, kind);
        let field_parts: Vec<(usize, Option<usize>)> = s
            .parts
            .iter()
            .filter_map(|p| match p {
                KeyPart::Field { index, width } => Some((*index, *width)),
                KeyPart::Lit(_) => None,
            })
            .collect();
        if field_parts.is_empty() || field_parts.iter().all(|(i, _)| vars[*i].is_some()) {
            continue;
        }
        let mut pattern = Vec::new();
        for (n, (index, _)) in field_parts.iter().enumerate() {
            if vars[*index].is_none() {
                let var = format_ident!("{}{}", prefix, n);
                vars[*index] = Some((kind, var.clone()));
                pattern.push(quote!(#var));
            } else {
                pattern.push(quote!(_));
            }
        }
        if let [KeyPart::Field { width: None, .. }] = s.parts.as_slice() {
            let p = &pattern[0];
            out.extend(quote! {
                let #p: &::core::primitive::str = #tk::__private_0_1::RawEntity::#getter(__tk_entity);
            });
            continue;
        }
        let n = field_parts.len();
        let text = &s.text;
        let parts = s.parts.iter().map(|p| match p {
            KeyPart::Lit(l) => quote!(#d::KeyPart::Literal(#l)),
            KeyPart::Field { width: Some(w), .. } => {
                quote!(#d::KeyPart::Field { width: ::core::option::Option::Some(#w) })
            }
            KeyPart::Field { width: None, .. } => {
                quote!(#d::KeyPart::Field { width: ::core::option::Option::None })
            }
        });
        out.extend(quote! {
            let [#(#pattern),*] = #d::split_key::<#n>(
                #kind_path,
                #text,
                #tk::__private_0_1::RawEntity::#getter(__tk_entity),
                &[#(#parts),*],
            )?;
        });
    }
    (out, vars)
}
