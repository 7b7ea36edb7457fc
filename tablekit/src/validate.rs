//! The service's naming rules and limits, checked before any request is sent.

use crate::error::{KeyKind, ValidationError};

/// The longest PartitionKey or RowKey, in characters as the service counts
/// them: UTF-16 code units, so a character outside the Basic Multilingual
/// Plane (an emoji) counts two.
pub const MAX_KEY_CHARS: usize = 1024;
/// The most custom properties in one entity (255 with PartitionKey, RowKey, Timestamp).
pub const MAX_PROPERTIES: usize = 252;
/// The longest property name, in characters.
pub const MAX_PROPERTY_NAME_CHARS: usize = 255;
/// The largest String (as UTF-16) or Binary value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The largest entity, in bytes.
pub const MAX_ENTITY_BYTES: usize = 1024 * 1024;
/// The most operations in one entity group transaction.
pub const MAX_BATCH_OPERATIONS: usize = 100;
/// The largest entity group transaction payload, in bytes.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// The most entities the service returns in one page, and the largest `$top`.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Checks a table name: 3 to 63 ASCII letters or digits, starting with a letter,
/// and not the reserved `tables`.
pub fn table_name(name: &str) -> Result<(), ValidationError> {
    let err = |reason| ValidationError::TableName {
        name: name.to_owned(),
        reason,
    };
    let len = name.len();
    if !(3..=63).contains(&len) {
        return Err(err("a table name has 3 to 63 characters"));
    }
    let bytes = name.as_bytes();
    if !bytes[0].is_ascii_alphabetic() {
        return Err(err("a table name starts with a letter"));
    }
    if !bytes.iter().all(u8::is_ascii_alphanumeric) {
        return Err(err("a table name has only ASCII letters and digits"));
    }
    if name.eq_ignore_ascii_case("tables") {
        return Err(err("\"tables\" is reserved"));
    }
    Ok(())
}

/// Checks a queue name: 3 to 63 characters of lower-case ASCII letters, digits
/// and hyphens, starting and ending with a letter or digit, with no two hyphens
/// in a row.
///
/// ```
/// use tablekit::validate::queue_name;
/// assert!(queue_name("archive-jobs").is_ok());
/// assert!(queue_name("Archive").is_err());
/// assert!(queue_name("a--b").is_err());
/// ```
pub fn queue_name(name: &str) -> Result<(), ValidationError> {
    dns_name("queue", name).map_err(|reason| ValidationError::QueueName {
        name: name.to_owned(),
        reason,
    })
}

/// Checks a blob container name: the same rules as [`queue_name`].
///
/// ```
/// use tablekit::validate::container_name;
/// assert!(container_name("photos-2014").is_ok());
/// assert!(container_name("Photos").is_err());
/// ```
pub fn container_name(name: &str) -> Result<(), ValidationError> {
    dns_name("container", name).map_err(|reason| ValidationError::ContainerName {
        name: name.to_owned(),
        reason,
    })
}

/// The DNS-label rules queue and container names share.
fn dns_name(kind: &'static str, name: &str) -> Result<(), &'static str> {
    let what = |q: &'static str, c: &'static str| if kind == "queue" { q } else { c };
    if !(3..=63).contains(&name.len()) {
        return Err(what(
            "a queue name has 3 to 63 characters",
            "a container name has 3 to 63 characters",
        ));
    }
    let bytes = name.as_bytes();
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    {
        return Err(what(
            "a queue name has only lower-case ASCII letters, digits and hyphens",
            "a container name has only lower-case ASCII letters, digits and hyphens",
        ));
    }
    if bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
        return Err(what(
            "a queue name starts and ends with a letter or digit",
            "a container name starts and ends with a letter or digit",
        ));
    }
    if name.contains("--") {
        return Err(what(
            "a queue name has no two hyphens in a row",
            "a container name has no two hyphens in a row",
        ));
    }
    Ok(())
}

/// Checks a blob name: 1 to 1,024 characters, none of them control characters.
/// `/` separates virtual folders, which listings can filter by prefix.
pub fn blob_name(name: &str) -> Result<(), ValidationError> {
    let err = |reason| ValidationError::BlobName {
        name: name.to_owned(),
        reason,
    };
    let len = name.chars().count();
    if !(1..=1024).contains(&len) {
        return Err(err("a blob name has 1 to 1,024 characters"));
    }
    if name.chars().any(char::is_control) {
        return Err(err("a blob name has no control characters"));
    }
    Ok(())
}

/// Checks a PartitionKey or RowKey value: at most 1024 UTF-16 code units (the
/// service's count of characters; [`ValidationError::KeyTooLong`] reports
/// that count), none of `/ \ # ?`, U+0000–U+001F or U+007F–U+009F.
pub fn key(kind: KeyKind, value: &str) -> Result<(), ValidationError> {
    // Fast path: ASCII keys (the common case) need one byte scan.
    if value.is_ascii() {
        if value.len() > MAX_KEY_CHARS {
            return Err(ValidationError::KeyTooLong {
                key: kind,
                len: value.len(),
                max: MAX_KEY_CHARS,
            });
        }
        if let Some(index) = value.bytes().position(|b| forbidden_key_char(b as char)) {
            return Err(ValidationError::KeyForbiddenChar {
                key: kind,
                ch: value.as_bytes()[index] as char,
                index,
            });
        }
        return Ok(());
    }
    let mut count = 0;
    for (index, ch) in value.chars().enumerate() {
        if forbidden_key_char(ch) {
            return Err(ValidationError::KeyForbiddenChar {
                key: kind,
                ch,
                index,
            });
        }
        count += ch.len_utf16();
    }
    if count > MAX_KEY_CHARS {
        return Err(ValidationError::KeyTooLong {
            key: kind,
            len: count,
            max: MAX_KEY_CHARS,
        });
    }
    Ok(())
}

fn forbidden_key_char(ch: char) -> bool {
    matches!(ch, '/' | '\\' | '#' | '?' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Checks a custom property name: 1 to 255 characters matching
/// `^[A-Za-z_][A-Za-z0-9_]*$`, and not `PartitionKey`, `RowKey` or `Timestamp`.
pub fn property_name(name: &str) -> Result<(), ValidationError> {
    let err = |reason| ValidationError::PropertyName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(err("a property name is not empty"));
    }
    if name.len() > MAX_PROPERTY_NAME_CHARS {
        return Err(err("a property name has at most 255 characters"));
    }
    let bytes = name.as_bytes();
    if !(bytes[0].is_ascii_alphabetic() || bytes[0] == b'_') {
        return Err(err("a property name starts with a letter or '_'"));
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        return Err(err(
            "a property name has only ASCII letters, digits and '_' (no '-')",
        ));
    }
    if matches!(name, "PartitionKey" | "RowKey" | "Timestamp") {
        return Err(err(
            "PartitionKey, RowKey and Timestamp are system properties",
        ));
    }
    Ok(())
}

/// The size the service counts for a String value: its UTF-16 length times two.
pub(crate) fn utf16_bytes(s: &str) -> usize {
    if s.is_ascii() {
        s.len() * 2
    } else {
        s.encode_utf16().count() * 2
    }
}

/// The bytes the service counts for a property value: a String 4 plus its
/// UTF-16 length times two, a Binary 4 plus its length, a Boolean 1, an Int32
/// 4, a Guid 16, the others 8. A String or Binary may hold at most
/// [`MAX_VALUE_BYTES`] of that (the 4 not counted).
///
/// ```
/// use tablekit::validate::value_size;
/// use tablekit::EdmValue;
///
/// assert_eq!(value_size(&EdmValue::String("Jones".into())), 4 + 10);
/// assert_eq!(value_size(&EdmValue::String("😀".into())), 4 + 4); // a surrogate pair
/// assert_eq!(value_size(&EdmValue::Binary(vec![0; 100])), 104);
/// assert_eq!(value_size(&EdmValue::Int64(7)), 8);
/// ```
pub fn value_size(value: &crate::EdmValue) -> usize {
    use crate::EdmValue;
    match value {
        EdmValue::String(s) => 4 + utf16_bytes(s),
        EdmValue::Binary(b) => 4 + b.len(),
        EdmValue::Boolean(_) => 1,
        EdmValue::Int32(_) => 4,
        EdmValue::Guid(_) => 16,
        EdmValue::DateTime(_) | EdmValue::Double(_) | EdmValue::Int64(_) => 8,
    }
}

/// The bytes a property adds to its entity's size: 8, its name as UTF-16, and
/// [`value_size`].
pub fn property_size(name: &str, value: &crate::EdmValue) -> usize {
    8 + utf16_bytes(name) + value_size(value)
}

/// The size the service counts for an entity with these keys and properties,
/// the one [`MAX_ENTITY_BYTES`] limits: 4 bytes, the keys as UTF-16, and each
/// property's [`property_size`]. It is the size tablekit checks before it sends
/// an entity, so a pattern that spreads an entity over several rows or blobs
/// can plan with it.
///
/// ```
/// use tablekit::validate::{entity_size, MAX_ENTITY_BYTES};
/// use tablekit::DynamicEntity;
///
/// let e = DynamicEntity::new("Sales", "000223").with("Email", "jonesj@contoso.com");
/// let size = entity_size(&e.partition_key, &e.row_key, e.properties.iter());
/// assert_eq!(size, 4 + 2 * 5 + 2 * 6 + (8 + 2 * 5 + 4 + 2 * 18));
/// assert!(size <= MAX_ENTITY_BYTES);
/// ```
pub fn entity_size<'a>(
    partition_key: &str,
    row_key: &str,
    properties: impl IntoIterator<Item = (&'a str, &'a crate::EdmValue)>,
) -> usize {
    4 + utf16_bytes(partition_key)
        + utf16_bytes(row_key)
        + properties
            .into_iter()
            .map(|(n, v)| property_size(n, v))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_follow_the_data_model_vectors() {
        for ok in ["Blogs", "Channels", "SocialNetworkTable", "abc"] {
            assert!(table_name(ok).is_ok(), "{ok}");
        }
        let long_ok = format!("a{}", "b".repeat(62));
        assert!(table_name(&long_ok).is_ok());
        let too_long = format!("a{}", "b".repeat(63));
        for bad in [
            "ab", "1Blogs", "my-table", "my_table", "tables", "Tables", "",
        ] {
            assert!(table_name(bad).is_err(), "{bad}");
        }
        assert!(table_name(&too_long).is_err());
    }

    #[test]
    fn keys_follow_the_data_model_vectors() {
        for ok in [
            "Channel9",
            "Oct-29",
            "Channel_19",
            "Examples Doc",
            "",
            "O'Brien %+ é",
        ] {
            assert!(key(KeyKind::RowKey, ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "10/29/2008 10:00:00 AM",
            "a#b",
            "a?b",
            "a\\b",
            "a\tb",
            "\u{7f}",
            "\u{9f}",
            "é/",
        ] {
            assert!(key(KeyKind::RowKey, bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            key(KeyKind::PartitionKey, "ab#"),
            Err(ValidationError::KeyForbiddenChar {
                key: KeyKind::PartitionKey,
                ch: '#',
                index: 2
            })
        );
        assert!(key(KeyKind::RowKey, &"x".repeat(1024)).is_ok());
        assert!(key(KeyKind::RowKey, &"é".repeat(1024)).is_ok());
        assert!(key(KeyKind::RowKey, &"é".repeat(1025)).is_err());
        // The service counts UTF-16 code units: a character outside the
        // Basic Multilingual Plane counts two.
        assert!(key(KeyKind::RowKey, &"\u{1F600}".repeat(512)).is_ok());
        assert_eq!(
            key(KeyKind::RowKey, &"\u{1F600}".repeat(513)),
            Err(ValidationError::KeyTooLong {
                key: KeyKind::RowKey,
                len: 1026,
                max: 1024
            })
        );
        assert!(key(
            KeyKind::PartitionKey,
            &format!("{}\u{1F600}", "x".repeat(1023))
        )
        .is_err());
        assert_eq!(
            key(KeyKind::RowKey, &"x".repeat(1025)),
            Err(ValidationError::KeyTooLong {
                key: KeyKind::RowKey,
                len: 1025,
                max: 1024
            })
        );
    }

    #[test]
    fn property_names_follow_the_data_model_vectors() {
        for ok in ["Text", "Rating", "CreatedOn", "_x", &"a".repeat(255)] {
            assert!(property_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "my-prop",
            "1abc",
            "PartitionKey",
            "RowKey",
            "Timestamp",
            "",
            "é",
            &"a".repeat(256),
        ] {
            assert!(property_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn utf16_size_counts_surrogate_pairs() {
        assert_eq!(utf16_bytes("abc"), 6);
        assert_eq!(utf16_bytes("é"), 2);
        assert_eq!(utf16_bytes("😀"), 4);
    }

    #[test]
    fn entity_size_is_the_size_the_client_checks_before_sending() {
        use crate::codec::write::EntityChecker;
        use crate::{DynamicEntity, TableEntity};

        let e = DynamicEntity::new("Sales é", "000223😀")
            .with("Email", "jonesj@contoso.com")
            .with("Note", "Ünïcödé 😀 text")
            .with("Photo", vec![7u8; 1000])
            .with("Active", true)
            .with("Age", 34i32)
            .with("Big", 1i64 << 40)
            .with("Score", 0.5f64)
            .with("Id", uuid::Uuid::nil())
            .with("Hired", chrono::Utc::now());
        let mut checker = EntityChecker::new(&e.partition_key, &e.row_key).unwrap();
        e.write_properties(&mut checker).unwrap();
        let checked = checker.finish(&e.partition_key, &e.row_key).unwrap();
        assert_eq!(
            entity_size(&e.partition_key, &e.row_key, e.properties.iter()),
            checked
        );
    }
}
