//! Keys ordered the way the service orders them: ordinal UTF-16 code units.

use std::borrow::Cow;
use std::cmp::Ordering;

/// A PartitionKey or RowKey (or table name) ordered by UTF-16 code units, as
/// .NET's `string.CompareOrdinal` orders them; Rust's `str` order (code points)
/// differs for characters outside the Basic Multilingual Plane, which sort before
/// U+E000..=U+FFFF here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key(pub(crate) String);

impl Key {
    pub(crate) fn new(s: &str) -> Self {
        Key(s.to_owned())
    }
}

/// Ordinal comparison by UTF-16 code units.
pub(crate) fn compare_utf16(a: &str, b: &str) -> Ordering {
    // Inside the BMP, UTF-16 order is code point order, which is UTF-8 byte
    // order; an ASCII side cannot reach a surrogate, so bytes decide.
    if a.is_ascii() || b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_utf16(&self.0, &other.0)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Appends the on-disk form of `s`: bytes whose order is `s`'s UTF-16
/// order. It is UTF-8 with the lead bytes of U+E000..=U+FFFF (`EE`, `EF`)
/// raised to `F5`, `F6` (bytes UTF-8 never uses), so they sort after the
/// characters outside the Basic Multilingual Plane (lead bytes `F0`..=`F4`)
/// as their UTF-16 code units (`E000`.. after the surrogates `D800`..) do.
fn encode_str(s: &str, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(s.as_bytes());
    if !s.is_ascii() {
        for b in &mut out[start..] {
            match *b {
                0xEE => *b = 0xF5,
                0xEF => *b = 0xF6,
                _ => {}
            }
        }
    }
}

/// The on-disk key of an entity: its keys' forms (see `encode_str`) joined
/// by a zero byte, which no key contains (U+0000 is forbidden in keys) and
/// which sorts below every byte of a key. Byte order of these keys is the
/// service's order: PartitionKey, then RowKey, each by UTF-16 code units.
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(crate) fn entity_key(pk: &str, rk: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(pk.len() + rk.len() + 1);
    encode_str(pk, &mut out);
    out.push(0);
    encode_str(rk, &mut out);
    out
}

/// The on-disk keys bounding partition `pk`: every entity key of it is at
/// least the first and less than the second.
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(crate) fn partition_range(pk: &str) -> (Vec<u8>, Vec<u8>) {
    let mut start = Vec::with_capacity(pk.len() + 1);
    encode_str(pk, &mut start);
    let mut end = start.clone();
    start.push(0);
    end.push(1);
    (start, end)
}

/// The keys of an on-disk entity key, or `None` if it is not one.
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(crate) fn decode_entity_key(bytes: &[u8]) -> Option<(String, String)> {
    let split = bytes.iter().position(|&b| b == 0)?;
    Some((
        decode_str(&bytes[..split])?,
        decode_str(&bytes[split + 1..])?,
    ))
}

/// The keys of an on-disk entity key, borrowed from it unless a key has
/// characters of U+E000..=U+FFFF, or `None` if it is not one.
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(crate) fn split_entity_key(bytes: &[u8]) -> Option<(Cow<'_, str>, Cow<'_, str>)> {
    let split = bytes.iter().position(|&b| b == 0)?;
    Some((
        borrowed_str(&bytes[..split])?,
        borrowed_str(&bytes[split + 1..])?,
    ))
}

/// A key from its on-disk form, borrowed if it has no character of
/// U+E000..=U+FFFF.
fn borrowed_str(part: &[u8]) -> Option<Cow<'_, str>> {
    if part.iter().any(|&b| b == 0xF5 || b == 0xF6) {
        decode_str(part).map(Cow::Owned)
    } else {
        std::str::from_utf8(part).ok().map(Cow::Borrowed)
    }
}

/// A key from its on-disk form (see `encode_str`): one allocation, and the
/// bytes copied as they are unless the key has characters of
/// U+E000..=U+FFFF.
fn decode_str(part: &[u8]) -> Option<String> {
    let mut utf8 = part.to_vec();
    if !part.is_ascii() {
        for b in &mut utf8 {
            match *b {
                0xF5 => *b = 0xEE,
                0xF6 => *b = 0xEF,
                _ => {}
            }
        }
    }
    String::from_utf8(utf8).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_disk_keys_sort_as_the_service_orders_keys_and_read_back() {
        let samples = [
            "",
            "a",
            "ab",
            "a b",
            "b",
            "Z",
            "~",
            "\u{7f}x",
            "é",
            "\u{7ff}",
            "\u{800}",
            "\u{D7FF}",
            "\u{E000}",
            "\u{EFFF}",
            "\u{F000}",
            "\u{FFFD}",
            "\u{FFFF}",
            "\u{10000}",
            "\u{1F600}",
            "\u{10FFFF}",
            "a\u{1F600}",
            "a\u{E000}",
            "a\u{FFFF}b",
            "\u{1F600}\u{1F600}",
        ];
        let mut pairs = Vec::new();
        for pk in samples {
            for rk in samples {
                pairs.push((pk, rk));
            }
        }
        for &(p1, r1) in &pairs {
            let k1 = entity_key(p1, r1);
            assert_eq!(decode_entity_key(&k1), Some((p1.to_owned(), r1.to_owned())));
            assert_eq!(split_entity_key(&k1), Some((p1.into(), r1.into())));
            let (start, end) = partition_range(p1);
            assert!(start <= k1 && k1 < end, "{p1:?} {r1:?}");
            for &(p2, r2) in &pairs {
                let k2 = entity_key(p2, r2);
                let service = compare_utf16(p1, p2).then(compare_utf16(r1, r2));
                assert_eq!(k1.cmp(&k2), service, "({p1:?}, {r1:?}) vs ({p2:?}, {r2:?})");
                if p1 != p2 {
                    assert!(!(start <= k2 && k2 < end), "{p2:?} is outside {p1:?}");
                }
            }
        }
    }

    #[test]
    fn supplementary_characters_sort_before_the_top_of_the_bmp() {
        let emoji = Key::new("\u{1F600}");
        let private = Key::new("\u{E000}");
        assert!(emoji < private, "UTF-16: D83D < E000");
        assert!("\u{1F600}" > "\u{E000}", "code point order differs");
        assert!(Key::new("a") < Key::new("b"));
        assert!(Key::new("") < Key::new("a"));
        assert!(Key::new("Z") < Key::new("a"), "ordinal: no case folding");
    }
}
