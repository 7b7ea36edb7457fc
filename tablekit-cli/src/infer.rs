//! `infer`: a `#[derive(TableEntity)]` type for the entities a table holds,
//! inferred from a sample of them.
//!
//! - Each property becomes a field of the Rust type of its stored Edm type
//!   (`Int32` → `i32`, `Int64` → `i64`, `Guid` → `tablekit::uuid::Uuid`, ...), an
//!   `Option` when some entities lack it; a property stored with several
//!   types is left out, with a comment (read it through `DynamicEntity`).
//! - Keys: a template when every key of the sample fits one the derive
//!   supports (a literal prefix ending at a separator, then a number of
//!   fixed width `{n:0N}`, a number `{n}`, or any text `{s}`), else a
//!   `String` key field.
//! - Several entity types in one table become an enum of structs, told apart
//!   by a discriminator property (`EntityType`, `Kind`, `Type`) or, failing
//!   that, a RowKey prefix (`EMPLOYEE_`) whose groups hold different
//!   property names.
//! - Every choice carries a comment with the counts it was made on.
//!
//! This file depends on `tablekit` alone: the integration tests include it
//! to compile its output.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tablekit::{DynamicEntity, EdmValue};

/// Discriminator property names looked for, in order.
const DISCRIMINATORS: [&str; 4] = ["EntityType", "Kind", "Type", "Discriminator"];

/// Characters that end a key prefix.
const SEPARATORS: [char; 5] = ['_', '-', ':', '.', '|'];

/// The Rust source of a type for `sample`, named after `table`.
pub fn infer(table: &str, sample: &[DynamicEntity]) -> String {
    let mut out = String::new();
    let name = pascal(table);
    let _ = writeln!(
        out,
        "// Inferred by `tablekit-cli infer {table}` from {} entities.",
        sample.len()
    );
    if sample.is_empty() {
        let _ = writeln!(
            out,
            "// The sample is empty: nothing to infer beyond the keys.\n\
             #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]\n\
             pub struct {name} {{\n    #[tablekit(partition_key)]\n    pub partition_key: String,\n    #[tablekit(row_key)]\n    pub row_key: String,\n}}"
        );
        return out;
    }
    if let Some(groups) = by_discriminator(sample) {
        let (property, groups) = groups;
        enum_of(
            &mut out,
            &name,
            sample.len(),
            Split::Property(property),
            groups,
        );
    } else if let Some(groups) = by_row_key_prefix(sample) {
        enum_of(&mut out, &name, sample.len(), Split::Prefix, groups);
    } else {
        let refs: Vec<&DynamicEntity> = sample.iter().collect();
        structure(&mut out, &name, &refs, None);
    }
    out
}

enum Split<'a> {
    Property(&'a str),
    Prefix,
}

/// Groups of entities with the value (or prefix) that names them.
type Groups<'a> = Vec<(String, Vec<&'a DynamicEntity>)>;

fn enum_of(out: &mut String, name: &str, total: usize, split: Split<'_>, groups: Groups<'_>) {
    let counts: Vec<String> = groups
        .iter()
        .map(|(v, g)| format!("{v:?} x{}", g.len()))
        .collect();
    let mut variants = Vec::new();
    for (value, group) in &groups {
        let variant = pascal(value);
        let struct_name = format!("{name}{variant}");
        let skip = match split {
            Split::Property(p) => Some(p),
            Split::Prefix => None,
        };
        structure(out, &struct_name, group, skip);
        out.push('\n');
        variants.push((variant, value.clone(), struct_name));
    }
    match split {
        Split::Property(p) => {
            let _ = writeln!(
                out,
                "// {} entity types, told apart by the String property {p:?} that all {total} entities hold: {}.",
                groups.len(),
                counts.join(", ")
            );
            let _ = writeln!(
                out,
                "#[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]"
            );
            if p != "EntityType" {
                let _ = writeln!(out, "#[tablekit(discriminator = {p:?})]");
            }
        }
        Split::Prefix => {
            let _ = writeln!(
                out,
                "// {} entity types, told apart by the RowKey prefix of all {total} entities: {}.",
                groups.len(),
                counts.join(", ")
            );
            let _ = writeln!(
                out,
                "#[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]"
            );
            let _ = writeln!(out, "#[tablekit(row_key_prefix)]");
        }
    }
    let _ = writeln!(out, "pub enum {name} {{");
    for (variant, value, struct_name) in variants {
        if variant != value {
            let _ = writeln!(out, "    #[tablekit(rename = {value:?})]");
        }
        let _ = writeln!(out, "    {variant}({struct_name}),");
    }
    let _ = writeln!(
        out,
        "    /// An entity of a type the sample did not show.\n    #[tablekit(unknown)]\n    Other(tablekit::DynamicEntity),\n}}"
    );
}

/// A discriminator property: a String every entity holds, with 2 to 16
/// identifier-like values.
fn by_discriminator(sample: &[DynamicEntity]) -> Option<(&'static str, Groups<'_>)> {
    DISCRIMINATORS.iter().find_map(|&p| {
        let mut groups: BTreeMap<String, Vec<&DynamicEntity>> = BTreeMap::new();
        for e in sample {
            match e.get(p) {
                Some(EdmValue::String(v)) if is_identifier_like(v) => {
                    groups.entry(v.clone()).or_default().push(e)
                }
                _ => return None,
            }
        }
        let groups: Groups<'_> = groups.into_iter().collect();
        (2..=16).contains(&groups.len()).then_some((p, groups))
    })
}

/// A RowKey prefix (letters up to and including the first separator) that
/// every RowKey has, with 2 to 16 prefixes, none of whose groups holds only
/// property names another group holds too.
fn by_row_key_prefix(sample: &[DynamicEntity]) -> Option<Groups<'_>> {
    let mut groups: BTreeMap<String, Vec<&DynamicEntity>> = BTreeMap::new();
    for e in sample {
        let end = e.row_key.find(SEPARATORS)?;
        let prefix = &e.row_key[..=end];
        if !prefix[..end].chars().all(|c| c.is_ascii_alphabetic()) || end == 0 {
            return None;
        }
        groups.entry(prefix.to_owned()).or_default().push(e);
    }
    let groups: Groups<'_> = groups.into_iter().collect();
    if !(2..=16).contains(&groups.len()) {
        return None;
    }
    let shapes: Vec<Vec<&str>> = groups
        .iter()
        .map(|(_, g)| {
            let mut names: Vec<&str> = g
                .iter()
                .flat_map(|e| e.properties.iter().map(|(n, _)| n))
                .collect();
            names.sort_unstable();
            names.dedup();
            names
        })
        .collect();
    // Told apart only if no group's property names are a subset of
    // another's (otherwise the prefix is more likely data: `Oct-`, `Nov-`).
    let subset = |a: &[&str], b: &[&str]| a.iter().all(|n| b.contains(n));
    let distinct = shapes.iter().enumerate().all(|(i, a)| {
        shapes
            .iter()
            .enumerate()
            .all(|(j, b)| i == j || !subset(a, b))
    });
    distinct.then_some(groups)
}

fn is_identifier_like(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A key as a template of the derive, or a plain key field.
struct KeyShape {
    /// The template (`None`: a `String` field marked as the key).
    template: Option<String>,
    /// The field the template names, with its type.
    field: Option<(String, &'static str)>,
    why: String,
}

fn key_shape(keys: &[&str], which: &str, field_name: &str) -> KeyShape {
    let n = keys.len();
    let plain = |why: String| KeyShape {
        template: None,
        field: None,
        why,
    };
    if n < 2 {
        return plain(format!("{which}: one value seen, kept as text"));
    }
    // The longest common prefix, cut back to just after its last separator.
    let first = keys[0];
    let mut common = first.len();
    for k in &keys[1..] {
        common = common.min(
            first
                .char_indices()
                .zip(k.chars())
                .take_while(|((_, a), b)| a == b)
                .last()
                .map_or(0, |((i, a), _)| i + a.len_utf8()),
        );
    }
    let prefix = first[..common]
        .rfind(SEPARATORS)
        .map_or("", |i| &first[..=i]);
    let rests: Vec<&str> = keys.iter().map(|k| &k[prefix.len()..]).collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let esc = |s: &str| s.replace('{', "{{").replace('}', "}}");
    if rests.iter().all(|r| digits(r)) {
        let width = rests[0].len();
        if rests.iter().all(|r| r.len() == width) && rests.iter().any(|r| r.starts_with('0')) {
            if width <= 19 {
                let ty = if width <= 9 { "u32" } else { "u64" };
                return KeyShape {
                    template: Some(format!("{}{{{field_name}:0{width}}}", esc(prefix))),
                    field: Some((field_name.to_owned(), ty)),
                    why: format!(
                        "{which}: all {n} are {prefix:?} then {width} digits, zero-padded"
                    ),
                };
            }
        } else if rests.iter().all(|r| {
            (r.len() == 1 || !r.starts_with('0')) && r.len() <= 19 && r.parse::<u64>().is_ok()
        }) {
            return KeyShape {
                template: Some(format!("{}{{{field_name}}}", esc(prefix))),
                field: Some((field_name.to_owned(), "u64")),
                why: format!("{which}: all {n} are {prefix:?} then a number without leading zeros"),
            };
        }
    }
    if !prefix.is_empty() && rests.iter().all(|r| !r.is_empty()) {
        return KeyShape {
            template: Some(format!("{}{{{field_name}}}", esc(prefix))),
            field: Some((field_name.to_owned(), "String")),
            why: format!("{which}: all {n} start with {prefix:?}"),
        };
    }
    plain(format!(
        "{which}: no common prefix or number form in {n} values, kept as text"
    ))
}

/// What the sample shows of one property.
#[derive(Default)]
struct Seen {
    present: usize,
    types: BTreeMap<&'static str, usize>,
}

fn edm_name(v: &EdmValue) -> &'static str {
    match v {
        EdmValue::String(_) => "String",
        EdmValue::Binary(_) => "Binary",
        EdmValue::Boolean(_) => "Boolean",
        EdmValue::DateTime(_) => "DateTime",
        EdmValue::Double(_) => "Double",
        EdmValue::Guid(_) => "Guid",
        EdmValue::Int32(_) => "Int32",
        EdmValue::Int64(_) => "Int64",
        _ => "unknown",
    }
}

fn rust_type(edm: &str) -> Option<&'static str> {
    Some(match edm {
        "String" => "String",
        "Binary" => "Vec<u8>",
        "Boolean" => "bool",
        "DateTime" => "tablekit::chrono::DateTime<tablekit::chrono::Utc>",
        "Double" => "f64",
        "Guid" => "tablekit::uuid::Uuid",
        "Int32" => "i32",
        "Int64" => "i64",
        _ => return None,
    })
}

fn structure(out: &mut String, name: &str, group: &[&DynamicEntity], skip: Option<&str>) {
    let n = group.len();
    let mut seen: BTreeMap<&str, Seen> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for e in group {
        for (p, v) in e.properties.iter() {
            if Some(p) == skip {
                continue;
            }
            let s = seen.entry(p).or_insert_with(|| {
                order.push(p);
                Seen::default()
            });
            s.present += 1;
            *s.types.entry(edm_name(v)).or_default() += 1;
        }
    }
    let mut used: Vec<String> = Vec::new();
    let mut fields = String::new();
    let field = |prop: &str, used: &mut Vec<String>| {
        let mut f = snake(prop);
        if is_keyword(&f) || f.is_empty() {
            f.push('_');
        }
        while used.contains(&f) {
            f.push('_');
        }
        used.push(f.clone());
        f
    };
    let pks: Vec<&str> = group.iter().map(|e| e.partition_key.as_str()).collect();
    let rks: Vec<&str> = group.iter().map(|e| e.row_key.as_str()).collect();
    // Key fields first, so property fields never take their names.
    used.extend(
        [
            "partition_key",
            "row_key",
            "partition",
            "row",
            "etag",
            "timestamp",
        ]
        .map(String::from),
    );
    let pk = key_shape(&pks, "PartitionKey", "partition");
    let rk = key_shape(&rks, "RowKey", "row");
    let mut attrs = Vec::new();
    for (shape, which) in [(&pk, "partition_key"), (&rk, "row_key")] {
        let _ = writeln!(fields, "    // {}", shape.why);
        match (&shape.template, &shape.field) {
            (Some(t), Some((f, ty))) => {
                attrs.push(format!("{which} = {t:?}"));
                let _ = writeln!(fields, "    pub {f}: {ty},");
            }
            _ => {
                let _ = writeln!(fields, "    #[tablekit({which})]\n    pub {which}: String,");
            }
        }
    }
    for prop in order {
        let s = &seen[prop];
        let types: Vec<String> = s.types.iter().map(|(t, c)| format!("{t} x{c}")).collect();
        let (edm, _) = s.types.iter().next().expect("seen once at least");
        let ty = match rust_type(edm) {
            Some(ty) if s.types.len() == 1 => ty,
            _ => {
                let _ = writeln!(
                    fields,
                    "    // {prop:?} left out: stored with several types ({}); read it through tablekit::DynamicEntity.",
                    types.join(", ")
                );
                continue;
            }
        };
        let f = field(prop, &mut used);
        let optional = s.present < n;
        let _ = writeln!(
            fields,
            "    // {prop}: {} in {} of {n} entities{}",
            types.join(", "),
            s.present,
            if optional { ", so optional" } else { "" }
        );
        if pascal_of_snake(&f) != prop {
            let _ = writeln!(fields, "    #[tablekit(rename = {prop:?})]");
        }
        if optional {
            let _ = writeln!(fields, "    pub {f}: Option<{ty}>,");
        } else {
            let _ = writeln!(fields, "    pub {f}: {ty},");
        }
    }
    let _ = writeln!(
        fields,
        "    #[tablekit(etag)]\n    pub etag: Option<tablekit::ETag>,\n    #[tablekit(timestamp)]\n    pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,"
    );
    let _ = writeln!(
        out,
        "#[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]"
    );
    if !attrs.is_empty() {
        let _ = writeln!(out, "#[tablekit({})]", attrs.join(", "));
    }
    let _ = write!(out, "pub struct {name} {{\n{fields}}}\n");
}

/// The derive's default property name of a field: PascalCase.
fn pascal_of_snake(field: &str) -> String {
    field
        .trim_end_matches('_')
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// A field name for a property: `FirstName` → `first_name`.
fn snake(prop: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = prop.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// A type or variant name: `social_network` / `EMPLOYEE_` → `SocialNetwork` / `Employee`.
fn pascal(s: &str) -> String {
    let mut out = String::new();
    for word in s.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = word.chars();
        if let Some(f) = chars.next() {
            out.push(f.to_ascii_uppercase());
            let rest = chars.as_str();
            if word.chars().all(|c| !c.is_ascii_lowercase()) {
                out.push_str(&rest.to_ascii_lowercase());
            } else {
                out.push_str(rest);
            }
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'T');
    }
    out
}

fn is_keyword(s: &str) -> bool {
    [
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
        "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
        "move", "mut", "pub", "ref", "return", "self", "static", "struct", "super", "trait",
        "true", "type", "unsafe", "use", "where", "while", "abstract", "become", "box", "do",
        "final", "macro", "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
    ]
    .contains(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_derive_conventions() {
        assert_eq!(snake("FirstName"), "first_name");
        assert_eq!(snake("EmailAddress"), "email_address");
        assert_eq!(snake("ID"), "id");
        assert_eq!(snake("HTTPStatus"), "http_status");
        assert_eq!(snake("Outer_Inner"), "outer_inner");
        assert_eq!(pascal_of_snake("first_name"), "FirstName");
        assert_eq!(pascal_of_snake("type_"), "Type");
        assert_eq!(pascal("EMPLOYEE_"), "Employee");
        assert_eq!(pascal("blogs"), "Blogs");
        assert_eq!(pascal("SocialNetwork"), "SocialNetwork");
    }

    #[test]
    fn a_property_of_several_types_is_left_out_with_its_counts() {
        let sample = [
            DynamicEntity::new("p", "a").with("Mixed", 1),
            DynamicEntity::new("p", "b").with("Mixed", "one"),
        ];
        let src = infer("Mixed", &sample);
        assert!(
            src.contains("\"Mixed\" left out: stored with several types (Int32 x1, String x1)"),
            "{src}"
        );
        assert!(!src.contains("pub mixed"), "{src}");
    }

    #[test]
    fn a_row_key_prefix_over_the_same_properties_is_data_not_a_type() {
        let sample = [
            DynamicEntity::new("p", "Oct-29")
                .with("Rating", 3)
                .with("Text", "a"),
            DynamicEntity::new("p", "Nov-02").with("Text", "b"),
        ];
        assert!(!infer("Blogs", &sample).contains("enum"));
    }

    #[test]
    fn key_templates_are_recognised() {
        let t = |keys: &[&str]| key_shape(keys, "RowKey", "row").template;
        assert_eq!(
            t(&["empid_000223", "empid_000224"]).as_deref(),
            Some("empid_{row:06}")
        );
        assert_eq!(t(&["7", "12", "0"]).as_deref(), Some("{row}"));
        assert_eq!(
            t(&["EMPLOYEE_a", "EMPLOYEE_b"]).as_deref(),
            Some("EMPLOYEE_{row}")
        );
        assert_eq!(t(&["Oct-29", "Nov-01"]), None);
        assert_eq!(t(&["a{b}_1", "a{b}_2"]).as_deref(), Some("a{{b}}_{row}"));
        // Mixed widths with leading zeros are no number: text after the prefix.
        assert_eq!(t(&["x_007", "x_12"]).as_deref(), Some("x_{row}"));
        assert_eq!(t(&["only"]), None);
    }
}
