//! The IR: the derive input parsed once, with its attributes, property names and
//! key sources resolved. Code generation reads only this.

use proc_macro2::Span;
use syn::{Data as SynData, DeriveInput, Fields, Generics, Ident, Type, Visibility};

use crate::attr::{self, ContainerAttrs, FieldAttrs, Site, VariantAttrs};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::template::{self, Part};

/// The default name of the schema-version property.
pub(crate) const DEFAULT_VERSION_PROPERTY: &str = "SchemaVersion";
/// The default discriminator property of an enum.
pub(crate) const DEFAULT_DISCRIMINATOR: &str = "EntityType";

/// Which derive is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `#[derive(TableEntity)]`.
    Entity,
    /// `#[derive(TableProperties)]`.
    Properties,
}

/// The derive input.
pub(crate) struct Container<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) vis: &'a Visibility,
    pub(crate) generics: &'a Generics,
    pub(crate) attrs: ContainerAttrs,
    pub(crate) data: Data<'a>,
    pub(crate) mode: Mode,
    /// The path of the tablekit crate in generated code: `::tablekit`, or the
    /// `crate = "..."` of a crate that re-exports it.
    pub(crate) krate: syn::Path,
    /// PartitionKey sources (exactly one when the input is valid).
    pub(crate) partition_keys: Vec<KeySource>,
    /// RowKey sources (exactly one when the input is valid).
    pub(crate) row_keys: Vec<KeySource>,
}

pub(crate) enum Data<'a> {
    Struct(Vec<Field<'a>>),
    Enum(Vec<Variant<'a>>),
    /// Already reported (tuple struct, union, ...).
    Unsupported,
}

/// How a field is stored.
#[derive(Clone)]
pub(crate) enum Kind {
    /// By its natural Edm type (`tablekit::__private_0_1::Property`).
    Native,
    /// As the Edm type named by `edm = "..."`.
    Edm(&'static str),
    /// As a JSON string.
    Json,
    /// As the string of its `Display`, read with `FromStr`.
    AsStr,
    /// Through a user module's `write` and `read`.
    With(syn::ExprPath),
    /// As the properties of a `TableProperties` struct, prefixed.
    Flatten,
    /// Not stored.
    Skip,
    /// The entity's ETag.
    ETag,
    /// The service's Timestamp.
    Timestamp,
}

/// A named field.
pub(crate) struct Field<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) ty: &'a Type,
    pub(crate) attrs: FieldAttrs,
    pub(crate) kind: Kind,
    /// The property name (or the prefix of a flattened struct).
    pub(crate) name: String,
    /// Where the name comes from: the `rename` string or the field.
    pub(crate) name_span: Span,
    /// Whether the PartitionKey / RowKey is built from it.
    pub(crate) in_partition_key: bool,
    pub(crate) in_row_key: bool,
}

impl Field<'_> {
    /// The field's name as Rust spells it, without `r#`.
    pub(crate) fn rust_name(&self) -> String {
        let s = self.ident.to_string();
        s.strip_prefix("r#").map(str::to_owned).unwrap_or(s)
    }

    pub(crate) fn in_key(&self) -> bool {
        self.in_partition_key || self.in_row_key
    }

    /// Whether the field is written as (one or more) properties.
    pub(crate) fn is_stored(&self) -> bool {
        let stored_kind = !matches!(self.kind, Kind::Skip | Kind::ETag | Kind::Timestamp);
        stored_kind && (!self.in_key() || self.attrs.stored.is_some())
    }
}

/// Which key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    Partition,
    Row,
}

impl KeyKind {
    pub(crate) fn service_name(self) -> &'static str {
        match self {
            KeyKind::Partition => "PartitionKey",
            KeyKind::Row => "RowKey",
        }
    }
}

/// A resolved piece of a key template.
#[derive(Debug, Clone)]
pub(crate) enum KeyPart {
    Lit(String),
    Field { index: usize, width: Option<usize> },
}

/// Where a key comes from: a container template or a field marked as the key.
pub(crate) struct KeySource {
    pub(crate) kind: KeyKind,
    /// The template text (`"{field}"` for a marked field).
    pub(crate) text: String,
    pub(crate) span: Span,
    pub(crate) parts: Vec<KeyPart>,
}

impl KeySource {
    /// The field indexes of the template, in order, each once.
    pub(crate) fn field_indexes(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for p in &self.parts {
            if let KeyPart::Field { index, .. } = p {
                if !out.contains(index) {
                    out.push(*index);
                }
            }
        }
        out
    }
}

/// An enum variant wrapping an entity type.
pub(crate) struct Variant<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) ty: Option<&'a Type>,
    pub(crate) attrs: VariantAttrs,
    /// The discriminator value.
    pub(crate) tag: String,
    pub(crate) tag_span: Span,
}

impl<'a> Container<'a> {
    pub(crate) fn from_ast(cx: &Ctxt, input: &'a DeriveInput, mode: Mode) -> Container<'a> {
        let site = match (&input.data, mode) {
            (SynData::Enum(_), _) => Site::Enum,
            (_, Mode::Entity) => Site::EntityStruct,
            (_, Mode::Properties) => Site::PropertiesStruct,
        };
        let attrs = attr::container(cx, &input.attrs, site);
        let rule = attrs
            .rename_all
            .as_ref()
            .map_or(RenameRule::Pascal, |r| r.value);
        let field_site = match mode {
            Mode::Entity => Site::EntityField,
            Mode::Properties => Site::PropertiesField,
        };
        let data = match &input.data {
            SynData::Struct(s) => match &s.fields {
                Fields::Named(named) => Data::Struct(
                    named
                        .named
                        .iter()
                        .filter_map(|f| {
                            let ident = f.ident.as_ref()?;
                            Some(field(cx, f, ident, field_site, rule))
                        })
                        .collect(),
                ),
                _ => {
                    cx.error_spanned_by(
                        &input.ident,
                        "#[derive(TableEntity)] needs a struct with named fields: each field becomes a property named after it",
                    );
                    Data::Unsupported
                }
            },
            SynData::Enum(e) if mode == Mode::Entity => {
                Data::Enum(e.variants.iter().map(|v| variant(cx, v)).collect())
            }
            SynData::Enum(e) => {
                cx.error_spanned_by(
                    e.enum_token,
                    "#[derive(TableProperties)] needs a struct with named fields",
                );
                Data::Unsupported
            }
            SynData::Union(u) => {
                cx.error_spanned_by(
                    u.union_token,
                    "#[derive(TableEntity)] does not support unions: use a struct with named fields, or an enum of entity types",
                );
                Data::Unsupported
            }
        };
        let krate = attrs
            .krate
            .as_ref()
            .map_or_else(|| syn::parse_quote!(::tablekit), |k| k.value.clone());
        let mut c = Container {
            ident: &input.ident,
            vis: &input.vis,
            generics: &input.generics,
            attrs,
            data,
            mode,
            krate,
            partition_keys: Vec::new(),
            row_keys: Vec::new(),
        };
        c.resolve_keys(cx);
        c
    }

    /// The schema version and the property that stores it, when the type has one.
    pub(crate) fn version_property(&self) -> Option<(i32, String)> {
        let v = self.attrs.version.as_ref()?;
        let name = self
            .attrs
            .version_property
            .as_ref()
            .map_or_else(|| DEFAULT_VERSION_PROPERTY.to_owned(), |p| p.value.value());
        Some((v.value, name))
    }

    /// The discriminator property of an enum.
    pub(crate) fn discriminator(&self) -> String {
        self.attrs
            .discriminator
            .as_ref()
            .map_or_else(|| DEFAULT_DISCRIMINATOR.to_owned(), |d| d.value.value())
    }

    pub(crate) fn fields(&self) -> &[Field<'a>] {
        match &self.data {
            Data::Struct(f) => f,
            _ => &[],
        }
    }

    fn resolve_keys(&mut self, cx: &Ctxt) {
        let Data::Struct(fields) = &mut self.data else {
            return;
        };
        let mut pks = Vec::new();
        let mut rks = Vec::new();
        for (kind, template, out) in [
            (KeyKind::Partition, &self.attrs.partition_key, &mut pks),
            (KeyKind::Row, &self.attrs.row_key, &mut rks),
        ] {
            let Some(t) = template else { continue };
            let text = t.value.value();
            let parts = match template::parse(&text) {
                Ok(p) => p,
                Err(msg) => {
                    cx.error_spanned_by(&t.value, msg);
                    continue;
                }
            };
            let mut resolved = Vec::new();
            let mut ok = true;
            for p in parts {
                match p {
                    Part::Lit(l) => resolved.push(KeyPart::Lit(l)),
                    Part::Field { name, width } => {
                        match fields.iter().position(|f| f.rust_name() == name) {
                            Some(index) => resolved.push(KeyPart::Field { index, width }),
                            None => {
                                ok = false;
                                let names: Vec<String> =
                                    fields.iter().map(Field::rust_name).collect();
                                cx.error_spanned_by(
                                    &t.value,
                                    format!(
                                        "the {} template {text:?} names `{name}`, which is not a field of {}; its fields: {}",
                                        kind.service_name(),
                                        self.ident,
                                        names.join(", ")
                                    ),
                                );
                            }
                        }
                    }
                }
            }
            if ok {
                out.push(KeySource {
                    kind,
                    text,
                    span: t.value.span(),
                    parts: resolved,
                });
            }
        }
        for (index, f) in fields.iter().enumerate() {
            for (kind, flag, out) in [
                (KeyKind::Partition, f.attrs.partition_key, &mut pks),
                (KeyKind::Row, f.attrs.row_key, &mut rks),
            ] {
                if let Some(span) = flag {
                    out.push(KeySource {
                        kind,
                        text: format!("{{{}}}", f.rust_name()),
                        span,
                        parts: vec![KeyPart::Field { index, width: None }],
                    });
                }
            }
        }
        // Only the first source of each key counts; the check pass reports the rest.
        for (sources, pk) in [(&pks, true), (&rks, false)] {
            if let Some(s) = sources.first() {
                for index in s.field_indexes() {
                    if pk {
                        fields[index].in_partition_key = true;
                    } else {
                        fields[index].in_row_key = true;
                    }
                }
            }
        }
        self.partition_keys = pks;
        self.row_keys = rks;
    }
}

fn field<'a>(
    cx: &Ctxt,
    f: &'a syn::Field,
    ident: &'a Ident,
    site: Site,
    rule: RenameRule,
) -> Field<'a> {
    let attrs = attr::field(cx, &f.attrs, site);
    let kind = if attrs.etag.is_some() {
        Kind::ETag
    } else if attrs.timestamp.is_some() {
        Kind::Timestamp
    } else if attrs.skip.is_some() {
        Kind::Skip
    } else if attrs.flatten.is_some() {
        Kind::Flatten
    } else if attrs.json.is_some() {
        Kind::Json
    } else if let Some(w) = &attrs.with {
        Kind::With(w.value.clone())
    } else if attrs.as_str.is_some() {
        Kind::AsStr
    } else if let Some(e) = &attrs.edm {
        Kind::Edm(e.value)
    } else {
        Kind::Native
    };
    let raw = ident.to_string();
    let rust_name = raw.strip_prefix("r#").unwrap_or(&raw);
    let (name, name_span) = match &attrs.rename {
        Some(r) => (r.value.value(), r.value.span()),
        None => (rule.apply(rust_name), ident.span()),
    };
    Field {
        ident,
        ty: &f.ty,
        attrs,
        kind,
        name,
        name_span,
        in_partition_key: false,
        in_row_key: false,
    }
}

fn variant<'a>(cx: &Ctxt, v: &'a syn::Variant) -> Variant<'a> {
    let attrs = attr::variant(cx, &v.attrs);
    let ty = match &v.fields {
        Fields::Unnamed(u) if u.unnamed.len() == 1 => u.unnamed.first().map(|f| &f.ty),
        _ => {
            cx.error_spanned_by(
                &v.ident,
                format!(
                    "each variant wraps one entity type, such as `{}(BlogPost)` where BlogPost derives TableEntity",
                    v.ident
                ),
            );
            None
        }
    };
    let (tag, tag_span) = match &attrs.rename {
        Some(r) => (r.value.value(), r.value.span()),
        None => (v.ident.to_string(), v.ident.span()),
    };
    Variant {
        ident: &v.ident,
        ty,
        attrs,
        tag,
        tag_span,
    }
}
