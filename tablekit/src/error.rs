//! The one error type of tablekit, with predicates and accessors.
//!
//! Every failure, whether caught on the client before any I/O or reported by the
//! service, is an [`Error`]. Match on [`Error::kind`] when the category matters,
//! or ask the predicates (`is_not_found`, `is_conflict`, ...) for the common cases.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The result type of tablekit operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from tablekit: invalid input caught before any I/O, an answer of the
/// service, a transport failure, or a response that could not be decoded.
///
/// `Display` gives one line; the cause (if any) is available through
/// [`std::error::Error::source`]. No secret (account key, SAS token, bearer
/// token) ever appears in an error.
pub struct Error {
    inner: Box<Inner>,
}

/// An error's kind and what the retry loop learnt about the request.
struct Inner {
    kind: ErrorKind,
    /// Some attempt of a write may have been applied: see [`Error::is_ambiguous`].
    ambiguous: bool,
    /// The `x-ms-client-request-id` the client sent with every attempt.
    client_request_id: Option<Box<str>>,
    /// What a read-back found after an ambiguous write (a
    /// [`ReadBack`](crate::table::ReadBack)); kept as `Any` so that this vocabulary
    /// module needs no entity type.
    read_back: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Who answered a [`ErrorKind::Service`] error when it was not the
    /// service: an embedded store, named with its file.
    answered_by: Option<Box<str>>,
}

/// What went wrong, by category.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input was rejected on the client, before any request was sent.
    Invalid(ValidationError),
    /// The service answered with an error status.
    Service(ServiceError),
    /// The request could not be completed: connection refused or reset, timeout, TLS.
    Transport(TransportError),
    /// A response (or a stored property) could not be turned into the requested type.
    Decode(DecodeError),
    /// A connection string or client configuration is malformed.
    Config(ConfigError),
    /// A read that needs an entity ([`Query::fetch_one`](crate::table::Query::fetch_one))
    /// found none; the message names the table.
    NoEntity(String),
    /// A write refused because it would take over data that another entity
    /// owns, such as a value of a unique index held by another entity (built
    /// by pattern crates with [`Error::constraint`]).
    Constraint(ConstraintError),
}

impl Error {
    /// The category of this error.
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.kind
    }

    /// The HTTP status the service answered with, if the error came from the service.
    pub fn status(&self) -> Option<u16> {
        match &self.inner.kind {
            ErrorKind::Service(e) => Some(e.status),
            _ => None,
        }
    }

    /// The service's error code ([`ErrorCode::EntityAlreadyExists`],
    /// [`ErrorCode::ResourceNotFound`], ...).
    pub fn code(&self) -> Option<&ErrorCode> {
        match &self.inner.kind {
            ErrorKind::Service(e) => e.code.as_ref(),
            _ => None,
        }
    }

    /// The service's `x-ms-request-id`, needed when asking Azure support about a failure.
    pub fn request_id(&self) -> Option<&str> {
        match &self.inner.kind {
            ErrorKind::Service(e) => e.request_id.as_deref(),
            _ => None,
        }
    }

    /// For a failed entity group transaction: the 0-based index of the operation
    /// that failed, when the service named one.
    pub fn batch_index(&self) -> Option<usize> {
        match &self.inner.kind {
            ErrorKind::Service(e) => e.batch_index,
            ErrorKind::Invalid(ValidationError::Batch { index, .. }) => *index,
            _ => None,
        }
    }

    /// The validation failure, when the input was rejected before any I/O.
    pub fn validation(&self) -> Option<&ValidationError> {
        match &self.inner.kind {
            ErrorKind::Invalid(v) => Some(v),
            _ => None,
        }
    }

    /// The entity, table or resource does not exist (404), or a query that had
    /// to return an entity matched none ([`ErrorKind::NoEntity`]).
    ///
    /// False for an [ambiguous](Error::is_ambiguous) error: a 404 that answers
    /// the retry of a delete may mean that the first attempt deleted it.
    pub fn is_not_found(&self) -> bool {
        (self.status() == Some(404) && !self.inner.ambiguous)
            || matches!(&self.inner.kind, ErrorKind::NoEntity(_))
    }

    /// The entity or table already exists, or the table is being deleted (409).
    ///
    /// False for an [ambiguous](Error::is_ambiguous) error: a 409 that answers
    /// the retry of an insert may be the caller's own entity, written by an
    /// earlier attempt whose answer was lost. [`Error::status`] still says 409.
    pub fn is_conflict(&self) -> bool {
        self.status() == Some(409) && !self.inner.ambiguous
    }

    /// An ETag condition failed (412): someone else changed the entity since it was read.
    ///
    /// False for an [ambiguous](Error::is_ambiguous) error: a 412 that answers
    /// the retry of a conditional write may come from the caller's own first
    /// attempt, which changed the ETag.
    pub fn is_precondition_failed(&self) -> bool {
        self.status() == Some(412) && !self.inner.ambiguous
    }

    /// The service asked the client to slow down (503 `ServerBusy`, or 429).
    pub fn is_throttled(&self) -> bool {
        matches!(self.status(), Some(503) | Some(429))
    }

    /// The write failed, but it may have been applied: its outcome is unknown.
    ///
    /// A failed write (any write: an upsert as well as an insert, a
    /// conditional update or delete, a transaction, a queue send) is ambiguous
    /// when one of its attempts may have reached the service without its
    /// answer reaching the client (the connection broke or timed out after the
    /// request was sent, or the service answered 500, 502 or 504): whatever
    /// the last attempt met, that same fault, a 503, or the 404, 409 or 412
    /// that its own earlier attempt provoked. A failed read is never ambiguous. [`Error::status`] still gives
    /// the last answer's status, but [`Error::is_conflict`],
    /// [`Error::is_precondition_failed`] and [`Error::is_not_found`] are false,
    /// since the conflict may be the caller's own write.
    ///
    /// Table writes do not stop there by default: the client reads the
    /// entities back, returns success when they hold exactly what the write
    /// sent, and only otherwise returns this error, with what it read in
    /// [`Error::read_back`](crate::Error::read_back)
    /// (see [`AmbiguousWrites`](crate::table::AmbiguousWrites)).
    pub fn is_ambiguous(&self) -> bool {
        self.inner.ambiguous
    }

    /// The `x-ms-client-request-id` tablekit sent with every attempt of the
    /// failed call (one id per call, the same on its retries): search the
    /// service's logs for it. [`Error::request_id`] is the service's own id of
    /// the answer, when one arrived.
    pub fn client_request_id(&self) -> Option<&str> {
        self.inner.client_request_id.as_deref()
    }

    /// Whether the request may have reached the server and been applied
    /// although this attempt failed: a connection cut or a timeout after the
    /// request was sent, or an answer (500, 502, 504) that does not say
    /// whether the work was done. A refused connection, a TLS failure, 408,
    /// 429, 503 and every other answer say that nothing was applied, or what was.
    pub(crate) fn outcome_unknown(&self) -> bool {
        match &self.inner.kind {
            ErrorKind::Transport(t) => {
                matches!(t.kind, TransportKind::Timeout | TransportKind::Interrupted)
            }
            ErrorKind::Service(e) => matches!(e.status, 500 | 502 | 504),
            _ => false,
        }
    }

    /// Marks the error ambiguous: an attempt of this non-idempotent call may
    /// have been applied.
    pub(crate) fn into_ambiguous(mut self) -> Self {
        self.inner.ambiguous = true;
        self
    }

    /// Attaches what a read-back found (see `table::outcome`).
    pub(crate) fn with_read_back(mut self, state: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.inner.read_back = Some(state);
        self
    }

    /// What a read-back found, as attached by [`Error::with_read_back`].
    pub(crate) fn read_back_state(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.inner.read_back.as_deref()
    }

    /// Names who gave a service answer in place of the service (an embedded
    /// store: "the embedded store file /data/app.redb"); `Display` then says
    /// "{who} answered ...". Errors of other kinds are returned unchanged.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn answered_by(mut self, who: impl Into<Box<str>>) -> Self {
        if matches!(self.inner.kind, ErrorKind::Service(_)) {
            self.inner.answered_by = Some(who.into());
        }
        self
    }

    /// Records the client request id of the call that failed.
    pub(crate) fn with_client_request_id(mut self, id: &str) -> Self {
        self.inner.client_request_id = Some(id.into());
        self
    }

    /// A write refused because it would take over data another entity owns
    /// (a value of a unique index): see [`ConstraintError`].
    pub fn is_constraint_violation(&self) -> bool {
        matches!(&self.inner.kind, ErrorKind::Constraint(_))
    }

    /// The constraint that refused the write, for [`ErrorKind::Constraint`].
    pub fn constraint_error(&self) -> Option<&ConstraintError> {
        match &self.inner.kind {
            ErrorKind::Constraint(c) => Some(c),
            _ => None,
        }
    }

    /// A constraint of code built on tablekit (a unique index of a pattern
    /// crate) refused a write: the value `row_key` in partition
    /// `partition_key` of the constraint `name` belongs to another entity,
    /// `held_by` (its PartitionKey and RowKey, when known).
    ///
    /// ```
    /// let e = tablekit::Error::constraint(
    ///     "email",
    ///     ("email_Sales", "jonesj@contoso.com"),
    ///     Some(("Sales", "000224")),
    /// );
    /// assert!(e.is_constraint_violation() && !e.is_retryable() && !e.is_invalid_input());
    /// let c = e.constraint_error().unwrap();
    /// assert_eq!(c.name(), "email");
    /// assert_eq!(c.held_by(), Some(("Sales", "000224")));
    /// assert_eq!(
    ///     e.to_string(),
    ///     "unique constraint \"email\": (\"email_Sales\", \"jonesj@contoso.com\") is held by (\"Sales\", \"000224\")"
    /// );
    /// ```
    pub fn constraint(
        name: impl Into<String>,
        key: (impl Into<String>, impl Into<String>),
        held_by: Option<(impl Into<String>, impl Into<String>)>,
    ) -> Self {
        ErrorKind::Constraint(ConstraintError {
            name: name.into(),
            key: (key.0.into(), key.1.into()),
            held_by: held_by.map(|(p, r)| (p.into(), r.into())),
        })
        .into()
    }

    /// The input was rejected on the client before any request was sent.
    pub fn is_invalid_input(&self) -> bool {
        matches!(&self.inner.kind, ErrorKind::Invalid(_))
    }

    /// The failure happened in the transport: no answer was received.
    pub fn is_transport(&self) -> bool {
        matches!(&self.inner.kind, ErrorKind::Transport(_))
    }

    /// A transient failure that is safe to retry for an idempotent operation.
    ///
    /// This is the one classification tablekit uses: the HTTP backend's retry
    /// loop asks this predicate and nothing else. A write that is not
    /// idempotent (an insert, a transaction) is still retried when its repeat
    /// is detected by the service (409, 412 or 404 then answer it), and the
    /// call's error is flagged [`Error::is_ambiguous`] if an attempt may have
    /// been applied. A queue send, whose repeat nobody would detect, is not
    /// resent after such an attempt: the call fails, ambiguous.
    ///
    /// | status or condition | retried? | why |
    /// |---|---|---|
    /// | transport: timeout (connect or answer) | yes | the next attempt may be faster |
    /// | transport: connection refused | yes | the server may be restarting |
    /// | transport: connection reset or closed, answer cut short | yes | a network blip |
    /// | transport: TLS handshake or certificate failure | **no** | retrying cannot fix a certificate or a protocol mismatch |
    /// | transport: the request could not be built | no | the same request fails the same way |
    /// | 408 Request Timeout | yes | |
    /// | 429 Too Many Requests | yes | after `Retry-After` when the service sends it |
    /// | 500 Internal Server Error | yes | |
    /// | 502 Bad Gateway | yes | |
    /// | 503 Server Busy / Service Unavailable | yes | after `Retry-After` when the service sends it |
    /// | 504 Gateway Timeout | yes | |
    /// | any other status (400, 403, 404, 409, 412, ...) | no | the answer is final |
    /// | invalid input, configuration, decode, no entity | no | nothing was sent, or the answer arrived |
    pub fn is_retryable(&self) -> bool {
        retryable(&self.inner.kind)
    }

    /// A time limit of the caller's own ran out before an operation's last
    /// step, for code built on tablekit (a pattern's write deadline, say):
    /// [`is_timeout`](Error::is_timeout) and
    /// [`is_retryable`](Error::is_retryable) hold, as for the HTTP options'
    /// timeouts. The message says which operation gave up and what it undid.
    ///
    /// ```
    /// let e = tablekit::Error::timed_out("the write of (Sales, 1) took 40 s, over its 30 s deadline");
    /// assert!(e.is_timeout() && e.is_retryable() && !e.is_invalid_input());
    /// assert!(e.to_string().contains("over its 30 s deadline"));
    /// ```
    pub fn timed_out(message: impl Into<String>) -> Self {
        ErrorKind::Transport(TransportError::new(TransportKind::Timeout, message, None)).into()
    }

    /// The failure was a time limit: the connect timeout or the per-attempt
    /// timeout of [`HttpOptions`](crate::options::HttpOptions) ran out, or one of the
    /// caller's own ([`Error::timed_out`]).
    pub fn is_timeout(&self) -> bool {
        matches!(
            &self.inner.kind,
            ErrorKind::Transport(t) if matches!(t.kind, TransportKind::Timeout | TransportKind::ConnectTimeout)
        )
    }

    /// How long the service asked the client to wait (`Retry-After` of a 429 or
    /// 503 answer), when it said so.
    pub fn retry_after(&self) -> Option<Duration> {
        match &self.inner.kind {
            ErrorKind::Service(e) => e.retry_after,
            _ => None,
        }
    }

    pub(crate) fn invalid(v: ValidationError) -> Self {
        ErrorKind::Invalid(v).into()
    }

    pub(crate) fn decode(message: impl Into<String>) -> Self {
        ErrorKind::Decode(DecodeError {
            message: message.into(),
            property: None,
            source: None,
        })
        .into()
    }

    pub(crate) fn decode_property(property: &str, message: impl Into<String>) -> Self {
        ErrorKind::Decode(DecodeError {
            message: message.into(),
            property: Some(property.to_owned()),
            source: None,
        })
        .into()
    }

    /// A decode error that keeps its cause (a `serde_json`, base64, UUID,
    /// chrono or integer parse error) for [`std::error::Error::source`].
    /// The message should say what could not be decoded, not repeat the cause.
    pub(crate) fn decode_caused_by(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ErrorKind::Decode(DecodeError {
            message: message.into(),
            property: None,
            source: Some(Arc::new(source)),
        })
        .into()
    }

    /// [`Error::decode_property`] with its cause kept as the source.
    pub(crate) fn decode_property_caused_by(
        property: &str,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ErrorKind::Decode(DecodeError {
            message: message.into(),
            property: Some(property.to_owned()),
            source: Some(Arc::new(source)),
        })
        .into()
    }

    pub(crate) fn no_entity(table: &str) -> Self {
        ErrorKind::NoEntity(table.to_owned()).into()
    }

    /// An error answer of a service, built by a backend that is not HTTP.
    #[cfg(any(
        feature = "durable",
        all(feature = "embedded", any(feature = "queue", feature = "blob"))
    ))]
    pub(crate) fn service(status: u16, code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorKind::Service(ServiceError {
            status,
            code: Some(code),
            message: Some(message.into()),
            request_id: None,
            batch_index: None,
            retry_after: None,
        })
        .into()
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        ErrorKind::Config(ConfigError {
            message: message.into(),
        })
        .into()
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                ambiguous: false,
                client_request_id: None,
                read_back: None,
                answered_by: None,
            }),
        }
    }
}

impl From<ValidationError> for Error {
    fn from(v: ValidationError) -> Self {
        Error::invalid(v)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind);
        if self.inner.ambiguous {
            d.field("ambiguous", &true);
        }
        if let Some(id) = &self.inner.client_request_id {
            d.field("client_request_id", id);
        }
        if self.inner.read_back.is_some() {
            d.field("read_back", &true);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner.kind {
            ErrorKind::Invalid(v) => write!(f, "invalid input: {v}"),
            ErrorKind::Service(e) => match &self.inner.answered_by {
                Some(who) => {
                    write!(f, "{who} answered ")?;
                    e.fmt_answer(f)
                }
                None => fmt::Display::fmt(e, f),
            },
            ErrorKind::Transport(e) => fmt::Display::fmt(e, f),
            ErrorKind::Decode(e) => fmt::Display::fmt(e, f),
            ErrorKind::Config(e) => fmt::Display::fmt(e, f),
            ErrorKind::NoEntity(table) => write!(f, "no entity of table {table} matched the query"),
            ErrorKind::Constraint(c) => fmt::Display::fmt(c, f),
        }?;
        if self.inner.ambiguous {
            f.write_str("; the outcome is unknown: an attempt may have been applied")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    // `Display` of each kind already shows the kind's own message, so the source
    // is the kind's cause, not the kind itself (which would print twice).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.inner.kind {
            ErrorKind::Transport(t) => std::error::Error::source(t),
            ErrorKind::Decode(d) => std::error::Error::source(d),
            _ => None,
        }
    }
}

/// The retry classification documented on [`Error::is_retryable`]: one match,
/// one row per line of that table.
fn retryable(kind: &ErrorKind) -> bool {
    match kind {
        ErrorKind::Transport(t) => match t.kind {
            TransportKind::Timeout
            | TransportKind::ConnectTimeout
            | TransportKind::Connect
            | TransportKind::Interrupted => true,
            TransportKind::Tls | TransportKind::Request => false,
        },
        ErrorKind::Service(e) => retryable_status(e.status),
        ErrorKind::Invalid(_)
        | ErrorKind::Decode(_)
        | ErrorKind::Config(_)
        | ErrorKind::NoEntity(_)
        | ErrorKind::Constraint(_) => false,
    }
}

/// A write refused because the value it would take is another entity's: a
/// unique index keeps one entity per value, and the copy under `key` names
/// `held_by`. Nothing of the refused change was applied to that copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintError {
    name: String,
    key: (String, String),
    held_by: Option<(String, String)>,
}

impl ConstraintError {
    /// The constraint's name (the index's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The PartitionKey and RowKey of the contested row (the index copy).
    pub fn key(&self) -> (&str, &str) {
        (&self.key.0, &self.key.1)
    }

    /// The entity that holds the value, when known: its PartitionKey and RowKey.
    pub fn held_by(&self) -> Option<(&str, &str)> {
        self.held_by.as_ref().map(|(p, r)| (p.as_str(), r.as_str()))
    }
}

impl fmt::Display for ConstraintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unique constraint {:?}: ({:?}, {:?})",
            self.name, self.key.0, self.key.1
        )?;
        match &self.held_by {
            Some((p, r)) => write!(f, " is held by ({p:?}, {r:?})"),
            None => f.write_str(" is held by another entity"),
        }
    }
}

/// The statuses of the table on [`Error::is_retryable`] that are worth another attempt.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

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

/// Why a filter text could not be parsed: where in the text the problem is
/// ([`position`](Self::position), [`column`](Self::column)), what is wrong
/// ([`message`](Self::message)) and, where the grammar allowed only some
/// tokens, what was expected ([`expected`](Self::expected)).
///
/// It converts into [`Error`] as an invalid-input error
/// ([`ValidationError::Filter`], which keeps this value).
///
/// ```
/// let e = tablekit::filter::parse("(Rating gt 3").unwrap_err();
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

macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// An error code of the storage services (the `code` of an error answer),
        /// as documented for the Table, Queue and Blob services; any other code
        /// is kept as [`ErrorCode::Other`].
        ///
        /// Match on it rather than on strings: a typo in a variant name does not compile.
        ///
        /// ```
        /// use tablekit::error::ErrorCode;
        /// assert_eq!(ErrorCode::from("EntityAlreadyExists"), ErrorCode::EntityAlreadyExists);
        /// assert_eq!(ErrorCode::EntityAlreadyExists.as_str(), "EntityAlreadyExists");
        /// assert_eq!(ErrorCode::from("SomethingNew"), ErrorCode::Other("SomethingNew".into()));
        /// ```
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[$doc])* $name,)*
            /// A code this version of tablekit does not name.
            Other(String),
        }

        impl ErrorCode {
            /// The code as the service spells it.
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$name => stringify!($name),)*
                    ErrorCode::Other(s) => s,
                }
            }
        }

        impl From<&str> for ErrorCode {
            fn from(code: &str) -> Self {
                match code {
                    $(stringify!($name) => ErrorCode::$name,)*
                    other => ErrorCode::Other(other.to_owned()),
                }
            }
        }
    };
}

error_codes! {
    // Common to the storage services.
    /// The account is disabled.
    AccountIsDisabled,
    /// The request's signature or credentials were not accepted.
    AuthenticationFailed,
    /// The credentials do not allow this operation.
    AuthorizationFailure,
    /// A conditional header (`If-Match`, `If-None-Match`, ...) was not satisfied.
    ConditionNotMet,
    /// The service failed internally; retrying may succeed.
    InternalError,
    /// The authentication information is malformed.
    InvalidAuthenticationInfo,
    /// A header value is malformed.
    InvalidHeaderValue,
    /// The request body or one of its values is invalid.
    InvalidInput,
    /// A query parameter value is invalid.
    InvalidQueryParameterValue,
    /// A resource (table, queue, container, blob) name is invalid.
    InvalidResourceName,
    /// The request URI is invalid.
    InvalidUri,
    /// The XML of the request body is invalid.
    InvalidXmlDocument,
    /// A required header is missing.
    MissingRequiredHeader,
    /// The operation did not finish in the allowed time.
    OperationTimedOut,
    /// A value is outside its allowed range.
    OutOfRangeInput,
    /// A query parameter value is outside its allowed range.
    OutOfRangeQueryParameterValue,
    /// The request body is too large.
    RequestBodyTooLarge,
    /// The resource already exists.
    ResourceAlreadyExists,
    /// The resource (for tables: the entity) does not exist.
    ResourceNotFound,
    /// The service is busy: slow down and retry.
    ServerBusy,
    /// The HTTP verb is not supported here.
    UnsupportedHttpVerb,
    // The Table service.
    /// Two properties of one entity have the same name.
    DuplicatePropertiesSpecified,
    /// An entity with this PartitionKey and RowKey already exists.
    EntityAlreadyExists,
    /// The entity does not exist.
    EntityNotFound,
    /// The entity is larger than the service stores.
    EntityTooLarge,
    /// A transaction names the same entity twice.
    InvalidDuplicateRow,
    /// A value does not match its declared type.
    InvalidValueType,
    /// The JSON format asked for is not supported.
    JsonFormatNotSupported,
    /// The operation is not allowed on this resource.
    MethodNotAllowed,
    /// The operation is not implemented.
    NotImplemented,
    /// A property has no value.
    PropertiesNeedValue,
    /// A property name is invalid.
    PropertyNameInvalid,
    /// A property name is too long.
    PropertyNameTooLong,
    /// A property value is too large.
    PropertyValueTooLarge,
    /// A table with this name already exists.
    TableAlreadyExists,
    /// The table is being deleted; its name is not free yet.
    TableBeingDeleted,
    /// The table does not exist.
    TableNotFound,
    /// The entity has more properties than the service stores.
    TooManyProperties,
    /// An ETag condition failed: the entity changed since it was read.
    UpdateConditionNotSatisfied,
    // The Queue service.
    /// A message is larger than the service stores.
    MessageTooLarge,
    /// The message does not exist (or its visibility timeout is over).
    MessageNotFound,
    /// The pop receipt does not match the message's latest one.
    PopReceiptMismatch,
    /// A queue with this name already exists.
    QueueAlreadyExists,
    /// The queue is being deleted.
    QueueBeingDeleted,
    /// The queue does not exist.
    QueueNotFound,
    // The Blob service.
    /// A blob with this name already exists.
    BlobAlreadyExists,
    /// The blob does not exist.
    BlobNotFound,
    /// A container with this name already exists.
    ContainerAlreadyExists,
    /// The container is being deleted.
    ContainerBeingDeleted,
    /// The container does not exist.
    ContainerNotFound,
    /// A block list names a block that was not uploaded.
    InvalidBlockList,
    /// A range is outside the blob.
    InvalidRange,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for ErrorCode {
    fn from(code: String) -> Self {
        match ErrorCode::from(code.as_str()) {
            ErrorCode::Other(_) => ErrorCode::Other(code),
            known => known,
        }
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// An error answer of the service.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceError {
    /// HTTP status.
    pub status: u16,
    /// The service's error code, such as [`ErrorCode::EntityAlreadyExists`].
    pub code: Option<ErrorCode>,
    /// The service's message, without the batch index prefix.
    pub message: Option<String>,
    /// `x-ms-request-id` of the response.
    pub request_id: Option<String>,
    /// For a failed entity group transaction, the 0-based index of the failing operation.
    pub batch_index: Option<usize>,
    /// The service's `Retry-After` (seconds or an HTTP date), as a delay from
    /// the moment the answer arrived.
    pub retry_after: Option<Duration>,
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the service answered ")?;
        self.fmt_answer(f)
    }
}

impl ServiceError {
    /// The answer without who gave it: status, code, index, message, request id.
    fn fmt_answer(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.status)?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        if let Some(i) = self.batch_index {
            write!(f, " at transaction operation {i}")?;
        }
        if let Some(m) = &self.message {
            // The service appends "\nRequestId:...\nTime:..." to messages; keep the first line.
            let first = m.lines().next().unwrap_or_default();
            write!(f, ": {first}")?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " (request id {id})")?;
        }
        Ok(())
    }
}

/// The request could not be completed.
#[derive(Debug)]
pub struct TransportError {
    pub(crate) kind: TransportKind,
    pub(crate) message: String,
    pub(crate) source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// What kind of transport failure, for [`Error::is_retryable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransportKind {
    /// The per-attempt timeout ran out after the connection was made: the
    /// request may have been sent.
    Timeout,
    /// The connect timeout ran out: nothing was sent.
    ConnectTimeout,
    /// No connection could be made (refused, unreachable, DNS).
    Connect,
    /// The connection was reset or closed, or the answer was cut short.
    Interrupted,
    /// The TLS handshake failed: a certificate was not accepted, or the peer
    /// does not speak TLS.
    Tls,
    /// The request could not be built or sent for a reason a retry cannot fix.
    Request,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "transport error: {}", self.message)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl TransportError {
    pub(crate) fn new(
        kind: TransportKind,
        message: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        TransportError {
            kind,
            message: message.into(),
            source,
        }
    }
}

/// A response or stored value could not be decoded into the requested type.
///
/// The underlying parse error (JSON, base64, GUID, date, integer), when there
/// is one, is the [`std::error::Error::source`] of this error and of the
/// [`Error`] holding it; `Display` does not repeat it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DecodeError {
    /// What went wrong.
    pub message: String,
    /// The property at fault, when one is.
    pub property: Option<String>,
    // Shared rather than boxed so that the error stays `Clone`.
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl DecodeError {
    /// A decode error about the whole entity or answer. For code outside
    /// tablekit that decodes entities (hand-written [`TableEntity`](crate::TableEntity)
    /// impls, pattern crates): `Error::from(DecodeError::new("..."))`.
    pub fn new(message: impl Into<String>) -> Self {
        DecodeError {
            message: message.into(),
            property: None,
            source: None,
        }
    }

    /// A decode error about one property.
    pub fn for_property(property: impl Into<String>, message: impl Into<String>) -> Self {
        DecodeError {
            message: message.into(),
            property: Some(property.into()),
            source: None,
        }
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        ErrorKind::Decode(e).into()
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.property {
            Some(p) => write!(f, "cannot decode property {p:?}: {}", self.message),
            None => write!(f, "cannot decode response: {}", self.message),
        }
    }
}

/// A connection string or configuration value is malformed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConfigError {
    /// What is wrong; never contains a secret.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configuration error: {}", self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_error_display_keeps_first_line_of_message() {
        let e: Error = ErrorKind::Service(ServiceError {
            status: 409,
            code: Some(ErrorCode::EntityAlreadyExists),
            message: Some("The specified entity already exists.\nRequestId:abc".into()),
            request_id: Some("abc".into()),
            batch_index: Some(2),
            retry_after: None,
        })
        .into();
        assert!(e.is_conflict());
        assert_eq!(e.batch_index(), Some(2));
        assert_eq!(
            e.to_string(),
            "the service answered 409 EntityAlreadyExists at transaction operation 2: The specified entity already exists. (request id abc)"
        );
    }

    fn service(status: u16) -> Error {
        ErrorKind::Service(ServiceError {
            status,
            code: None,
            message: None,
            request_id: None,
            batch_index: None,
            retry_after: None,
        })
        .into()
    }

    fn transport(kind: TransportKind) -> Error {
        ErrorKind::Transport(TransportError::new(kind, "x", None)).into()
    }

    /// One assertion per row of the table on `Error::is_retryable`.
    #[test]
    fn retry_classification_table() {
        assert!(transport(TransportKind::Timeout).is_retryable());
        assert!(transport(TransportKind::Connect).is_retryable());
        assert!(transport(TransportKind::Interrupted).is_retryable());
        assert!(!transport(TransportKind::Tls).is_retryable());
        assert!(!transport(TransportKind::Request).is_retryable());
        assert!(service(408).is_retryable());
        assert!(service(429).is_retryable());
        assert!(service(500).is_retryable());
        assert!(service(502).is_retryable());
        assert!(service(503).is_retryable());
        assert!(service(504).is_retryable());
        for other in [400, 401, 403, 404, 405, 409, 411, 412, 413, 501, 505] {
            assert!(!service(other).is_retryable(), "{other}");
        }
        assert!(!Error::invalid(ValidationError::Continuation { reason: "x" }).is_retryable());
        assert!(!Error::config("x").is_retryable());
        assert!(!Error::decode("x").is_retryable());
        assert!(!Error::no_entity("T").is_retryable());
        assert!(transport(TransportKind::Timeout).is_timeout());
        assert!(!transport(TransportKind::Connect).is_timeout());
    }

    #[test]
    fn decode_errors_keep_their_cause_as_source() {
        use std::error::Error as _;
        let cause = "12x".parse::<i32>().unwrap_err();
        let e =
            Error::decode_property_caused_by("Rating", "\"12x\" is not an Int32", cause.clone());
        // Display does not repeat the cause; the source chain reaches it.
        assert_eq!(
            e.to_string(),
            "cannot decode property \"Rating\": \"12x\" is not an Int32"
        );
        let source = e.source().expect("the cause is kept");
        assert_eq!(
            source.downcast_ref::<std::num::ParseIntError>(),
            Some(&cause)
        );
        let json = serde_json::from_str::<u8>("{").unwrap_err();
        let e = Error::decode_caused_by("the answer is not JSON", json);
        assert!(e.source().unwrap().is::<serde_json::Error>());
        match e.kind() {
            ErrorKind::Decode(d) => assert!(d.clone().source().is_some(), "clones keep it"),
            other => panic!("{other:?}"),
        }
        assert!(Error::decode("no cause").source().is_none());
    }

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
