//! Eventually consistent transactions through a queue (design guide §3.3):
//! work that spans partitions, tables or services is put on a queue as one
//! message, and a [`Worker`] runs it step by step, deleting the message only
//! after every step succeeded. A worker that dies half-way leaves the message
//! to come back after its visibility timeout, and the next attempt runs the
//! steps again from the start, so every step is idempotent by construction.
//!
//! * An [`Operation`] is a serde type with a `KIND` and an `async fn run`
//!   written from the idempotent building blocks of [`StepContext`]:
//!   insert-or-replace, delete-if-exists, ETag-guarded replace and delete
//!   ([`Guarded`]), "already done" detection (a read that finds nothing), and
//!   blob put/delete with conditions. [`Archive`] is the guide's example.
//! * [`Eventual::enqueue`] sends it in one call as a versioned message,
//!   `{"v":1,"kind":"tablekit.archive","op":{...}}`.
//! * A [`Worker`] (built by [`WorkerBuilder`]) receives, runs, heartbeats,
//!   retries and moves what keeps failing to a poison queue.
//!
//! ```
//! use tablekit::{ETag, QueueServiceClient, TableEntity, TableServiceClient};
//! use tablekit_patterns::eventual::{Archive, Eventual, Worker};
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     name: String,
//!     #[tablekit(etag)]
//!     etag: Option<ETag>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let tables = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! let queues = QueueServiceClient::embedded();
//! let current = tables.table::<Employee>("Current")?;
//! let archive = tables.table::<Employee>("Archive")?;
//! current.create_table().await?;
//! archive.create_table().await?;
//! let jobs = queues.queue("archive-jobs")?;
//! jobs.create_queue().await?;
//!
//! let e = Employee { department: "Sales".into(), employee_id: 456, name: "Kim".into(), etag: None };
//! current.insert(&e).await?;
//!
//! // The client: one message ("#" cannot be in a key: employee #456 is 000456).
//! Eventual::new(jobs.clone())
//!     .enqueue(&Archive::<Employee>::new("Current", "Archive", ("Sales", "000456"))?)
//!     .await?;
//!
//! // The worker: read from Current, insert-or-replace into Archive, delete
//! // from Current under the ETag read, delete the message.
//! let poison = queues.queue("archive-jobs-poison")?;
//! poison.create_queue().await?;
//! let worker = Worker::builder(jobs.clone(), tables.clone())
//!     .operation::<Archive<Employee>>()
//!     .poison_queue(poison)
//!     .build()?;
//! let report = worker.drain().await?;
//! assert_eq!(report.succeeded, 1);
//! assert!(current.get(("Sales", "000456")).await?.is_none());
//! assert_eq!(archive.get(("Sales", "000456")).await?.map(|e| e.name), Some("Kim".into()));
//! assert_eq!(jobs.approximate_message_count().await?, 0);
//! # Ok(()) }
//! ```
//!
//! # What a reader sees between steps
//!
//! There is no isolation: a reader that looks at `Current` and `Archive`
//! between the insert into Archive and the delete from Current sees the
//! employee in both tables, and one that reads the message's effects before
//! the worker ran sees neither change. The tables become consistent when the
//! message is processed; if isolation matters, design the keys so that one
//! entity group transaction can do the work instead.
//!
//! # Delivery is at least once
//!
//! A message can run more than once: after a crash, after a failed step,
//! when a step outlives the visibility timeout and a second worker receives
//! the message while the first is still running, or when the final delete is
//! lost. So each step must leave the same state when repeated, which the
//! building blocks of [`StepContext`] do: insert-or-replace instead of insert,
//! delete-if-exists instead of delete, a read that finds nothing meaning "an
//! earlier attempt finished", and ETag-guarded writes that start again from
//! the read when someone else changed the entity ([`Guarded::Changed`]).
//! A message that ran to completion can still run again if its delete fails:
//! an operation must be harmless on a state it already produced.
//!
//! # Sizing the visibility timeout
//!
//! A received message is hidden for [`WorkerBuilder::visibility_timeout`]
//! (default 30 s). Make it longer than the slowest operation you expect (the
//! p99 of one run, requests and retries included), or a second worker will
//! run the message alongside the first (harmless, as the steps are
//! idempotent, but wasted work). While an operation runs the worker extends
//! the timeout every [`WorkerBuilder::heartbeat`] (default a third of it),
//! keeping the new pop receipt, so a long job stays hidden as long as its
//! worker is alive; after a crash the message comes back within one timeout.
//! A short timeout therefore means fast recovery and more heartbeats.
//!
//! # Failures and the poison queue
//!
//! A step that fails leaves the message on the queue: the worker writes the
//! error into the message (`"last_error"`) and hides it for
//! [`WorkerBuilder::retry_delay`]. When a message has been received
//! [`WorkerBuilder::max_dequeue_count`] times (default 5) and fails again, or
//! comes back more often than that because its workers kept dying, it is
//! copied to the poison queue with the last error ([`PoisonedMessage`]) and
//! then deleted from the main queue: in that order, so a crash in between
//! leaves a duplicate in the poison queue, never a lost message.
//!
//! The copy is whole for every message, up to the 64 KiB a queue message
//! holds. A poison entry is itself a message, holding the body escaped as a
//! JSON string beside the error, so a large body does not fit in it: the
//! worker then first writes the body to a row of the table
//! [`POISON_BODY_TABLE`] (or [`WorkerBuilder::poison_body_table`]; created
//! when first needed), keyed by the queue's name and the message id, and the
//! entry names that table and carries a preview. A crash after the row and
//! before the entry leaves the message on the main queue, to be poisoned
//! again (the same row, written again). [`PoisonedMessage::whole_body`]
//! reads the whole message either way, [`Eventual::requeue`] sends it again
//! once the cause is fixed, and [`PoisonedMessage::delete_kept_body`]
//! removes the row when the entry is dealt with. A message
//! that comes back because its last attempt stopped (its worker died) is
//! not run again; if its kind has a give-up step
//! ([`WorkerBuilder::on_give_up`]), that runs first, once, to release what
//! the operation held for a later attempt. A message
//! that is not an envelope at all (not JSON, no format version, a version 1
//! envelope that does not parse) goes to the poison queue at once: no
//! worker could ever run it. Transient errors of single requests
//! (throttling, 503, timeouts) are retried inside tablekit's retry policy and
//! count as a failure of the step only when those retries run out.
//!
//! # Messages from newer clients: unknown kinds and versions
//!
//! During a rolling deployment new clients send kinds (or a format version)
//! that the old workers still running do not know. Such a message is not
//! the old worker's to judge: it logs a `tracing::warn!`, leaves the message
//! exactly as it is, and hides it for [`WorkerBuilder::unknown_delay`]
//! (default: the retry delay) so that another worker, perhaps a new one,
//! receives it next ([`Report::deferred`] counts these). Only when the
//! message has been received `max_dequeue_count` times does a worker that
//! cannot run it move it to the poison queue, so old and new workers may
//! run side by side for about `unknown_delay × max_dequeue_count` before an
//! old one poisons new work. A queue that only ever has one version of
//! worker can ask for the strict behaviour with
//! [`WorkerBuilder::poison_unknown_at_once`].
//!
//! # Messages never expire
//!
//! [`Eventual`] sends every message with no expiry (the Queue service's
//! `messagettl=-1`; the service reports an expiration time of 9999-12-31,
//! which tablekit reads as [`SentMessage::expires_on`] `None`). The queue's
//! own default, seven days, would silently delete an operation that waited
//! out a worker outage of a week. A message therefore leaves the queue in
//! one of two ways only: a worker ran it to the end and deleted it, or a
//! worker moved it to the poison queue (whose messages never expire
//! either). [`Eventual::with_time_to_live`] sets an expiry for operations
//! that are worthless late; an expired operation is lost without a trace.
//!
//! # What is atomic
//!
//! Nothing across the steps: each building block of [`StepContext`] is one
//! request, atomic on its own (one entity, one blob); the message is the
//! only thing that ties them together. Enqueuing is one request: once
//! [`Eventual::enqueue`] returned, the operation will run (at least once) or
//! end in the poison queue (unless it was given a time to live and
//! expired). If it failed, the operation may still have been
//! queued (a send whose answer was lost); sending it again is safe, since a
//! message may run more than once anyway. An operation that must be atomic with
//! a table write of the caller's should be written so that the table write
//! itself is one of its steps, or so that running it when the caller's
//! write failed is harmless.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tablekit::{queue::SentMessage, QueueClient, Result, TableServiceClient};

use crate::error::refused;

mod archive;
mod context;
mod envelope;
mod poison;
mod worker;
pub use archive::Archive;
pub use context::{Event, Guarded, StepContext};
use envelope::envelope_bytes;
pub use poison::{PoisonedMessage, POISON_BODY_TABLE};
pub use worker::{Report, Worker, WorkerBuilder};

/// The version of the message format this module writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The `kind` of [`Archive`] messages.
pub const ARCHIVE_KIND: &str = "tablekit.archive";

/// How many times [`Archive`] reads again after its guarded delete found the
/// entity changed since the read, before it gives up (and the message is
/// retried later).
pub const MAX_REREADS: usize = 16;

/// What an operation's steps fail with: any error, tablekit's or yours. Its
/// `Display` text is what the worker records as the message's last error.
pub type OpError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result of an operation or one of its steps.
pub type OpResult<T = ()> = std::result::Result<T, OpError>;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A multi-step operation that a [`Worker`] runs at least once.
///
/// `run` is called again from the start after any failure or crash, possibly
/// by two workers at the same time, so write it from the idempotent building
/// blocks of [`StepContext`] (see the [module docs](self)). The value itself
/// travels in the message as JSON (`serde`); change its shape compatibly, or
/// give the new shape a new `KIND`.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tablekit::{DynamicEntity, QueueServiceClient, TableServiceClient};
/// use tablekit_patterns::eventual::{Eventual, OpResult, Operation, StepContext, Worker};
///
/// /// Moves a customer's row to another partition: copy, then delete.
/// #[derive(Serialize, Deserialize)]
/// struct MoveCustomer { table: String, from: String, to: String, id: String }
///
/// impl Operation for MoveCustomer {
///     const KIND: &'static str = "move-customer";
///     async fn run(&self, ctx: &StepContext) -> OpResult {
///         let table = ctx.tables().table::<DynamicEntity>(&self.table)?;
///         let Some((mut row, _)) = ctx.read(&table, (&*self.from, &*self.id)).await? else {
///             return Ok(()); // gone from the source: an earlier attempt finished
///         };
///         row.partition_key = self.to.clone();
///         ctx.insert_or_replace(&table, &row).await?;
///         ctx.delete_if_exists(&table, (&*self.from, &*self.id)).await?;
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> OpResult {
/// let tables = TableServiceClient::embedded();
/// let queues = QueueServiceClient::embedded();
/// let (queue, poison) = (queues.queue("moves")?, queues.queue("moves-poison")?);
/// # queue.create_queue().await?;
/// # poison.create_queue().await?;
/// let customers = tables.table::<DynamicEntity>("Customers")?;
/// customers.create_table().await?;
/// customers.insert(&DynamicEntity::new("Lisbon", "c1").with("Name", "Ana")).await?;
///
/// let op = MoveCustomer { table: "Customers".into(), from: "Lisbon".into(), to: "Porto".into(), id: "c1".into() };
/// Eventual::new(queue.clone()).enqueue(&op).await?;
/// let worker = Worker::builder(queue, tables).operation::<MoveCustomer>().poison_queue(poison);
/// worker.build()?.drain().await?;
/// assert!(customers.get(("Porto", "c1")).await?.is_some());
/// assert!(customers.get(("Lisbon", "c1")).await?.is_none());
/// # Ok(()) }
/// ```
pub trait Operation: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The message's `kind`: what a worker dispatches on. Unique per queue.
    const KIND: &'static str;

    /// Runs the steps, all of them, from the start.
    fn run(&self, ctx: &StepContext) -> impl Future<Output = OpResult> + Send;
}

/// The enqueueing side: puts operations on a queue, one message each.
///
/// Each message is checked (size, encoding) before it is sent; an operation
/// whose JSON is over the queue's 64 KiB (as the queue client encodes it: the
/// text as is by default, 48 KiB of JSON with `MessageEncoding::Base64`) is
/// refused before any request. Carry keys, not large data.
///
/// Messages never expire by default (the Queue service's `messagettl=-1`;
/// its own default would delete a message after 7 days): an operation
/// waits out a worker outage of any length, and leaves the queue only when
/// a worker ran it or moved it to the poison queue.
/// [`with_time_to_live`](Eventual::with_time_to_live) gives them an expiry
/// instead, for work that is worthless late.
#[derive(Debug, Clone)]
pub struct Eventual {
    queue: QueueClient,
    time_to_live: Option<Duration>,
}

impl Eventual {
    /// Enqueues to `queue` (create it first), messages that never expire.
    pub fn new(queue: QueueClient) -> Self {
        Eventual {
            queue,
            time_to_live: None,
        }
    }

    /// Sends messages that the queue deletes `ttl` after they were sent if no
    /// worker has deleted them by then (at least 1 s; checked when sending).
    ///
    /// **An expired operation is lost without a trace**: it never runs, it is
    /// not moved to the poison queue, and no error is reported anywhere, so
    /// whatever it was to keep consistent stays inconsistent (an archive
    /// never done, an index entry never written). Use it only for operations
    /// that are harmless to drop once late (a cache refresh, a notification),
    /// and size it well over the longest worker outage you would recover from.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tablekit::QueueServiceClient;
    /// # use tablekit_patterns::eventual::Eventual;
    /// let jobs = QueueServiceClient::embedded().queue("refresh-jobs").unwrap();
    /// let refreshes = Eventual::new(jobs).with_time_to_live(Duration::from_secs(3600));
    /// assert_eq!(refreshes.time_to_live(), Some(Duration::from_secs(3600)));
    /// ```
    pub fn with_time_to_live(mut self, ttl: Duration) -> Self {
        self.time_to_live = Some(ttl);
        self
    }

    /// The messages' time to live; `None`: they never expire (the default).
    pub fn time_to_live(&self) -> Option<Duration> {
        self.time_to_live
    }

    /// The queue the messages go to.
    pub fn queue(&self) -> &QueueClient {
        &self.queue
    }

    /// Sends `op` as one message, `{"v":1,"kind":O::KIND,"op":...}`.
    pub async fn enqueue<O: Operation>(&self, op: &O) -> Result<SentMessage> {
        self.enqueue_kind(O::KIND, op).await
    }

    /// Sends `body` as the operation of kind `kind`: the form for handlers
    /// registered with [`WorkerBuilder::handle`].
    pub async fn enqueue_kind<M: Serialize + ?Sized>(
        &self,
        kind: &str,
        body: &M,
    ) -> Result<SentMessage> {
        crate::trace::traced_storage("Eventual", "enqueue", async move {
            if kind.is_empty() {
                return Err(refused("eventual", "an operation kind must not be empty"));
            }
            self.send(envelope_bytes(kind, body)?).await
        })
        .await
    }

    /// Sends a poisoned message again, once its cause is fixed: its
    /// [whole body](PoisonedMessage::whole_body), read with `tables` (the
    /// Table service of the worker that poisoned it) when the entry does not
    /// carry all of it, as one new message (with its last error, which the
    /// next failure replaces). Then delete its entry from the poison queue,
    /// and after that its [kept body](PoisonedMessage::delete_kept_body):
    /// a crash in between leaves an entry of a message already sent again
    /// (delivery is at least once anyway), never a lost one.
    pub async fn requeue(
        &self,
        poisoned: &PoisonedMessage,
        tables: &TableServiceClient,
    ) -> Result<SentMessage> {
        crate::trace::traced_storage("Eventual", "requeue", async move {
            self.send(poisoned.whole_body(tables).await?).await
        })
        .await
    }

    async fn send(&self, body: Vec<u8>) -> Result<SentMessage> {
        let send = self.queue.send(body);
        match self.time_to_live {
            None => send.never_expire().await,
            Some(ttl) => send.time_to_live(ttl).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::envelope::{read_envelope, Unreadable};
    use super::worker::cut;
    use super::*;
    use tablekit::DynamicEntity;

    #[test]
    fn an_enqueued_envelope_reads_back_with_its_kind_and_operation() {
        let bytes = envelope_bytes("tablekit.archive", &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"v":1,"kind":"tablekit.archive","op":{"a":1}}"#
        );
        let env = read_envelope(&bytes).unwrap();
        assert_eq!(env.kind, "tablekit.archive");
        assert_eq!(env.op, serde_json::json!({"a": 1}));
        assert_eq!(env.last_error, None);
    }

    #[test]
    fn a_newer_version_is_named_and_kept_apart_from_malformed_messages() {
        let Err(Unreadable::Newer { why, kind }) =
            read_envelope(br#"{"v":2,"kind":"x","op":{},"extra":true}"#)
        else {
            panic!("version 2 is a newer client's");
        };
        assert!(why.contains("version 2 is newer"), "{why}");
        assert!(why.contains("version 1"), "{why}");
        assert_eq!(kind.as_deref(), Some("x"));
    }

    #[test]
    fn a_message_without_a_version_or_not_json_is_malformed() {
        let malformed = |body: &[u8]| match read_envelope(body) {
            Err(Unreadable::Malformed(why)) => why,
            other => panic!("{other:?}"),
        };
        let err = malformed(br#"{"kind":"x","op":{}}"#);
        assert!(err.contains("no format version"), "{err}");
        let err = malformed(br#"{"v":0,"kind":"x","op":{}}"#);
        assert!(err.contains("no format version"), "{err}");
        let err = malformed(b"archive 456");
        assert!(err.contains("not JSON"), "{err}");
        let err = malformed(br#"{"v":1,"op":{}}"#);
        assert!(err.contains("malformed"), "{err}");
    }

    #[test]
    fn the_last_error_travels_in_the_envelope() {
        let env = read_envelope(br#"{"v":1,"kind":"k","op":null,"last_error":"boom"}"#).unwrap();
        assert_eq!(env.last_error.as_deref(), Some("boom"));
    }

    #[test]
    fn cut_keeps_whole_characters() {
        assert_eq!(cut("abc", 5), ("abc", false));
        assert_eq!(cut("aé", 2), ("a", true));
        assert_eq!(cut("abcdef", 3), ("abc", true));
    }

    #[test]
    fn an_archive_operation_serialises_as_its_table_names_and_key() {
        let op = Archive::<DynamicEntity>::new("Current", "Archive", ("Sales", "000456")).unwrap();
        let json = serde_json::to_string(&op).unwrap();
        assert_eq!(
            json,
            r#"{"from":"Current","to":"Archive","partition_key":"Sales","row_key":"000456"}"#
        );
        let back: Archive<DynamicEntity> = serde_json::from_str(&json).unwrap();
        assert_eq!(back.key(), op.key());
    }
}
