//! Input refused on the client before any request: [`ValidationError`],
//! the [`KeyKind`] it names, and the filter [`ParseError`].

use std::fmt;

use super::Error;

/// Which of the two key properties a key error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyKind {
    /// The `PartitionKey`.
    PartitionKey,
    /// The `RowKey`.
    RowKey,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyKind::PartitionKey => "PartitionKey",
            KeyKind::RowKey => "RowKey",
        })
    }
}

/// Input rejected on the client before any request was sent. Each message names
/// the field and the limit it broke.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// A table name is not 3 to 63 ASCII letters and digits starting with a letter, or is reserved.
    #[error("table name {name:?} is invalid: {reason}")]
    #[non_exhaustive]
    TableName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A queue name is not 3 to 63 lower-case letters, digits and single hyphens.
    #[error("queue name {name:?} is invalid: {reason}")]
    #[non_exhaustive]
    QueueName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A blob container name is not 3 to 63 lower-case letters, digits and single hyphens.
    #[error("container name {name:?} is invalid: {reason}")]
    #[non_exhaustive]
    ContainerName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A blob name is empty, too long or holds a control character.
    #[error("blob name {name:?} is invalid: {reason}")]
    #[non_exhaustive]
    BlobName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A blob request breaks a rule of the Blob service (range, metadata, block size).
    #[error("blob request: {reason}")]
    #[non_exhaustive]
    Blob {
        /// Which rule it breaks.
        reason: String,
    },
    /// A queue message or one of its settings breaks a rule of the Queue service.
    #[error("queue message: {reason}")]
    #[non_exhaustive]
    Message {
        /// Which rule it breaks, with the limit.
        reason: String,
    },
    /// A PartitionKey or RowKey is longer than 1024 characters.
    #[error("{key} is {len} characters long; the limit is {max}")]
    #[non_exhaustive]
    KeyTooLong {
        /// Which key.
        key: KeyKind,
        /// Its length in characters.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A PartitionKey or RowKey holds a character the service forbids in keys
    /// (`/`, `\`, `#`, `?` or a control character).
    #[error("{key} contains the forbidden character {ch:?} at character {index} (keys may not contain '/', '\\', '#', '?' or control characters)")]
    #[non_exhaustive]
    KeyForbiddenChar {
        /// Which key.
        key: KeyKind,
        /// The character.
        ch: char,
        /// Its position, counted in characters.
        index: usize,
    },
    /// A property name is empty, too long, not identifier-like, or reserved.
    #[error("property name {name:?} is invalid: {reason}")]
    #[non_exhaustive]
    PropertyName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// Two properties of one entity have the same name (built outside
    /// tablekit with [`ValidationError::duplicate_property`]).
    #[non_exhaustive]
    #[error("property {name:?} appears twice in one entity")]
    DuplicateProperty {
        /// The repeated name.
        name: String,
    },
    /// An entity has more custom properties than the service stores.
    #[error("entity has {count} custom properties; the limit is {max} (255 including PartitionKey, RowKey and Timestamp)")]
    #[non_exhaustive]
    TooManyProperties {
        /// How many custom properties it has.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A String or Binary value is over 64 KiB.
    #[error("property {property:?} is {size} bytes; a {edm} value may be at most {max} bytes")]
    #[non_exhaustive]
    ValueTooLarge {
        /// The property.
        property: String,
        /// The Edm type of the value.
        edm: &'static str,
        /// Its size (UTF-16 bytes for strings).
        size: usize,
        /// The limit.
        max: usize,
    },
    /// An entity is over 1 MiB.
    #[error(
        "entity ({partition_key:?}, {row_key:?}) is about {size} bytes; the limit is {max} bytes"
    )]
    #[non_exhaustive]
    EntityTooLarge {
        /// Its PartitionKey.
        partition_key: String,
        /// Its RowKey.
        row_key: String,
        /// Its estimated stored size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A DateTime outside 1601-01-01T00:00:00Z ..= 9999-12-31T23:59:59.9999999Z, the range the service stores.
    #[error("property {property:?} holds {value}, outside 1601-01-01T00:00:00Z ..= 9999-12-31T23:59:59.9999999Z, the DateTime range the service stores")]
    #[non_exhaustive]
    DateTimeOutOfRange {
        /// The property.
        property: String,
        /// The value, in RFC 3339.
        value: String,
    },
    /// A value does not fit the Edm type it is stored as.
    #[error("property {property:?}: {reason}")]
    #[non_exhaustive]
    ValueOutOfRange {
        /// The property.
        property: String,
        /// What does not fit.
        reason: String,
    },
    /// A page size ([`Query::page_size`](crate::table::Query::page_size),
    /// [`ListTables::page_size`](crate::table::ListTables::page_size)) outside 1..=1000.
    #[error(
        "page_size({value}) is outside 1..={max}: the service returns at most {max} entities per page"
    )]
    #[non_exhaustive]
    PageSize {
        /// The requested value.
        value: usize,
        /// The limit.
        max: usize,
    },
    /// An entity group transaction breaks one of its rules
    /// (built outside tablekit with [`ValidationError::batch`]).
    #[non_exhaustive]
    #[error("{}{reason}", index.map(|i| format!("transaction operation {i}: ")).unwrap_or_default())]
    Batch {
        /// The operation at fault, when one is.
        index: Option<usize>,
        /// Which rule it breaks.
        reason: String,
    },
    /// A design pattern (such as those of `tablekit-patterns`) refused a
    /// write or a declaration that breaks one of its rules (built with
    /// [`ValidationError::pattern`]).
    #[non_exhaustive]
    #[error("{pattern}: {reason}")]
    Pattern {
        /// The pattern, as its module names it (`index`, `large`, ...).
        pattern: &'static str,
        /// Which rule it breaks.
        reason: String,
    },
    /// Writes composed into one [`Plan`](crate::table::Plan) that one
    /// transaction cannot carry out exactly: of two tables or partitions, or
    /// two writes of one entity that no single operation does.
    #[non_exhaustive]
    #[error("plan: {reason}")]
    Plan {
        /// Which writes, and why.
        reason: String,
    },
    /// Stored access policies or service properties the service would refuse
    /// (more than five policies or CORS rules, a policy id that is empty,
    /// longer than 64 characters or given twice, a retention outside 1 to 365
    /// days): see [`crate::acl`] and [`crate::service_properties`].
    #[error("{what}: {reason}")]
    #[non_exhaustive]
    Settings {
        /// What was refused (`stored access policies`, `service properties`).
        what: &'static str,
        /// Which rule it breaks.
        reason: String,
    },
    /// A limit or rule of the Azure Cosmos DB Table API that Azure Storage
    /// does not have: the account's [`Target`](crate::account::Target) is Cosmos DB.
    #[error("the Cosmos DB Table API would refuse this: {reason}")]
    #[non_exhaustive]
    CosmosDb {
        /// Which rule, and by how much.
        reason: String,
    },
    /// A continuation token string could not be parsed.
    #[error("continuation token is malformed: {reason}")]
    #[non_exhaustive]
    Continuation {
        /// Why.
        reason: &'static str,
    },
    /// A filter or select expression is invalid.
    #[error("query is invalid: {reason}")]
    #[non_exhaustive]
    Query {
        /// Why.
        reason: String,
    },
    /// A filter text (such as one given to
    /// [`Query::filter_raw`](crate::table::Query::filter_raw)) does not parse: the
    /// [`ParseError`] says where ([`ParseError::position`]) and what was
    /// expected there ([`ParseError::expected`]).
    #[error(transparent)]
    Filter(ParseError),
}

impl ValidationError {
    /// A broken transaction rule, for code outside tablekit that checks
    /// transactions of its own (pattern crates): reported as tablekit reports
    /// its own, so [`Error::is_invalid_input`] holds.
    ///
    /// ```
    /// use tablekit::{Error, error::ValidationError};
    ///
    /// let err = Error::from(ValidationError::batch(Some(3), "the index entity is missing"));
    /// assert!(err.is_invalid_input());
    /// assert_eq!(err.to_string(), "invalid input: transaction operation 3: the index entity is missing");
    /// ```
    pub fn batch(index: Option<usize>, reason: impl Into<String>) -> Self {
        ValidationError::Batch {
            index,
            reason: reason.into(),
        }
    }

    /// A refusal of a design pattern, for pattern crates: reported like
    /// tablekit's own checks, so [`Error::is_invalid_input`] holds.
    ///
    /// ```
    /// use tablekit::{Error, error::ValidationError};
    ///
    /// let err = Error::from(ValidationError::pattern("index", "two indexes named \"email\""));
    /// assert!(err.is_invalid_input());
    /// assert!(matches!(err.validation(), Some(ValidationError::Pattern { pattern: "index", .. })));
    /// assert_eq!(err.to_string(), "invalid input: index: two indexes named \"email\"");
    /// ```
    pub fn pattern(pattern: &'static str, reason: impl Into<String>) -> Self {
        ValidationError::Pattern {
            pattern,
            reason: reason.into(),
        }
    }

    /// Two properties of one entity with the same name, for hand-written
    /// [`TableEntity`](crate::TableEntity) impls and pattern crates.
    pub fn duplicate_property(name: impl Into<String>) -> Self {
        ValidationError::DuplicateProperty { name: name.into() }
    }
}

/// Why a filter text could not be parsed ([`Filter::parse`](crate::filter::Filter::parse),
/// [`Query::filter_raw`](crate::table::Query::filter_raw)): where in the text the problem is
/// ([`position`](Self::position), [`column`](Self::column)), what is wrong
/// ([`message`](Self::message)) and, where the grammar allowed only some
/// tokens, what was expected ([`expected`](Self::expected)).
///
/// It converts into [`Error`] as an invalid-input error
/// ([`ValidationError::Filter`], which keeps this value).
///
/// ```
/// let e = tablekit::filter::Filter::parse("(Rating gt 3").unwrap_err();
/// assert_eq!(e.position(), 12);
/// assert_eq!(e.column(), 13);
/// assert_eq!(e.expected(), Some("`)`"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid filter at byte {offset}: {message}")]
#[non_exhaustive]
pub struct ParseError {
    offset: usize,
    column: usize,
    message: String,
    expected: Option<String>,
}

impl ParseError {
    pub(crate) fn new(offset: usize, message: impl Into<String>) -> Self {
        ParseError {
            offset,
            column: 0,
            message: message.into(),
            expected: None,
        }
    }

    /// Names what the grammar allowed at the error's position.
    pub(crate) fn expecting(mut self, expected: impl Into<String>) -> Self {
        self.expected = Some(expected.into());
        self
    }

    /// Fills in the column, once the whole text is at hand.
    pub(crate) fn in_text(mut self, text: &str) -> Self {
        let before = text.get(..self.offset).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        self.column = before[line_start..].chars().count() + 1;
        self
    }

    /// The byte offset in the filter text where the problem was found.
    pub fn position(&self) -> usize {
        self.offset
    }

    /// The byte offset in the filter text where the problem was found (the
    /// same as [`position`](Self::position)).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The 1-based column, counted in characters from the start of its line,
    /// where the problem was found: what an editor shows.
    pub fn column(&self) -> usize {
        self.column
    }

    /// What is wrong, without the offset.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What the grammar allowed at [`position`](Self::position), such as
    /// `` `)` `` or `` a comparison operator ``; `None` when the problem is not a
    /// missing token (an unterminated string, a number out of range, ...).
    pub fn expected(&self) -> Option<&str> {
        self.expected.as_deref()
    }
}

impl From<ParseError> for Error {
    fn from(e: ParseError) -> Self {
        Error::invalid(ValidationError::Filter(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_messages_name_field_and_limit() {
        let e = Error::invalid(ValidationError::KeyTooLong {
            key: KeyKind::RowKey,
            len: 1025,
            max: 1024,
        });
        assert!(e.is_invalid_input());
        assert_eq!(
            e.to_string(),
            "invalid input: RowKey is 1025 characters long; the limit is 1024"
        );
    }
}
