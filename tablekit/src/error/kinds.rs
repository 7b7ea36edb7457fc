//! What an [`ErrorKind`](super::ErrorKind) carries: a refused constraint,
//! the service's error answer, a transport failure, a decode error and a
//! configuration error.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Error, ErrorCode, ErrorKind};

/// A write refused because the value it would take is another entity's: a
/// unique index keeps one entity per value, and the copy under `key` names
/// `held_by`. Nothing of the refused change was applied to that copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintError {
    pub(super) name: String,
    pub(super) key: (String, String),
    pub(super) held_by: Option<(String, String)>,
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

/// An error answer of the service.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceError {
    /// HTTP status.
    pub status: u16,
    /// The service's error code, such as [`ErrorCode::EntityAlreadyExists`].
    pub code: Option<ErrorCode>,
    /// The service's message, without the batch index prefix. The reason an
    /// authentication failure gives beside it (`AuthenticationErrorDetail`,
    /// such as "Lifetime validation failed. The token is expired.") ends its
    /// first line, the line an error shows.
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
    pub(crate) fn fmt_answer(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
    /// The answer broke a limit of [`AnswerLimits`](crate::options::AnswerLimits):
    /// it was sent, and a retry would bring the same answer.
    TooLarge,
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
    pub(super) source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
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

/// A token credential (Microsoft Entra ID) could not give a token, or the
/// service refused the one it gave.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CredentialError {
    /// What went wrong; never contains a token or a secret.
    pub message: String,
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "credential error: {}", self.message)
    }
}
