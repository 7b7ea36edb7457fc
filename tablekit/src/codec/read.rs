//! Reading entities: a borrowed view of one stored entity ([`RawEntity`]) built
//! straight from the JSON bytes of a response (or from a property bag), which a
//! [`TableEntity`] turns into its own type.
//!
//! The JSON is parsed once. Names and string values borrow from the response
//! body where they contain no escapes, so a property is copied only when the
//! target type takes ownership of it.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use uuid::Uuid;

use crate::edm::{parse_datetime, EdmType, EdmValue};
use crate::entity::{ETag, TableEntity};
use crate::error::{Error, Result};

/// A JSON scalar as it appeared on the wire.
#[derive(Debug, Clone)]
pub(crate) enum Scalar<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
}

/// Where a property's value came from.
#[derive(Debug, Clone)]
pub(crate) enum Slot<'a> {
    /// A JSON value with the type annotation the service sent, if any.
    Json(Scalar<'a>, Option<EdmType>),
    /// A typed value (embedded backend, tests).
    Value(Cow<'a, EdmValue>),
}

/// One stored entity, as read: keys, system properties and properties whose
/// values are converted on demand to the type the reader asks for.
#[derive(Debug, Default)]
pub struct RawEntity<'a> {
    pub(crate) partition_key: Cow<'a, str>,
    pub(crate) row_key: Cow<'a, str>,
    pub(crate) timestamp: Option<Cow<'a, str>>,
    pub(crate) etag: Option<Cow<'a, str>>,
    pub(crate) props: Vec<(Cow<'a, str>, Slot<'a>)>,
}

impl<'a> RawEntity<'a> {
    /// A view of a property bag with these keys.
    pub fn from_dynamic(entity: &'a crate::DynamicEntity) -> Self {
        RawEntity {
            partition_key: Cow::Borrowed(&entity.partition_key),
            row_key: Cow::Borrowed(&entity.row_key),
            timestamp: entity
                .timestamp
                .map(|t| Cow::Owned(crate::edm::format_datetime(&t))),
            etag: entity.etag.as_ref().map(|e| Cow::Borrowed(e.as_str())),
            props: entity
                .properties
                .iter()
                .map(|(n, v)| (Cow::Borrowed(n), Slot::Value(Cow::Borrowed(v))))
                .collect(),
        }
    }

    /// The PartitionKey.
    pub fn partition_key(&self) -> &str {
        &self.partition_key
    }

    /// The RowKey.
    pub fn row_key(&self) -> &str {
        &self.row_key
    }

    /// The service's Timestamp: when the entity was last written.
    pub fn timestamp(&self) -> Option<DateTime<Utc>> {
        self.timestamp
            .as_deref()
            .and_then(|t| parse_datetime(t).ok())
    }

    /// The ETag the entity was read with.
    pub fn etag(&self) -> Option<ETag> {
        self.etag.as_deref().map(ETag::new)
    }

    /// The number of custom properties.
    pub fn len(&self) -> usize {
        self.props.len()
    }

    /// Whether there are no custom properties.
    pub fn is_empty(&self) -> bool {
        self.props.is_empty()
    }

    /// The custom properties, in the order the service sent them.
    pub fn properties(&self) -> impl ExactSizeIterator<Item = PropertyValue<'_>> {
        self.props
            .iter()
            .map(|(n, s)| PropertyValue { name: n, slot: s })
    }

    /// A property by name.
    pub fn get(&self, name: &str) -> Option<PropertyValue<'_>> {
        self.props
            .iter()
            .find(|(n, _)| n == name)
            .map(|(n, s)| PropertyValue { name: n, slot: s })
    }

    /// A property that must be there: a missing one is a decode error naming it.
    pub fn required(&self, name: &str) -> Result<PropertyValue<'_>> {
        self.get(name)
            .ok_or_else(|| Error::decode_property(name, "the entity has no such property"))
    }
}

/// A stored property value, converted on demand. Each `to_*` method checks the
/// type the service declared (when it declared one) and converts the wire form;
/// a mismatch is a decode error naming the property.
#[derive(Clone, Copy)]
pub struct PropertyValue<'e> {
    name: &'e str,
    slot: &'e Slot<'e>,
}

impl fmt::Debug for PropertyValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PropertyValue")
            .field("name", &self.name)
            .field("value", self.slot)
            .finish()
    }
}

impl<'e> PropertyValue<'e> {
    /// The property's name.
    pub fn name(&self) -> &'e str {
        self.name
    }

    /// The type the service declared, or the one inferred from the JSON form
    /// (string → String, integer → Int32 or Int64 by range, number with a
    /// fraction or exponent → Double, boolean → Boolean).
    pub fn edm_type(&self) -> EdmType {
        match self.slot {
            Slot::Value(v) => v.edm_type(),
            Slot::Json(_, Some(t)) => *t,
            Slot::Json(s, None) => match s {
                Scalar::Bool(_) => EdmType::Boolean,
                Scalar::Int(i) if i32::try_from(*i).is_ok() => EdmType::Int32,
                Scalar::Int(_) => EdmType::Int64,
                Scalar::Float(_) => EdmType::Double,
                Scalar::Str(_) => EdmType::String,
            },
        }
    }

    /// Whether the service declared this property's type (rather than it being inferred).
    pub fn is_annotated(&self) -> bool {
        matches!(self.slot, Slot::Json(_, Some(_)) | Slot::Value(_))
    }

    fn mismatch(&self, want: EdmType) -> Error {
        Error::decode_property(
            self.name,
            format!("stored as {}, read as {want}", self.edm_type()),
        )
    }

    fn declared_is(&self, want: EdmType, also: &[EdmType]) -> Result<()> {
        match self.slot {
            Slot::Json(_, Some(t)) if *t != want && !also.contains(t) => Err(self.mismatch(want)),
            _ => Ok(()),
        }
    }

    /// The value as a string slice (`Edm.String`).
    pub fn as_str(&self) -> Result<&'e str> {
        match self.slot {
            Slot::Json(Scalar::Str(s), None | Some(EdmType::String)) => Ok(s),
            Slot::Value(v) => match v.as_ref() {
                EdmValue::String(s) => Ok(s),
                _ => Err(self.mismatch(EdmType::String)),
            },
            _ => Err(self.mismatch(EdmType::String)),
        }
    }

    /// The value as an owned string (`Edm.String`).
    pub fn string(&self) -> Result<String> {
        self.as_str().map(str::to_owned)
    }

    /// The value as `bool` (`Edm.Boolean`).
    pub fn to_bool(&self) -> Result<bool> {
        match self.slot {
            Slot::Json(Scalar::Bool(b), None | Some(EdmType::Boolean)) => Ok(*b),
            Slot::Value(v) => v.as_bool().ok_or_else(|| self.mismatch(EdmType::Boolean)),
            _ => Err(self.mismatch(EdmType::Boolean)),
        }
    }

    /// The value as `i32` (`Edm.Int32`).
    pub fn to_i32(&self) -> Result<i32> {
        self.declared_is(EdmType::Int32, &[])?;
        match self.slot {
            Slot::Json(Scalar::Int(i), _) => i32::try_from(*i)
                .map_err(|_| Error::decode_property(self.name, format!("{i} does not fit Int32"))),
            Slot::Json(Scalar::Str(s), Some(EdmType::Int32)) => s
                .parse()
                .map_err(|_| Error::decode_property(self.name, format!("{s:?} is not an Int32"))),
            Slot::Value(v) => v.as_i32().ok_or_else(|| self.mismatch(EdmType::Int32)),
            _ => Err(self.mismatch(EdmType::Int32)),
        }
    }

    /// The value as `i64` (`Edm.Int64`; an `Edm.Int32` widens).
    pub fn to_i64(&self) -> Result<i64> {
        self.declared_is(EdmType::Int64, &[EdmType::Int32])?;
        match self.slot {
            Slot::Json(Scalar::Int(i), _) => Ok(*i),
            // Int64 travels as a string; without metadata it is a bare string.
            Slot::Json(Scalar::Str(s), _) => s
                .parse()
                .map_err(|_| Error::decode_property(self.name, format!("{s:?} is not an Int64"))),
            Slot::Value(v) => v.as_i64().ok_or_else(|| self.mismatch(EdmType::Int64)),
            _ => Err(self.mismatch(EdmType::Int64)),
        }
    }

    /// The value as `f64` (`Edm.Double`, including `NaN` and the infinities;
    /// an Int32 or Int64 widens, since some writers store integral doubles as integers).
    pub fn to_f64(&self) -> Result<f64> {
        self.declared_is(EdmType::Double, &[EdmType::Int32, EdmType::Int64])?;
        match self.slot {
            Slot::Json(Scalar::Float(f), _) => Ok(*f),
            Slot::Json(Scalar::Int(i), _) => Ok(*i as f64),
            Slot::Json(Scalar::Str(s), None | Some(EdmType::Double)) => match s.as_ref() {
                "NaN" => Ok(f64::NAN),
                "Infinity" | "INF" => Ok(f64::INFINITY),
                "-Infinity" | "-INF" => Ok(f64::NEG_INFINITY),
                other => other.parse().map_err(|_| {
                    Error::decode_property(self.name, format!("{other:?} is not a Double"))
                }),
            },
            Slot::Value(v) => match v.as_ref() {
                EdmValue::Double(f) => Ok(*f),
                EdmValue::Int32(i) => Ok(f64::from(*i)),
                EdmValue::Int64(i) => Ok(*i as f64),
                _ => Err(self.mismatch(EdmType::Double)),
            },
            _ => Err(self.mismatch(EdmType::Double)),
        }
    }

    /// The value as a UTC instant (`Edm.DateTime`).
    pub fn to_datetime(&self) -> Result<DateTime<Utc>> {
        self.declared_is(EdmType::DateTime, &[])?;
        match self.slot {
            Slot::Json(Scalar::Str(s), _) => parse_datetime(s)
                .map_err(|_| Error::decode_property(self.name, format!("{s:?} is not a DateTime"))),
            Slot::Value(v) => v
                .as_datetime()
                .ok_or_else(|| self.mismatch(EdmType::DateTime)),
            _ => Err(self.mismatch(EdmType::DateTime)),
        }
    }

    /// The value as a GUID (`Edm.Guid`).
    pub fn to_guid(&self) -> Result<Uuid> {
        self.declared_is(EdmType::Guid, &[])?;
        match self.slot {
            Slot::Json(Scalar::Str(s), _) => Uuid::parse_str(s)
                .map_err(|_| Error::decode_property(self.name, format!("{s:?} is not a Guid"))),
            Slot::Value(v) => v.as_guid().ok_or_else(|| self.mismatch(EdmType::Guid)),
            _ => Err(self.mismatch(EdmType::Guid)),
        }
    }

    /// The value as bytes (`Edm.Binary`, base64 on the wire).
    pub fn to_binary(&self) -> Result<Vec<u8>> {
        self.declared_is(EdmType::Binary, &[])?;
        match self.slot {
            Slot::Json(Scalar::Str(s), _) => base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map_err(|_| Error::decode_property(self.name, "not valid base64")),
            Slot::Value(v) => v
                .as_binary()
                .map(<[u8]>::to_vec)
                .ok_or_else(|| self.mismatch(EdmType::Binary)),
            _ => Err(self.mismatch(EdmType::Binary)),
        }
    }

    /// The value as the given type.
    pub fn to_value_as(&self, edm: EdmType) -> Result<EdmValue> {
        Ok(match edm {
            EdmType::String => EdmValue::String(self.string()?),
            EdmType::Binary => EdmValue::Binary(self.to_binary()?),
            EdmType::Boolean => EdmValue::Boolean(self.to_bool()?),
            EdmType::DateTime => EdmValue::DateTime(self.to_datetime()?),
            EdmType::Double => EdmValue::Double(self.to_f64()?),
            EdmType::Guid => EdmValue::Guid(self.to_guid()?),
            EdmType::Int32 => EdmValue::Int32(self.to_i32()?),
            EdmType::Int64 => EdmValue::Int64(self.to_i64()?),
        })
    }

    /// The value as its declared (or inferred, see [`PropertyValue::edm_type`]) type.
    pub fn to_value(&self) -> Result<EdmValue> {
        match self.slot {
            Slot::Value(v) => Ok(v.as_ref().clone()),
            // Moving the owned string saves nothing here (we only have a borrow),
            // but the common case is a borrowed slice of the body: one copy.
            _ => self.to_value_as(self.edm_type()),
        }
    }
}

// ---------------------------------------------------------------------------
// JSON parsing with serde visitors.

/// A map key or string value, borrowed from the body when it holds no escapes.
struct CowStr<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A property value: a scalar, or null (which the service treats as absent).
struct MaybeScalar<'a>(Option<Scalar<'a>>);

impl<'de> de::Deserialize<'de> for MaybeScalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeScalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number, boolean or null")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(MaybeScalar(Some(Scalar::Bool(v))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(MaybeScalar(Some(Scalar::Int(v))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(MaybeScalar(Some(match i64::try_from(v) {
                    Ok(i) => Scalar::Int(i),
                    Err(_) => Scalar::Float(v as f64),
                })))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(MaybeScalar(Some(Scalar::Float(v))))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MaybeScalar(Some(Scalar::Str(Cow::Borrowed(v)))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MaybeScalar(Some(Scalar::Str(Cow::Owned(v.to_owned())))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(MaybeScalar(Some(Scalar::Str(Cow::Owned(v)))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MaybeScalar(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MaybeScalar(None))
            }
        }
        d.deserialize_any(V)
    }
}

const ANNOTATION: &str = "@odata.type";

/// Decodes one JSON entity object into `T`; shares a property buffer between
/// the entities of a page and reports `T`'s own error through `failure`.
struct EntitySeed<'s, 'de, T> {
    scratch: &'s mut Vec<(Cow<'de, str>, Slot<'de>)>,
    failure: &'s mut Option<Error>,
    etag: Option<&'s str>,
    _t: PhantomData<T>,
}

impl<'de, T: TableEntity> DeserializeSeed<'de> for EntitySeed<'_, 'de, T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: TableEntity> Visitor<'de> for EntitySeed<'_, 'de, T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an entity object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut raw = RawEntity {
            props: std::mem::take(self.scratch),
            etag: self.etag.map(|e| Cow::Owned(e.to_owned())),
            ..Default::default()
        };
        raw.props.clear();
        let mut annotations: Vec<(Cow<'de, str>, EdmType)> = Vec::new();
        let (mut has_pk, mut has_rk) = (false, false);
        while let Some(CowStr(key)) = map.next_key::<CowStr<'de>>()? {
            match key.as_ref() {
                "PartitionKey" => {
                    raw.partition_key = map.next_value::<CowStr<'de>>()?.0;
                    has_pk = true;
                }
                "RowKey" => {
                    raw.row_key = map.next_value::<CowStr<'de>>()?.0;
                    has_rk = true;
                }
                "Timestamp" => raw.timestamp = Some(map.next_value::<CowStr<'de>>()?.0),
                "odata.etag" => {
                    let etag = map.next_value::<CowStr<'de>>()?.0;
                    if raw.etag.is_none() {
                        raw.etag = Some(etag);
                    }
                }
                k if k.starts_with("odata.") => {
                    map.next_value::<IgnoredAny>()?;
                }
                k if k.ends_with(ANNOTATION) => {
                    let name = &k[..k.len() - ANNOTATION.len()];
                    let CowStr(t) = map.next_value::<CowStr<'de>>()?;
                    if matches!(name, "PartitionKey" | "RowKey" | "Timestamp") {
                        continue;
                    }
                    let edm = EdmType::from_wire(&t).ok_or_else(|| {
                        de::Error::custom(format_args!(
                            "property {name:?} has the type {t:?}, which the Table service does not store"
                        ))
                    })?;
                    let name = match key {
                        Cow::Borrowed(b) => Cow::Borrowed(&b[..b.len() - ANNOTATION.len()]),
                        Cow::Owned(ref o) => Cow::Owned(o[..o.len() - ANNOTATION.len()].to_owned()),
                    };
                    annotations.push((name, edm));
                }
                _ => {
                    if let MaybeScalar(Some(v)) = map.next_value::<MaybeScalar<'de>>()? {
                        raw.props.push((key, Slot::Json(v, None)));
                    }
                }
            }
        }
        if !(has_pk && has_rk) {
            return Err(de::Error::custom(
                "an entity without PartitionKey or RowKey",
            ));
        }
        for (name, edm) in annotations {
            if let Some((_, Slot::Json(_, t))) = raw.props.iter_mut().find(|(n, _)| *n == name) {
                *t = Some(edm);
            }
        }
        let result = T::decode(&raw);
        *self.scratch = std::mem::take(&mut raw.props);
        result.map_err(|e| {
            *self.failure = Some(e);
            de::Error::custom("entity decode failed")
        })
    }
}

/// Decodes the `value` array of a query response.
struct PageSeed<'s, T> {
    out: &'s mut Vec<T>,
    failure: &'s mut Option<Error>,
}

impl<'de, T: TableEntity> DeserializeSeed<'de> for PageSeed<'_, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: TableEntity> Visitor<'de> for PageSeed<'_, T> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of entities")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut scratch = Vec::new();
        if let Some(n) = seq.size_hint() {
            self.out.reserve(n);
        }
        loop {
            let seed = EntitySeed::<T> {
                scratch: &mut scratch,
                failure: self.failure,
                etag: None,
                _t: PhantomData,
            };
            match seq.next_element_seed(seed)? {
                Some(e) => self.out.push(e),
                None => return Ok(()),
            }
        }
    }
}

struct QueryBody<'s, T> {
    out: &'s mut Vec<T>,
    failure: &'s mut Option<Error>,
}

impl<'de, T: TableEntity> Visitor<'de> for QueryBody<'_, T> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a query response object with a value array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(CowStr(key)) = map.next_key::<CowStr<'de>>()? {
            if key == "value" {
                map.next_value_seed(PageSeed {
                    out: &mut *self.out,
                    failure: &mut *self.failure,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

fn json_failure(e: serde_json::Error, failure: Option<Error>) -> Error {
    failure.unwrap_or_else(|| Error::decode(format!("invalid JSON: {e}")))
}

/// Decodes the entities of a query response body (`{"value":[...]}`).
pub(crate) fn decode_page<T: TableEntity>(body: &[u8], out: &mut Vec<T>) -> Result<()> {
    let mut failure = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let r = de.deserialize_map(QueryBody {
        out,
        failure: &mut failure,
    });
    r.and_then(|_| de.end())
        .map_err(|e| json_failure(e, failure))
}

/// Decodes a single entity body; `etag` is the response's ETag header, which
/// takes precedence over `odata.etag` in the body.
pub(crate) fn decode_entity<T: TableEntity>(body: &[u8], etag: Option<&str>) -> Result<T> {
    let mut failure = None;
    let mut scratch = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let seed = EntitySeed::<T> {
        scratch: &mut scratch,
        failure: &mut failure,
        etag,
        _t: PhantomData,
    };
    let r = seed.deserialize(&mut de);
    r.and_then(|v| de.end().map(|_| v))
        .map_err(|e| json_failure(e, failure))
}

/// Decodes the table names of a `GET /Tables` response.
pub(crate) fn decode_table_names(body: &[u8]) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Body {
        value: Vec<Row>,
    }
    #[derive(serde::Deserialize)]
    struct Row {
        #[serde(rename = "TableName")]
        table_name: String,
    }
    let b: Body = serde_json::from_slice(body)
        .map_err(|e| Error::decode(format!("invalid table list: {e}")))?;
    Ok(b.value.into_iter().map(|r| r.table_name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DynamicEntity;

    #[test]
    fn minimal_metadata_page_decodes_every_type() {
        let body = br#"{"odata.metadata":"x","value":[{"odata.etag":"W/\"datetime'2020-01-01T00%3A00%3A00.1234567Z'\"","PartitionKey":"p","RowKey":"r","Timestamp":"2020-01-01T00:00:00.1234567Z","S":"a\"b","I":7,"L@odata.type":"Edm.Int64","L":"9000000000","F":2.5,"FI@odata.type":"Edm.Double","FI":2,"N@odata.type":"Edm.Double","N":"NaN","B@odata.type":"Edm.Binary","B":"AAH/","T":true,"G@odata.type":"Edm.Guid","G":"01234567-89ab-cdef-0123-456789abcdef","D@odata.type":"Edm.DateTime","D":"2020-07-23T21:20:41.6667782Z","Z":null}]}"#;
        let mut out: Vec<DynamicEntity> = Vec::new();
        decode_page(body, &mut out).unwrap();
        let e = &out[0];
        assert_eq!(e.partition_key, "p");
        assert_eq!(e.row_key, "r");
        assert!(e.etag.is_some());
        assert!(e.timestamp.is_some());
        assert_eq!(e.get("S"), Some(&EdmValue::String("a\"b".into())));
        assert_eq!(e.get("I"), Some(&EdmValue::Int32(7)));
        assert_eq!(e.get("L"), Some(&EdmValue::Int64(9_000_000_000)));
        assert_eq!(e.get("F"), Some(&EdmValue::Double(2.5)));
        assert_eq!(e.get("FI"), Some(&EdmValue::Double(2.0)));
        assert!(matches!(e.get("N"), Some(EdmValue::Double(n)) if n.is_nan()));
        assert_eq!(e.get("B"), Some(&EdmValue::Binary(vec![0, 1, 255])));
        assert_eq!(e.get("T"), Some(&EdmValue::Boolean(true)));
        assert!(matches!(e.get("G"), Some(EdmValue::Guid(_))));
        assert!(matches!(e.get("D"), Some(EdmValue::DateTime(_))));
        assert_eq!(e.get("Z"), None, "null is absent");
    }

    #[test]
    fn unannotated_values_are_read_by_schema() {
        let body = br#"{"PartitionKey":"p","RowKey":"r","L":"9000000000","D":"2020-07-23T21:20:41Z","G":"01234567-89ab-cdef-0123-456789abcdef","B":"AAH/"}"#;
        struct Probe;
        impl TableEntity for Probe {
            fn partition_key(&self) -> Cow<'_, str> {
                "".into()
            }
            fn row_key(&self) -> Cow<'_, str> {
                "".into()
            }
            fn write_properties<W: crate::PropertyWriter + ?Sized>(&self, _: &mut W) -> Result<()> {
                Ok(())
            }
            fn decode(e: &RawEntity<'_>) -> Result<Self> {
                assert_eq!(e.required("L")?.to_i64()?, 9_000_000_000);
                assert!(e.required("D")?.to_datetime().is_ok());
                assert!(e.required("G")?.to_guid().is_ok());
                assert_eq!(e.required("B")?.to_binary()?, vec![0, 1, 255]);
                assert!(e.required("L")?.to_bool().is_err());
                assert!(e.required("Missing").is_err());
                Ok(Probe)
            }
        }
        decode_entity::<Probe>(body, None).unwrap();
    }

    #[test]
    fn declared_type_mismatch_names_the_property() {
        let body = br#"{"PartitionKey":"p","RowKey":"r","L@odata.type":"Edm.Int64","L":"1"}"#;
        let e: DynamicEntity = decode_entity(body, Some("W/\"x\"")).unwrap();
        assert_eq!(e.etag.as_ref().map(ETag::as_str), Some("W/\"x\""));
        let raw = RawEntity::from_dynamic(&e);
        let err = raw.required("L").unwrap().to_i32().unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot decode property \"L\": stored as Edm.Int64, read as Edm.Int32"
        );
    }

    #[test]
    fn unsupported_annotation_and_bad_json_are_decode_errors() {
        let body = br#"{"PartitionKey":"p","RowKey":"r","X@odata.type":"Edm.Decimal","X":"1"}"#;
        assert!(decode_entity::<DynamicEntity>(body, None).is_err());
        assert!(decode_entity::<DynamicEntity>(b"{", None).is_err());
        assert!(decode_entity::<DynamicEntity>(br#"{"RowKey":"r"}"#, None).is_err());
    }

    #[test]
    fn table_names_decode() {
        let body = br#"{"odata.metadata":"m","value":[{"TableName":"a1"},{"TableName":"b2"}]}"#;
        assert_eq!(decode_table_names(body).unwrap(), vec!["a1", "b2"]);
    }
}
