//! The ETag of an entity and the condition of a write on it.

use std::fmt;

use chrono::{DateTime, Utc};

/// An entity's ETag: an opaque version string, stored and sent back byte for byte.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ETag(String);

impl ETag {
    /// Wraps a value received from the service.
    pub fn new(value: impl Into<String>) -> Self {
        ETag(value.into())
    }

    /// The value as sent by the service.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The Timestamp the service embeds in its ETags
    /// (`W/"datetime'2008-10-01T15%3A27%3A34.4838174Z'"`), when it does.
    pub fn timestamp(&self) -> Option<DateTime<Utc>> {
        let inner = self.0.strip_prefix("W/\"datetime'")?.strip_suffix("'\"")?;
        // The usual value (`2008-10-01T15%3A27%3A34.4838174Z`, 32 bytes) is
        // decoded on the stack: every write's answer carries one.
        let mut buf = [0u8; 48];
        let (src, mut len, mut i) = (inner.as_bytes(), 0, 0);
        while i < src.len() {
            let hex = |b: u8| char::from(b).to_digit(16);
            let byte = match (src[i], src.get(i + 1), src.get(i + 2)) {
                (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                    i += 3;
                    (hex(h)? * 16 + hex(l)?) as u8
                }
                (b, _, _) => {
                    i += 1;
                    b
                }
            };
            match buf.get_mut(len) {
                Some(slot) => *slot = byte,
                None => {
                    let decoded = percent_encoding::percent_decode_str(inner)
                        .decode_utf8()
                        .ok()?;
                    return crate::edm::parse_datetime_text(&decoded).ok();
                }
            }
            len += 1;
        }
        crate::edm::parse_datetime_text(std::str::from_utf8(&buf[..len]).ok()?).ok()
    }
}

impl fmt::Debug for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ETag({})", self.0)
    }
}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The condition of an update or delete.
///
/// There is no default: an unconditional write is the visible choice `IfMatch::Any`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    /// Apply whatever the stored version is (`If-Match: *`).
    Any,
    /// Apply only if the stored version still has this ETag; otherwise the service
    /// answers 412 and [`Error::is_precondition_failed`](crate::Error::is_precondition_failed) is true.
    ETag(ETag),
}

impl IfMatch {
    /// The ETag a conditional request carries, `None` for [`IfMatch::Any`].
    #[cfg(feature = "blob")]
    pub(crate) fn into_etag(self) -> Option<ETag> {
        match self {
            IfMatch::Any => None,
            IfMatch::ETag(e) => Some(e),
        }
    }

    pub(crate) fn header_value(&self) -> &str {
        match self {
            IfMatch::Any => "*",
            IfMatch::ETag(e) => e.as_str(),
        }
    }
}

impl From<ETag> for IfMatch {
    fn from(e: ETag) -> Self {
        IfMatch::ETag(e)
    }
}

impl From<&ETag> for IfMatch {
    fn from(e: &ETag) -> Self {
        IfMatch::ETag(e.clone())
    }
}

/// The condition of a create: apply only if nothing is stored under the name yet.
///
/// Blob uploads take it ([`Upload::if_none_match`](crate::blob::Upload::if_none_match));
/// a table [`insert`](crate::TableClient::insert) carries it implicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IfNoneMatch {
    /// Apply only if nothing exists (`If-None-Match: *`); otherwise the write
    /// fails with a conflict and leaves what is stored alone.
    Any,
}

/// `*` or the ETag itself: what the `If-Match` header carries.
impl fmt::Display for IfMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.header_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_timestamp_is_read_from_weak_datetime_etag() {
        let e = ETag::new("W/\"datetime'2008-10-01T15%3A27%3A34.4838174Z'\"");
        assert_eq!(
            e.timestamp().map(|t| crate::edm::format_datetime(&t)),
            Some("2008-10-01T15:27:34.4838174Z".to_owned())
        );
        assert_eq!(ETag::new("\"0x8D\"").timestamp(), None);
        // Longer than the stack buffer (a fraction of more digits than the
        // service writes): still read.
        let long = ETag::new("W/\"datetime'2008-10-01T15%3A27%3A34.48381740000000000000000000Z'\"");
        assert_eq!(
            long.timestamp().map(|t| crate::edm::format_datetime(&t)),
            Some("2008-10-01T15:27:34.4838174Z".to_owned())
        );
        assert_eq!(
            ETag::new("W/\"datetime'2008-10-01T15%3A27%3A34%FFZ'\"").timestamp(),
            None,
            "not UTF-8"
        );
        // Lower-case escapes, and a `%` that starts no escape, as percent
        // decoding reads them.
        let lower = ETag::new("W/\"datetime'2008-10-01T15%3a27%3a34Z'\"");
        assert_eq!(
            lower.timestamp().map(|t| crate::edm::format_datetime(&t)),
            Some("2008-10-01T15:27:34.0000000Z".to_owned())
        );
        assert_eq!(
            ETag::new("W/\"datetime'2008-10-01T15%3A27%3A34%Z'\"").timestamp(),
            None
        );
    }
}
