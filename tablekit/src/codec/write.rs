//! Writing entities: the JSON encoder of the wire format and the checks of the
//! service's limits, done in the same walk over the entity.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::edm::{max_datetime, min_datetime, write_datetime, EdmType};
use crate::entity::{forward_property_writer, Forward, PropertyArg, PropertyWriter, TableEntity};
use crate::error::{Error, KeyKind, Result, ValidationError};
use crate::validate::{self, MAX_ENTITY_BYTES, MAX_PROPERTIES, MAX_VALUE_BYTES};

/// Checks one entity against the service's limits as its properties go by:
/// property names, the number of properties, value sizes, the DateTime range and
/// the entity's stored size (the service's published formula).
#[derive(Debug)]
pub(crate) struct EntityChecker {
    count: usize,
    size: usize,
    /// The names were checked at compile time (derived types).
    names_checked: bool,
    /// The names seen so far, when the type cannot promise unique names.
    seen: Option<SeenNames>,
}

/// The property names of one entity, for an exact duplicate check: each name's
/// hash (to compare cheaply) and its text (to compare exactly on a hash match,
/// so a collision of two different names never refuses an entity). The texts
/// share one buffer, so a name costs a copy, not an allocation.
#[derive(Debug, Default)]
struct SeenNames {
    /// `(hash, end of the name in `text`)`; a name starts where the previous one ends.
    entries: Vec<(u64, usize)>,
    text: String,
    /// Masks the hashes: all ones, except in the tests that make every name
    /// collide to prove the comparison exact.
    hash_mask: u64,
}

impl SeenNames {
    fn new() -> Self {
        SeenNames {
            hash_mask: u64::MAX,
            ..SeenNames::default()
        }
    }

    /// Adds `name`; false if it was already there.
    fn insert(&mut self, name: &str) -> bool {
        // FNV-1a: fast on short names; only a filter before the exact comparison.
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) & self.hash_mask;
        let mut start = 0;
        for &(h, end) in &self.entries {
            if h == hash && &self.text[start..end] == name {
                return false;
            }
            start = end;
        }
        self.text.push_str(name);
        self.entries.push((hash, self.text.len()));
        true
    }
}

impl EntityChecker {
    /// Starts checking an entity with these keys; the keys themselves are validated here.
    pub(crate) fn new(partition_key: &str, row_key: &str) -> Result<Self> {
        validate::key(KeyKind::PartitionKey, partition_key)?;
        validate::key(KeyKind::RowKey, row_key)?;
        Ok(EntityChecker {
            count: 0,
            // 4 bytes of overhead, the keys as UTF-16.
            size: 4 + validate::utf16_bytes(partition_key) + validate::utf16_bytes(row_key),
            names_checked: false,
            seen: None,
        })
    }

    /// Looks for two properties with one name (types that cannot rule it out).
    pub(crate) fn find_duplicates(mut self, find: bool) -> Self {
        self.seen = find.then(SeenNames::new);
        self
    }

    /// Skips the name checks, for names checked when the type was compiled.
    pub(crate) fn names_checked(mut self, checked: bool) -> Self {
        self.names_checked = checked;
        self
    }

    fn property(&mut self, name: &str, value_size: usize) -> Result<()> {
        if !self.names_checked {
            validate::property_name(name)?;
        }
        if let Some(seen) = &mut self.seen {
            if !seen.insert(name) {
                return Err(Error::invalid(ValidationError::DuplicateProperty {
                    name: name.to_owned(),
                }));
            }
        }
        self.count += 1;
        if self.count > MAX_PROPERTIES {
            return Err(Error::invalid(ValidationError::TooManyProperties {
                count: self.count,
                max: MAX_PROPERTIES,
            }));
        }
        self.size += 8 + name.len() * 2 + value_size;
        Ok(())
    }

    /// Ends the walk: checks the total size of the entity with these keys.
    pub(crate) fn finish(&self, partition_key: &str, row_key: &str) -> Result<usize> {
        if self.size > MAX_ENTITY_BYTES {
            return Err(Error::invalid(ValidationError::EntityTooLarge {
                partition_key: partition_key.to_owned(),
                row_key: row_key.to_owned(),
                size: self.size,
                max: MAX_ENTITY_BYTES,
            }));
        }
        Ok(self.size)
    }
}

impl PropertyWriter for EntityChecker {
    fn string(&mut self, name: &str, value: &str) -> Result<()> {
        let size = validate::utf16_bytes(value);
        if size > MAX_VALUE_BYTES {
            return Err(Error::invalid(ValidationError::ValueTooLarge {
                property: name.to_owned(),
                edm: EdmType::String.as_str(),
                size,
                max: MAX_VALUE_BYTES,
            }));
        }
        self.property(name, 4 + size)
    }
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(Error::invalid(ValidationError::ValueTooLarge {
                property: name.to_owned(),
                edm: EdmType::Binary.as_str(),
                size: value.len(),
                max: MAX_VALUE_BYTES,
            }));
        }
        self.property(name, 4 + value.len())
    }
    fn boolean(&mut self, name: &str, _: bool) -> Result<()> {
        self.property(name, 1)
    }
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()> {
        if *value < min_datetime() || *value > max_datetime() {
            return Err(Error::invalid(ValidationError::DateTimeOutOfRange {
                property: name.to_owned(),
                value: value.to_rfc3339(),
            }));
        }
        self.property(name, 8)
    }
    fn double(&mut self, name: &str, _: f64) -> Result<()> {
        self.property(name, 8)
    }
    fn guid(&mut self, name: &str, _: &Uuid) -> Result<()> {
        self.property(name, 16)
    }
    fn int32(&mut self, name: &str, _: i32) -> Result<()> {
        self.property(name, 4)
    }
    fn int64(&mut self, name: &str, _: i64) -> Result<()> {
        self.property(name, 8)
    }
}

/// Sends every property to two writers, the first one first.
pub(crate) struct Tee<'a, A: ?Sized, B: ?Sized>(pub(crate) &'a mut A, pub(crate) &'a mut B);

impl<A: PropertyWriter + ?Sized, B: PropertyWriter + ?Sized> Forward for Tee<'_, A, B> {
    fn forward(&mut self, name: &str, value: PropertyArg<'_>) -> Result<()> {
        value.write_to(self.0, name)?;
        value.write_to(self.1, name)
    }
}

impl<A: PropertyWriter + ?Sized, B: PropertyWriter + ?Sized> PropertyWriter for Tee<'_, A, B> {
    forward_property_writer!();
}

/// Writes properties as members of a JSON object in the Table service's format,
/// checking them on the way.
pub(crate) struct JsonWriter<'a> {
    out: &'a mut Vec<u8>,
    check: EntityChecker,
}

impl PropertyWriter for JsonWriter<'_> {
    fn string(&mut self, name: &str, value: &str) -> Result<()> {
        self.check.string(name, value)?;
        self.name(name);
        write_json_str(self.out, value);
        Ok(())
    }
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()> {
        self.check.binary(name, value)?;
        self.annotated(name, EdmType::Binary);
        self.out.push(b'"');
        let start = self.out.len();
        let len = base64::encoded_len(value.len(), true).unwrap_or(0);
        self.out.resize(start + len, 0);
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(value, &mut self.out[start..])
            .unwrap_or(0);
        self.out.truncate(start + written);
        self.out.push(b'"');
        Ok(())
    }
    fn boolean(&mut self, name: &str, value: bool) -> Result<()> {
        self.check.boolean(name, value)?;
        self.name(name);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()> {
        self.check.datetime(name, value)?;
        self.annotated(name, EdmType::DateTime);
        self.out.push(b'"');
        write_datetime(self.out, value);
        self.out.push(b'"');
        Ok(())
    }
    fn double(&mut self, name: &str, value: f64) -> Result<()> {
        self.check.double(name, value)?;
        // Always annotated: an unannotated integral number would be stored as Int32.
        self.annotated(name, EdmType::Double);
        write_double(self.out, value);
        Ok(())
    }
    fn guid(&mut self, name: &str, value: &Uuid) -> Result<()> {
        self.check.guid(name, value)?;
        self.annotated(name, EdmType::Guid);
        self.out.push(b'"');
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        self.out
            .extend_from_slice(value.hyphenated().encode_lower(&mut buf).as_bytes());
        self.out.push(b'"');
        Ok(())
    }
    fn int32(&mut self, name: &str, value: i32) -> Result<()> {
        self.check.int32(name, value)?;
        self.name(name);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        Ok(())
    }
    fn int64(&mut self, name: &str, value: i64) -> Result<()> {
        self.check.int64(name, value)?;
        // Int64 travels as a string: JSON numbers lose precision above 2^53.
        self.annotated(name, EdmType::Int64);
        self.out.push(b'"');
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        self.out.push(b'"');
        Ok(())
    }
}

impl JsonWriter<'_> {
    fn name(&mut self, name: &str) {
        self.out.push(b',');
        write_json_str(self.out, name);
        self.out.push(b':');
    }

    fn annotated(&mut self, name: &str, edm: EdmType) {
        self.out.push(b',');
        self.out.push(b'"');
        write_json_str_body(self.out, name);
        self.out.extend_from_slice(b"@odata.type\":\"");
        self.out.extend_from_slice(edm.as_str().as_bytes());
        self.out.extend_from_slice(b"\"");
        self.name(name);
    }
}

/// Appends the whole entity as a JSON object: keys first, then its properties.
/// Validates keys, names and limits in the same pass; on error `out` may hold a
/// partial object and must be discarded.
pub(crate) fn write_entity_json<T: TableEntity>(entity: &T, out: &mut Vec<u8>) -> Result<()> {
    let pk = entity.partition_key();
    let rk = entity.row_key();
    let check = EntityChecker::new(&pk, &rk)?
        .names_checked(T::property_names_checked())
        .find_duplicates(!T::unique_property_names());
    out.extend_from_slice(b"{\"PartitionKey\":");
    write_json_str(out, &pk);
    out.extend_from_slice(b",\"RowKey\":");
    write_json_str(out, &rk);
    let mut w = JsonWriter { out, check };
    entity.write_properties(&mut w)?;
    w.check.finish(&pk, &rk)?;
    w.out.push(b'}');
    Ok(())
}

/// The first buffer size for one entity's JSON: most entities fit, so the
/// buffer is allocated once.
pub(crate) const ENCODE_CAPACITY: usize = 1024;

/// The JSON encoding of an entity, validated.
pub fn entity_to_json<T: TableEntity>(entity: &T) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(ENCODE_CAPACITY);
    write_entity_json(entity, &mut out)?;
    Ok(out)
}

/// Counts the bytes [`JsonWriter`] would write, checking the properties
/// exactly as it does, without writing them: the payload size of a
/// transaction operation for a backend that stores property bags.
struct JsonLen {
    len: usize,
    check: EntityChecker,
}

/// Counts the bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl JsonLen {
    /// `,"name":`
    fn name(&mut self, name: &str) {
        self.len += 4 + json_str_body_len(name);
    }

    /// `,"name@odata.type":"Edm.X",` then the name.
    fn annotated(&mut self, name: &str, edm: EdmType) {
        self.len +=
            2 + json_str_body_len(name) + b"@odata.type\":\"".len() + edm.as_str().len() + 1;
        self.name(name);
    }
}

impl PropertyWriter for JsonLen {
    fn string(&mut self, name: &str, value: &str) -> Result<()> {
        self.check.string(name, value)?;
        self.name(name);
        self.len += 2 + json_str_body_len(value);
        Ok(())
    }
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()> {
        self.check.binary(name, value)?;
        self.annotated(name, EdmType::Binary);
        self.len += 2 + base64::encoded_len(value.len(), true).unwrap_or(0);
        Ok(())
    }
    fn boolean(&mut self, name: &str, value: bool) -> Result<()> {
        self.check.boolean(name, value)?;
        self.name(name);
        self.len += if value { 4 } else { 5 };
        Ok(())
    }
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()> {
        self.check.datetime(name, value)?;
        self.annotated(name, EdmType::DateTime);
        // The checker keeps the year within 1601..=9999: always
        // `"YYYY-MM-DDTHH:MM:SS.fffffffZ"`.
        self.len += 2 + 28;
        Ok(())
    }
    fn double(&mut self, name: &str, value: f64) -> Result<()> {
        self.check.double(name, value)?;
        self.annotated(name, EdmType::Double);
        self.len += if value.is_nan() {
            5
        } else if value == f64::INFINITY {
            10
        } else if value == f64::NEG_INFINITY {
            11
        } else {
            let mut count = ByteCount(0);
            let _ = serde_json::to_writer(&mut count, &value);
            count.0
        };
        Ok(())
    }
    fn guid(&mut self, name: &str, value: &Uuid) -> Result<()> {
        self.check.guid(name, value)?;
        self.annotated(name, EdmType::Guid);
        self.len += 2 + uuid::fmt::Hyphenated::LENGTH;
        Ok(())
    }
    fn int32(&mut self, name: &str, value: i32) -> Result<()> {
        self.check.int32(name, value)?;
        self.name(name);
        self.len += itoa::Buffer::new().format(value).len();
        Ok(())
    }
    fn int64(&mut self, name: &str, value: i64) -> Result<()> {
        self.check.int64(name, value)?;
        self.annotated(name, EdmType::Int64);
        self.len += 2 + itoa::Buffer::new().format(value).len();
        Ok(())
    }
}

/// The length of the JSON [`write_entity_json`] writes for `entity`, with the
/// same checks (and the same errors), without writing it.
#[cfg(test)]
pub(crate) fn entity_json_len<T: TableEntity>(entity: &T) -> Result<usize> {
    json_len_walk(entity, |w| entity.write_properties(w))
}

/// [`entity_json_len`], handing each property, once checked, to `also` in
/// the same walk (which the first error stops, before `also` sees that
/// property).
pub(crate) fn entity_json_len_with<T: TableEntity, W: PropertyWriter + ?Sized>(
    entity: &T,
    also: &mut W,
) -> Result<usize> {
    json_len_walk(entity, |w| entity.write_properties(&mut Tee(w, also)))
}

fn json_len_walk<T: TableEntity>(
    entity: &T,
    walk: impl FnOnce(&mut JsonLen) -> Result<()>,
) -> Result<usize> {
    let pk = entity.partition_key();
    let rk = entity.row_key();
    let check = EntityChecker::new(&pk, &rk)?
        .names_checked(T::property_names_checked())
        .find_duplicates(!T::unique_property_names());
    // `{"PartitionKey":` pk `,"RowKey":` rk ... `}`
    let len = 16 + 2 + json_str_body_len(&pk) + 10 + 2 + json_str_body_len(&rk) + 1;
    let mut w = JsonLen { len, check };
    walk(&mut w)?;
    w.check.finish(&pk, &rk)?;
    Ok(w.len)
}

pub(crate) fn write_double(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"\"Infinity\"");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"\"-Infinity\"");
    } else {
        // serde_json prints the shortest text that reads back to the same bits,
        // with a ".0" on integral values.
        let _ = serde_json::to_writer(&mut *out, &v);
    }
}

/// Appends `s` as a quoted JSON string.
pub(crate) fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    write_json_str_body(out, s);
    out.push(b'"');
}

/// Which bytes are escaped: what JSON requires (`"`, `\\` and the control
/// characters), and every byte of a non-ASCII character.
///
/// Bodies go out pure ASCII, with non-ASCII text as `\uXXXX` (a surrogate pair
/// for characters beyond the BMP), as the official SDKs send it. Raw UTF-8 is
/// valid JSON, but Azurite decodes each body chunk on its own, so a character
/// split across two chunks is stored as two U+FFFD while the write succeeds; and
/// its batch parser splits operations with a pattern that U+2028/U+2029 break.
/// The size limits are counted on the stored text, not on these bytes.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    let mut i = 0x80;
    while i < 0x100 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_unicode_escape(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[(unit >> 12) as usize & 0xf],
        HEX[(unit >> 8) as usize & 0xf],
        HEX[(unit >> 4) as usize & 0xf],
        HEX[unit as usize & 0xf],
    ]);
}

/// The length of what [`write_json_str_body`] writes for `s`.
fn json_str_body_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&b| NEEDS_ESCAPE[b as usize]) {
        return bytes.len();
    }
    s.chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' => 2,
            c if (c as u32) < 0x20 => 6,
            c if c.is_ascii() => 1,
            c => 6 * c.len_utf16(),
        })
        .sum()
}

fn write_json_str_body(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    // Copy runs of plain bytes whole; most strings are one run.
    while let Some(i) = bytes[start..]
        .iter()
        .position(|&b| NEEDS_ESCAPE[b as usize])
    {
        let i = start + i;
        out.extend_from_slice(&bytes[start..i]);
        let b = bytes[i];
        start = i + 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x80.. => {
                // `i` starts a character: every earlier byte was ASCII or a whole
                // character consumed here.
                let ch = s[i..].chars().next().unwrap_or(char::REPLACEMENT_CHARACTER);
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    write_unicode_escape(out, *unit);
                }
                start = i + ch.len_utf8();
            }
            _ => write_unicode_escape(out, u16::from(b)),
        }
    }
    out.extend_from_slice(&bytes[start..]);
}

/// A hand-written entity type that writes the property `A` twice (a derived
/// type cannot), valid otherwise: for the tests of the duplicate check.
#[cfg(test)]
pub(crate) struct Twice;

#[cfg(test)]
impl TableEntity for Twice {
    fn partition_key(&self) -> std::borrow::Cow<'_, str> {
        "p".into()
    }
    fn row_key(&self) -> std::borrow::Cow<'_, str> {
        "r".into()
    }
    fn write_properties<W: PropertyWriter + ?Sized>(&self, out: &mut W) -> Result<()> {
        out.int32("A", 1)?;
        out.string("B", "b")?;
        out.int32("A", 3)
    }
    fn decode(_: &crate::entity::RawEntity<'_>) -> Result<Self> {
        Ok(Twice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::DynamicEntity;
    use crate::EdmValue;

    fn json(e: &DynamicEntity) -> String {
        String::from_utf8(entity_to_json(e).unwrap()).unwrap()
    }

    #[test]
    fn the_counted_length_is_the_written_length() {
        let dt = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .unwrap()
                .with_timezone(&Utc)
        };
        let entities = [
            DynamicEntity::new("p", "r"),
            DynamicEntity::new("", ""),
            DynamicEntity::new("quo\"te é", "中文 😀 ~")
                .with("S", "plain")
                .with("Esc", "a\"b\\c\nd\re\tf\u{0}\u{1f}")
                .with("Wide", "é中😀\u{2028}")
                .with("Empty", "")
                .with("B", vec![0u8, 1, 2, 255])
                .with("B1", vec![7u8])
                .with("B0", Vec::<u8>::new())
                .with("T", true)
                .with("F", false)
                .with("D0", dt("1601-01-01T00:00:00Z"))
                .with("D1", dt("9999-12-31T23:59:59.9999999Z"))
                .with("X", 0.1)
                .with("X2", -1e300)
                .with("X3", 5e-324)
                .with("X4", 3.0)
                .with("X5", -0.0)
                .with("Nan", f64::NAN)
                .with("Inf", f64::INFINITY)
                .with("NInf", f64::NEG_INFINITY)
                .with(
                    "G",
                    Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
                )
                .with("I", i32::MIN)
                .with("I0", 0)
                .with("L", i64::MIN)
                .with("L1", i64::MAX)
                .with("L0", 0_i64),
        ];
        for e in &entities {
            assert_eq!(
                entity_json_len(e).unwrap(),
                entity_to_json(e).unwrap().len(),
                "{}",
                json(e)
            );
        }
    }

    #[test]
    fn the_counter_refuses_what_the_writer_refuses() {
        let too_old = chrono::DateTime::from_timestamp(-20_000_000_000, 0).unwrap();
        let bad = DynamicEntity::new("p", "r").with("D", too_old);
        let (written, counted) = (entity_to_json(&bad), entity_json_len(&bad));
        assert!(written.is_err() && counted.is_err());
        assert_eq!(
            written.unwrap_err().to_string(),
            counted.unwrap_err().to_string()
        );
        let bad_key = DynamicEntity::new("a/b", "r");
        assert!(entity_to_json(&bad_key).is_err() && entity_json_len(&bad_key).is_err());
    }

    #[test]
    fn every_edm_type_is_written_with_the_service_annotations() {
        let e = DynamicEntity::new("p'1", "r\"1")
            .with("S", "a\"b\\c\n\u{1}é")
            .with("B", vec![0u8, 1, 255])
            .with("T", true)
            .with(
                "D",
                crate::edm::parse_datetime("2020-07-23T21:20:41.6667782Z").unwrap(),
            )
            .with("F", 2.0)
            .with("N", f64::NAN)
            .with(
                "G",
                Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            )
            .with("I", -5)
            .with("L", i64::MIN);
        assert_eq!(
            json(&e),
            concat!(
                r#"{"PartitionKey":"p'1","RowKey":"r\"1","S":"a\"b\\c\n\u0001\u00e9","#,
                r#""B@odata.type":"Edm.Binary","B":"AAH/","T":true,"#,
                r#""D@odata.type":"Edm.DateTime","D":"2020-07-23T21:20:41.6667782Z","#,
                r#""F@odata.type":"Edm.Double","F":2.0,"#,
                r#""N@odata.type":"Edm.Double","N":"NaN","#,
                r#""G@odata.type":"Edm.Guid","G":"01234567-89ab-cdef-0123-456789abcdef","#,
                r#""I":-5,"L@odata.type":"Edm.Int64","L":"-9223372036854775808"}"#
            )
        );
    }

    #[test]
    fn doubles_print_the_shortest_exact_text() {
        for (v, s) in [
            (1e300, "1e+300"),
            (0.1, "0.1"),
            (f64::INFINITY, "\"Infinity\""),
            (f64::NEG_INFINITY, "\"-Infinity\""),
            (30000.37, "30000.37"),
        ] {
            let mut out = Vec::new();
            write_double(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), s);
        }
    }

    #[test]
    fn limits_are_checked_while_writing() {
        let too_big = DynamicEntity::new("p", "r").with("S", "x".repeat(32 * 1024 + 1));
        let err = entity_to_json(&too_big).unwrap_err();
        assert_eq!(
            err.validation(),
            Some(&ValidationError::ValueTooLarge {
                property: "S".into(),
                edm: "Edm.String",
                size: 65538,
                max: 65536
            })
        );
        assert!(
            entity_to_json(&DynamicEntity::new("p", "r").with("S", "x".repeat(32 * 1024))).is_ok()
        );
        assert!(entity_to_json(&DynamicEntity::new("p", "r").with("B", vec![0u8; 65536])).is_ok());
        assert!(entity_to_json(&DynamicEntity::new("p", "r").with("B", vec![0u8; 65537])).is_err());

        let mut many = DynamicEntity::new("p", "r");
        for i in 0..253 {
            many.set(format!("P{i}"), i);
        }
        assert_eq!(
            entity_to_json(&many).unwrap_err().validation(),
            Some(&ValidationError::TooManyProperties {
                count: 253,
                max: 252
            })
        );

        let mut huge = DynamicEntity::new("p", "r");
        for i in 0..17 {
            huge.set(format!("B{i}"), vec![0u8; 65536]);
        }
        assert!(matches!(
            entity_to_json(&huge).unwrap_err().validation(),
            Some(ValidationError::EntityTooLarge { .. })
        ));

        let old = DynamicEntity::new("p", "r").with(
            "D",
            EdmValue::DateTime(crate::edm::parse_datetime("1600-12-31T23:59:59Z").unwrap()),
        );
        assert!(matches!(
            entity_to_json(&old).unwrap_err().validation(),
            Some(ValidationError::DateTimeOutOfRange { .. })
        ));
        assert!(entity_to_json(&DynamicEntity::new("p/", "r")).is_err());
        assert!(entity_to_json(&DynamicEntity::new("p", "r").with("Timestamp", 1)).is_err());
        assert!(entity_to_json(&DynamicEntity::new("p", "r").with("a-b", 1)).is_err());
    }

    #[test]
    fn a_type_that_may_repeat_a_name_is_checked_for_duplicates() {
        assert_eq!(
            entity_to_json(&Twice).unwrap_err().validation(),
            Some(&ValidationError::DuplicateProperty { name: "A".into() })
        );
    }

    #[test]
    fn the_duplicate_check_compares_names_exactly_when_hashes_collide() {
        // Every name hashes alike here, so only the exact comparison tells them apart.
        let mut seen = SeenNames {
            hash_mask: 0,
            ..SeenNames::default()
        };
        for name in ["A", "B", "AB", "Ab", "BA", "\u{e9}", ""] {
            assert!(seen.insert(name), "{name:?} is new");
        }
        for name in ["A", "AB", "BA", "\u{e9}", ""] {
            assert!(!seen.insert(name), "{name:?} was seen");
        }
        // With real hashes too, and through the checker.
        let mut seen = SeenNames::new();
        assert!(seen.insert("Name") && seen.insert("Name2") && !seen.insert("Name"));
        let mut checker = EntityChecker::new("p", "r").unwrap().find_duplicates(true);
        checker.int32("X", 1).unwrap();
        checker.int32("Y", 1).unwrap();
        assert_eq!(
            checker.int32("X", 2).unwrap_err().validation(),
            Some(&ValidationError::DuplicateProperty { name: "X".into() })
        );
    }

    fn escaped(s: &str) -> String {
        let mut out = Vec::new();
        write_json_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn non_ascii_text_is_written_as_utf16_escapes() {
        assert_eq!(escaped("caf\u{e9}"), r#""caf\u00e9""#);
        assert_eq!(escaped("\u{6771}\u{4eac}"), r#""\u6771\u4eac""#);
        // Beyond the BMP: a surrogate pair, as JSON requires.
        assert_eq!(escaped("\u{1F600}"), r#""\ud83d\ude00""#);
        assert_eq!(escaped("a\u{2028}b\u{2029}"), r#""a\u2028b\u2029""#);
        assert_eq!(escaped("\"\\\n\u{1}x"), r#""\"\\\n\u0001x""#);
        assert!(escaped("\u{1F600}\u{e9}\u{ffff}\u{10ffff}").is_ascii());
    }

    #[test]
    fn escaped_text_reads_back_exactly() {
        let text: String = "\u{1F600}O'Brien \u{e9}\u{2028}\u{6771}\u{0}\u{10ffff}\"\\".repeat(3);
        let back: String = serde_json::from_str(&escaped(&text)).unwrap();
        assert_eq!(back, text);
    }

    #[test]
    fn itoa_handles_extremes() {
        let e = DynamicEntity::new("p", "r")
            .with("Min", i64::MIN)
            .with("Max", i64::MAX)
            .with("Zero", 0_i32)
            .with("Neg", -7_i32);
        let text = json(&e);
        assert!(text.contains(r#""Min":"-9223372036854775808""#), "{text}");
        assert!(text.contains(r#""Max":"9223372036854775807""#), "{text}");
        assert!(text.contains(r#""Zero":0,"Neg":-7"#), "{text}");
    }
}
