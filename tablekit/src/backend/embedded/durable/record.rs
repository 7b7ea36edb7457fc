//! How a stored entity is kept in the file: compact JSON of its version and
//! its typed properties, read back bit for bit.

use super::*;

/// A stored entity's record: its version and its properties in order.
#[derive(Serialize, Deserialize)]
pub(super) struct Record<'a> {
    /// The version: 100 ns ticks since the Unix epoch.
    pub(super) t: i64,
    #[serde(borrow)]
    pub(super) p: Vec<(Cow<'a, str>, Value<'a>)>,
}

/// A property value with its Edm type, in a form that reads back bit for bit.
#[derive(Serialize, Deserialize)]
pub(super) enum Value<'a> {
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

pub(super) fn encode(stored: &StoredEntity, out: &mut Vec<u8>) {
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

pub(super) fn decode(
    pk: &str,
    rk: &str,
    bytes: &[u8],
) -> std::result::Result<StoredEntity, String> {
    let bad = |what: &str| format!("the entity ({pk:?}, {rk:?}) is unreadable: {what}");
    let record: Record<'_> = serde_json::from_slice(bytes).map_err(|e| bad(&e.to_string()))?;
    let mut properties = Properties::with_capacity(record.p.len());
    for (name, v) in record.p {
        let v = match v {
            Value::String(s) => EdmValue::String(s.into_owned()),
            Value::Binary(b) => EdmValue::Binary(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| bad(&e.to_string()))?,
            ),
            Value::Boolean(b) => EdmValue::Boolean(b),
            Value::DateTime(s, n) => EdmValue::DateTime(
                DateTime::from_timestamp(s, n).ok_or_else(|| bad("a DateTime is out of range"))?,
            ),
            Value::Double(bits) => EdmValue::Double(f64::from_bits(bits)),
            Value::Guid(g) => EdmValue::Guid(uuid::Uuid::from_u128(g)),
            Value::Int32(i) => EdmValue::Int32(i),
            Value::Int64(i) => EdmValue::Int64(i),
        };
        properties.push_unchecked(name.into_owned(), v);
    }
    let version = Version::at(record.t);
    Ok(StoredEntity {
        entity: DynamicEntity {
            partition_key: pk.to_owned(),
            row_key: rk.to_owned(),
            timestamp: Some(version.timestamp),
            etag: Some(version.etag),
            properties,
        },
        timestamp_text: version.text,
    })
}
