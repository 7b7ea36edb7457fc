//! Code generation. Reads only the IR ([`crate::ast`]), after the check pass.
//!
//! Generated code names only `::tablekit::...` (support items under
//! `::tablekit::__private`) and `::core::...` paths, prefixes its local names
//! with `__tk_`, and sits in `const _: () = { ... };` except for the public
//! `{Name}Columns` type.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, Ident, Type};

use crate::ast::{Container, Data, Field, KeyKind, KeyPart, KeySource, Kind};
use crate::check::{self, DEFAULT_DISCRIMINATOR, DEFAULT_VERSION_PROPERTY};
use crate::ctxt::Ctxt;
use crate::fallback;
use crate::ty;

/// Which derive is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `#[derive(TableEntity)]`.
    Entity,
    /// `#[derive(TableProperties)]`.
    Properties,
}

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
        (Data::Struct(_), Mode::Entity) => entity_struct(&c),
        (Data::Struct(_), Mode::Properties) => properties_struct(&c),
        (Data::Enum(_), _) => entity_enum(&c),
        (Data::Unsupported, _) => TokenStream::new(),
    }
}

fn d() -> TokenStream {
    quote!(::tablekit::__private)
}

fn result(t: TokenStream) -> TokenStream {
    quote!(::core::result::Result<#t, ::tablekit::Error>)
}

fn key_kind_path(k: KeyKind) -> TokenStream {
    match k {
        KeyKind::Partition => quote!(::tablekit::KeyKind::PartitionKey),
        KeyKind::Row => quote!(::tablekit::KeyKind::RowKey),
    }
}

fn version_property(c: &Container) -> Option<(i32, String)> {
    let v = c.attrs.version.as_ref()?;
    let name = c
        .attrs
        .version_property
        .as_ref()
        .map_or_else(|| DEFAULT_VERSION_PROPERTY.to_owned(), |p| p.value.value());
    Some((v.value, name))
}

// ---------------------------------------------------------------------------
// Keys.

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
enum Source {
    SelfFields,
    Params,
}

/// The checks that make a field's text safe in a key, naming the field on failure.
fn key_checks(c: &Container, s: &KeySource, src: Source) -> TokenStream {
    let d = d();
    let kind = key_kind_path(s.kind);
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
fn key_value(c: &Container, s: &KeySource, src: Source) -> TokenStream {
    let d = d();
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
    let d = d();
    let vis = c.vis;
    let kind = key_kind_path(s.kind);
    let key = s.kind.service_name();
    let fn_name = match s.kind {
        KeyKind::Partition => format_ident!("partition_key"),
        KeyKind::Row => format_ident!("row_key"),
    };
    let params = builder_params(c, &s.field_indexes());
    let checks = key_checks(c, s, Source::Params);
    let value = key_value(c, s, Source::Params);
    let ret = result(quote!(#d::String));
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

fn key_builders(c: &Container) -> TokenStream {
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
    let ret = result(quote!(::tablekit::EntityKey));
    let doc = format!(
        " The key of a `{}`: PartitionKey `{}` and RowKey `{}`, both checked.",
        c.ident, pk.text, rk.text
    );
    quote! {
        #pk_builder
        #rk_builder
        #[doc = #doc]
        #vis fn key(#(#params),*) -> #ret {
            ::core::result::Result::Ok(::tablekit::EntityKey::new(
                Self::partition_key(#(#pk_args),*)?,
                Self::row_key(#(#rk_args),*)?,
            ))
        }
    }
}

// ---------------------------------------------------------------------------
// Writing.

fn edm_marker(name: &str) -> TokenStream {
    let d = d();
    let ident = Ident::new(name, Span::call_site());
    quote!(#d::as_edm::#ident)
}

/// Writes one stored field.
fn write_field(f: &Field) -> TokenStream {
    let d = d();
    let ident = f.ident;
    let ty = f.ty;
    let name = &f.name;
    let span = ty.span();
    match &f.kind {
        Kind::Native => quote_spanned! {span=>
            <#ty as #d::Property>::write_to(&self.#ident, #name, __tk_out)?;
        },
        Kind::Edm(m) => {
            let m = edm_marker(m);
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

fn write_body(c: &Container) -> TokenStream {
    let mut body = TokenStream::new();
    if c.mode == Mode::Entity {
        for s in c.partition_keys.iter().chain(&c.row_keys).take(2) {
            body.extend(key_checks(c, s, Source::SelfFields));
        }
    }
    for f in c.fields().iter().filter(|f| f.is_stored()) {
        body.extend(write_field(f));
    }
    if let Some((version, name)) = version_property(c) {
        body.extend(quote!(::tablekit::PropertyWriter::int32(__tk_out, #name, #version)?;));
    }
    body
}

// ---------------------------------------------------------------------------
// Reading.

/// The value of a field whose property is missing and that is not read through
/// the `Property` traits.
fn missing_value(f: &Field, prefixed: bool) -> TokenStream {
    let d = d();
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
fn missing_name(f: &Field, prefixed: bool) -> TokenStream {
    let d = d();
    let name = &f.name;
    if prefixed {
        quote!(&#d::nested_prefix(__tk_prefix, #name))
    } else {
        quote!(#name)
    }
}

/// Reads one field from its slot (`__tk_vN`), the keys, or the system properties.
fn read_field(
    f: &Field,
    slot: &Ident,
    key_var: Option<&(KeyKind, Ident)>,
    prefixed: bool,
) -> TokenStream {
    let d = d();
    let ty = f.ty;
    let span = ty.span();
    let name = f.rust_name();
    if let Some((kind, var)) = key_var {
        let kind = key_kind_path(*kind);
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
                    let n = missing_name(f, prefixed);
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
            let m = edm_marker(m);
            let missing = match default_value(f) {
                Some(dflt) => dflt,
                None => {
                    let n = missing_name(f, prefixed);
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
            let missing = missing_value(f, prefixed);
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
            let missing = missing_value(f, prefixed);
            quote_spanned! {path.span()=>
                match #slot {
                    ::core::option::Option::Some(__tk_v) => #path::read(__tk_v)?,
                    ::core::option::Option::None => #missing,
                }
            }
        }
        Kind::Flatten => {
            let prefix = missing_name(f, prefixed);
            quote_spanned!(span=> <#ty as #d::TableProperties>::read_properties(__tk_entity, #prefix)?)
        }
        Kind::Skip => default_value(f)
            .unwrap_or_else(|| quote_spanned!(span=> ::core::default::Default::default())),
        Kind::ETag => quote!(::tablekit::RawEntity::etag(__tk_entity)),
        Kind::Timestamp => quote!(::core::option::Option::map(
            ::tablekit::RawEntity::timestamp(__tk_entity),
            ::core::convert::From::from
        )),
    }
}

/// Splits the keys into the text of their fields; returns the statements and,
/// per field index, the variable holding its text.
fn split_keys(c: &Container) -> (TokenStream, Vec<Option<(KeyKind, Ident)>>) {
    let d = d();
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
        let kind_path = key_kind_path(kind);
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
                let #p: &::core::primitive::str = ::tablekit::RawEntity::#getter(__tk_entity);
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
                ::tablekit::RawEntity::#getter(__tk_entity),
                &[#(#parts),*],
            )?;
        });
    }
    (out, vars)
}

/// The body of a decoder: one pass over the properties into slots, then the
/// struct built field by field. With `prefixed`, it reads the properties named
/// `{__tk_prefix}_{name}` (a flattened struct).
fn decode_body(c: &Container, prefixed: bool) -> TokenStream {
    let d = d();
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
            let mut #slot: ::core::option::Option<::tablekit::PropertyValue<'_>> = ::core::option::Option::None;
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
        if let Some((_, v)) = version_property(c) {
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
                for __tk_p in ::tablekit::RawEntity::properties(__tk_entity) {
                    match ::tablekit::PropertyValue::name(&__tk_p) { #arms }
                }
            }
        };
    }
    let inits = fields.iter().enumerate().map(|(i, f)| {
        let ident = f.ident;
        let value = read_field(f, &slots[i], key_vars[i].as_ref(), prefixed);
        quote!(#ident: #value)
    });
    quote! {
        #split
        #decls
        #pass
        ::core::result::Result::Ok(Self { #(#inits),* })
    }
}

// ---------------------------------------------------------------------------
// Columns.

/// The value type of a field's column: the field's type without an outer
/// `Option`. Decided from the syntax, not through the `Property` trait, so an
/// unsupported field type is reported once (at the field), not again in the
/// columns type.
fn column_value_type(f: &Field) -> TokenStream {
    let inner: &Type = ty::strip_option(f.ty);
    quote!(#inner)
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

/// Fields with a column: the stored ones that are one property each.
fn column_fields<'c, 'a>(c: &'c Container<'a>) -> impl Iterator<Item = &'c Field<'a>> {
    c.fields()
        .iter()
        .filter(|f| f.is_stored() && !matches!(f.kind, Kind::Flatten))
}

fn columns(c: &Container) -> (TokenStream, TokenStream) {
    let d = d();
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
        defs.push(quote! {
            #[doc = #doc]
            pub #fi: ::tablekit::Column<#ident, #v>
        });
        inits.push(match f.kind {
            Kind::Edm(edm) => {
                let edm = format_ident!("{}", edm);
                quote!(#fi: ::tablekit::Column::with_edm(#name, ::tablekit::EdmType::#edm))
            }
            _ => quote!(#fi: ::tablekit::Column::new(#name)),
        });
    }
    let doc = format!(
        " The typed column handles of [`{ident}`], one per stored property plus the key and Timestamp columns, for the query DSL (`<{ident} as tablekit::EntityColumns>::columns()`)."
    );
    let def = quote! {
        #[doc = #doc]
        #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::marker::Copy)]
        #[allow(private_interfaces)]
        #vis struct #columns_ident {
            /// The PartitionKey.
            pub partition_key: ::tablekit::Column<#ident, #d::String>,
            /// The RowKey.
            pub row_key: ::tablekit::Column<#ident, #d::String>,
            /// The service's Timestamp: when the entity was last written.
            pub timestamp: ::tablekit::Column<#ident, #d::DateTime<#d::Utc>>,
            #(#defs,)*
        }
    };
    let imp = quote! {
        #[automatically_derived]
        impl #d::DerivedColumns for #columns_ident {
            const COLUMNS: Self = #columns_ident {
                partition_key: ::tablekit::Column::new("PartitionKey"),
                row_key: ::tablekit::Column::new("RowKey"),
                timestamp: ::tablekit::Column::new("Timestamp"),
                #(#inits,)*
            };
        }

        static __TK_COLUMNS: #columns_ident = <#columns_ident as #d::DerivedColumns>::COLUMNS;

        #[automatically_derived]
        impl ::tablekit::EntityColumns for #ident {
            type Columns = #columns_ident;
            fn columns() -> &'static #columns_ident {
                &__TK_COLUMNS
            }
        }
    };
    (def, imp)
}

/// Compile-time checks of a projection against the type it projects: each
/// field exists there (`no field` error listing the candidates), with the same
/// value type (`mismatched types`) and the same property name (a failed
/// constant assertion), each reported at the projection's field.
fn projection_checks(c: &Container, src: &syn::Path) -> TokenStream {
    let d = d();
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
            quote!(<<#src as ::tablekit::EntityColumns>::Columns as #d::DerivedColumns>::COLUMNS.#fi),
            span,
        );
        let v = column_value_type(f);
        let annot = quote_spanned!(f.ty.span()=> ::tablekit::Column<#src, #v>);
        // The stored Edm type must agree too when either side overrides it
        // (`edm = "Int64"` on an i32): the same Rust type could read the other
        // side's values wrongly.
        let (edm_pattern, edm_text) = match f.kind {
            Kind::Edm(edm) => {
                let e = format_ident!("{}", edm);
                (
                    quote!(::core::option::Option::Some(::tablekit::EdmType::#e)),
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

// ---------------------------------------------------------------------------
// The impls.

fn entity_struct(c: &Container) -> TokenStream {
    let d = d();
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
    let entity = quote!(__tk_entity: &::tablekit::RawEntity<'_>);
    let ret_self = result(quote!(Self));

    let mut inherent = key_builders(c);
    let decode = match (version_property(c), &c.attrs.upgrade) {
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
                let __tk_stored: ::core::primitive::i32 = match ::tablekit::RawEntity::get(__tk_entity, #name) {
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
    if let Some((version, name)) = version_property(c) {
        inherent.extend(quote! {
            /// The schema version this type writes.
            #vis const SCHEMA_VERSION: ::core::primitive::i32 = #version;
            /// The property that stores the schema version.
            #vis const VERSION_PROPERTY: &'static ::core::primitive::str = #name;
        });
    }
    if let Some(t) = &c.attrs.table {
        let t = &t.value;
        inherent.extend(quote! {
            /// The name of the table this type is stored in.
            #vis const TABLE_NAME: &'static ::core::primitive::str = #t;
        });
    }

    let etag_field = fields.iter().find(|f| matches!(f.kind, Kind::ETag));
    let ts_field = fields.iter().find(|f| matches!(f.kind, Kind::Timestamp));
    let mut extra = TokenStream::new();
    if let Some(f) = etag_field {
        let fi = f.ident;
        extra.extend(quote! {
            fn etag(&self) -> ::core::option::Option<&::tablekit::ETag> {
                ::core::option::Option::as_ref(&self.#fi)
            }
            fn set_etag(&mut self, etag: ::tablekit::ETag) {
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
    let mut projection = TokenStream::new();
    if let Some(src) = &c.attrs.projection_of {
        let has_flatten = fields.iter().any(|f| matches!(f.kind, Kind::Flatten));
        if !has_flatten {
            let mut names: Vec<String> = column_fields(c).map(|f| f.name.clone()).collect();
            if let Some((_, v)) = version_property(c) {
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
            impl ::tablekit::TableEntity for #ident {
                fn partition_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    #pk_value
                }
                fn row_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    #rk_value
                }
                fn write_properties<__TkW: ::tablekit::PropertyWriter + ?::core::marker::Sized>(
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

fn properties_struct(c: &Container) -> TokenStream {
    let d = d();
    let ident = c.ident;
    let write = write_body(c);
    let body = decode_body(c, true);
    let fields = c.fields();
    let names: Vec<&str> = fields
        .iter()
        .filter(|f| f.is_stored() && !matches!(f.kind, Kind::Flatten))
        .map(|f| f.name.as_str())
        .collect();
    let nested = fields
        .iter()
        .filter(|f| matches!(f.kind, Kind::Flatten))
        .map(|f| {
            let ty = f.ty;
            let name = &f.name;
            quote!(#d::is_flattened::<#ty>(__tk_name, #name) ||)
        });
    let known_arm = if names.is_empty() {
        TokenStream::new()
    } else {
        quote!(#(#names)|* => true,)
    };
    quote! {
        #[allow(clippy::needless_question_mark)]
        const _: () = {
            #[automatically_derived]
            impl #d::TableProperties for #ident {
                fn write_properties<__TkW: ::tablekit::PropertyWriter + ?::core::marker::Sized>(
                    &self,
                    __tk_out: &mut __TkW,
                ) -> #d::Result<()> {
                    #write
                    ::core::result::Result::Ok(())
                }
                fn read_properties(
                    __tk_entity: &::tablekit::RawEntity<'_>,
                    __tk_prefix: &::core::primitive::str,
                ) -> #d::Result<Self> {
                    #body
                }
                fn is_known(__tk_name: &::core::primitive::str) -> ::core::primitive::bool {
                    match __tk_name {
                        #known_arm
                        _ => #(#nested)* false,
                    }
                }
            }
        };
    }
}

fn entity_enum(c: &Container) -> TokenStream {
    let d = d();
    let ident = c.ident;
    let vis = c.vis;
    let Data::Enum(variants) = &c.data else {
        return TokenStream::new();
    };
    let by_prefix = c.attrs.row_key_prefix.is_some();
    let disc = c
        .attrs
        .discriminator
        .as_ref()
        .map_or_else(|| DEFAULT_DISCRIMINATOR.to_owned(), |d| d.value.value());
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
    let pk = each(&|_| quote!(::tablekit::TableEntity::partition_key(__tk_v)));
    let rk = each(&|_| quote!(::tablekit::TableEntity::row_key(__tk_v)));
    let etag = each(&|_| quote!(::tablekit::TableEntity::etag(__tk_v)));
    let set_etag = each(&|_| quote!(::tablekit::TableEntity::set_etag(__tk_v, etag)));
    let set_ts = each(&|_| quote!(::tablekit::TableEntity::set_timestamp(__tk_v, timestamp)));
    let write: Vec<TokenStream> = variants
        .iter()
        .map(|v| {
            let vi = v.ident;
            let tag = &v.tag;
            if by_prefix || v.attrs.unknown.is_some() {
                quote!(Self::#vi(__tk_v) => ::tablekit::TableEntity::write_properties(__tk_v, __tk_out))
            } else {
                quote!(Self::#vi(__tk_v) => {
                    ::tablekit::TableEntity::write_properties(__tk_v, __tk_out)?;
                    ::tablekit::PropertyWriter::string(__tk_out, #disc, #tag)
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
            quote!(::core::result::Result::Ok(Self::#vi(<#vt as ::tablekit::TableEntity>::decode(__tk_entity)?)))
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
                    return ::core::result::Result::Ok(Self::#vi(<#vt as ::tablekit::TableEntity>::decode(__tk_entity)?));
                }
            }
        });
        let fb = fallback(quote!(::core::option::Option::Some(__tk_rk)));
        quote! {
            let __tk_rk = ::tablekit::RawEntity::row_key(__tk_entity);
            #(#tests)*
            #fb
        }
    } else {
        let arms = known.iter().map(|v| {
            let vi = v.ident;
            let vt = v.ty;
            let tag = &v.tag;
            quote!(::core::option::Option::Some(#tag) => ::core::result::Result::Ok(Self::#vi(<#vt as ::tablekit::TableEntity>::decode(__tk_entity)?)))
        });
        let fb = fallback(quote!(__tk_other));
        quote! {
            let __tk_tag = match ::tablekit::RawEntity::get(__tk_entity, #disc) {
                ::core::option::Option::Some(__tk_p) => ::core::option::Option::Some(::tablekit::PropertyValue::as_str(&__tk_p)?),
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
        .map(|t| quote!(|| <#t as ::tablekit::TableEntity>::needs_type_annotations()));
    let columns_ident = format_ident!("{}Columns", ident);
    let doc = format!(" The typed column handles of [`{ident}`]: the key and Timestamp columns.");
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
    let table_const = c.attrs.table.as_ref().map(|t| {
        let t = &t.value;
        quote! {
            /// The name of the table this type is stored in.
            #vis const TABLE_NAME: &'static ::core::primitive::str = #t;
        }
    });
    let tag_rest = unknown.map(|v| {
        let vi = v.ident;
        quote!(Self::#vi(_) => ::core::option::Option::None,)
    });
    quote! {
        #[doc = #doc]
        #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::marker::Copy)]
        #vis struct #columns_ident {
            /// The PartitionKey.
            pub partition_key: ::tablekit::Column<#ident, #d::String>,
            /// The RowKey.
            pub row_key: ::tablekit::Column<#ident, #d::String>,
            /// The service's Timestamp: when the entity was last written.
            pub timestamp: ::tablekit::Column<#ident, #d::DateTime<#d::Utc>>,
        }

        #[allow(clippy::needless_question_mark)]
        const _: () = {
            #[automatically_derived]
            impl ::tablekit::TableEntity for #ident {
                fn partition_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    match self { #(#pk,)* }
                }
                fn row_key(&self) -> #d::Cow<'_, ::core::primitive::str> {
                    match self { #(#rk,)* }
                }
                fn write_properties<__TkW: ::tablekit::PropertyWriter + ?::core::marker::Sized>(
                    &self,
                    __tk_out: &mut __TkW,
                ) -> #d::Result<()> {
                    match self { #(#write,)* }
                }
                fn decode(__tk_entity: &::tablekit::RawEntity<'_>) -> #d::Result<Self> {
                    #decode
                }
                fn etag(&self) -> ::core::option::Option<&::tablekit::ETag> {
                    match self { #(#etag,)* }
                }
                fn set_etag(&mut self, etag: ::tablekit::ETag) {
                    match self { #(#set_etag,)* }
                }
                fn set_timestamp(&mut self, timestamp: #d::DateTime<#d::Utc>) {
                    match self { #(#set_ts,)* }
                }
                fn needs_type_annotations() -> ::core::primitive::bool {
                    false #(#needs)*
                }
            }

            #[automatically_derived]
            impl #ident {
                #[doc = #tag_doc]
                #vis fn discriminator(&self) -> ::core::option::Option<&'static ::core::primitive::str> {
                    match self { #(#tag_arms,)* #tag_rest }
                }
                #table_const
            }

            #[automatically_derived]
            impl #d::DerivedColumns for #columns_ident {
                const COLUMNS: Self = #columns_ident {
                    partition_key: ::tablekit::Column::new("PartitionKey"),
                    row_key: ::tablekit::Column::new("RowKey"),
                    timestamp: ::tablekit::Column::new("Timestamp"),
                };
            }

            static __TK_COLUMNS: #columns_ident = <#columns_ident as #d::DerivedColumns>::COLUMNS;

            #[automatically_derived]
            impl ::tablekit::EntityColumns for #ident {
                type Columns = #columns_ident;
                fn columns() -> &'static #columns_ident {
                    &__TK_COLUMNS
                }
            }
        };
    }
}
