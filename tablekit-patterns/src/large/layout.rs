//! How a large value is stored: the kinds of value a blob holds, the
//! blob names, and the [`BLOBS`](super::BLOBS) list of the row.

use tablekit::validate::{value_size, MAX_VALUE_BYTES};
use tablekit::{error::DecodeError, DynamicEntity, EdmValue, EntityKey, Error, Result};

use super::{BlobRef, BLOBS};

/// The type of a property kept outside its entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Binary,
    String,
}

impl Kind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Kind::Binary => "Binary",
            Kind::String => "String",
        }
    }

    pub(super) fn parse(s: &str) -> Option<Kind> {
        match s {
            "Binary" => Some(Kind::Binary),
            "String" => Some(Kind::String),
            _ => None,
        }
    }

    pub(super) fn of(value: &EdmValue) -> Option<Kind> {
        match value {
            EdmValue::Binary(_) => Some(Kind::Binary),
            EdmValue::String(_) => Some(Kind::String),
            _ => None,
        }
    }

    pub(super) fn into_bytes(value: EdmValue) -> Vec<u8> {
        match value {
            EdmValue::Binary(b) => b,
            EdmValue::String(s) => s.into_bytes(),
            _ => unreachable!("only String and Binary values leave an entity"),
        }
    }

    pub(super) fn value(self, property: &str, bytes: Vec<u8>) -> Result<EdmValue> {
        Ok(match self {
            Kind::Binary => EdmValue::Binary(bytes),
            Kind::String => EdmValue::String(String::from_utf8(bytes).map_err(|_| {
                Error::from(DecodeError::for_property(
                    property,
                    "the String kept outside the entity is not UTF-8",
                ))
            })?),
        })
    }
}

/// Whether a value is over the 64 KiB a property may hold (a String measured
/// in UTF-16, as the service measures it).
pub(super) fn over_property_limit(value: &EdmValue) -> bool {
    matches!(value, EdmValue::String(_) | EdmValue::Binary(_))
        && value_size(value) - 4 > MAX_VALUE_BYTES
}

/// A key as one segment of a blob name: ASCII letters, digits, `-` and `_`
/// as they are, every other byte of its UTF-8 as `%XX`; the empty key as
/// `%00` (a byte no key may hold), so no segment is empty, `.` or `..`.
pub(super) fn encode_segment(key: &str) -> String {
    if key.is_empty() {
        return "%00".to_owned();
    }
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode_segment(segment: &str) -> Option<String> {
    if segment == "%00" {
        return Some(String::new());
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The entity and property a blob of this pattern belongs to, from its name.
pub(super) fn parse_blob_name(table: &str, name: &str) -> Option<(EntityKey, String)> {
    let mut parts = name.split('/');
    let (t, pk, rk, write, prop) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some()
        || t != table
        || write.len() != 32
        || !write.bytes().all(|b| b.is_ascii_hexdigit())
        || prop.is_empty()
    {
        return None;
    }
    Some((
        EntityKey::new(decode_segment(pk)?, decode_segment(rk)?),
        prop.to_owned(),
    ))
}

/// The properties an entity's [`BLOBS`] property lists, with their types.
pub(super) fn blob_list(row: &DynamicEntity) -> Result<Vec<(String, Kind)>> {
    let Some(list) = row.get(BLOBS) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_str()
        .ok_or_else(|| bad_blob_list("not a String".to_owned()))?;
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|item| {
            item.split_once(':')
                .and_then(|(p, k)| Some((p.to_owned(), Kind::parse(k)?)))
                .ok_or_else(|| {
                    bad_blob_list(format!(
                        "expected `Property:Binary` or `Property:String` items, got {item:?}"
                    ))
                })
        })
        .collect()
}

pub(super) fn bad_blob_list(why: String) -> Error {
    DecodeError::for_property(BLOBS, why).into()
}

/// The properties an entity keeps in blobs, from its [`BLOBS`] property and
/// the properties it names (which `row` must hold).
pub(super) fn blob_refs(row: &DynamicEntity) -> Result<Vec<BlobRef>> {
    blob_list(row)?
        .into_iter()
        .map(|(property, kind)| {
            let blob = row
                .get(&property)
                .and_then(EdmValue::as_str)
                .ok_or_else(|| bad_blob_list(format!("{property} should hold its blob's name")))?
                .to_owned();
            Ok(BlobRef {
                property,
                kind,
                blob,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit::codec::entity_to_json;
    use tablekit::validate::{entity_size, property_size, MAX_ENTITY_BYTES};

    #[test]
    fn key_segments_round_trip_and_never_hold_a_slash_or_dot() {
        for key in [
            "Sales",
            "",
            "a.b",
            "..",
            "ü/x",
            "empid_000223",
            "%00",
            "a b%",
        ] {
            let seg = encode_segment(key);
            assert!(
                !seg.contains('/') && !seg.contains('.') && !seg.is_empty(),
                "{seg}"
            );
            assert_eq!(decode_segment(&seg).as_deref(), Some(key), "{key:?}");
        }
        assert_eq!(encode_segment("Sales"), "Sales");
        assert_eq!(encode_segment("a.b"), "a%2Eb");
        assert_eq!(decode_segment("%G0"), None);
    }

    #[test]
    fn blob_names_parse_back_to_their_entity_and_property() {
        let id = "0123456789abcdef0123456789abcdef";
        let name = format!("Employees/Sales/000%2E1/{id}/Photo");
        let (key, prop) = parse_blob_name("Employees", &name).unwrap();
        assert_eq!(key, EntityKey::new("Sales", "000.1"));
        assert_eq!(prop, "Photo");
        assert!(parse_blob_name("Other", &name).is_none());
        assert!(parse_blob_name("Employees", "Employees/Sales/1/short/Photo").is_none());
        assert!(parse_blob_name("Employees", &format!("{name}/extra")).is_none());
    }

    #[test]
    fn the_size_formula_is_tablekits_at_the_1_mib_boundary() {
        // 15 Binary properties of 64 KiB and one that brings the entity to
        // exactly 1 MiB: tablekit takes it, and refuses one byte more.
        let build = |extra: usize| {
            let mut e = DynamicEntity::new("Sales", "000223");
            for i in 0..15 {
                e.set(format!("B{i:02}"), vec![0u8; MAX_VALUE_BYTES]);
            }
            let so_far = entity_size("Sales", "000223", e.properties.iter());
            let last = MAX_ENTITY_BYTES - so_far - property_size("B15", &EdmValue::Binary(vec![]));
            e.set("B15", vec![0u8; last + extra]);
            e
        };
        let exact = build(0);
        assert_eq!(
            entity_size("Sales", "000223", exact.properties.iter()),
            MAX_ENTITY_BYTES
        );
        entity_to_json(&exact).expect("exactly 1 MiB");
        let over = build(1);
        assert!(entity_to_json(&over).unwrap_err().is_invalid_input());
    }

    #[test]
    fn string_sizes_count_utf16() {
        assert_eq!(value_size(&EdmValue::String("ab".into())), 8);
        assert_eq!(value_size(&EdmValue::String("😀".into())), 8);
        assert!(over_property_limit(&EdmValue::String(
            "é".repeat(32 * 1024 + 1)
        )));
        assert!(!over_property_limit(&EdmValue::String(
            "é".repeat(32 * 1024)
        )));
        assert!(over_property_limit(&EdmValue::Binary(vec![0; 65_537])));
        assert!(!over_property_limit(&EdmValue::Binary(vec![0; 65_536])));
    }
}
