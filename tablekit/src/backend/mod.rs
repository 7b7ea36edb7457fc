//! The seam between the typed clients and a backend, one file per service:
//! [`table`], [`queue`] and [`blob`] say what a client asks of a backend and
//! what it gets back, and [`Repeat`], shared by the three, how a request may be
//! repeated. [`connect`](mod@connect) is the one place that builds a backend: over HTTP from
//! an [`Account`](crate::Account), or the embedded store.

#[cfg(feature = "admin")]
pub(crate) mod admin;
#[cfg(feature = "blob")]
pub(crate) mod blob;
mod connect;
#[cfg(feature = "embedded")]
pub(crate) mod embedded;
pub(crate) mod http;
#[cfg(feature = "queue")]
pub(crate) mod queue;
mod stored;
mod table;
#[cfg(any(feature = "queue", feature = "blob"))]
mod traced;

#[cfg(feature = "blob")]
pub(crate) use connect::connect_blobs;
#[cfg(feature = "queue")]
pub(crate) use connect::connect_queues;
#[cfg(all(feature = "embedded", feature = "blob"))]
pub(crate) use connect::embedded_blobs;
#[cfg(all(feature = "durable", feature = "blob"))]
pub(crate) use connect::embedded_blobs_at;
#[cfg(all(feature = "embedded", feature = "queue"))]
pub(crate) use connect::embedded_queues;
#[cfg(all(feature = "durable", feature = "queue"))]
pub(crate) use connect::embedded_queues_at;
#[cfg(feature = "durable")]
pub(crate) use connect::{
    check_store_file, compact_store_file, hold_store_file, remove_store_file,
};
pub(crate) use connect::{connect, target, Target};
#[cfg(feature = "embedded")]
pub(crate) use connect::{embedded, embedded_simulated};
#[cfg(feature = "durable")]
pub(crate) use connect::{embedded_at, embedded_at_simulated};
#[cfg(feature = "embedded")]
pub(crate) use stored::{Selection, StoredEntity};
pub use table::Written;
pub(crate) use table::{Backend, BatchKind, BatchOp, EntityBody, Operation, Payload, Response};

/// How a request may be repeated after an attempt failed; the retry loop of
/// a remote backend decides by it whether to resend and whether the call's
/// error is [ambiguous](crate::Error::is_ambiguous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// A read: repeating it changes nothing, and its failure leaves nothing
    /// behind.
    Read,
    /// A write that leaves the same state however often it is applied (an
    /// upsert): every retryable failure is retried, and a failed call whose
    /// attempt may have been applied is ambiguous.
    Idempotent,
    /// Not idempotent, but a repeat of an applied attempt is refused by the
    /// service (an insert meets 409, a conditional write 412, a delete 404):
    /// retried, and the call's error is ambiguous if an attempt may have been
    /// applied.
    Detected,
    /// A repeat of an applied attempt would apply twice unnoticed (a queue
    /// send): retried only after failures that prove nothing was applied;
    /// after an attempt whose outcome is unknown the call fails, ambiguous.
    Never,
}
