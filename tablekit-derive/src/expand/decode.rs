//! Reading: one pass over a stored entity's properties into slots, then each
//! field built from its slot, the keys or the system properties.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Ident;

use super::keys::split_keys;
use super::{d, edm_marker, key_kind_path, tk};
use crate::ast::{Container, Field, KeyKind, Kind};
use crate::ty;

/// The value of a field whose property is missing and that is not read through
/// the `Property` traits.
fn missing_value(c: &Container, f: &Field, prefixed: bool) -> TokenStream {
    let d = d(c);
    let name = &f.name;
    if let Some(dflt) = default_value(f) {
        return dflt;
    }
    if ty::option_inner(f.ty).is_some() {
        return quote!(::core::option::Option::None);
    }
    if prefixed {
        quote!(return ::core::result::Result::Err(#d::missing_flattened(__tk_prefix, #name)))
    } else {
        quote!(return ::core::result::Result::Err(#d::missing_property(#name)))
    }
}

fn default_value(f: &Field) -> Option<TokenStream> {
    let d = f.attrs.default.as_ref()?;
    let span = f.ty.span();
    Some(match &d.value {
        Some(path) => quote_spanned!(path.span()=> #path()),
        None => quote_spanned!(span=> ::core::default::Default::default()),
    })
}

/// The name passed to `missing`, with the flatten prefix when there is one.
fn missing_name(c: &Container, f: &Field, prefixed: bool) -> TokenStream {
    let d = d(c);
    let name = &f.name;
    if prefixed {
        quote!(&#d::nested_prefix(__tk_prefix, #name))
    } else {
        quote!(#name)
    }
}

/// Reads one field from its slot (`__tk_vN`), the keys, or the system properties.
fn read_field(
    c: &Container,
    f: &Field,
    slot: &Ident,
    key_var: Option<&(KeyKind, Ident)>,
    prefixed: bool,
) -> TokenStream {
    let tk = tk(c);
    let d = d(c);
    let ty = f.ty;
    let span = ty.span();
    let name = f.rust_name();
    if let Some((kind, var)) = key_var {
        let kind = key_kind_path(c, *kind);
        return if ty::is_string(ty) {
            quote!(#d::String::from(#var))
        } else {
            quote_spanned!(span=> #d::parse_key_field::<#ty>(#kind, #name, #var)?)
        };
    }
    match &f.kind {
        Kind::Native => {
            let missing = match default_value(f) {
                Some(dflt) => dflt,
                None => {
                    let n = missing_name(c, f, prefixed);
                    quote_spanned!(span=> <#ty as #d::Property>::missing(#n)?)
                }
            };
            quote_spanned! {span=>
                match #slot {
                    ::core::option::Option::Some(__tk_v) => <#ty as #d::Property>::read_from(__tk_v)?,
                    ::core::option::Option::None => #missing,
                }
            }
        }
        Kind::Edm(m) => {
            let m = edm_marker(c, m);
            let missing = match default_value(f) {
                Some(dflt) => dflt,
                None => {
                    let n = missing_name(c, f, prefixed);
                    quote_spanned!(span=> <#ty as #d::PropertyAs<#m>>::missing_as(#n)?)
                }
            };
            quote_spanned! {span=>
                match #slot {
                    ::core::option::Option::Some(__tk_v) => <#ty as #d::PropertyAs<#m>>::read_as(__tk_v)?,
                    ::core::option::Option::None => #missing,
                }
            }
        }
        Kind::Json | Kind::AsStr => {
            let func = if matches!(f.kind, Kind::Json) {
                quote!(read_json)
            } else {
                quote!(read_parsed)
            };
            let missing = missing_value(c, f, prefixed);
            let read = match ty::option_inner(ty) {
                Some(inner) => {
                    quote_spanned!(span=> ::core::option::Option::Some(#d::#func::<#inner>(__tk_v)?))
                }
                None => quote_spanned!(span=> #d::#func::<#ty>(__tk_v)?),
            };
            quote! {
                match #slot {
                    ::core::option::Option::Some(__tk_v) => #read,
                    ::core::option::Option::None => #missing,
                }
            }
        }
        Kind::With(path) => {
            let missing = missing_value(c, f, prefixed);
            quote_spanned! {path.span()=>
                match #slot {
                    ::core::option::Option::Some(__tk_v) => #path::read(__tk_v)?,
                    ::core::option::Option::None => #missing,
                }
            }
        }
        Kind::Flatten => {
            let prefix = missing_name(c, f, prefixed);
            quote_spanned!(span=> <#ty as #d::TableProperties>::read_properties(__tk_entity, #prefix)?)
        }
        Kind::Skip => default_value(f)
            .unwrap_or_else(|| quote_spanned!(span=> ::core::default::Default::default())),
        Kind::ETag => quote!(#tk::__private_0_1::RawEntity::etag(__tk_entity)),
        Kind::Timestamp => quote!(::core::option::Option::map(
            #tk::__private_0_1::RawEntity::timestamp(__tk_entity),
            ::core::convert::From::from
        )),
    }
}

/// The body of a decoder: one pass over the properties into slots, then the
/// struct built field by field. With `prefixed`, it reads the properties named
/// `{__tk_prefix}_{name}` (a flattened struct).
pub(super) fn decode_body(c: &Container, prefixed: bool) -> TokenStream {
    let tk = tk(c);
    let d = d(c);
    let fields = c.fields();
    let slots: Vec<Ident> = (0..fields.len())
        .map(|i| format_ident!("__tk_v{}", i))
        .collect();
    let (split, key_vars) = if prefixed {
        (TokenStream::new(), vec![None; fields.len()])
    } else {
        split_keys(c)
    };
    let slotted: Vec<usize> = fields
        .iter()
        .enumerate()
        .filter(|(i, f)| {
            f.is_stored() && !matches!(f.kind, Kind::Flatten) && key_vars[*i].is_none()
        })
        .map(|(i, _)| i)
        .collect();
    let deny = c.attrs.deny_unknown.is_some() && !prefixed;
    let mut decls = TokenStream::new();
    let mut arms = TokenStream::new();
    for &i in &slotted {
        let slot = &slots[i];
        let name = &fields[i].name;
        decls.extend(quote! {
            let mut #slot: ::core::option::Option<#tk::__private_0_1::PropertyValue<'_>> = ::core::option::Option::None;
        });
        arms.extend(quote!(#name => #slot = ::core::option::Option::Some(__tk_p),));
    }
    let mut pass = TokenStream::new();
    if deny {
        let mut known: Vec<String> = fields
            .iter()
            .enumerate()
            .filter(|(i, f)| {
                f.is_stored() && !matches!(f.kind, Kind::Flatten) && !slotted.contains(i)
            })
            .map(|(_, f)| f.name.clone())
            .collect();
        if let Some((_, v)) = c.version_property() {
            known.push(v);
        }
        if !known.is_empty() {
            arms.extend(quote!(#(#known)|* => {}));
        }
        let flattened: Vec<TokenStream> = fields
            .iter()
            .filter(|f| matches!(f.kind, Kind::Flatten))
            .map(|f| {
                let ty = f.ty;
                let name = &f.name;
                quote!(#d::is_flattened::<#ty>(__tk_name, #name))
            })
            .collect();
        let unknown = quote!(return ::core::result::Result::Err(#d::unknown_property(__tk_name)));
        if flattened.is_empty() {
            arms.extend(quote!(__tk_name => #unknown,));
        } else {
            arms.extend(quote! {
                __tk_name => if !(#(#flattened)||*) { #unknown },
            });
        }
    } else if !slotted.is_empty() {
        arms.extend(quote!(_ => {}));
    }
    if !arms.is_empty() {
        pass = if prefixed {
            quote! {
                for (__tk_name, __tk_p) in #d::prefixed_properties(__tk_entity, __tk_prefix) {
                    match __tk_name { #arms }
                }
            }
        } else {
            quote! {
                for __tk_p in #tk::__private_0_1::RawEntity::properties(__tk_entity) {
                    match #tk::__private_0_1::PropertyValue::name(&__tk_p) { #arms }
                }
            }
        };
    }
    let inits = fields.iter().enumerate().map(|(i, f)| {
        let ident = f.ident;
        let value = read_field(c, f, &slots[i], key_vars[i].as_ref(), prefixed);
        quote!(#ident: #value)
    });
    quote! {
        #split
        #decls
        #pass
        ::core::result::Result::Ok(Self { #(#inits),* })
    }
}
