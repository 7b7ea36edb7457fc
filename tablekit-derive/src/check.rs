//! The check pass: validates the IR as a whole (key sources, property names,
//! limits, attribute combinations) before any code is generated.

use std::collections::HashMap;

use proc_macro2::Span;
use quote::ToTokens;

use crate::ast::{
    Container, Data, Field, KeyKind, KeyPart, KeySource, Kind, Mode, DEFAULT_VERSION_PROPERTY,
};
use crate::ctxt::Ctxt;
use crate::template;
use crate::ty;

/// The most custom properties an entity holds.
const MAX_PROPERTIES: usize = 252;
/// The longest property name.
const MAX_NAME: usize = 255;

pub(crate) fn check(cx: &Ctxt, c: &Container) {
    check_generics(cx, c);
    match &c.data {
        Data::Struct(fields) => {
            check_container(cx, c);
            for f in fields {
                check_field(cx, c, f);
            }
            if c.mode == Mode::Entity {
                check_key_sources(cx, c, KeyKind::Partition, &c.partition_keys);
                check_key_sources(cx, c, KeyKind::Row, &c.row_keys);
                check_single(cx, fields, |f| matches!(f.kind, Kind::ETag), "etag");
                check_single(
                    cx,
                    fields,
                    |f| matches!(f.kind, Kind::Timestamp),
                    "timestamp",
                );
            }
            check_names(cx, c, fields);
        }
        Data::Enum(_) => check_enum(cx, c),
        Data::Unsupported => {}
    }
}

fn check_generics(cx: &Ctxt, c: &Container) {
    if !c.generics.params.is_empty() || c.generics.where_clause.is_some() {
        let what = if c.generics.lifetimes().next().is_some() {
            "lifetimes"
        } else {
            "generic parameters"
        };
        cx.error_spanned_by(
            c.generics,
            format!(
                "#[derive(TableEntity)] does not support {what} yet: an entity type owns its data (TableEntity: 'static) and has one schema"
            ),
        );
    }
}

fn check_container(cx: &Ctxt, c: &Container) {
    let a = &c.attrs;
    if a.version.is_none() {
        if let Some(p) = &a.version_property {
            cx.error_at(p.span, "`version_property` needs `version = N`");
        }
        if let Some(u) = &a.upgrade {
            cx.error_at(u.span, "`upgrade` needs `version = N`: the hook runs for entities stored with an older version");
        }
    }
    if a.projection_of.is_some() {
        for (span, key) in [
            (a.version.as_ref().map(|v| v.span), "version"),
            (a.upgrade.as_ref().map(|v| v.span), "upgrade"),
        ] {
            if let Some(span) = span {
                cx.error_at(
                    span,
                    format!(
                        "`{key}` belongs on the type a projection reads, not on the projection"
                    ),
                );
            }
        }
    }
    if let Some(t) = &a.table {
        let name = t.value.value();
        if let Err(reason) = table_name(&name) {
            cx.error_spanned_by(
                &t.value,
                format!("table name {name:?} is invalid: {reason}"),
            );
        }
    }
}

fn table_name(name: &str) -> Result<(), &'static str> {
    let b = name.as_bytes();
    if !(3..=63).contains(&b.len()) {
        return Err("a table name has 3 to 63 characters");
    }
    if !b[0].is_ascii_alphabetic() || !b.iter().all(u8::is_ascii_alphanumeric) {
        return Err("a table name is ASCII letters and digits, starting with a letter");
    }
    if name.eq_ignore_ascii_case("tables") {
        return Err("\"tables\" is reserved");
    }
    Ok(())
}

/// The attribute keys of a field that choose how it is stored.
fn storage_keys(f: &Field) -> Vec<(&'static str, Span)> {
    let a = &f.attrs;
    [
        ("skip", a.skip),
        ("etag", a.etag),
        ("timestamp", a.timestamp),
        ("flatten", a.flatten),
        ("json", a.json),
        ("with", a.with.as_ref().map(|w| w.span)),
        ("as_str", a.as_str),
        ("edm", a.edm.as_ref().map(|e| e.span)),
    ]
    .into_iter()
    .filter_map(|(k, s)| s.map(|s| (k, s)))
    .collect()
}

fn check_field(cx: &Ctxt, c: &Container, f: &Field) {
    let a = &f.attrs;
    let kinds = storage_keys(f);
    if let [(first, _), rest @ ..] = kinds.as_slice() {
        for (key, span) in rest {
            cx.error_at(
                *span,
                format!("`{key}` cannot be combined with `{first}` on one field"),
            );
        }
    }
    let is_key_flag = a.partition_key.or(a.row_key);
    if f.in_key() || is_key_flag.is_some() {
        let key_name = if f.in_partition_key || a.partition_key.is_some() {
            "PartitionKey"
        } else {
            "RowKey"
        };
        for (key, span) in &kinds {
            let fits = match *key {
                // The key uses Display/FromStr anyway; `stored` stores it that way too.
                "as_str" => true,
                // These only shape the property a `stored` key field also writes.
                "edm" | "with" => a.stored.is_some(),
                _ => false,
            };
            if !fits {
                let hint = if matches!(*key, "edm" | "with") {
                    " unless it is also `stored` as a property"
                } else {
                    ""
                };
                cx.error_at(
                    *span,
                    format!(
                        "`{key}` does not apply to a key field{hint} (`{}` builds the {key_name})",
                        f.rust_name()
                    ),
                );
            }
        }
        if let Some(d) = &a.default {
            cx.error_at(
                d.span,
                "a key field always has a value (it is read from the key): remove `default`",
            );
        }
        if let Some(inner) = ty::option_inner(f.ty) {
            cx.error_spanned_by(
                f.ty,
                format!(
                    "a key field cannot be optional: every entity has a key; use `{}`",
                    inner.to_token_stream()
                ),
            );
        }
    } else if let Some(s) = a.stored {
        cx.error_at(
            s,
            "`stored` applies to key fields (it stores them as their own property too)",
        );
    }
    match f.kind {
        Kind::ETag if !ty::is_option_etag(f.ty) => cx.error_spanned_by(
            f.ty,
            "an #[tablekit(etag)] field has the type Option<tablekit::ETag>",
        ),
        Kind::Timestamp if !ty::is_option_datetime(f.ty) => cx.error_spanned_by(
            f.ty,
            "a #[tablekit(timestamp)] field has the type Option<chrono::DateTime<chrono::Utc>>",
        ),
        Kind::Flatten if ty::option_inner(f.ty).is_some() => cx.error_spanned_by(
            f.ty,
            "a flattened field cannot be optional: its properties are read into the struct's own fields (make those optional)",
        ),
        _ => {}
    }
    if let (Some(d), Kind::ETag | Kind::Timestamp | Kind::Flatten) = (&a.default, &f.kind) {
        cx.error_at(
            d.span,
            "`default` applies to stored fields and skipped fields",
        );
    }
    if let (Some(r), Kind::Skip) = (&a.rename, &f.kind) {
        cx.error_at(
            r.span,
            "a skipped field is not stored: `rename` has no effect",
        );
    }
    if let Some(e) = a.encrypt {
        if f.in_key() || is_key_flag.is_some() {
            cx.error_at(
                e,
                "a key field cannot be encrypted: the PartitionKey and RowKey are stored in clear (the service indexes them)",
            );
        } else if !matches!(f.kind, Kind::Native) {
            cx.error_at(
                e,
                "`encrypt` applies to a plain String field (the format encrypts strings only): not with `skip`, `etag`, `timestamp`, `json`, `flatten`, `with`, `as_str` or `edm`",
            );
        } else if !ty::is_string(ty::strip_option(f.ty)) {
            cx.error_spanned_by(
                f.ty,
                "`encrypt` applies to String and Option<String> fields: the format of the .NET and Python libraries encrypts strings only",
            );
        }
    }
    if c.mode == Mode::Entity && c.attrs.projection_of.is_some() && matches!(f.kind, Kind::Flatten)
    {
        if let Some(s) = a.flatten {
            cx.error_at(
                s,
                "a projection cannot flatten: list the properties it reads as fields",
            );
        }
    }
}

fn check_single(cx: &Ctxt, fields: &[Field], pick: impl Fn(&Field) -> bool, key: &str) {
    for f in fields.iter().filter(|f| pick(f)).skip(1) {
        cx.error_spanned_by(f.ident, format!("only one field can be #[tablekit({key})]"));
    }
}

fn check_key_sources(cx: &Ctxt, c: &Container, kind: KeyKind, sources: &[KeySource]) {
    let key = kind.service_name();
    let attr = match kind {
        KeyKind::Partition => "partition_key",
        KeyKind::Row => "row_key",
    };
    match sources {
        [] => {
            // A template that failed to parse was reported already.
            let template_given = match kind {
                KeyKind::Partition => c.attrs.partition_key.is_some(),
                KeyKind::Row => c.attrs.row_key.is_some(),
            };
            if !template_given {
                cx.error_spanned_by(
                    c.ident,
                    format!(
                        "{} has no {key}: mark a field #[tablekit({attr})], or build it from fields with #[tablekit({attr} = \"{{field}}\")] on the struct",
                        c.ident
                    ),
                );
            }
        }
        [first, rest @ ..] => {
            for s in rest {
                cx.error_at(
                    s.span,
                    format!(
                        "{key} has two sources; it is already built from {:?}",
                        first.text
                    ),
                );
            }
            check_template(cx, c, first);
        }
    }
}

fn check_template(cx: &Ctxt, c: &Container, s: &KeySource) {
    let fields = c.fields();
    let key = s.kind.service_name();
    for (i, part) in s.parts.iter().enumerate() {
        match part {
            KeyPart::Lit(l) => {
                if let Some(ch) = template::forbidden_char(l) {
                    cx.error_at(
                        s.span,
                        format!(
                            "the {key} template {:?} holds {ch:?}, which the service forbids in keys ('/', '\\', '#', '?' and control characters)",
                            s.text
                        ),
                    );
                }
            }
            KeyPart::Field { index, width } => {
                let Some(f) = fields.get(*index) else {
                    continue;
                };
                let name = f.rust_name();
                if width.is_some() && !ty::is_integer(f.ty) {
                    cx.error_at(
                        s.span,
                        format!(
                            "`{{{name}:0N}}` zero-pads an integer, but `{name}` has the type `{}`; write `{{{name}}}`",
                            f.ty.to_token_stream()
                        ),
                    );
                }
                if width.is_none() && matches!(s.parts.get(i + 1), Some(KeyPart::Field { .. })) {
                    cx.error_at(
                        s.span,
                        format!(
                            "in the {key} template {:?}, `{name}` is followed by another field: put text between them or give `{name}` a fixed width ({{{name}:0N}}), so the key can be read back",
                            s.text
                        ),
                    );
                }
            }
        }
    }
}

/// Property names: valid, not reserved, unique; and the number of properties.
fn check_names(cx: &Ctxt, c: &Container, fields: &[Field]) {
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut count = 0usize;
    let mut check_one = |name: &str, span: Span, owner: String, what: &str| {
        if let Err(reason) = property_name(name) {
            cx.error_at(
                span,
                format!(
                    "{what} {} is not a valid property name: {reason}",
                    shown(name)
                ),
            );
            return;
        }
        if let Some(first) = seen.get(name) {
            cx.error_at(
                span,
                format!("{owner} and {first} are both stored as the property {name:?}"),
            );
        } else {
            seen.insert(name.to_owned(), owner);
        }
    };
    for f in fields.iter().filter(|f| f.is_stored()) {
        let what = if matches!(f.kind, Kind::Flatten) {
            "the flatten prefix"
        } else {
            "the property name"
        };
        if matches!(f.kind, Kind::Flatten) {
            if let Err(reason) = property_name(&f.name) {
                cx.error_at(
                    f.name_span,
                    format!(
                        "{what} {} is not a valid property name: {reason}",
                        shown(&f.name)
                    ),
                );
            }
            continue;
        }
        count += 1;
        check_one(
            &f.name,
            f.name_span,
            format!("field `{}`", f.rust_name()),
            what,
        );
        if c.mode == Mode::Entity
            && matches!(
                f.rust_name().as_str(),
                "partition_key" | "row_key" | "timestamp"
            )
        {
            cx.error_spanned_by(
                f.ident,
                format!(
                    "a stored field named `{}` would clash with the {} column of {}Columns: rename the Rust field (its property name can stay, with #[tablekit(rename = \"...\")])",
                    f.rust_name(),
                    f.rust_name(),
                    c.ident
                ),
            );
        }
    }
    if c.attrs.version.is_some() {
        let (name, span) = match &c.attrs.version_property {
            Some(p) => (p.value.value(), p.value.span()),
            None => (
                DEFAULT_VERSION_PROPERTY.to_owned(),
                c.attrs
                    .version
                    .as_ref()
                    .map_or_else(Span::call_site, |v| v.span),
            ),
        };
        count += 1;
        check_one(
            &name,
            span,
            "the schema version".to_owned(),
            "the version property",
        );
    }
    if count > MAX_PROPERTIES {
        cx.error_spanned_by(
            c.ident,
            format!(
                "{} stores {count} properties; an entity holds at most {MAX_PROPERTIES} (255 with PartitionKey, RowKey and Timestamp)",
                c.ident
            ),
        );
    }
}

/// A name for an error message: quoted, and cut short when it is long.
fn shown(name: &str) -> String {
    let count = name.chars().count();
    if count <= 40 {
        format!("{name:?}")
    } else {
        let head: String = name.chars().take(24).collect();
        format!("\"{head}...\" ({count} characters)")
    }
}

/// The service's rule for property names.
pub(crate) fn property_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.chars().count() > MAX_NAME {
        return Err("a property name has at most 255 characters");
    }
    let b = name.as_bytes();
    if !(b[0].is_ascii_alphabetic() || b[0] == b'_') {
        return Err("a property name starts with a letter or '_'");
    }
    if !b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_') {
        return Err("a property name has only ASCII letters, digits and '_'");
    }
    if matches!(name, "PartitionKey" | "RowKey" | "Timestamp") {
        return Err("PartitionKey, RowKey and Timestamp are system properties; rename the field with #[tablekit(rename = \"...\")]");
    }
    Ok(())
}

fn check_enum(cx: &Ctxt, c: &Container) {
    let Data::Enum(variants) = &c.data else {
        return;
    };
    let a = &c.attrs;
    if let (Some(_), Some(p)) = (&a.discriminator, a.row_key_prefix) {
        cx.error_at(
            p,
            "choose one discriminator: `row_key_prefix` or `discriminator`",
        );
    }
    if let Some(d) = &a.discriminator {
        if let Err(reason) = property_name(&d.value.value()) {
            cx.error_spanned_by(
                &d.value,
                format!(
                    "the discriminator {:?} is not a valid property name: {reason}",
                    d.value.value()
                ),
            );
        }
    }
    if variants.is_empty() {
        cx.error_spanned_by(
            c.ident,
            "an enum deriving TableEntity has at least one variant",
        );
    }
    let mut tags: HashMap<&str, &syn::Ident> = HashMap::new();
    let mut unknown: Option<&syn::Ident> = None;
    for v in variants {
        if v.attrs.unknown.is_some() {
            if let Some(first) = unknown {
                cx.error_spanned_by(v.ident, format!("`{first}` is already the unknown variant"));
            }
            unknown = Some(v.ident);
            continue;
        }
        if let Some(first) = tags.get(v.tag.as_str()) {
            cx.error_at(
                v.tag_span,
                format!(
                    "`{}` and `{first}` have the same discriminator {:?}",
                    v.ident, v.tag
                ),
            );
        } else {
            tags.insert(&v.tag, v.ident);
        }
        if a.row_key_prefix.is_some() {
            if let Some(ch) = template::forbidden_char(&v.tag) {
                cx.error_at(
                    v.tag_span,
                    format!(
                        "the RowKey prefix {:?} holds {ch:?}, which the service forbids in keys",
                        v.tag
                    ),
                );
            }
        }
        if v.tag.is_empty() {
            cx.error_at(v.tag_span, "a discriminator is not empty");
        }
    }
    if a.row_key_prefix.is_some() {
        for v in variants.iter().filter(|v| v.attrs.unknown.is_none()) {
            for w in variants
                .iter()
                .filter(|w| w.attrs.unknown.is_none() && w.ident != v.ident)
            {
                if w.tag.starts_with(&v.tag) && w.tag != v.tag {
                    cx.error_at(
                        w.tag_span,
                        format!("the RowKey prefix {:?} starts with {:?}, the prefix of `{}`: entities of `{}` would be read as `{}`", w.tag, v.tag, v.ident, w.ident, v.ident),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_names_follow_the_service_rules() {
        assert!(property_name("FirstName").is_ok());
        assert!(property_name("_x").is_ok());
        assert!(property_name(&"a".repeat(255)).is_ok());
        for bad in ["", "1a", "a-b", "é", "PartitionKey", "RowKey", "Timestamp"] {
            assert!(property_name(bad).is_err(), "{bad}");
        }
        assert!(property_name(&"a".repeat(256)).is_err());
    }

    #[test]
    fn table_names_follow_the_service_rules() {
        assert!(table_name("Employees").is_ok());
        for bad in ["ab", "1abc", "my-table", "tables"] {
            assert!(table_name(bad).is_err(), "{bad}");
        }
    }
}
