//! The one error type of tablekit, with predicates and accessors.
//!
//! Every failure, whether caught on the client before any I/O or reported by the
//! service, is an [`Error`]. Match on [`Error::kind`] when the category matters,
//! or ask the predicates (`is_not_found`, `is_conflict`, ...) for the common cases.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

mod codes;
mod kinds;
mod validation;
pub use codes::ErrorCode;
pub(crate) use kinds::TransportKind;
pub use kinds::{
    ConfigError, ConstraintError, CredentialError, DecodeError, ServiceError, TransportError,
};
pub use validation::{KeyKind, ParseError, ValidationError};

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
    /// The cause of an error whose kind keeps none of its own (a store
    /// file's database error behind a configuration or service error).
    cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
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
    /// A token credential could not give a bearer token (Microsoft Entra ID).
    Credential(CredentialError),
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

    /// A blob or container has a lease held by somebody else: a write or
    /// delete named no lease, or an acquire met one (the codes
    /// `LeaseIdMissing`, `LeaseAlreadyPresent`,
    /// `LeaseIsBreakingAndCannotBeAcquired`). Wait, or
    /// [break](crate::BlobClient::break_lease) it.
    pub fn is_lease_held(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::LeaseIdMissing
                    | ErrorCode::LeaseAlreadyPresent
                    | ErrorCode::LeaseIsBreakingAndCannotBeAcquired
            )
        )
    }

    /// The lease a call named is no longer held by it: it expired, was
    /// released, broken or changed, or another lease took its place (the
    /// codes `LeaseLost`, `LeaseNotPresentWith*Operation`,
    /// `LeaseIdMismatchWith*Operation`, `LeaseIsBrokenAndCannotBeRenewed`,
    /// `LeaseIsBreakingAndCannotBeChanged`). Acquire a new lease.
    pub fn is_lease_lost(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::LeaseLost
                    | ErrorCode::LeaseNotPresentWithBlobOperation
                    | ErrorCode::LeaseNotPresentWithContainerOperation
                    | ErrorCode::LeaseNotPresentWithLeaseOperation
                    | ErrorCode::LeaseIdMismatchWithBlobOperation
                    | ErrorCode::LeaseIdMismatchWithContainerOperation
                    | ErrorCode::LeaseIdMismatchWithLeaseOperation
                    | ErrorCode::LeaseIsBrokenAndCannotBeRenewed
                    | ErrorCode::LeaseIsBreakingAndCannotBeChanged
            )
        )
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
                matches!(
                    t.kind,
                    TransportKind::Timeout | TransportKind::Interrupted | TransportKind::TooLarge
                )
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

    /// Keeps `cause` as this error's [`std::error::Error::source`], for a
    /// kind that keeps no cause of its own (the embedded store file's
    /// database errors behind its configuration and service errors).
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn with_cause(
        mut self,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.inner.cause = Some(Arc::new(cause));
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

    /// An answer broke one of the limits of
    /// [`AnswerLimits`](crate::options::AnswerLimits) (its head, or its body
    /// for its kind): it was not read further. Not retried; a write that met
    /// it has an unknown outcome, as with a connection cut in its answer.
    /// Also a [transport](Error::is_transport) error.
    pub fn is_answer_too_large(&self) -> bool {
        matches!(&self.inner.kind, ErrorKind::Transport(t) if t.kind == TransportKind::TooLarge)
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

    /// An error answer of a service, built by a backend that is not HTTP
    /// (the embedded store's answers beyond its tables' own: its file, its
    /// queues and blobs, its access policies).
    #[cfg(all(
        feature = "embedded",
        any(
            feature = "durable",
            feature = "queue",
            feature = "blob",
            feature = "admin"
        )
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

    /// An error of a [`TokenCredential`](crate::account::TokenCredential):
    /// the token could not be had. The message must not contain a secret.
    ///
    /// ```
    /// let e = tablekit::Error::credential("the managed identity endpoint did not answer");
    /// assert!(e.is_credential_error());
    /// assert_eq!(e.to_string(), "credential error: the managed identity endpoint did not answer");
    /// ```
    pub fn credential(message: impl Into<String>) -> Self {
        ErrorKind::Credential(CredentialError {
            message: message.into(),
        })
        .into()
    }

    /// Whether a token credential failed ([`ErrorKind::Credential`]).
    pub fn is_credential_error(&self) -> bool {
        matches!(self.inner.kind, ErrorKind::Credential(_))
    }

    /// A service error with `note` added to the first line of its message
    /// (what the client knows about why the service refused the request);
    /// other errors unchanged.
    pub(crate) fn with_service_note(mut self, note: &str) -> Self {
        if let ErrorKind::Service(e) = &mut self.inner.kind {
            let message = e.message.take().unwrap_or_default();
            let (first, rest) = message.split_once('\n').unwrap_or((&message, ""));
            let mut noted = String::with_capacity(message.len() + note.len() + 3);
            noted.push_str(first);
            if !first.is_empty() {
                noted.push(' ');
            }
            noted.push_str(note);
            if !rest.is_empty() {
                noted.push('\n');
                noted.push_str(rest);
            }
            e.message = Some(noted);
        }
        self
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
                cause: None,
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
            ErrorKind::Credential(c) => fmt::Display::fmt(c, f),
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
            _ => self
                .inner
                .cause
                .as_deref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
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
            TransportKind::Tls | TransportKind::Request | TransportKind::TooLarge => false,
        },
        ErrorKind::Service(e) => retryable_status(e.status),
        ErrorKind::Invalid(_)
        | ErrorKind::Decode(_)
        | ErrorKind::Config(_)
        | ErrorKind::NoEntity(_)
        | ErrorKind::Constraint(_)
        | ErrorKind::Credential(_) => false,
    }
}

/// The statuses of the table on [`Error::is_retryable`] that are worth another attempt.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
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
}
