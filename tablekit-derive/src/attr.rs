//! The `#[tablekit(...)]` attributes: one namespace, parsed with
//! `parse_nested_meta`. Every key is checked against the keys valid where it
//! appears; an unknown key lists them, a repeated key is an error, and a value of
//! the wrong form shows the right one. Parsing goes on after an error so that
//! every mistake of one build is reported.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, ExprLit, ExprPath, Lit, LitStr, Token};

use crate::case::{RenameRule, RULES};
use crate::ctxt::Ctxt;

/// A value with the span of the attribute key that set it.
#[derive(Debug, Clone)]
pub(crate) struct Spanned<T> {
    pub(crate) span: Span,
    pub(crate) value: T,
}

/// Where attributes appear; decides which keys are valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Site {
    /// On a struct deriving `TableEntity`.
    EntityStruct,
    /// On a struct deriving `TableProperties`.
    PropertiesStruct,
    /// On an enum deriving `TableEntity`.
    Enum,
    /// On a field of a `TableEntity` struct.
    EntityField,
    /// On a field of a `TableProperties` struct.
    PropertiesField,
    /// On a variant of a `TableEntity` enum.
    Variant,
}

impl Site {
    fn keys(self) -> &'static [&'static str] {
        match self {
            Site::EntityStruct => &[
                "partition_key",
                "row_key",
                "rename_all",
                "deny_unknown",
                "version",
                "version_property",
                "upgrade",
                "projection_of",
                "table",
                "crate",
            ],
            Site::PropertiesStruct => &["rename_all", "crate"],
            Site::Enum => &["discriminator", "row_key_prefix", "table", "crate"],
            Site::EntityField => &[
                "rename",
                "skip",
                "default",
                "partition_key",
                "row_key",
                "stored",
                "etag",
                "timestamp",
                "json",
                "flatten",
                "with",
                "as_str",
                "edm",
                "encrypt",
            ],
            Site::PropertiesField => &[
                "rename", "skip", "default", "json", "flatten", "with", "as_str", "edm",
            ],
            Site::Variant => &["rename", "unknown"],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Site::EntityStruct => "on a struct deriving TableEntity",
            Site::PropertiesStruct => "on a struct deriving TableProperties",
            Site::Enum => "on an enum deriving TableEntity",
            Site::EntityField => "on a field of a TableEntity struct",
            Site::PropertiesField => "on a field of a TableProperties struct",
            Site::Variant => "on a variant of a TableEntity enum",
        }
    }
}

/// The Edm types `#[tablekit(edm = "...")]` can name.
pub(crate) const EDM_TYPES: &[&str] = &[
    "String", "Binary", "Boolean", "DateTime", "Double", "Guid", "Int32", "Int64",
];

/// Container attributes (struct or enum).
#[derive(Debug, Default)]
pub(crate) struct ContainerAttrs {
    pub(crate) table: Option<Spanned<LitStr>>,
    pub(crate) partition_key: Option<Spanned<LitStr>>,
    pub(crate) row_key: Option<Spanned<LitStr>>,
    pub(crate) rename_all: Option<Spanned<RenameRule>>,
    pub(crate) deny_unknown: Option<Span>,
    pub(crate) version: Option<Spanned<i32>>,
    pub(crate) version_property: Option<Spanned<LitStr>>,
    pub(crate) upgrade: Option<Spanned<ExprPath>>,
    pub(crate) projection_of: Option<Spanned<syn::Path>>,
    pub(crate) discriminator: Option<Spanned<LitStr>>,
    pub(crate) row_key_prefix: Option<Span>,
    /// `crate = "path"`: where the generated code finds tablekit.
    pub(crate) krate: Option<Spanned<syn::Path>>,
}

/// Field attributes.
#[derive(Debug, Default)]
pub(crate) struct FieldAttrs {
    pub(crate) rename: Option<Spanned<LitStr>>,
    pub(crate) skip: Option<Span>,
    /// `default` alone (`None`) or `default = "path"`.
    pub(crate) default: Option<Spanned<Option<ExprPath>>>,
    pub(crate) partition_key: Option<Span>,
    pub(crate) row_key: Option<Span>,
    pub(crate) stored: Option<Span>,
    pub(crate) etag: Option<Span>,
    pub(crate) timestamp: Option<Span>,
    pub(crate) json: Option<Span>,
    pub(crate) flatten: Option<Span>,
    pub(crate) with: Option<Spanned<ExprPath>>,
    pub(crate) as_str: Option<Span>,
    pub(crate) edm: Option<Spanned<&'static str>>,
    /// `encrypt`: stored encrypted (client-side encryption).
    pub(crate) encrypt: Option<Span>,
}

/// Variant attributes.
#[derive(Debug, Default)]
pub(crate) struct VariantAttrs {
    pub(crate) rename: Option<Spanned<LitStr>>,
    pub(crate) unknown: Option<Span>,
}

/// Walks every `#[tablekit(...)]` attribute, reporting unknown keys and calling
/// `on` for the known ones.
fn walk(
    cx: &Ctxt,
    attrs: &[Attribute],
    site: Site,
    mut on: impl FnMut(&str, &ParseNestedMeta) -> syn::Result<()>,
) {
    for attr in attrs.iter().filter(|a| a.path().is_ident("tablekit")) {
        let result = attr.parse_nested_meta(|meta| {
            let key = match meta.path.get_ident() {
                Some(ident) => ident.to_string(),
                None => {
                    cx.error_spanned_by(
                        &meta.path,
                        format!(
                            "expected a tablekit attribute key {}: {}",
                            site.describe(),
                            site.keys().join(", ")
                        ),
                    );
                    return skip_value(&meta);
                }
            };
            if !site.keys().contains(&key.as_str()) {
                cx.error_spanned_by(
                    &meta.path,
                    format!(
                        "unknown tablekit attribute `{key}` {}; expected one of: {}",
                        site.describe(),
                        site.keys().join(", ")
                    ),
                );
                return skip_value(&meta);
            }
            on(&key, &meta)
        });
        if let Err(e) = result {
            cx.syn_error(e);
        }
    }
}

/// Consumes a key's value (`= expr` or `(...)`) so parsing can go on.
fn skip_value(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        content.parse::<proc_macro2::TokenStream>()?;
    }
    Ok(())
}

fn key_span(meta: &ParseNestedMeta) -> Span {
    meta.path
        .get_ident()
        .map_or_else(Span::call_site, syn::Ident::span)
}

/// A key that takes no value.
fn flag(cx: &Ctxt, meta: &ParseNestedMeta, key: &str) -> syn::Result<Option<Span>> {
    if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
        cx.error_spanned_by(
            &meta.path,
            format!("`{key}` takes no value: write #[tablekit({key})]"),
        );
        skip_value(meta)?;
        return Ok(None);
    }
    Ok(Some(key_span(meta)))
}

/// A key that takes a literal value; `example` is the right form of the value.
fn literal(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    key: &str,
    example: &str,
) -> syn::Result<Option<Lit>> {
    if !meta.input.peek(Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            format!("`{key}` takes a value: write #[tablekit({key} = {example})]"),
        );
        skip_value(meta)?;
        return Ok(None);
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit { lit, .. }) => Ok(Some(lit)),
        other => {
            cx.error_spanned_by(
                other,
                format!("expected a literal: write #[tablekit({key} = {example})]"),
            );
            Ok(None)
        }
    }
}

fn string(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    key: &str,
    example: &str,
) -> syn::Result<Option<LitStr>> {
    Ok(match literal(cx, meta, key, example)? {
        Some(Lit::Str(s)) => Some(s),
        Some(other) => {
            cx.error_spanned_by(
                other,
                format!("expected a string: write #[tablekit({key} = {example})]"),
            );
            None
        }
        None => None,
    })
}

fn path_string<T: syn::parse::Parse>(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    key: &str,
    example: &str,
) -> syn::Result<Option<T>> {
    Ok(
        string(cx, meta, key, example)?.and_then(|s| match s.parse::<T>() {
            Ok(p) => Some(p),
            Err(_) => {
                cx.error_spanned_by(
                    &s,
                    format!("expected a path in the string: write #[tablekit({key} = {example})]"),
                );
                None
            }
        }),
    )
}

/// Stores a value, reporting a repeated key.
fn set<T>(cx: &Ctxt, slot: &mut Option<T>, meta: &ParseNestedMeta, key: &str, value: Option<T>) {
    let Some(value) = value else { return };
    if slot.is_some() {
        cx.error_spanned_by(&meta.path, format!("duplicate tablekit attribute `{key}`"));
    } else {
        *slot = Some(value);
    }
}

fn spanned<T>(meta: &ParseNestedMeta, value: Option<T>) -> Option<Spanned<T>> {
    value.map(|value| Spanned {
        span: key_span(meta),
        value,
    })
}

pub(crate) fn container(cx: &Ctxt, attrs: &[Attribute], site: Site) -> ContainerAttrs {
    let mut c = ContainerAttrs::default();
    walk(cx, attrs, site, |key, meta| {
        match key {
            "table" => {
                let v = string(cx, meta, key, "\"Employees\"")?;
                set(cx, &mut c.table, meta, key, spanned(meta, v));
            }
            "partition_key" => {
                let v = string(cx, meta, key, "\"{department}\"")?;
                set(cx, &mut c.partition_key, meta, key, spanned(meta, v));
            }
            "row_key" => {
                let v = string(cx, meta, key, "\"empid_{employee_id:06}\"")?;
                set(cx, &mut c.row_key, meta, key, spanned(meta, v));
            }
            "rename_all" => {
                let v = string(cx, meta, key, "\"camelCase\"")?.and_then(|s| {
                    let rule = RenameRule::from_str(&s.value());
                    if rule.is_none() {
                        cx.error_spanned_by(
                            &s,
                            format!(
                                "unknown rename_all rule {:?}; expected one of: {RULES}",
                                s.value()
                            ),
                        );
                    }
                    rule
                });
                set(cx, &mut c.rename_all, meta, key, spanned(meta, v));
            }
            "deny_unknown" => {
                let v = flag(cx, meta, key)?;
                set(cx, &mut c.deny_unknown, meta, key, v);
            }
            "row_key_prefix" => {
                let v = flag(cx, meta, key)?;
                set(cx, &mut c.row_key_prefix, meta, key, v);
            }
            "version" => {
                let v = match literal(cx, meta, key, "2")? {
                    Some(Lit::Int(i)) => match i.base10_parse::<i32>() {
                        Ok(n) if n >= 1 => Some(n),
                        _ => {
                            cx.error_spanned_by(
                                &i,
                                "a schema version is an integer from 1 to 2147483647",
                            );
                            None
                        }
                    },
                    Some(other) => {
                        cx.error_spanned_by(
                            other,
                            "expected an integer: write #[tablekit(version = 2)]",
                        );
                        None
                    }
                    None => None,
                };
                set(cx, &mut c.version, meta, key, spanned(meta, v));
            }
            "version_property" => {
                let v = string(cx, meta, key, "\"SchemaVersion\"")?;
                set(cx, &mut c.version_property, meta, key, spanned(meta, v));
            }
            "upgrade" => {
                let v = path_string::<ExprPath>(cx, meta, key, "\"Self::upgrade\"")?;
                set(cx, &mut c.upgrade, meta, key, spanned(meta, v));
            }
            "projection_of" => {
                let v = path_string::<syn::Path>(cx, meta, key, "\"Employee\"")?;
                set(cx, &mut c.projection_of, meta, key, spanned(meta, v));
            }
            "discriminator" => {
                let v = string(cx, meta, key, "\"EntityType\"")?;
                set(cx, &mut c.discriminator, meta, key, spanned(meta, v));
            }
            "crate" => {
                let v = path_string::<syn::Path>(cx, meta, key, "\"my_crate::tablekit\"")?;
                set(cx, &mut c.krate, meta, key, spanned(meta, v));
            }
            _ => skip_value(meta)?,
        }
        Ok(())
    });
    c
}

pub(crate) fn field(cx: &Ctxt, attrs: &[Attribute], site: Site) -> FieldAttrs {
    let mut f = FieldAttrs::default();
    walk(cx, attrs, site, |key, meta| {
        match key {
            "rename" => {
                let v = string(cx, meta, key, "\"EmailAddress\"")?;
                set(cx, &mut f.rename, meta, key, spanned(meta, v));
            }
            "default" => {
                let v = if meta.input.peek(Token![=]) {
                    path_string::<ExprPath>(cx, meta, key, "\"path::to::function\"")?.map(Some)
                } else {
                    flag(cx, meta, key)?.map(|_| None)
                };
                set(cx, &mut f.default, meta, key, spanned(meta, v));
            }
            "with" => {
                let v = path_string::<ExprPath>(cx, meta, key, "\"path::to::module\"")?;
                set(cx, &mut f.with, meta, key, spanned(meta, v));
            }
            "edm" => {
                let v = string(cx, meta, key, "\"Int64\"")?.and_then(|s| {
                    let text = s.value();
                    let name = text.strip_prefix("Edm.").unwrap_or(&text);
                    let found = EDM_TYPES.iter().copied().find(|t| *t == name);
                    if found.is_none() {
                        cx.error_spanned_by(
                            &s,
                            format!(
                                "unknown Edm type {text:?}; expected one of: {}",
                                EDM_TYPES.join(", ")
                            ),
                        );
                    }
                    found
                });
                set(cx, &mut f.edm, meta, key, spanned(meta, v));
            }
            _ => {
                let v = flag(cx, meta, key)?;
                let slot = match key {
                    "skip" => &mut f.skip,
                    "partition_key" => &mut f.partition_key,
                    "row_key" => &mut f.row_key,
                    "stored" => &mut f.stored,
                    "etag" => &mut f.etag,
                    "timestamp" => &mut f.timestamp,
                    "json" => &mut f.json,
                    "flatten" => &mut f.flatten,
                    "as_str" => &mut f.as_str,
                    "encrypt" => &mut f.encrypt,
                    _ => return skip_value(meta),
                };
                set(cx, slot, meta, key, v);
            }
        }
        Ok(())
    });
    f
}

pub(crate) fn variant(cx: &Ctxt, attrs: &[Attribute]) -> VariantAttrs {
    let mut v = VariantAttrs::default();
    walk(cx, attrs, Site::Variant, |key, meta| {
        match key {
            "rename" => {
                let s = string(cx, meta, key, "\"Blog\"")?;
                set(cx, &mut v.rename, meta, key, spanned(meta, s));
            }
            "unknown" => {
                let s = flag(cx, meta, key)?;
                set(cx, &mut v.unknown, meta, key, s);
            }
            _ => skip_value(meta)?,
        }
        Ok(())
    });
    v
}
