//! How a stored entity is kept in the file: a compact binary record of its
//! version and its typed properties, read back bit for bit.
//!
//! The record (file format 3): the byte `0x01`, the version (100 ns ticks,
//! `i64` little-endian), the number of properties (LEB128), then each
//! property: its name (LEB128 length, UTF-8), an Edm type byte and the value
//! (a String or Binary as LEB128 length and bytes; a Boolean as one byte; a
//! DateTime as seconds `i64` and nanoseconds `u32`; a Double as its IEEE bits
//! `u64`; a Guid as `u128`; Int32 and Int64; every number little-endian).
//! Files of format 2 kept records as compact JSON (first byte `{`); those
//! still read, and are rewritten in this form when the entity is next
//! written.

use super::*;

use super::rows::{edm, parse, Field, BINARY};

/// A stored entity's record in format 2: its version and its properties in
/// order, as JSON.
#[derive(Serialize, Deserialize)]
struct Record<'a> {
    /// The version: 100 ns ticks since the Unix epoch.
    t: i64,
    #[serde(borrow)]
    p: Vec<(Cow<'a, str>, Value<'a>)>,
}

/// A property value with its Edm type, in a form that reads back bit for bit.
#[derive(Serialize, Deserialize)]
enum Value<'a> {
    #[serde(rename = "s", borrow)]
    String(Cow<'a, str>),
    /// Base64.
    #[serde(rename = "b")]
    Binary(String),
    #[serde(rename = "o")]
    Boolean(bool),
    /// Seconds and nanoseconds since the Unix epoch.
    #[serde(rename = "d")]
    DateTime(i64, u32),
    /// The IEEE 754 bits.
    #[serde(rename = "f")]
    Double(u64),
    #[serde(rename = "g")]
    Guid(u128),
    #[serde(rename = "i")]
    Int32(i32),
    #[serde(rename = "l")]
    Int64(i64),
}

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_len(out, b.len());
    out.extend_from_slice(b);
}

/// Appends the record of `stored` to `out`.
pub(super) fn encode(stored: &StoredEntity, out: &mut Vec<u8>) {
    let e = &stored.entity;
    let t = e.timestamp.as_ref().map_or(0, ticks_of);
    out.reserve(16 + e.properties.len() * 24);
    out.push(BINARY);
    out.extend_from_slice(&t.to_le_bytes());
    put_len(out, e.properties.len());
    for (name, v) in e.properties.iter() {
        put_bytes(out, name.as_bytes());
        match v {
            EdmValue::String(s) => {
                out.push(edm::STRING);
                put_bytes(out, s.as_bytes());
            }
            EdmValue::Binary(b) => {
                out.push(edm::BINARY);
                put_bytes(out, b);
            }
            EdmValue::Boolean(b) => out.extend_from_slice(&[edm::BOOLEAN, u8::from(*b)]),
            EdmValue::DateTime(d) => {
                out.push(edm::DATETIME);
                out.extend_from_slice(&d.timestamp().to_le_bytes());
                out.extend_from_slice(&d.timestamp_subsec_nanos().to_le_bytes());
            }
            EdmValue::Double(f) => {
                out.push(edm::DOUBLE);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            EdmValue::Guid(g) => {
                out.push(edm::GUID);
                out.extend_from_slice(&g.as_u128().to_le_bytes());
            }
            EdmValue::Int32(i) => {
                out.push(edm::INT32);
                out.extend_from_slice(&i.to_le_bytes());
            }
            EdmValue::Int64(i) => {
                out.push(edm::INT64);
                out.extend_from_slice(&i.to_le_bytes());
            }
        }
    }
}

/// The entity (`pk`, `rk`) of a record, binary or (format 2) JSON.
pub(super) fn decode(
    pk: String,
    rk: String,
    bytes: &[u8],
) -> std::result::Result<StoredEntity, String> {
    let decoded = match bytes.first() {
        Some(&BINARY) => {
            decode_binary(bytes).ok_or_else(|| "a record is cut short or malformed".to_owned())
        }
        _ => decode_json(bytes),
    };
    match decoded {
        Ok((t, properties)) => {
            let version = Version::at(t);
            Ok(StoredEntity {
                entity: DynamicEntity {
                    partition_key: pk,
                    row_key: rk,
                    timestamp: Some(version.timestamp),
                    etag: Some(version.etag),
                    properties,
                },
                timestamp_text: version.text,
            })
        }
        Err(what) => Err(format!("the entity ({pk:?}, {rk:?}) is unreadable: {what}")),
    }
}

fn decode_binary(record: &[u8]) -> Option<(i64, Properties)> {
    let mut properties = Properties::with_capacity(8);
    let t = parse(record, |name, v| {
        let v = match v {
            Field::Str(s) => EdmValue::String(s.to_owned()),
            Field::Bin(b) => EdmValue::Binary(b.to_vec()),
            Field::Value(v) => v,
        };
        properties.push_unchecked(name.to_owned(), v);
    })?;
    Some((t, properties))
}

/// A format 2 record.
fn decode_json(bytes: &[u8]) -> std::result::Result<(i64, Properties), String> {
    let record: Record<'_> = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut properties = Properties::with_capacity(record.p.len());
    for (name, v) in record.p {
        let v = match v {
            Value::String(s) => EdmValue::String(s.into_owned()),
            Value::Binary(b) => EdmValue::Binary(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| e.to_string())?,
            ),
            Value::Boolean(b) => EdmValue::Boolean(b),
            Value::DateTime(s, n) => EdmValue::DateTime(
                DateTime::from_timestamp(s, n).ok_or("a DateTime is out of range")?,
            ),
            Value::Double(bits) => EdmValue::Double(f64::from_bits(bits)),
            Value::Guid(g) => EdmValue::Guid(uuid::Uuid::from_u128(g)),
            Value::Int32(i) => EdmValue::Int32(i),
            Value::Int64(i) => EdmValue::Int64(i),
        };
        properties.push_unchecked(name.into_owned(), v);
    }
    Ok((record.t, properties))
}

/// A format 2 (JSON) record of `stored`, for the tests of reading old files.
#[cfg(test)]
pub(super) fn encode_json(stored: &StoredEntity, out: &mut Vec<u8>) {
    let e = &stored.entity;
    let p = e
        .properties
        .iter()
        .map(|(n, v)| {
            let v = match v {
                EdmValue::String(s) => Value::String(Cow::Borrowed(s)),
                EdmValue::Binary(b) => {
                    Value::Binary(base64::engine::general_purpose::STANDARD.encode(b))
                }
                EdmValue::Boolean(b) => Value::Boolean(*b),
                EdmValue::DateTime(d) => Value::DateTime(d.timestamp(), d.timestamp_subsec_nanos()),
                EdmValue::Double(f) => Value::Double(f.to_bits()),
                EdmValue::Guid(g) => Value::Guid(g.as_u128()),
                EdmValue::Int32(i) => Value::Int32(*i),
                EdmValue::Int64(i) => Value::Int64(*i),
            };
            (Cow::Borrowed(n), v)
        })
        .collect();
    let record = Record {
        t: e.timestamp.as_ref().map_or(0, ticks_of),
        p,
    };
    serde_json::to_writer(out, &record).expect("a record serialises to memory");
}
