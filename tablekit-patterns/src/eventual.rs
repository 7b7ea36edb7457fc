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
//! leaves a duplicate in the poison queue, never a lost message. A message
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

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tablekit::{
    BlobClient, BlobServiceClient, DynamicEntity, ETag, EntityKey, Error, ErrorCode, IfMatch,
    QueueClient, QueueMessage, RawEntity, Result, SentMessage, TableClient, TableEntity,
    TableServiceClient, UpdateMode,
};
use tracing::Instrument;

use crate::error::refused;

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

// ---------------------------------------------------------------------------
// The message format.

/// The message as it travels: `{"v":1,"kind":"...","op":{...}}`, plus the
/// last error once an attempt failed.
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    v: u32,
    kind: String,
    op: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
}

/// Why this worker cannot run a message.
#[derive(Debug)]
enum Unreadable {
    /// No worker ever could (not JSON, no version, a malformed version 1
    /// envelope): it goes to the poison queue at once.
    Malformed(String),
    /// A newer client's format version: a newer worker may read it, so it
    /// is left on the queue for one (see [`WorkerBuilder::unknown_delay`]).
    Newer {
        why: String,
        /// Its `kind`, if the newer format still has one where this has.
        kind: Option<String>,
    },
}

impl Unreadable {
    fn why(&self) -> &str {
        match self {
            Unreadable::Malformed(why) | Unreadable::Newer { why, .. } => why,
        }
    }
}

fn read_envelope(body: &[u8]) -> std::result::Result<Envelope, Unreadable> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        Unreadable::Malformed(format!(
            "the message is not JSON ({e}); expected {{\"v\":1,\"kind\":..,\"op\":..}}"
        ))
    })?;
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(FORMAT_VERSION) => {}
        Some(v) if v > u64::from(FORMAT_VERSION) => {
            return Err(Unreadable::Newer {
                why: format!(
                "message format version {v} is newer than this worker's version {FORMAT_VERSION}"
            ),
                kind: value
                    .get("kind")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned),
            })
        }
        _ => {
            return Err(Unreadable::Malformed(format!(
                "the message has no format version \"v\" (a number from 1; this worker \
                 reads {FORMAT_VERSION}): it was not written by Eventual::enqueue"
            )))
        }
    }
    serde_json::from_value(value)
        .map_err(|e| Unreadable::Malformed(format!("a malformed version 1 message: {e}")))
}

/// The message as written: the operation serialised in its own field order.
#[derive(Serialize)]
struct EnvelopeOut<'a, M: ?Sized> {
    v: u32,
    kind: &'a str,
    op: &'a M,
}

fn envelope_bytes<M: Serialize + ?Sized>(kind: &str, op: &M) -> Result<Vec<u8>> {
    let env = EnvelopeOut {
        v: FORMAT_VERSION,
        kind,
        op,
    };
    serde_json::to_vec(&env).map_err(|e| {
        refused(
            "eventual",
            format!("cannot write the {kind} operation as JSON: {e}"),
        )
    })
}

/// The enqueueing side: puts operations on a queue, one message each.
///
/// Each message is checked (size, encoding) before it is sent; an operation
/// whose JSON is over the queue's 64 KiB (48 KiB of JSON after Base64) is
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
        if kind.is_empty() {
            return Err(refused("eventual", "an operation kind must not be empty"));
        }
        let send = self.queue.send(envelope_bytes(kind, body)?)?;
        match self.time_to_live {
            None => send.never_expire().await,
            Some(ttl) => send.time_to_live(ttl).await,
        }
    }
}

/// A message the worker gave up on, as it is stored in the poison queue
/// (JSON). Read it with `poison.receive().json::<PoisonedMessage>()`; `body`
/// is the original message, which can be sent again once the cause is fixed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoisonedMessage {
    /// The queue it came from.
    pub queue: String,
    /// Its id in that queue.
    pub message_id: String,
    /// How many times it had been received.
    pub dequeue_count: u32,
    /// The last error, or why the worker could not run it.
    pub error: String,
    /// The original message text (UTF-8, lossily), possibly truncated.
    pub body: String,
    /// Whether `body` was cut short to fit the poison queue's message size.
    pub body_truncated: bool,
}

// ---------------------------------------------------------------------------
// Steps.

/// A step boundary or heartbeat, as seen by a [`WorkerBuilder::step_hook`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// A step has just completed.
    Step {
        /// The message being run.
        message_id: String,
        /// Its dequeue count (1 on the first attempt).
        dequeue_count: u32,
        /// The step's number within this attempt: 1 after the first.
        step: usize,
        /// What the step did, for example `"insert_or_replace Archive"`.
        name: String,
    },
    /// The worker is about to extend the message's visibility. A hook error
    /// skips this heartbeat (as if it were lost).
    Heartbeat {
        /// The message being run.
        message_id: String,
    },
}

type Hook = Arc<dyn Fn(Event) -> BoxFuture<OpResult> + Send + Sync>;

/// The outcome of an ETag-guarded write or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Guarded {
    /// Applied; the new ETag for a write, `None` for a delete.
    Done(Option<ETag>),
    /// Someone changed it since the ETag was read (412): read again and redo.
    Changed,
    /// It is gone (404): for a delete, someone (an earlier attempt, another
    /// worker) already did it.
    Gone,
}

/// What a step runs with: the services, the message's identity, and the
/// idempotent building blocks. Each building block, once it succeeded, marks
/// a step boundary (the [`WorkerBuilder::step_hook`] sees it); call
/// [`step`](StepContext::step) after steps of your own.
#[derive(Clone)]
pub struct StepContext {
    inner: Arc<ContextInner>,
}

struct ContextInner {
    tables: TableServiceClient,
    blobs: Option<BlobServiceClient>,
    message_id: String,
    dequeue_count: u32,
    hook: Option<Hook>,
    steps: AtomicUsize,
}

impl fmt::Debug for StepContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepContext")
            .field("message_id", &self.inner.message_id)
            .field("dequeue_count", &self.inner.dequeue_count)
            .field("steps", &self.inner.steps.load(Ordering::Relaxed))
            .finish()
    }
}

/// A blob write or delete under an ETag answered 412: Azurite (and, by HTTP's
/// rules, the service) answers so also when the blob is missing, where the
/// embedded store says 404. One more request tells which it is.
async fn changed_or_gone(blob: &BlobClient) -> Result<Guarded> {
    Ok(if blob.exists().await? {
        Guarded::Changed
    } else {
        Guarded::Gone
    })
}

fn is_missing_entity(e: &Error) -> bool {
    e.is_not_found() && e.code() != Some(&ErrorCode::TableNotFound)
}

impl StepContext {
    /// A context outside any worker, for running an operation's steps
    /// directly (in a test, or synchronously as a fallback): no message, no hook.
    pub fn detached(tables: TableServiceClient, blobs: Option<BlobServiceClient>) -> Self {
        StepContext {
            inner: Arc::new(ContextInner {
                tables,
                blobs,
                message_id: String::new(),
                dequeue_count: 0,
                hook: None,
                steps: AtomicUsize::new(0),
            }),
        }
    }

    /// The Table service the worker was built with.
    pub fn tables(&self) -> &TableServiceClient {
        &self.inner.tables
    }

    /// The Blob service the worker was built with; an error if it has none
    /// ([`WorkerBuilder::blobs`]).
    pub fn blobs(&self) -> OpResult<&BlobServiceClient> {
        self.inner.blobs.as_ref().ok_or_else(|| {
            "this worker has no Blob service: add one with WorkerBuilder::blobs".into()
        })
    }

    /// The id of the message being run (empty for a detached context).
    pub fn message_id(&self) -> &str {
        &self.inner.message_id
    }

    /// How many times the message has been received, this time included: 1
    /// on the first attempt.
    pub fn dequeue_count(&self) -> u32 {
        self.inner.dequeue_count
    }

    /// Marks a step boundary named `name`: the step hook runs here, and a hook
    /// error stops the operation as a failure of this step would.
    pub async fn step(&self, name: &str) -> OpResult {
        let step = self.inner.steps.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::debug!(message_id = %self.inner.message_id, step, name, "step done");
        match &self.inner.hook {
            Some(hook) => {
                hook(Event::Step {
                    message_id: self.inner.message_id.clone(),
                    dequeue_count: self.inner.dequeue_count,
                    step,
                    name: name.to_owned(),
                })
                .await
            }
            None => Ok(()),
        }
    }

    /// Reads an entity with its ETag (whether or not `T` keeps one); `None`
    /// if there is none, which in a retried operation usually means an
    /// earlier attempt already moved or deleted it. Step `"read <table>"`.
    pub async fn read<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        key: impl Into<EntityKey>,
    ) -> OpResult<Option<(T, ETag)>> {
        let found = table.with_type::<DynamicEntity>().get(key).await?;
        let found = match found {
            Some(d) => {
                let etag = d.etag.clone().ok_or("the service returned no ETag")?;
                Some((T::decode(&RawEntity::from_dynamic(&d))?, etag))
            }
            None => None,
        };
        self.step(&format!("read {}", table.name())).await?;
        Ok(found)
    }

    /// Inserts the entity or replaces whatever is stored under its key
    /// (no If-Match): the same state however often it runs. Returns the new
    /// ETag. Step `"insert_or_replace <table>"`.
    pub async fn insert_or_replace<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        entity: &T,
    ) -> OpResult<ETag> {
        let written = table.upsert(entity, UpdateMode::Replace).await?;
        self.step(&format!("insert_or_replace {}", table.name()))
            .await?;
        Ok(written.etag().clone())
    }

    /// Deletes the entity if it exists (`If-Match: *`, 404 is success);
    /// returns whether it was there. Step `"delete_if_exists <table>"`.
    pub async fn delete_if_exists<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        key: impl Into<EntityKey>,
    ) -> OpResult<bool> {
        let existed = table.delete_if_exists(key, IfMatch::Any).await?;
        self.step(&format!("delete_if_exists {}", table.name()))
            .await?;
        Ok(existed)
    }

    /// Replaces the entity only if it is unchanged since `etag` was read.
    /// Step `"replace_if_unchanged <table>"` (also when the outcome is
    /// [`Guarded::Changed`] or [`Guarded::Gone`]).
    pub async fn replace_if_unchanged<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        entity: &T,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match table
            .update(entity, UpdateMode::Replace, IfMatch::ETag(etag.clone()))
            .await
        {
            Ok(w) => Guarded::Done(Some(w.etag().clone())),
            Err(e) if e.is_precondition_failed() => Guarded::Changed,
            Err(e) if is_missing_entity(&e) => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("replace_if_unchanged {}", table.name()))
            .await?;
        Ok(outcome)
    }

    /// Deletes the entity only if it is unchanged since `etag` was read:
    /// [`Guarded::Changed`] means read again and redo, [`Guarded::Gone`] that
    /// it is already deleted. Step `"delete_if_unchanged <table>"`.
    pub async fn delete_if_unchanged<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        key: impl Into<EntityKey>,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match table.delete(key, IfMatch::ETag(etag.clone())).await {
            Ok(()) => Guarded::Done(None),
            Err(e) if e.is_precondition_failed() => Guarded::Changed,
            Err(e) if is_missing_entity(&e) => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("delete_if_unchanged {}", table.name()))
            .await?;
        Ok(outcome)
    }

    /// Uploads the blob, replacing any. Step `"put_blob <name>"`.
    pub async fn put_blob(
        &self,
        blob: &BlobClient,
        body: impl Into<bytes::Bytes>,
    ) -> OpResult<ETag> {
        let written = blob.upload(body).await?;
        self.step(&format!("put_blob {}", blob.name())).await?;
        Ok(written.etag().clone())
    }

    /// Uploads the blob only if there is none; returns `false` (and writes
    /// nothing) if it exists, for example because an earlier attempt wrote it.
    /// Step `"put_blob_if_not_exists <name>"`.
    pub async fn put_blob_if_not_exists(
        &self,
        blob: &BlobClient,
        body: impl Into<bytes::Bytes>,
    ) -> OpResult<bool> {
        let written = match blob.upload(body).if_not_exists().await {
            Ok(_) => true,
            Err(e) if e.code() == Some(&ErrorCode::BlobAlreadyExists) || e.is_conflict() => false,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("put_blob_if_not_exists {}", blob.name()))
            .await?;
        Ok(written)
    }

    /// Replaces the blob only if it is unchanged since `etag`
    /// ([`Guarded::Gone`] if it no longer exists).
    /// Step `"put_blob_if_unchanged <name>"`.
    pub async fn put_blob_if_unchanged(
        &self,
        blob: &BlobClient,
        body: impl Into<bytes::Bytes>,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match blob.upload(body).if_match(etag.clone()).await {
            Ok(w) => Guarded::Done(Some(w.etag().clone())),
            Err(e) if e.is_precondition_failed() => changed_or_gone(blob).await?,
            Err(e) if e.is_not_found() => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("put_blob_if_unchanged {}", blob.name()))
            .await?;
        Ok(outcome)
    }

    /// Deletes the blob if it exists; returns whether it did.
    /// Step `"delete_blob_if_exists <name>"`.
    pub async fn delete_blob_if_exists(&self, blob: &BlobClient) -> OpResult<bool> {
        let existed = blob.delete_if_exists().await?;
        self.step(&format!("delete_blob_if_exists {}", blob.name()))
            .await?;
        Ok(existed)
    }

    /// Deletes the blob only if it is unchanged since `etag`
    /// ([`Guarded::Gone`] if an earlier attempt deleted it).
    /// Step `"delete_blob_if_unchanged <name>"`.
    pub async fn delete_blob_if_unchanged(
        &self,
        blob: &BlobClient,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match blob.delete(Some(etag.clone())).await {
            Ok(()) => Guarded::Done(None),
            Err(e) if e.is_precondition_failed() => changed_or_gone(blob).await?,
            Err(e) if e.code() == Some(&ErrorCode::BlobNotFound) => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("delete_blob_if_unchanged {}", blob.name()))
            .await?;
        Ok(outcome)
    }
}

// ---------------------------------------------------------------------------
// The built-in operation.

/// The guide's archive of employee #456: move one entity of type `T` from
/// table `from` (`Current`) to table `to` (`Archive`).
///
/// | step | request | on a retry |
/// |---|---|---|
/// | 1 | read from `from`, with the ETag | nothing there: an earlier attempt finished; done |
/// | 2 | insert-or-replace into `to` | the same copy again |
/// | 3 | delete from `from` if unchanged since step 1 | 412: someone changed it, start again at step 1 (so the archived copy is never stale); 404: another attempt deleted it; done |
///
/// Then the worker deletes the message. The entity is read and written as
/// `T`: properties `T` does not declare are not carried over, and an entity
/// that does not decode as `T` fails the operation (and, after the retries,
/// goes to the poison queue). Use `Archive<DynamicEntity>` for a copy of
/// every property.
///
/// The kind is [`ARCHIVE_KIND`] whatever `T` is: one worker runs archives of
/// one entity type.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub struct Archive<T> {
    from: String,
    to: String,
    partition_key: String,
    row_key: String,
    #[serde(skip)]
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Archive<T> {
    fn clone(&self) -> Self {
        Archive {
            from: self.from.clone(),
            to: self.to.clone(),
            partition_key: self.partition_key.clone(),
            row_key: self.row_key.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Archive<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Archive")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("partition_key", &self.partition_key)
            .field("row_key", &self.row_key)
            .finish()
    }
}

impl<T: TableEntity> Archive<T> {
    /// Archives the entity `key` from table `from` to table `to`. The names
    /// and the key are checked here, before any request.
    ///
    /// ```
    /// use tablekit::DynamicEntity;
    /// use tablekit_patterns::eventual::Archive;
    ///
    /// let op = Archive::<DynamicEntity>::new("Current", "Archive", ("Sales", "000456")).unwrap();
    /// assert_eq!(op.key(), tablekit::EntityKey::new("Sales", "000456"));
    /// assert!(Archive::<DynamicEntity>::new("Current", "Current", ("Sales", "1")).unwrap_err().is_invalid_input());
    /// assert!(Archive::<DynamicEntity>::new("Cur rent", "Archive", ("Sales", "1")).unwrap_err().is_invalid_input());
    /// assert!(Archive::<DynamicEntity>::new("Current", "Archive", ("Sales", "#456")).unwrap_err().is_invalid_input());
    /// ```
    pub fn new(from: &str, to: &str, key: impl Into<EntityKey>) -> Result<Self> {
        tablekit::validate::table_name(from)?;
        tablekit::validate::table_name(to)?;
        if from.eq_ignore_ascii_case(to) {
            return Err(refused(
                "eventual",
                format!("an archive from table {from} into itself would delete the entity"),
            ));
        }
        let key = key.into();
        key.validate()?;
        Ok(Archive {
            from: from.to_owned(),
            to: to.to_owned(),
            partition_key: key.partition_key,
            row_key: key.row_key,
            _t: PhantomData,
        })
    }

    /// The key of the entity it archives.
    pub fn key(&self) -> EntityKey {
        EntityKey::new(&self.partition_key, &self.row_key)
    }

    /// The table it archives from.
    pub fn from_table(&self) -> &str {
        &self.from
    }

    /// The table it archives to.
    pub fn to_table(&self) -> &str {
        &self.to
    }
}

impl<T: TableEntity + Send + Sync + 'static> Operation for Archive<T> {
    const KIND: &'static str = ARCHIVE_KIND;

    async fn run(&self, ctx: &StepContext) -> OpResult {
        // A message is input from outside: check it as `new` does.
        Archive::<T>::new(&self.from, &self.to, self.key())?;
        let current = ctx.tables().table::<T>(&self.from)?;
        let archive = ctx.tables().table::<T>(&self.to)?;
        for _ in 0..MAX_REREADS {
            let Some((entity, etag)) = ctx.read(&current, self.key()).await? else {
                return Ok(()); // already archived by an earlier attempt
            };
            ctx.insert_or_replace(&archive, &entity).await?;
            match ctx.delete_if_unchanged(&current, self.key(), &etag).await? {
                Guarded::Done(_) | Guarded::Gone => return Ok(()),
                Guarded::Changed => continue, // archive the newer version instead
            }
        }
        Err(format!(
            "{} changed {MAX_REREADS} times while being archived; will retry later",
            self.key()
        )
        .into())
    }
}

// ---------------------------------------------------------------------------
// The worker.

type Handler = Box<dyn Fn(serde_json::Value, StepContext) -> BoxFuture<OpResult> + Send + Sync>;

/// What a worker did: counts of messages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Run to completion and deleted.
    pub succeeded: u64,
    /// Failed and left on the queue for another attempt.
    pub failed: u64,
    /// Moved to the poison queue.
    pub poisoned: u64,
    /// Not run because this worker does not know their kind or format
    /// version (a newer client's), and left on the queue, hidden for the
    /// [unknown delay](WorkerBuilder::unknown_delay), for a worker that does.
    pub deferred: u64,
}

impl Report {
    /// How many messages it handled in all.
    pub fn total(&self) -> u64 {
        self.succeeded + self.failed + self.poisoned + self.deferred
    }

    fn add(&mut self, other: Report) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.poisoned += other.poisoned;
        self.deferred += other.deferred;
    }
}

/// Options and operations of a [`Worker`]; see [`Worker::builder`].
#[must_use = "a worker is made by build()"]
pub struct WorkerBuilder {
    queue: QueueClient,
    poison: Option<QueueClient>,
    tables: TableServiceClient,
    blobs: Option<BlobServiceClient>,
    handlers: HashMap<String, Handler>,
    duplicate_kind: Option<String>,
    options: Options,
    hook: Option<Hook>,
}

#[derive(Debug, Clone)]
struct Options {
    concurrency: usize,
    visibility_timeout: Duration,
    heartbeat: Option<Duration>,
    retry_delay: Option<Duration>,
    unknown_delay: Option<Duration>,
    poison_unknown_at_once: bool,
    max_dequeue_count: u32,
    poll_min: Duration,
    poll_max: Duration,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&String> = self.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("WorkerBuilder")
            .field("queue", &self.queue.name())
            .field("poison", &self.poison.as_ref().map(QueueClient::name))
            .field("kinds", &kinds)
            .field("options", &self.options)
            .finish()
    }
}

impl WorkerBuilder {
    /// Runs up to `n` messages at once (default 1; 1 to 1,024). They run
    /// concurrently on the worker's task, not in parallel threads: the steps
    /// wait on requests.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.options.concurrency = n;
        self
    }

    /// Hides a received message for this long (default 30 s; 1 s to 7 days),
    /// renewed by the heartbeat while it runs. See "Sizing the visibility
    /// timeout" in the [module docs](self).
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.options.visibility_timeout = timeout;
        self
    }

    /// Extends a running message's visibility this often (default a third of
    /// the visibility timeout; must be shorter than it).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.options.heartbeat = Some(every);
        self
    }

    /// How long a failed message stays hidden before its next attempt
    /// (default: the visibility timeout, as after a crash).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.options.retry_delay = Some(delay);
        self
    }

    /// How long a message this worker cannot run because it does not know
    /// its kind or its format version (a newer client's, during a rolling
    /// deployment) is hidden before a worker may receive it again (default:
    /// the [retry delay](Self::retry_delay), at least 1 s; 1 s to 7 days). Each time, the
    /// worker logs a `tracing::warn!` and leaves the message as it is; once
    /// it has been received [`max_dequeue_count`](Self::max_dequeue_count)
    /// times it goes to the poison queue. So `unknown_delay` times the
    /// dequeue limit is how long old and new workers may run side by side
    /// before an old one poisons what only the new ones can run.
    pub fn unknown_delay(mut self, delay: Duration) -> Self {
        self.options.unknown_delay = Some(delay);
        self
    }

    /// Moves a message whose kind or format version this worker does not
    /// know to the poison queue on its first receive, instead of leaving it
    /// for another worker (see [`unknown_delay`](Self::unknown_delay)): for
    /// a queue that only ever has one version of workers. A message that is
    /// not an envelope at all (not JSON, no version) goes there at once
    /// either way.
    pub fn poison_unknown_at_once(mut self) -> Self {
        self.options.poison_unknown_at_once = true;
        self
    }

    /// A message received this many times that fails again (default 5), or
    /// received more often than this, goes to the poison queue.
    pub fn max_dequeue_count(mut self, n: u32) -> Self {
        self.options.max_dequeue_count = n;
        self
    }

    /// When the queue is empty, [`Worker::run`] polls again after `min`,
    /// doubling up to `max` while it stays empty (default 100 ms to 10 s).
    pub fn poll_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.options.poll_min = min;
        self.options.poll_max = max;
        self
    }

    /// The poison queue (required; for example the main queue's name with
    /// `-poison` appended). Create it before the worker runs.
    pub fn poison_queue(mut self, queue: QueueClient) -> Self {
        self.poison = Some(queue);
        self
    }

    /// The Blob service the steps reach through [`StepContext::blobs`].
    pub fn blobs(mut self, blobs: BlobServiceClient) -> Self {
        self.blobs = Some(blobs);
        self
    }

    /// Runs messages of kind `O::KIND` as `O`.
    pub fn operation<O: Operation>(self) -> Self {
        self.handle(O::KIND, |op: O, ctx: StepContext| async move {
            op.run(&ctx).await
        })
    }

    /// Runs messages of kind `kind` with `handler`, given the message's
    /// operation read as `M`: the form for operations that need state the
    /// message does not carry (clients, key functions), such as
    /// [`inter_index`](crate::inter_index). An operation that does not read
    /// as `M` fails (and is retried, then poisoned).
    pub fn handle<M, F, Fut>(mut self, kind: &str, handler: F) -> Self
    where
        M: DeserializeOwned + Send + 'static,
        F: Fn(M, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = OpResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let kind_owned = kind.to_owned();
        let erased: Handler = Box::new(move |value, ctx| {
            let handler = handler.clone();
            let kind = kind_owned.clone();
            Box::pin(async move {
                let op: M = serde_json::from_value(value)
                    .map_err(|e| format!("the {kind} operation does not read: {e}"))?;
                handler(op, ctx).await
            })
        });
        if self.handlers.insert(kind.to_owned(), erased).is_some() {
            self.duplicate_kind.get_or_insert_with(|| kind.to_owned());
        }
        self
    }

    /// Calls `hook` at every step boundary (after each building block of
    /// [`StepContext`] and each [`StepContext::step`]) and before every
    /// heartbeat. An error it returns fails the step; a hook that never
    /// returns holds the worker there (until it is aborted): the crash tests
    /// stop workers at each boundary in turn this way.
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = OpResult> + Send + 'static,
    {
        self.hook = Some(Arc::new(move |e| Box::pin(hook(e))));
        self
    }

    /// Checks the options (before any request) and makes the worker.
    pub fn build(self) -> Result<Worker> {
        let o = &self.options;
        if let Some(kind) = &self.duplicate_kind {
            return Err(refused(
                "eventual",
                format!("two handlers for the kind {kind:?}"),
            ));
        }
        if self.handlers.is_empty() {
            return Err(refused(
                "eventual",
                "a worker needs at least one operation (WorkerBuilder::operation or handle)",
            ));
        }
        if !(1..=1024).contains(&o.concurrency) {
            return Err(refused(
                "eventual",
                format!("a concurrency of {} is outside 1..=1024", o.concurrency),
            ));
        }
        if o.visibility_timeout < Duration::from_secs(1)
            || o.visibility_timeout > tablekit::queue::MAX_VISIBILITY
        {
            return Err(refused(
                "eventual",
                format!(
                    "a visibility timeout of {:?} is outside the service's 1 s to 7 days",
                    o.visibility_timeout
                ),
            ));
        }
        let heartbeat = o.heartbeat.unwrap_or(o.visibility_timeout / 3);
        if heartbeat.is_zero() || heartbeat >= o.visibility_timeout {
            return Err(refused("eventual", format!(
                "a heartbeat every {heartbeat:?} does not renew a visibility timeout of {:?} in time",
                o.visibility_timeout
            )));
        }
        let retry_delay = o.retry_delay.unwrap_or(o.visibility_timeout);
        if retry_delay > tablekit::queue::MAX_VISIBILITY {
            return Err(refused(
                "eventual",
                format!("a retry delay of {retry_delay:?} is over the service's 7 days"),
            ));
        }
        let unknown_delay = o
            .unknown_delay
            .unwrap_or(retry_delay.max(Duration::from_secs(1)));
        if unknown_delay < Duration::from_secs(1) || unknown_delay > tablekit::queue::MAX_VISIBILITY
        {
            return Err(refused(
                "eventual",
                format!(
                    "an unknown-message delay of {unknown_delay:?} is outside 1 s to the service's 7 days"
                ),
            ));
        }
        if o.max_dequeue_count == 0 {
            return Err(refused(
                "eventual",
                "a max dequeue count of 0 would poison every message",
            ));
        }
        if o.poll_min.is_zero() || o.poll_min > o.poll_max {
            return Err(refused(
                "eventual",
                format!(
                    "a poll backoff from {:?} to {:?} is not a growing, non-zero range",
                    o.poll_min, o.poll_max
                ),
            ));
        }
        let Some(poison) = self.poison else {
            return Err(refused(
                "eventual",
                format!(
                "name a poison queue for {} (WorkerBuilder::poison_queue), for example {}-poison",
                self.queue.name(),
                self.queue.name()
            ),
            ));
        };
        if poison.name() == self.queue.name() {
            return Err(refused(
                "eventual",
                "the poison queue must not be the main queue",
            ));
        }
        Ok(Worker {
            inner: Arc::new(WorkerInner {
                queue: self.queue,
                poison,
                tables: self.tables,
                blobs: self.blobs,
                handlers: self.handlers,
                hook: self.hook,
                heartbeat,
                retry_delay,
                unknown_delay,
                options: self.options,
            }),
        })
    }
}

/// Runs the operations of one queue: receives each message hidden for the
/// visibility timeout, runs it with a heartbeat, deletes it after success,
/// records the error and leaves it for a later attempt after a failure, and
/// moves it to the poison queue when it keeps failing. Cheap to clone.
///
/// Three ways to run it:
///
/// * [`run_once`](Worker::run_once): one receive of up to `concurrency`
///   messages, each run to its end; for tests and cron-style jobs.
/// * [`drain`](Worker::drain): `run_once` until a receive finds nothing.
/// * [`run`](Worker::run): the long-lived loop, until a shutdown signal.
///
/// Progress goes to `tracing`: one `eventual.message` span per message
/// (queue, message id, dequeue count, kind), with events at `debug` for each
/// step, `info` on success, `warn` on a failure and `error` on poisoning.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<WorkerInner>,
}

struct WorkerInner {
    queue: QueueClient,
    poison: QueueClient,
    tables: TableServiceClient,
    blobs: Option<BlobServiceClient>,
    handlers: HashMap<String, Handler>,
    hook: Option<Hook>,
    heartbeat: Duration,
    retry_delay: Duration,
    unknown_delay: Duration,
    options: Options,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&String> = self.inner.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("Worker")
            .field("queue", &self.inner.queue.name())
            .field("poison", &self.inner.poison.name())
            .field("kinds", &kinds)
            .field("options", &self.inner.options)
            .field("heartbeat", &self.inner.heartbeat)
            .field("retry_delay", &self.inner.retry_delay)
            .field("unknown_delay", &self.inner.unknown_delay)
            .finish()
    }
}

/// The most of the original body a poison message keeps: its JSON is written
/// again as a string (escaped) inside the poison message, which must fit the
/// queue's 64 KiB after Base64.
const POISON_BODY_MAX: usize = 24 * 1024;
const ERROR_TEXT_MAX: usize = 2 * 1024;

fn cut(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

enum Outcome {
    Succeeded,
    Failed,
    Poisoned,
    Deferred,
}

impl Worker {
    /// A worker for the operations on `queue`, whose steps use `tables`.
    /// Register at least one operation, then [`build`](WorkerBuilder::build).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tablekit::{DynamicEntity, QueueServiceClient, TableServiceClient};
    /// use tablekit_patterns::eventual::{Archive, Worker};
    ///
    /// let queues = QueueServiceClient::embedded();
    /// let queue = queues.queue("archive-jobs").unwrap();
    /// let worker = Worker::builder(queue.clone(), TableServiceClient::embedded())
    ///     .operation::<Archive<DynamicEntity>>()
    ///     .poison_queue(queues.queue("archive-jobs-poison").unwrap())
    ///     .concurrency(8)
    ///     .visibility_timeout(Duration::from_secs(60))
    ///     .max_dequeue_count(3)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(worker.poison_queue().name(), "archive-jobs-poison");
    ///
    /// // Options the queue cannot honour are refused before any request.
    /// let err = Worker::builder(queue, TableServiceClient::embedded())
    ///     .operation::<Archive<DynamicEntity>>()
    ///     .poison_queue(queues.queue("archive-jobs-poison").unwrap())
    ///     .visibility_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.is_invalid_input());
    /// ```
    pub fn builder(queue: QueueClient, tables: TableServiceClient) -> WorkerBuilder {
        WorkerBuilder {
            queue,
            poison: None,
            tables,
            blobs: None,
            handlers: HashMap::new(),
            duplicate_kind: None,
            options: Options {
                concurrency: 1,
                visibility_timeout: Duration::from_secs(30),
                heartbeat: None,
                retry_delay: None,
                unknown_delay: None,
                poison_unknown_at_once: false,
                max_dequeue_count: 5,
                poll_min: Duration::from_millis(100),
                poll_max: Duration::from_secs(10),
            },
            hook: None,
        }
    }

    /// The queue it works on.
    pub fn queue(&self) -> &QueueClient {
        &self.inner.queue
    }

    /// The queue it moves poisoned messages to.
    pub fn poison_queue(&self) -> &QueueClient {
        &self.inner.poison
    }

    /// Receives up to `concurrency` messages once and runs each to its end
    /// (success, failure or poison). An error means the receive itself failed.
    pub async fn run_once(&self) -> Result<Report> {
        let n = self
            .inner
            .options
            .concurrency
            .min(tablekit::queue::MAX_MESSAGES_PER_REQUEST);
        let messages = self.receive(n).await?;
        let mut report = Report::default();
        let mut running: FuturesUnordered<_> = messages
            .into_iter()
            .map(|m| self.inner.clone().process(m))
            .collect();
        while let Some(outcome) = running.next().await {
            report.add(outcome);
        }
        Ok(report)
    }

    /// Runs [`run_once`](Worker::run_once) until a receive finds no visible
    /// message. Messages that failed are hidden for the retry delay, and
    /// those this worker cannot run for the unknown delay, so a drain ends
    /// even when some keep failing.
    pub async fn drain(&self) -> Result<Report> {
        let mut report = Report::default();
        loop {
            let once = self.run_once().await?;
            if once.total() == 0 {
                return Ok(report);
            }
            report.add(once);
        }
    }

    /// Runs until `shutdown` completes: keeps up to `concurrency` messages
    /// running, receiving more as slots free up, and polls with a growing
    /// backoff while the queue is empty. A failed receive is logged and
    /// retried after the backoff; it does not stop the worker.
    ///
    /// On shutdown it stops receiving and **finishes** the messages it holds
    /// (each is already running, with its heartbeat), then returns. To bound
    /// that, put a timeout around the whole call: dropping the future abandons
    /// the running messages, which come back after their visibility timeout,
    /// exactly as after a crash.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Report {
        use futures::FutureExt as _;
        let opts = &self.inner.options;
        let mut report = Report::default();
        let mut running = FuturesUnordered::new();
        let mut backoff = opts.poll_min;
        tokio::pin!(shutdown);
        let mut stopping = false;
        loop {
            // A busy queue never lets the waits below see the signal: look here too.
            if !stopping && shutdown.as_mut().now_or_never().is_some() {
                stopping = true;
            }
            if stopping {
                while let Some(outcome) = running.next().await {
                    report.add(outcome);
                }
                tracing::info!(queue = %self.inner.queue.name(), ?report, "worker stopped");
                return report;
            }
            if running.len() < opts.concurrency {
                let free = (opts.concurrency - running.len())
                    .min(tablekit::queue::MAX_MESSAGES_PER_REQUEST);
                // The running messages make progress while the receive waits;
                // the receive itself is never cancelled, so no message it
                // took is left hidden for nothing.
                let receive = self.receive(free);
                tokio::pin!(receive);
                let received = loop {
                    tokio::select! {
                        biased;
                        r = &mut receive => break r,
                        Some(outcome) = running.next(), if !running.is_empty() => report.add(outcome),
                    }
                };
                match received {
                    Ok(messages) if !messages.is_empty() => {
                        backoff = opts.poll_min;
                        for m in messages {
                            running.push(self.inner.clone().process(m));
                        }
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(queue = %self.inner.queue.name(), error = %e, "receive failed");
                    }
                }
                // Nothing received: wait for the backoff, a finished message or shutdown.
                let sleep = tokio::time::sleep(backoff);
                backoff = (backoff * 2).min(opts.poll_max);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        biased;
                        _ = &mut shutdown => { stopping = true; break; }
                        Some(outcome) = running.next(), if !running.is_empty() => report.add(outcome),
                        _ = &mut sleep => break,
                    }
                }
                continue;
            }
            // Every slot busy: wait for one to free up, or for shutdown.
            tokio::select! {
                biased;
                _ = &mut shutdown => stopping = true,
                Some(outcome) = running.next() => report.add(outcome),
            }
        }
    }

    async fn receive(&self, n: usize) -> Result<Vec<QueueMessage>> {
        self.inner
            .queue
            .receive()
            .max_messages(n)
            .visibility_timeout(self.inner.options.visibility_timeout)
            .await
    }
}

impl Report {
    fn of(outcome: Outcome) -> Report {
        let mut r = Report::default();
        match outcome {
            Outcome::Succeeded => r.succeeded = 1,
            Outcome::Failed => r.failed = 1,
            Outcome::Poisoned => r.poisoned = 1,
            Outcome::Deferred => r.deferred = 1,
        }
        r
    }
}

impl WorkerInner {
    async fn process(self: Arc<Self>, message: QueueMessage) -> Report {
        let span = tracing::info_span!(
            "eventual.message",
            queue = %self.queue.name(),
            message_id = %message.id(),
            dequeue_count = message.dequeue_count(),
            kind = tracing::field::Empty,
        );
        let outcome = self
            .process_in_span(message, span.clone())
            .instrument(span)
            .await;
        Report::of(outcome)
    }

    async fn process_in_span(&self, mut message: QueueMessage, span: tracing::Span) -> Outcome {
        let envelope = match read_envelope(message.body()) {
            Ok(env) => env,
            Err(Unreadable::Newer { why, kind }) => {
                if let Some(kind) = &kind {
                    span.record("kind", kind.as_str());
                }
                return self.defer_unknown(&mut message, &why).await;
            }
            Err(e) => return self.poison(&message, e.why()).await,
        };
        span.record("kind", envelope.kind.as_str());
        let count = message.dequeue_count();
        if count > self.options.max_dequeue_count {
            let why = format!(
                "received {count} times, over the limit of {}; last error: {}",
                self.options.max_dequeue_count,
                envelope.last_error.as_deref().unwrap_or(
                    "none recorded (the workers that received it stopped before finishing)"
                ),
            );
            return self.poison(&message, &why).await;
        }
        let Some(handler) = self.handlers.get(&envelope.kind) else {
            let mut kinds: Vec<&String> = self.handlers.keys().collect();
            kinds.sort();
            let why = format!(
                "unknown operation kind {:?}: this worker runs {kinds:?}",
                envelope.kind
            );
            return self.defer_unknown(&mut message, &why).await;
        };
        let ctx = StepContext {
            inner: Arc::new(ContextInner {
                tables: self.tables.clone(),
                blobs: self.blobs.clone(),
                message_id: message.id().to_owned(),
                dequeue_count: count,
                hook: self.hook.clone(),
                steps: AtomicUsize::new(0),
            }),
        };
        let result = {
            let run = handler(envelope.op.clone(), ctx);
            tokio::pin!(run);
            let mut beat = tokio::time::interval_at(
                tokio::time::Instant::now() + self.heartbeat,
                self.heartbeat,
            );
            beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    r = &mut run => break r,
                    _ = beat.tick() => self.heartbeat(&mut message).await,
                }
            }
        };
        match result {
            Ok(()) => {
                match self.queue.delete_message(&message).await {
                    Ok(()) => tracing::info!("operation done, message deleted"),
                    // Done, but another worker holds the message now (our
                    // visibility lapsed): it will find the work done.
                    Err(e) => {
                        tracing::warn!(error = %e, "operation done; the message could not be deleted and will run again")
                    }
                }
                Outcome::Succeeded
            }
            Err(e) => {
                let text = e.to_string();
                if count >= self.options.max_dequeue_count {
                    return self.poison(&message, &text).await;
                }
                tracing::warn!(error = %text, "operation failed; left for another attempt");
                let (short, _) = cut(&text, ERROR_TEXT_MAX);
                let env = Envelope {
                    last_error: Some(short.to_owned()),
                    ..envelope
                };
                let body = serde_json::to_vec(&env).unwrap_or_else(|_| message.body().to_vec());
                if let Err(e) = self
                    .queue
                    .update_message(&mut message, self.retry_delay, Some(&body))
                    .await
                {
                    tracing::warn!(error = %e, "could not record the error in the message");
                }
                Outcome::Failed
            }
        }
    }

    /// A message this worker cannot run but a newer one may (an unknown
    /// kind or a newer format version): hidden for the unknown delay, its
    /// body untouched, until the dequeue limit; then, or at once if so
    /// configured, poisoned.
    async fn defer_unknown(&self, message: &mut QueueMessage, why: &str) -> Outcome {
        let count = message.dequeue_count();
        let limit = self.options.max_dequeue_count;
        if self.options.poison_unknown_at_once {
            return self.poison(message, why).await;
        }
        if count >= limit {
            let why = format!(
                "{why}; received {count} times (the limit is {limit}) and no worker that runs it took it"
            );
            return self.poison(message, &why).await;
        }
        tracing::warn!(
            reason = %why,
            retry_in = ?self.unknown_delay,
            "this worker cannot run the message (a newer client's?); left on the queue for a worker that can"
        );
        if let Err(e) = self
            .queue
            .update_message(message, self.unknown_delay, None)
            .await
        {
            tracing::warn!(error = %e, "could not hide the message for the unknown delay; it comes back after its visibility timeout");
        }
        Outcome::Deferred
    }

    async fn heartbeat(&self, message: &mut QueueMessage) {
        if let Some(hook) = &self.hook {
            let event = Event::Heartbeat {
                message_id: message.id().to_owned(),
            };
            if let Err(e) = hook(event).await {
                tracing::debug!(error = %e, "heartbeat skipped by the hook");
                return;
            }
        }
        match self
            .queue
            .update_message(message, self.options.visibility_timeout, None)
            .await
        {
            Ok(()) => {
                tracing::debug!(next_visible_on = ?message.next_visible_on(), "visibility extended")
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; the message may run twice"),
        }
    }

    /// Copies the message to the poison queue, then deletes it from the main
    /// queue: a crash in between leaves a duplicate, never a loss.
    async fn poison(&self, message: &QueueMessage, why: &str) -> Outcome {
        let text = String::from_utf8_lossy(message.body());
        let (body, body_truncated) = cut(&text, POISON_BODY_MAX);
        let (error, _) = cut(why, ERROR_TEXT_MAX);
        let poisoned = PoisonedMessage {
            queue: self.queue.name().to_owned(),
            message_id: message.id().to_owned(),
            dequeue_count: message.dequeue_count(),
            error: error.to_owned(),
            body: body.to_owned(),
            body_truncated,
        };
        let sent = match self.poison.send_json(&poisoned) {
            Ok(send) => send.never_expire().await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            tracing::error!(error = %e, reason = %why, "could not move the message to the poison queue; it stays");
            return Outcome::Failed;
        }
        if let Err(e) = self.queue.delete_message(message).await {
            tracing::warn!(error = %e, "poisoned, but the message could not be deleted from the main queue");
        }
        tracing::error!(reason = %why, poison_queue = %self.poison.name(), "message moved to the poison queue");
        Outcome::Poisoned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
