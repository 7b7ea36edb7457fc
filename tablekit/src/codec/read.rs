//! Reading entities: the JSON bytes of a response parsed straight into the
//! borrowed view of each stored entity ([`RawEntity`]), which a
//! [`TableEntity`] turns into its own type.
//!
//! The JSON is parsed once. Names and string values borrow from the response
//! body where they contain no escapes, so a property is copied only when the
//! target type takes ownership of it.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::edm::EdmType;
use crate::entity::{RawEntity, Scalar, Slot, TableEntity};
use crate::error::{Error, Result};

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
    /// The type annotations met, shared between the entities of a page too.
    annotations: &'s mut Vec<(Cow<'de, str>, EdmType)>,
    failure: &'s mut Option<Error>,
    /// The answer's ETag header, which lives as long as its body.
    etag: Option<&'de str>,
    /// The key a point read asked for: an entity under another is refused.
    key: Option<(&'s str, &'s str)>,
    /// The key a write's URL names: the entity's, whatever its body says.
    url_key: Option<(&'s str, &'s str)>,
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
            etag: self.etag.map(Cow::Borrowed),
            ..Default::default()
        };
        raw.props.clear();
        let mut annotations = std::mem::take(self.annotations);
        annotations.clear();
        let (mut has_pk, mut has_rk, mut has_ts) = (false, false, false);
        // Annotations given to the property that followed them.
        let mut typed = 0;
        while let Some(CowStr(key)) = map.next_key::<CowStr<'de>>()? {
            match key.as_ref() {
                "PartitionKey" | "RowKey" | "Timestamp" => {
                    let CowStr(v) = map.next_value::<CowStr<'de>>()?;
                    let (slot, seen) = match key.as_ref() {
                        "PartitionKey" => (&mut raw.partition_key, &mut has_pk),
                        "RowKey" => (&mut raw.row_key, &mut has_rk),
                        _ => (raw.timestamp.get_or_insert_default(), &mut has_ts),
                    };
                    if std::mem::replace(seen, true) {
                        return Err(refuse(self.failure, twice(&key)));
                    }
                    *slot = v;
                }
                "odata.etag" => {
                    // Borrowed as it stands in the body: a weak ETag holds
                    // escaped quotes, and unescaping it would copy it for
                    // every entity of a page, wanted or not.
                    let json = map.next_value::<&'de serde_json::value::RawValue>()?.get();
                    if raw.etag.is_none() {
                        match json.strip_prefix('"').and_then(|j| j.strip_suffix('"')) {
                            Some(text) if !text.contains('\\') => {
                                raw.etag = Some(Cow::Borrowed(text));
                            }
                            Some(_) => {
                                raw.etag = Some(Cow::Borrowed(json));
                                raw.etag_is_json = true;
                            }
                            None => return Err(de::Error::custom("odata.etag is not a string")),
                        }
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
                        // The service writes a property's annotation just
                        // before it: typed here, not searched for below.
                        let edm = match annotations.last() {
                            Some((name, edm)) if annotations.len() > typed && *name == key => {
                                typed += 1;
                                Some(*edm)
                            }
                            _ => None,
                        };
                        raw.props.push((key, Slot::Json(v, edm)));
                    }
                }
            }
        }
        if let Some((pk, rk)) = self.url_key {
            raw.partition_key = Cow::Owned(pk.to_owned());
            raw.row_key = Cow::Owned(rk.to_owned());
            (has_pk, has_rk) = (true, true);
        }
        if !(has_pk && has_rk) {
            return Err(de::Error::custom(
                "an entity without PartitionKey or RowKey",
            ));
        }
        if let Some(name) = repeated(&raw.props).or_else(|| repeated(&annotations)) {
            return Err(refuse(self.failure, twice(name)));
        }
        if let Some((pk, rk)) = self.key {
            if raw.partition_key != pk || raw.row_key != rk {
                let e = Error::decode(format!(
                    "the answer to a point read of ({pk:?}, {rk:?}) holds the entity ({:?}, {:?})",
                    raw.partition_key, raw.row_key
                ));
                return Err(refuse(self.failure, e));
            }
        }
        if typed == annotations.len() {
            annotations.clear();
        }
        for (name, edm) in annotations.drain(..) {
            if let Some((_, Slot::Json(_, t))) = raw.props.iter_mut().find(|(n, _)| *n == name) {
                *t = Some(edm);
            }
        }
        *self.annotations = annotations;
        let result = T::decode(&raw);
        *self.scratch = std::mem::take(&mut raw.props);
        result.map_err(|e| {
            *self.failure = Some(e);
            de::Error::custom("entity decode failed")
        })
    }
}

/// What the error of a property held twice says (after its name).
const TWICE: &str = "appears twice in one entity";

/// The error of a property that an entity holds twice.
fn twice(name: &str) -> Error {
    Error::decode_property(name, TWICE)
}

/// The property `e` found twice in an entity, if that is what it is about.
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
pub(crate) fn duplicated_property(e: &Error) -> Option<&str> {
    match e.kind() {
        crate::error::ErrorKind::Decode(d) if d.message == TWICE => d.property.as_deref(),
        _ => None,
    }
}

/// Keeps `e` as the decode's error and stops the deserializer.
fn refuse<E: de::Error>(failure: &mut Option<Error>, e: Error) -> E {
    let stop = E::custom(&e);
    *failure = Some(e);
    stop
}

/// A name that `items` holds twice, if any: a scan for the few properties of
/// most entities, a sort for many.
fn repeated<'a, V>(items: &'a [(Cow<'_, str>, V)]) -> Option<&'a str> {
    if items.len() <= 16 {
        return (1..items.len())
            .find(|&i| items[..i].iter().any(|(n, _)| *n == items[i].0))
            .map(|i| items[i].0.as_ref());
    }
    let mut sorted: Vec<&str> = items.iter().map(|(n, _)| n.as_ref()).collect();
    sorted.sort_unstable();
    sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
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
        use crate::validate::MAX_PAGE_SIZE;
        let (mut scratch, mut annotations) = (Vec::new(), Vec::new());
        if let Some(n) = seq.size_hint() {
            self.out.reserve(n.min(MAX_PAGE_SIZE));
        }
        let first = self.out.len();
        loop {
            if self.out.len() - first == MAX_PAGE_SIZE {
                // Stop decoding: a page never holds more.
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    let e = Error::decode(format!(
                        "a query page of more than {MAX_PAGE_SIZE} entities: the service sends at most {MAX_PAGE_SIZE}"
                    ));
                    return Err(refuse(self.failure, e));
                }
                return Ok(());
            }
            let seed = EntitySeed::<T> {
                scratch: &mut scratch,
                annotations: &mut annotations,
                failure: self.failure,
                etag: None,
                key: None,
                url_key: None,
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
    failure.unwrap_or_else(|| {
        let at = format!("line {}, column {}", e.line(), e.column());
        Error::decode_caused_by(format!("not the expected entity JSON ({at})"), e)
    })
}

/// Decodes the entities of a query response body (`{"value":[...]}`).
pub(crate) fn decode_page<T: TableEntity>(body: &[u8], out: &mut Vec<T>) -> Result<()> {
    // Room for the page at once (an entity's JSON is rarely under 128
    // bytes), at most a full page: not grown and moved while decoded.
    out.reserve((body.len() / 128).min(crate::validate::MAX_PAGE_SIZE));
    let mut failure = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let r = de.deserialize_map(QueryBody {
        out,
        failure: &mut failure,
    });
    r.and_then(|_| de.end())
        .map_err(|e| json_failure(e, failure))
}

/// An entity from its JSON in the service's form (`PartitionKey`, `RowKey`,
/// properties with `@odata.type` annotations where the type needs one), as
/// [`entity_to_json`](crate::codec::entity_to_json) writes it: the way back, for
/// exports and imports.
///
/// ```
/// use tablekit::{DynamicEntity, EdmValue, codec::{entity_from_json, entity_to_json}};
///
/// let e = DynamicEntity::new("p", "r").with("Big", 1_i64 << 40).with("X", 0.5);
/// let back: DynamicEntity = entity_from_json(&entity_to_json(&e)?)?;
/// assert_eq!(back.get("Big"), Some(&EdmValue::Int64(1 << 40)));
/// assert_eq!(back.get("X"), Some(&EdmValue::Double(0.5)));
/// # Ok::<(), tablekit::Error>(())
/// ```
pub fn entity_from_json<T: TableEntity>(json: &[u8]) -> Result<T> {
    decode_entity(json, None, None)
}

/// Decodes a single entity body; `etag` is the response's ETag header, which
/// takes precedence over `odata.etag` in the body.
///
/// With `key` (a point read's), an entity under another key is refused.
pub(crate) fn decode_entity<'b, T: TableEntity>(
    body: &'b [u8],
    etag: Option<&'b str>,
    key: Option<(&str, &str)>,
) -> Result<T> {
    decode_one(body, etag, key, None)
}

/// The entity of a write's JSON body under the key its URL names (an update
/// or upsert: the body may leave its keys out, and they are not the
/// entity's if it gives others), for the server.
#[cfg(feature = "server")]
pub(crate) fn decode_write_body<T: TableEntity>(body: &[u8], url_key: (&str, &str)) -> Result<T> {
    decode_one(body, None, None, Some(url_key))
}

fn decode_one<'b, T: TableEntity>(
    body: &'b [u8],
    etag: Option<&'b str>,
    key: Option<(&str, &str)>,
    url_key: Option<(&str, &str)>,
) -> Result<T> {
    let mut failure = None;
    // Room for the properties and type annotations of most entities: the
    // buffers of a single entity are not grown as it is read.
    let (mut scratch, mut annotations) = (Vec::with_capacity(16), Vec::with_capacity(8));
    let mut de = serde_json::Deserializer::from_slice(body);
    let seed = EntitySeed::<T> {
        scratch: &mut scratch,
        annotations: &mut annotations,
        failure: &mut failure,
        etag,
        key,
        url_key,
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
        .map_err(|e| Error::decode_caused_by("not the expected table list", e))?;
    Ok(b.value.into_iter().map(|r| r.table_name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edm::EdmValue;
    use crate::entity::ETag;
    use crate::DynamicEntity;

    #[test]
    fn a_page_etag_is_unescaped_only_when_read() {
        // Escaped (as the service writes a weak ETag), plain, and a point
        // read's header taking precedence over the body's.
        let body = br#"{"value":[{"odata.etag":"W/\"datetime'2020-01-01T00%3A00%3A00.1234567Z'\"","PartitionKey":"p","RowKey":"a"},{"odata.etag":"0x8D1","PartitionKey":"p","RowKey":"b"},{"odata.etag":"a\u0062\/c","PartitionKey":"p","RowKey":"c"}]}"#;
        let mut out: Vec<DynamicEntity> = Vec::new();
        decode_page(body, &mut out).unwrap();
        let etags: Vec<&str> = out
            .iter()
            .map(|e| e.etag.as_ref().unwrap().as_str())
            .collect();
        assert_eq!(
            etags,
            [
                "W/\"datetime'2020-01-01T00%3A00%3A00.1234567Z'\"",
                "0x8D1",
                "ab/c"
            ]
        );
        assert!(out[0].etag.as_ref().unwrap().timestamp().is_some());
        let one = br#"{"odata.etag":"W/\"x\"","PartitionKey":"p","RowKey":"a"}"#;
        let e: DynamicEntity = decode_entity(one, Some("W/\"header\""), None).unwrap();
        assert_eq!(e.etag.unwrap().as_str(), "W/\"header\"");
        let e: DynamicEntity = decode_entity(one, None, None).unwrap();
        assert_eq!(e.etag.unwrap().as_str(), "W/\"x\"");
        let bad = br#"{"odata.etag":7,"PartitionKey":"p","RowKey":"a"}"#;
        assert!(decode_entity::<DynamicEntity>(bad, None, None).is_err());
    }

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
            fn write_properties<W: crate::entity::PropertyWriter + ?Sized>(
                &self,
                _: &mut W,
            ) -> Result<()> {
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
        decode_entity::<Probe>(body, None, None).unwrap();
    }

    #[test]
    fn declared_type_mismatch_names_the_property() {
        let body = br#"{"PartitionKey":"p","RowKey":"r","L@odata.type":"Edm.Int64","L":"1"}"#;
        let e: DynamicEntity = decode_entity(body, Some("W/\"x\""), None).unwrap();
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
        assert!(decode_entity::<DynamicEntity>(body, None, None).is_err());
        assert!(decode_entity::<DynamicEntity>(b"{", None, None).is_err());
        assert!(decode_entity::<DynamicEntity>(br#"{"RowKey":"r"}"#, None, None).is_err());
    }

    /// The underlying error a decode error keeps as its `source()`.
    fn cause<E: std::error::Error + 'static>(err: &Error) -> &E {
        let source =
            std::error::Error::source(err).unwrap_or_else(|| panic!("{err} has no source"));
        source.downcast_ref::<E>().unwrap_or_else(|| {
            panic!(
                "{err}: the source {source:?} is not a {}",
                std::any::type_name::<E>()
            )
        })
    }

    fn decode_one(property: &str, edm: &str, json_value: &str) -> Error {
        let body = format!(
            r#"{{"PartitionKey":"p","RowKey":"r","{property}@odata.type":"Edm.{edm}","{property}":{json_value}}}"#
        );
        let err = decode_entity::<DynamicEntity>(body.as_bytes(), None, None).unwrap_err();
        match err.kind() {
            crate::error::ErrorKind::Decode(d) => assert_eq!(d.property.as_deref(), Some(property)),
            other => panic!("{other:?}"),
        }
        err
    }

    #[test]
    fn a_bad_guid_keeps_the_uuid_error_as_source() {
        let err = decode_one("Id", "Guid", r#""not-a-guid""#);
        cause::<uuid::Error>(&err);
        // `Display` names the value, not the cause a second time.
        assert_eq!(
            err.to_string(),
            r#"cannot decode property "Id": "not-a-guid" is not a Guid"#
        );
    }

    #[test]
    fn a_bad_datetime_keeps_chronos_error_as_source() {
        let err = decode_one("When", "DateTime", r#""yesterday""#);
        cause::<chrono::ParseError>(&err);
    }

    #[test]
    fn bad_base64_keeps_the_base64_error_as_source() {
        let err = decode_one("Blob", "Binary", r#""%%%""#);
        cause::<base64::DecodeError>(&err);
    }

    #[test]
    fn bad_integers_and_doubles_keep_the_parse_error_as_source() {
        cause::<std::num::ParseIntError>(&decode_one("Big", "Int64", r#""12x""#));
        cause::<std::num::ParseIntError>(&decode_one("Small", "Int32", r#""12x""#));
        cause::<std::num::TryFromIntError>(&decode_one("Small", "Int32", "4294967296"));
        cause::<std::num::ParseFloatError>(&decode_one("D", "Double", r#""two""#));
    }

    #[test]
    fn malformed_json_keeps_serdes_error_as_source() {
        let err =
            decode_entity::<DynamicEntity>(br#"{"PartitionKey":"p","#, None, None).unwrap_err();
        assert!(cause::<serde_json::Error>(&err).is_eof());
        assert!(err.to_string().contains("line 1, column 20"), "{err}");
        let err = decode_table_names(b"[1]").unwrap_err();
        cause::<serde_json::Error>(&err);
    }

    #[test]
    fn table_names_decode() {
        let body = br#"{"odata.metadata":"m","value":[{"TableName":"a1"},{"TableName":"b2"}]}"#;
        assert_eq!(decode_table_names(body).unwrap(), vec!["a1", "b2"]);
    }

    fn decoded(body: &str) -> Result<DynamicEntity> {
        decode_entity::<DynamicEntity>(body.as_bytes(), None, None)
    }

    #[test]
    fn a_type_annotation_types_its_property_before_or_after_it() {
        for body in [
            r#"{"PartitionKey":"p","RowKey":"r","a@odata.type":"Edm.Int64","a":"5","b":"x"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","a":"5","a@odata.type":"Edm.Int64","b":"x"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","a@odata.type":"Edm.Int64","b":"x","a":"5"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","b@odata.type":"Edm.String","a@odata.type":"Edm.Int64","a":"5","b":"x"}"#,
        ] {
            let e = decoded(body).unwrap();
            assert_eq!(e.get("a"), Some(&EdmValue::Int64(5)), "{body}");
            assert_eq!(e.get("b"), Some(&EdmValue::String("x".into())), "{body}");
        }
        // An annotation of a null (absent) property types nothing.
        let e = decoded(
            r#"{"PartitionKey":"p","RowKey":"r","a@odata.type":"Edm.Int64","a":null,"b":"5"}"#,
        )
        .unwrap();
        assert_eq!(e.get("b"), Some(&EdmValue::String("5".into())));
        // An annotation twice is refused, also when the first typed its property.
        let e = decoded(r#"{"PartitionKey":"p","RowKey":"r","a@odata.type":"Edm.Int64","a":"1","a@odata.type":"Edm.Int64"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("appears twice"), "{e}");
    }

    #[test]
    fn an_entity_with_a_property_twice_is_refused() {
        for body in [
            r#"{"PartitionKey":"p","RowKey":"r","a":1,"a":2}"#,
            r#"{"PartitionKey":"p","RowKey":"r","a":1,"b":true,"a":"x"}"#,
            r#"{"PartitionKey":"p","PartitionKey":"q","RowKey":"r"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","RowKey":"r"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","Timestamp":"2024-01-01T00:00:00Z","Timestamp":"2024-01-01T00:00:00Z"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","a@odata.type":"Edm.Int64","a@odata.type":"Edm.Guid","a":"1"}"#,
        ] {
            let e = decoded(body).unwrap_err();
            assert!(e.to_string().contains("appears twice"), "{body}: {e}");
        }
        // Many properties (the sorting path), one of them twice.
        let mut many: String = (0..40).map(|i| format!(r#""p{i}":{i},"#)).collect();
        many.push_str(r#""p17":1"#);
        let e = decoded(&format!(r#"{{"PartitionKey":"p","RowKey":"r",{many}}}"#)).unwrap_err();
        assert!(e.to_string().contains(r#""p17": appears twice"#), "{e}");
        assert_eq!(duplicated_property(&e), Some("p17"));
        // Distinct names, few or many, decode.
        let distinct: String = (0..40).map(|i| format!(r#","p{i}":{i}"#)).collect();
        let e = decoded(&format!(r#"{{"PartitionKey":"p","RowKey":"r"{distinct}}}"#)).unwrap();
        assert_eq!(e.get("p39"), Some(&EdmValue::Int32(39)));
        decoded(r#"{"PartitionKey":"p","RowKey":"r","a":1,"b":2}"#).unwrap();
        // A page refuses it too.
        let mut out: Vec<DynamicEntity> = Vec::new();
        let e = decode_page(
            br#"{"value":[{"PartitionKey":"p","RowKey":"r","a":1,"a":1}]}"#,
            &mut out,
        )
        .unwrap_err();
        assert!(e.to_string().contains("appears twice"), "{e}");
    }

    #[test]
    fn a_point_read_answered_with_another_entity_is_refused() {
        let body = br#"{"PartitionKey":"p","RowKey":"other"}"#;
        let e = decode_entity::<DynamicEntity>(body, None, Some(("p", "r"))).unwrap_err();
        assert!(
            e.to_string()
                .contains(r#"point read of ("p", "r") holds the entity ("p", "other")"#),
            "{e}"
        );
        let e = decode_entity::<DynamicEntity>(body, None, Some(("q", "other"))).unwrap_err();
        assert!(
            matches!(e.kind(), crate::error::ErrorKind::Decode(_)),
            "{e}"
        );
        decode_entity::<DynamicEntity>(body, None, Some(("p", "other"))).unwrap();
    }

    #[test]
    fn a_page_stops_decoding_past_1000_entities() {
        let page = |n: usize| {
            let v: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"PartitionKey":"p","RowKey":"{i}"}}"#))
                .collect();
            format!(r#"{{"value":[{}]}}"#, v.join(","))
        };
        let mut out: Vec<DynamicEntity> = Vec::new();
        decode_page(page(1000).as_bytes(), &mut out).unwrap();
        assert_eq!(out.len(), 1000);
        for n in [1001, 100_000] {
            let mut out: Vec<DynamicEntity> = Vec::new();
            let e = decode_page(page(n).as_bytes(), &mut out).unwrap_err();
            assert!(e.to_string().contains("more than 1000 entities"), "{e}");
            assert!(out.len() <= 1000, "decoding stopped at the limit");
        }
    }
}
