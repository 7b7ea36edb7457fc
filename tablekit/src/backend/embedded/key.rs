//! Keys ordered the way the service orders them: ordinal UTF-16 code units.

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

#[cfg(test)]
mod tests {
    use super::*;

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
