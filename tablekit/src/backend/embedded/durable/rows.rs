//! A page of entities read from a store file, kept as their on-disk keys and
//! binary records (`record.rs`) in one buffer, and decoded from there
//! straight into the caller's type: a string is copied once, into the
//! caller's value, with no entity built in between.
//!
//! This file reads the binary record; `record.rs` writes it (and reads it
//! into a stored entity through [`parse`]). It imports none of the store's
//! files, so the payload types can name it.

use std::borrow::Cow;

use crate::edm::{EdmType, EdmValue};
use crate::entity::{RawEntity, Scalar, Slot};

#[cfg(test)]
use crate::backend::embedded::clock::Version;
use crate::backend::embedded::key::split_entity_key;

/// The first byte of a binary record.
pub(crate) const BINARY: u8 = 0x01;

/// The Edm type bytes of a binary record.
pub(crate) mod edm {
    pub(crate) const STRING: u8 = b's';
    pub(crate) const BINARY: u8 = b'b';
    pub(crate) const BOOLEAN: u8 = b'o';
    pub(crate) const DATETIME: u8 = b'd';
    pub(crate) const DOUBLE: u8 = b'f';
    pub(crate) const GUID: u8 = b'g';
    pub(crate) const INT32: u8 = b'i';
    pub(crate) const INT64: u8 = b'l';
}

/// Entities of one page: their on-disk keys and binary records, in order.
#[derive(Debug, Default)]
pub(crate) struct Rows {
    buf: Vec<u8>,
    /// Where each row's key and record end in `buf`.
    ends: Vec<(usize, usize)>,
    /// The table and file the rows were read from, as errors name them.
    origin: String,
}

impl Rows {
    /// No rows yet, of the table and file `origin` names.
    pub(crate) fn new(origin: &str) -> Rows {
        Rows {
            origin: origin.to_owned(),
            ..Rows::default()
        }
    }

    /// Why row `i` cannot be decoded (`fill` refused it): the entity its key
    /// names, if the key reads, with the table and file. No value of the
    /// entity is shown.
    pub(crate) fn unreadable(&self, i: usize) -> String {
        let whose = match self.get(i).map(|(k, _)| split_entity_key(k)) {
            Some(Some((pk, rk))) => format!(
                "the entity ({pk:?}, {rk:?}) is unreadable: its record is cut short or malformed"
            ),
            _ => "an entity key is unreadable".to_owned(),
        };
        if self.origin.is_empty() {
            whose
        } else {
            format!("{}: {whose}", self.origin)
        }
    }

    /// Appends a row: an on-disk key and its binary record.
    pub(crate) fn push(&mut self, key: &[u8], record: &[u8]) {
        self.buf.extend_from_slice(key);
        let key_end = self.buf.len();
        self.buf.extend_from_slice(record);
        self.ends.push((key_end, self.buf.len()));
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Row `i`'s (key, record).
    pub(crate) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let &(k, v) = self.ends.get(i)?;
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p].1);
        Some((&self.buf[start..k], &self.buf[k..v]))
    }

    /// The rows' (key, record) pairs, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0;
        self.ends.iter().map(move |&(k, v)| {
            let row = (&self.buf[start..k], &self.buf[k..v]);
            start = v;
            row
        })
    }
}

/// A property value as a record holds it: strings and bytes borrowed.
pub(crate) enum Field<'a> {
    Str(&'a str),
    Bin(&'a [u8]),
    Value(EdmValue),
}

/// A reader of a binary record: every read is bounds-checked, so damaged
/// bytes are an error, never a panic.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn len(&mut self) -> Option<usize> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return usize::try_from(n).ok();
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }

    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
}

/// Reads a binary record: calls `each` with every property's name and
/// value, in order, and gives the version (100 ns ticks); `None` if it is not
/// a whole binary record (`each` may have seen a part of it).
pub(crate) fn parse<'a>(record: &'a [u8], mut each: impl FnMut(&'a str, Field<'a>)) -> Option<i64> {
    let (&BINARY, rest) = record.split_first()? else {
        return None;
    };
    let mut r = Reader { bytes: rest };
    let t = i64::from_le_bytes(r.array()?);
    let count = r.len()?;
    for _ in 0..count {
        let name = r.str()?;
        let v = match r.byte()? {
            edm::STRING => Field::Str(r.str()?),
            edm::BINARY => Field::Bin(r.bytes()?),
            edm::BOOLEAN => match r.byte()? {
                0 => Field::Value(EdmValue::Boolean(false)),
                1 => Field::Value(EdmValue::Boolean(true)),
                _ => return None,
            },
            edm::DATETIME => {
                let s = i64::from_le_bytes(r.array()?);
                let n = u32::from_le_bytes(r.array()?);
                Field::Value(EdmValue::DateTime(chrono::DateTime::from_timestamp(s, n)?))
            }
            edm::DOUBLE => Field::Value(EdmValue::Double(f64::from_bits(u64::from_le_bytes(
                r.array()?,
            )))),
            edm::GUID => Field::Value(EdmValue::Guid(uuid::Uuid::from_u128(u128::from_le_bytes(
                r.array()?,
            )))),
            edm::INT32 => Field::Value(EdmValue::Int32(i32::from_le_bytes(r.array()?))),
            edm::INT64 => Field::Value(EdmValue::Int64(i64::from_le_bytes(r.array()?))),
            _ => return None,
        };
        each(name, v);
    }
    r.bytes.is_empty().then_some(t)
}

/// Fills `raw` with a view of the entity of an on-disk key and binary
/// record: the properties `keep` keeps, and the Timestamp if `timestamp`.
/// `false` if the key or record is unreadable.
pub(crate) fn fill<'a>(
    raw: &mut RawEntity<'a>,
    key: &'a [u8],
    record: &'a [u8],
    keep: impl Fn(&str) -> bool,
    timestamp: bool,
) -> bool {
    let Some((pk, rk)) = split_entity_key(key) else {
        return false;
    };
    raw.partition_key = pk;
    raw.row_key = rk;
    raw.props.clear();
    let props = &mut raw.props;
    let parsed = parse(record, |name, v| {
        if keep(name) {
            let slot = match v {
                Field::Str(s) => Slot::Json(Scalar::Str(Cow::Borrowed(s)), Some(EdmType::String)),
                Field::Bin(b) => Slot::Value(Cow::Owned(EdmValue::Binary(b.to_vec()))),
                Field::Value(v) => Slot::Value(Cow::Owned(v)),
            };
            props.push((Cow::Borrowed(name), slot));
        }
    });
    let Some(t) = parsed else {
        return false;
    };
    // Written into the strings the previous entity left (one buffer each for
    // a whole page), as `Version::at` would form them.
    let mut text = reuse(&mut raw.timestamp);
    write_timestamp(&mut text, t);
    let mut etag = reuse(&mut raw.etag);
    write_etag(&mut etag, &text);
    raw.etag = Some(Cow::Owned(etag));
    raw.timestamp = timestamp.then_some(Cow::Owned(text));
    true
}

/// The owned string `slot` holds, emptied, to write the next entity's in.
fn reuse(slot: &mut Option<Cow<'_, str>>) -> String {
    match slot.take() {
        Some(Cow::Owned(mut s)) => {
            s.clear();
            s
        }
        _ => String::with_capacity(48),
    }
}

std::thread_local! {
    /// The whole seconds of the last Timestamp written on this thread, and
    /// its text up to the fraction (`2008-10-01T15:27:34.`): the entities of
    /// a page mostly share their second.
    static SECOND: std::cell::RefCell<(i64, String)> =
        const { std::cell::RefCell::new((i64::MIN, String::new())) };
}

/// The Timestamp of version `ticks` in the service's form (`Version::text`).
fn write_timestamp(out: &mut String, ticks: i64) {
    let (secs, frac) = (ticks.div_euclid(10_000_000), ticks.rem_euclid(10_000_000));
    SECOND.with_borrow_mut(|(second, head)| {
        if *second != secs || head.is_empty() {
            let at = chrono::DateTime::from_timestamp(secs, (frac * 100) as u32)
                .unwrap_or(chrono::DateTime::UNIX_EPOCH);
            let mut bytes = Vec::with_capacity(32);
            crate::edm::write_datetime(&mut bytes, &at);
            // `write_datetime` writes ASCII only, and ends in `.fffffffZ`.
            let text = String::from_utf8(bytes).unwrap_or_default();
            *head = text[..text.len().saturating_sub(8)].to_owned();
            *second = secs;
        }
        out.push_str(head);
    });
    let mut digits = [b'0'; 7];
    let mut f = frac;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (f % 10) as u8;
        f /= 10;
    }
    out.extend(digits.iter().map(|&d| char::from(d)));
    out.push('Z');
}

/// The ETag of the version whose Timestamp is `text` (`Version::etag`):
/// `W/"datetime'2008-10-01T15%3A27%3A34.4838174Z'"`.
fn write_etag(out: &mut String, text: &str) {
    out.push_str("W/\"datetime'");
    let mut parts = text.split(':');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    for part in parts {
        out.push_str("%3A");
        out.push_str(part);
    }
    out.push_str("'\"");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_timestamp_and_etag_are_those_of_its_version() {
        let key = crate::backend::embedded::key::entity_key("p", "r");
        for ticks in [
            0_i64,
            1,
            17_000_000_001_234_567,
            17_000_000_009_999_999,
            17_000_000_010_000_000,
            -1,
            -11_644_473_600 * 10_000_000,
            253_402_300_799 * 10_000_000 + 9_999_999,
        ] {
            let mut record = vec![BINARY];
            record.extend_from_slice(&ticks.to_le_bytes());
            record.push(0);
            let v = Version::at(ticks);
            let mut raw = RawEntity::default();
            for timestamp in [true, false] {
                assert!(fill(&mut raw, &key, &record, |_| true, timestamp));
                assert_eq!(raw.etag.as_deref(), Some(v.etag.as_str()));
                let text = timestamp.then_some(&*v.text);
                assert_eq!(raw.timestamp.as_deref(), text, "{ticks}");
            }
        }
    }
}
