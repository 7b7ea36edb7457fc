//! The read view of one stored entity: keys, system properties and properties
//! whose values convert on demand to the type the reader asks for. The JSON
//! codec (`codec::read`) fills it from a response body, borrowing names and
//! strings from the body; a property bag fills it too
//! ([`RawEntity::from_dynamic`]).

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::etag::ETag;
use crate::edm::{parse_datetime, parse_datetime_text, EdmType, EdmValue};
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
    /// `etag` is still a JSON string literal, quotes and escapes included (as
    /// a page holds it: `"W/\"datetime'…'\""`): unescaped only if asked for.
    pub(crate) etag_is_json: bool,
    pub(crate) props: Vec<(Cow<'a, str>, Slot<'a>)>,
}

impl<'a> RawEntity<'a> {
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
        let etag = self.etag.as_deref()?;
        if self.etag_is_json {
            return serde_json::from_str::<String>(etag).ok().map(ETag::new);
        }
        Some(ETag::new(etag))
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
            Slot::Json(Scalar::Int(i), _) => i32::try_from(*i).map_err(|e| {
                Error::decode_property_caused_by(self.name, format!("{i} does not fit Int32"), e)
            }),
            Slot::Json(Scalar::Str(s), Some(EdmType::Int32)) => s.parse().map_err(|e| {
                Error::decode_property_caused_by(self.name, format!("{s:?} is not an Int32"), e)
            }),
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
            Slot::Json(Scalar::Str(s), _) => s.parse().map_err(|e| {
                Error::decode_property_caused_by(self.name, format!("{s:?} is not an Int64"), e)
            }),
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
                other => other.parse().map_err(|e| {
                    Error::decode_property_caused_by(
                        self.name,
                        format!("{other:?} is not a Double"),
                        e,
                    )
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
            Slot::Json(Scalar::Str(s), _) => parse_datetime_text(s).map_err(|e| {
                Error::decode_property_caused_by(self.name, format!("{s:?} is not a DateTime"), e)
            }),
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
            Slot::Json(Scalar::Str(s), _) => Uuid::parse_str(s).map_err(|e| {
                Error::decode_property_caused_by(self.name, format!("{s:?} is not a Guid"), e)
            }),
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
                .map_err(|e| Error::decode_property_caused_by(self.name, "not valid base64", e)),
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
