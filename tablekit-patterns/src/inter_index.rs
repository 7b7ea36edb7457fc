//! The inter-partition secondary index pattern (design guide §3.2): each
//! entity is stored once under a primary partition (`empid_Sales` / `000223`)
//! and once more per index under a partition of its own (`email_Sales` /
//! `jonesj@contoso.com`), in the same table or in another. Lookups by any
//! index are point or range reads of one partition, and the load is spread
//! over several partitions instead of one.
//!
//! No transaction spans two partitions, so the copies are kept eventually
//! consistent through a queue ([`eventual`](crate::eventual)): a change is
//! one message, and a [`Worker`](crate::eventual::Worker) applies it.
//!
//! | operation | requests |
//! |---|---|
//! | [`put`](InterPartitionIndex::put), [`remove`](InterPartitionIndex::remove) (client) | 1 message sent |
//! | the worker, for a put | read primary; per copy whose indexed value changed: read it, delete it under its ETag if an older change wrote it; replace the primary under the ETag read (insert if absent); insert-or-replace each copy; per changed value again: read the old copy, delete it if older; read the primary again (+1 conditional write or delete per copy if a newer change got in) |
//! | the worker, for a stale put (a newer change is stored) | read primary; read each copy under this change's values (+1 conditional delete or rewrite of each one this change wrote) |
//! | the worker, for a remove | read primary (newer or this remove: done); per copy: read, delete if older; replace the primary by a tombstone under the ETag read (insert if absent); per copy again: read, delete if older |
//! | [`get`](InterPartitionIndex::get), [`lookup`](InterPartitionIndex::lookup) | 1 point read |
//! | [`lookup_verified`](InterPartitionIndex::lookup_verified) | 2 point reads (+1 conditional delete to repair) |
//! | [`list`](InterPartitionIndex::list), [`list_primary`](InterPartitionIndex::list_primary) | 1 range query (a request per page) |
//! | [`purge_tombstones`](InterPartitionIndex::purge_tombstones) | 1 query over the primary partitions (a request per page), 1 conditional delete per old tombstone |
//!
//! A primary write that finds the primary changed since its read (412, or
//! 409 on an insert) starts again from the read, after a jittered pause, at
//! most [`MAX_REREADS`] times; then the message fails and is retried later.
//!
//! # Order of the writes
//!
//! The message is sent first and the worker writes everything, so a change
//! the client was told about is never lost, whatever crashes after. The
//! worker orders its writes so that **an index copy never points at a missing
//! primary**: a copy is written only after the primary it points at, and
//! deleted before it (before the tombstone that replaces it). A copy under
//! an old value is deleted *before* the primary changes, because the old
//! value is known only from the primary as stored: a crash after the primary
//! write would otherwise forget it. Every step is idempotent, so a worker that
//! stops anywhere is followed by one that redoes the whole change. Between
//! the steps a reader can see the primary changed and the index not yet, or a
//! lookup by the old value find nothing while the new one is not yet written:
//! the index is eventually consistent.
//!
//! # Change stamps: out-of-order delivery and racing workers
//!
//! Delivery is at least once, and not in order: a message can run again
//! after a newer change of the same entity (after a crash, a failed step, a
//! lost delete), and two workers can apply two changes of one entity at the
//! same time. So each message carries a **stamp**: microseconds since the
//! Unix epoch by the sending client's clock, made strictly increasing per
//! [`InterPartitionIndex`] value (and its clones). The primary, each copy and
//! each tombstone store the stamp of the change that wrote them in
//! [`CHANGE_STAMP`] (Int64). The worker:
//!
//! * applies a put only over an older primary (or none): a primary with a
//!   stamp as new or newer means the message is stale. It then writes
//!   nothing new, but brings in line what an earlier attempt of *this*
//!   message may have left: a copy under its values that holds its stamp is
//!   deleted (or, if the current primary still has that value, rewritten from
//!   it), under the copy's ETag. An equal stamp with the same entity is this
//!   message's own earlier attempt, which then goes on with the copies.
//! * writes the primary under the ETag of its read, so of two racing workers
//!   one restarts from a fresh read and finds the other's stamp.
//! * deletes a copy under an old value only if an older change wrote it
//!   (its stamp is lower), before the primary write and once more after it:
//!   an older change that read the primary earlier can write its copy late.
//! * reads the primary again after writing the copies: if a newer change got
//!   in, each copy just written is deleted (or, if the newer primary has the
//!   same value, rewritten from it), under the ETag this worker's write
//!   returned, so a newer worker's own write of that copy wins.
//! * leaves a **tombstone** for a remove: the primary is replaced by an
//!   entity with only its keys, [`CHANGE_STAMP`] and [`REMOVED`]` = true`.
//!   A put older than the remove, delivered late, sees the newer stamp and
//!   does nothing, so a removed entity does not come back; a newer put
//!   replaces the tombstone. Every read skips tombstones (on the client:
//!   a `$filter` on `Removed` would drop every entity without it).
//!   [`purge_tombstones`](InterPartitionIndex::purge_tombstones) deletes
//!   old ones once no older message can still be delivered.
//!
//! What remains:
//!
//! * Stamps of **different clients** compare by their clocks: last writer
//!   wins by client clock, so of two changes of one entity made on two
//!   machines within their clock skew, the one with the later clock wins,
//!   which need not be the one made later. Equal stamps from two clients
//!   (the same microsecond): the change stored first wins. Send the changes
//!   of one entity from one [`InterPartitionIndex`] value (or keep clocks
//!   synchronised) if that matters.
//! * A worker that crashes between its primary write and its second
//!   delete of old copies, while an older change racing it writes a copy
//!   under the old value, leaves that copy: on redelivery the old value is
//!   no longer known. Such a copy has an older stamp than its primary;
//!   [`lookup_verified`](InterPartitionIndex::lookup_verified) and
//!   [`list_verified`](InterPartitionIndex::list_verified) repair it (a
//!   delete conditional on the copy's ETag) when they find it.
//! * A put older than a purged tombstone would bring the entity back: purge
//!   only past the queue's message time-to-live.
//! * A message sent before stamps existed has no stamp (0): it is applied
//!   unconditionally, as then (its primary and copies get stamp 0, which any
//!   stamped change replaces).
//!
//! # Keys
//!
//! The entity type's own keys (its derive, say `{department}` /
//! `{employee_id:06}`) are stored with a PartitionKey prefix: the primary
//! under `empid_Sales` / `000223`, a copy under `email_Sales` /
//! `jonesj@contoso.com` with the property [`PRIMARY_ROW_KEY`] holding the
//! primary RowKey. An entity type with a property named [`PRIMARY_ROW_KEY`],
//! [`CHANGE_STAMP`] or [`REMOVED`] is refused. Normalise indexed values in the key function (lower case),
//! as RowKeys compare ordinally; a value must be a valid RowKey (no `/ \ # ?`).
//! An entity travels in its message, so it must fit one (about 48 KiB of
//! JSON); a larger one is refused before any request.
//!
//! ```
//! use tablekit::{QueueServiceClient, TableEntity, TableServiceClient};
//! use tablekit_patterns::eventual::Worker;
//! use tablekit_patterns::inter_index::{InterIndex, InterPartitionIndex};
//! use tablekit_patterns::range::KeyRange;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee { department: String, employee_id: u32, email: String }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let tables = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! let queues = QueueServiceClient::embedded();
//! let (jobs, poison) = (queues.queue("employee-index")?, queues.queue("employee-index-poison")?);
//! # jobs.create_queue().await?;
//! # poison.create_queue().await?;
//! let table = tables.table::<Employee>("Employees")?;
//! table.create_table().await?;
//!
//! let by_email = InterIndex::new("email", "email_", |e: &Employee| e.email.to_lowercase());
//! let employees = InterPartitionIndex::new(table, "empid_", jobs.clone())
//!     .with_index(&by_email)?;
//!
//! // The client: one message per change.
//! employees.put(&Employee { department: "Sales".into(), employee_id: 223, email: "jonesj@contoso.com".into() }).await?;
//!
//! // The worker: writes empid_Sales/000223, then email_Sales/jonesj@contoso.com.
//! let worker = employees.attach(Worker::builder(jobs, tables)).poison_queue(poison).build()?;
//! worker.drain().await?;
//!
//! let jones = employees.lookup(&by_email, "Sales", "jonesj@contoso.com").await?;
//! assert_eq!(jones.map(|e| e.employee_id), Some(223));
//! let a_to_b = employees.list(&by_email, "Sales", KeyRange::prefix("a")).await?;
//! assert!(a_to_b.is_empty()); // "jonesj" is not in 'a'..'b'
//! # Ok(()) }
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tablekit::filter::prefix_successor;
use tablekit::{
    entity_from_json, entity_to_json, to_dynamic, Column, DecodeError, DynamicEntity, ETag,
    EdmValue, EntityKey, IfMatch, QueueClient, RawEntity, Result, SentMessage, TableClient,
    TableEntity,
};

use crate::error::refused;
use crate::eventual::{Eventual, Guarded, OpResult, StepContext, WorkerBuilder, MAX_REREADS};
use crate::range::KeyRange;

/// The property of an index copy that holds the RowKey of its primary.
pub const PRIMARY_ROW_KEY: &str = crate::index::PRIMARY_ROW_KEY;

/// The Int64 property of a primary, a copy and a tombstone that holds the
/// stamp of the change that wrote it (microseconds since the Unix epoch).
pub const CHANGE_STAMP: &str = "ChangeStamp";

/// The Boolean property (`true`) that marks a primary as a tombstone: the
/// entity was removed by the change of its [`CHANGE_STAMP`].
pub const REMOVED: &str = "Removed";

type KeyFn<T> = dyn Fn(&T) -> String + Send + Sync;

struct IndexDef<T> {
    name: String,
    prefix: String,
    key: Arc<KeyFn<T>>,
    table: Option<TableClient<DynamicEntity>>,
}

/// One index of an [`InterPartitionIndex`]: a name, the PartitionKey prefix of
/// its copies (`email_`), the function giving an entity's indexed value, and
/// optionally a table of its own. Cheap to clone.
///
/// ```
/// use tablekit::{DynamicEntity, EdmValue};
/// use tablekit_patterns::inter_index::InterIndex;
///
/// let by_email = InterIndex::new("email", "email_", |e: &DynamicEntity| match e.get("Email") {
///     Some(EdmValue::String(s)) => s.to_lowercase(),
///     _ => String::new(),
/// });
/// let jones = DynamicEntity::new("Sales", "000223").with("Email", "JonesJ@contoso.com");
/// assert_eq!(by_email.value(&jones), "jonesj@contoso.com");
/// assert_eq!(by_email.partition_key("Sales"), "email_Sales");
/// ```
pub struct InterIndex<T> {
    def: Arc<IndexDef<T>>,
}

impl<T> Clone for InterIndex<T> {
    fn clone(&self) -> Self {
        InterIndex {
            def: self.def.clone(),
        }
    }
}

impl<T> fmt::Debug for InterIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterIndex")
            .field("name", &self.def.name)
            .field("prefix", &self.def.prefix)
            .field("table", &self.def.table.as_ref().map(|t| t.name()))
            .finish()
    }
}

impl<T: TableEntity> InterIndex<T> {
    /// An index named `name` whose copies of an entity of partition `p` go to
    /// partition `prefix` + `p`, under the RowKey `key(entity)`, in the
    /// primary's table.
    pub fn new(
        name: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        InterIndex {
            def: Arc::new(IndexDef {
                name: name.into(),
                prefix: prefix.into(),
                key: Arc::new(key),
                table: None,
            }),
        }
    }

    /// The same index with its copies in `table` (the guide: "the copies may
    /// also go into separate tables"). Create the table first.
    pub fn in_table<U: TableEntity>(self, table: &TableClient<U>) -> Self {
        InterIndex {
            def: Arc::new(IndexDef {
                name: self.def.name.clone(),
                prefix: self.def.prefix.clone(),
                key: self.def.key.clone(),
                table: Some(table.with_type::<DynamicEntity>()),
            }),
        }
    }

    /// The index's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The PartitionKey of the copies of the entities of partition `partition_key`.
    pub fn partition_key(&self, partition_key: &str) -> String {
        format!("{}{partition_key}", self.def.prefix)
    }

    /// The indexed value of `entity`: its copy's RowKey.
    pub fn value(&self, entity: &T) -> String {
        (self.def.key)(entity)
    }
}

/// The message of a change, as it travels.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Change {
    Put {
        entity: serde_json::Value,
        /// 0 in a message written before stamps existed: applied unordered.
        #[serde(default)]
        stamp: i64,
    },
    Remove {
        partition_key: String,
        row_key: String,
        #[serde(default)]
        stamp: i64,
    },
}

/// The next change stamp after `last` at clock reading `now`: `now`, or
/// `last + 1` when the clock has not moved on (or went back).
fn next_stamp(last: i64, now: i64) -> i64 {
    now.max(last.saturating_add(1))
}

/// The system clock in microseconds since the Unix epoch (0 before it).
fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The pause before attempt `attempt` (2 or more) of a guarded primary
/// write: 5 ms doubling to at most 320 ms, each with up to as much again of
/// jitter, so two workers that collided do not collide again in lockstep.
fn backoff(attempt: usize) -> Duration {
    let base = 5u64 << attempt.saturating_sub(2).min(6);
    Duration::from_millis(base + fastrand::u64(0..=base))
}

/// The stamp stored in `d` (0 if it has none: written before stamps).
fn stamp_of(d: &DynamicEntity) -> i64 {
    match d.get(CHANGE_STAMP) {
        Some(EdmValue::Int64(s)) => *s,
        Some(EdmValue::Int32(s)) => i64::from(*s),
        _ => 0,
    }
}

fn is_tombstone(d: &DynamicEntity) -> bool {
    matches!(d.get(REMOVED), Some(EdmValue::Boolean(true)))
}

/// A primary as a worker read it.
enum Current<T> {
    Absent,
    Tombstone { stamp: i64, etag: ETag },
    Live { entity: T, stamp: i64, etag: ETag },
}

impl<T> Current<T> {
    fn stamp(&self) -> Option<i64> {
        match self {
            Current::Absent => None,
            Current::Tombstone { stamp, .. } | Current::Live { stamp, .. } => Some(*stamp),
        }
    }

    fn etag(&self) -> Option<&ETag> {
        match self {
            Current::Absent => None,
            Current::Tombstone { etag, .. } | Current::Live { etag, .. } => Some(etag),
        }
    }
}

/// An entity type stored under a primary PartitionKey prefix with any number
/// of [`InterIndex`]es, kept in step through a queue. Cheap to clone. See the
/// [module docs](self).
pub struct InterPartitionIndex<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    primary: TableClient<DynamicEntity>,
    prefix: String,
    indexes: Vec<Arc<IndexDef<T>>>,
    queue: Eventual,
    kind: String,
    last_stamp: Arc<AtomicI64>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for InterPartitionIndex<T> {
    fn clone(&self) -> Self {
        InterPartitionIndex {
            inner: self.inner.clone(),
        }
    }
}

impl<T> fmt::Debug for InterPartitionIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterPartitionIndex")
            .field("table", &self.inner.primary.name())
            .field("prefix", &self.inner.prefix)
            .field(
                "indexes",
                &self
                    .inner
                    .indexes
                    .iter()
                    .map(|d| d.prefix.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("queue", &self.inner.queue.queue().name())
            .field("kind", &self.inner.kind)
            .finish()
    }
}

fn strip<'a>(prefix: &str, key: &'a str) -> Result<&'a str> {
    key.strip_prefix(prefix).ok_or_else(|| {
        DecodeError::new(format!(
            "PartitionKey {key:?} does not start with the prefix {prefix:?}"
        ))
        .into()
    })
}

impl<T: TableEntity + Send + Sync + 'static> InterPartitionIndex<T> {
    /// Entities of `table` with primary PartitionKeys `prefix` + their own
    /// (`empid_` + `Sales`), changed through messages on `queue`.
    pub fn new(table: TableClient<T>, prefix: impl Into<String>, queue: QueueClient) -> Self {
        let primary = table.with_type::<DynamicEntity>();
        let kind = format!("tablekit.inter_index.{}", primary.name());
        InterPartitionIndex {
            inner: Arc::new(Inner {
                primary,
                prefix: prefix.into(),
                indexes: Vec::new(),
                queue: Eventual::new(queue),
                kind,
                last_stamp: Arc::new(AtomicI64::new(0)),
                _t: PhantomData,
            }),
        }
    }

    /// Adds an index. Refused (before any request) if its name is taken, or
    /// if its prefix is empty, or, in the same table, is a prefix of another's
    /// (or the primary's) or has one of them as a prefix, which would mix
    /// their partitions.
    pub fn with_index(self, index: &InterIndex<T>) -> Result<Self> {
        let def = &index.def;
        if def.prefix.is_empty() {
            return Err(refused(
                "inter_index",
                format!("index {:?} needs a PartitionKey prefix", def.name),
            ));
        }
        let table_of = |d: &IndexDef<T>| {
            d.table
                .as_ref()
                .map_or(self.inner.primary.name(), |t| t.name())
                .to_owned()
        };
        let overlaps = |a: &str, b: &str| a.starts_with(b) || b.starts_with(a);
        if table_of(def) == self.inner.primary.name() && overlaps(&def.prefix, &self.inner.prefix) {
            return Err(refused(
                "inter_index",
                format!(
                    "index prefix {:?} overlaps the primary prefix {:?} in table {}",
                    def.prefix,
                    self.inner.prefix,
                    self.inner.primary.name()
                ),
            ));
        }
        for other in &self.inner.indexes {
            if other.name == def.name {
                return Err(refused(
                    "inter_index",
                    format!("two indexes named {:?}", def.name),
                ));
            }
            if table_of(other) == table_of(def) && overlaps(&other.prefix, &def.prefix) {
                return Err(refused(
                    "inter_index",
                    format!(
                        "index prefixes {:?} and {:?} overlap in table {}",
                        other.prefix,
                        def.prefix,
                        table_of(def)
                    ),
                ));
            }
        }
        let mut indexes = self.inner.indexes.clone();
        indexes.push(def.clone());
        Ok(InterPartitionIndex {
            inner: Arc::new(Inner {
                primary: self.inner.primary.clone(),
                prefix: self.inner.prefix.clone(),
                indexes,
                queue: self.inner.queue.clone(),
                kind: self.inner.kind.clone(),
                last_stamp: self.inner.last_stamp.clone(),
                _t: PhantomData,
            }),
        })
    }

    /// The `kind` of this index's messages: `tablekit.inter_index.<table>`.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The primary PartitionKey of the entities of partition `partition_key`.
    pub fn primary_partition_key(&self, partition_key: &str) -> String {
        format!("{}{partition_key}", self.inner.prefix)
    }

    /// Registers this index's changes with a worker builder.
    pub fn attach(&self, builder: WorkerBuilder) -> WorkerBuilder {
        let this = self.clone();
        builder.handle(&self.inner.kind, move |change: Change, ctx: StepContext| {
            let this = this.clone();
            async move { this.apply(change, &ctx).await }
        })
    }

    fn table_of(&self, def: &IndexDef<T>) -> TableClient<DynamicEntity> {
        def.table
            .clone()
            .unwrap_or_else(|| self.inner.primary.clone())
    }

    /// The stored primary of `entity`, and each index's copy, stamped `stamp`.
    fn stored(&self, entity: &T, stamp: i64) -> Result<(DynamicEntity, Vec<DynamicEntity>)> {
        let mut own = to_dynamic(entity)?;
        for reserved in [PRIMARY_ROW_KEY, CHANGE_STAMP, REMOVED] {
            if own.get(reserved).is_some() {
                return Err(refused(
                    "inter_index",
                    format!("the entity has a property {reserved}, which the index uses"),
                ));
            }
        }
        own.set(CHANGE_STAMP, stamp);
        let mut primary = own.clone();
        primary.partition_key = self.primary_partition_key(&own.partition_key);
        EntityKey::new(&primary.partition_key, &primary.row_key).validate()?;
        let mut copies = Vec::new();
        for def in &self.inner.indexes {
            let mut copy = own.clone();
            copy.partition_key = format!("{}{}", def.prefix, own.partition_key);
            copy.row_key = (def.key)(entity);
            copy.set(PRIMARY_ROW_KEY, own.row_key.clone());
            EntityKey::new(&copy.partition_key, &copy.row_key).validate()?;
            copies.push(copy);
        }
        Ok((primary, copies))
    }

    /// The next stamp of this index value: strictly increasing.
    fn stamp(&self) -> i64 {
        let now = now_micros();
        let mut last = self.inner.last_stamp.load(Ordering::SeqCst);
        loop {
            let next = next_stamp(last, now);
            match self.inner.last_stamp.compare_exchange_weak(
                last,
                next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// Sends the message that stores `entity` (a new one, or a new version)
    /// and its index copies, stamped with this client's clock. The entity and
    /// its keys are checked first; an entity too large for one message is
    /// refused before any request.
    pub async fn put(&self, entity: &T) -> Result<SentMessage> {
        self.stored(entity, 0)?;
        let json = entity_to_json(entity)?;
        let value: serde_json::Value = serde_json::from_slice(&json).map_err(|e| {
            refused(
                "inter_index",
                format!("the entity's JSON does not read back: {e}"),
            )
        })?;
        let change = Change::Put {
            entity: value,
            stamp: self.stamp(),
        };
        self.inner
            .queue
            .enqueue_kind(&self.inner.kind, &change)
            .await
    }

    /// Sends the message that removes the entity `key` (its own keys, say
    /// `("Sales", "000223")`) and its copies, stamped with this client's
    /// clock. The worker leaves a tombstone in place of the primary.
    pub async fn remove(&self, key: impl Into<EntityKey>) -> Result<SentMessage> {
        let key = key.into();
        key.validate()?;
        EntityKey::new(self.primary_partition_key(&key.partition_key), &key.row_key).validate()?;
        let change = Change::Remove {
            partition_key: key.partition_key,
            row_key: key.row_key,
            stamp: self.stamp(),
        };
        self.inner
            .queue
            .enqueue_kind(&self.inner.kind, &change)
            .await
    }

    async fn apply(&self, change: Change, ctx: &StepContext) -> OpResult {
        match change {
            Change::Put { entity, stamp } => {
                let json = serde_json::to_vec(&entity)?;
                let entity: T = entity_from_json(&json)?;
                self.apply_put(&entity, stamp, ctx).await
            }
            Change::Remove {
                partition_key,
                row_key,
                stamp,
            } => {
                self.apply_remove(&partition_key, &row_key, stamp, ctx)
                    .await
            }
        }
    }

    /// Reads the primary `key` as a step.
    async fn read_primary(&self, ctx: &StepContext, key: &EntityKey) -> OpResult<Current<T>> {
        Ok(match ctx.read(&self.inner.primary, key.clone()).await? {
            None => Current::Absent,
            Some((d, etag)) if is_tombstone(&d) => Current::Tombstone {
                stamp: stamp_of(&d),
                etag,
            },
            Some((d, etag)) => Current::Live {
                stamp: stamp_of(&d),
                entity: self.decode_primary(d)?,
                etag,
            },
        })
    }

    /// Writes `entity` over the primary as read (`current`): replace under
    /// its ETag, or insert if there was none. `false`: someone wrote it
    /// meanwhile, read again.
    async fn write_primary(
        &self,
        ctx: &StepContext,
        entity: &DynamicEntity,
        current: &Current<T>,
    ) -> OpResult<bool> {
        if let Some(etag) = current.etag() {
            let outcome = ctx
                .replace_if_unchanged(&self.inner.primary, entity, etag)
                .await?;
            return Ok(matches!(outcome, Guarded::Done(_)));
        }
        let written = match self.inner.primary.insert(entity).await {
            Ok(_) => true,
            Err(e) if e.is_conflict() => false,
            Err(e) => return Err(e.into()),
        };
        ctx.step(&format!("insert {}", self.inner.primary.name()))
            .await?;
        Ok(written)
    }

    /// Deletes the copy `key` of `def` if a change older than `stamp` wrote
    /// it (under its ETag, reading again if it changed meanwhile), so that a
    /// copy a newer change wrote is left alone. Stamp 0 (a message from
    /// before stamps): delete whatever is there, as then.
    async fn delete_older_copy(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        key: EntityKey,
        stamp: i64,
    ) -> OpResult {
        let table = self.table_of(def);
        if stamp == 0 {
            ctx.delete_if_exists(&table, key).await?;
            return Ok(());
        }
        for _ in 0..MAX_REREADS {
            let Some((copy, etag)) = ctx.read(&table, key.clone()).await? else {
                return Ok(());
            };
            if stamp_of(&copy) >= stamp {
                return Ok(());
            }
            match ctx.delete_if_unchanged(&table, key.clone(), &etag).await? {
                Guarded::Changed => continue,
                Guarded::Done(_) | Guarded::Gone => return Ok(()),
            }
        }
        Err(format!("the index copy {key} kept changing; will retry later").into())
    }

    /// Brings a copy this change wrote (`copy`, whose stored ETag is `etag`)
    /// in line with the primary `current`, which a newer change wrote: the
    /// copy is rewritten from it if it still has the copy's value, deleted
    /// otherwise; both under `etag`, so a newer change's own write of the
    /// copy wins.
    async fn settle_copy(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        copy: &DynamicEntity,
        etag: &ETag,
        current: &Current<T>,
    ) -> OpResult {
        let table = self.table_of(def);
        let index = self
            .inner
            .indexes
            .iter()
            .position(|d| std::ptr::eq(&**d, def))
            .ok_or("an index of another table")?;
        match current {
            Current::Live { entity, stamp, .. } if (def.key)(entity) == copy.row_key => {
                let (_, fresh) = self.stored(entity, *stamp)?;
                ctx.replace_if_unchanged(&table, &fresh[index], etag)
                    .await?;
            }
            _ => {
                let key = EntityKey::new(&copy.partition_key, &copy.row_key);
                ctx.delete_if_unchanged(&table, key, etag).await?;
            }
        }
        Ok(())
    }

    async fn apply_put(&self, entity: &T, stamp: i64, ctx: &StepContext) -> OpResult {
        let (primary, copies) = self.stored(entity, stamp)?;
        let key = EntityKey::new(&primary.partition_key, &primary.row_key);
        for attempt in 1..=MAX_REREADS {
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let current = self.read_primary(ctx, &key).await?;
            if let Some(stored) = current.stamp().filter(|s| stamp != 0 && *s >= stamp) {
                let resumed = match &current {
                    Current::Live { entity: c, .. } if stored == stamp => {
                        entity_to_json(c)? == entity_to_json(entity)?
                    }
                    _ => false,
                };
                if resumed {
                    // An earlier attempt of this message wrote the primary.
                    return self.write_copies(ctx, &key, &copies, stamp).await;
                }
                // A newer change (or, on a tie, the one stored) wins; undo
                // what an earlier attempt of this one may have left.
                for (def, copy) in self.inner.indexes.iter().zip(&copies) {
                    let copy_key = EntityKey::new(&copy.partition_key, &copy.row_key);
                    if let Some((found, etag)) = ctx.read(&self.table_of(def), copy_key).await? {
                        if stamp_of(&found) == stamp {
                            self.settle_copy(ctx, def, copy, &etag, &current).await?;
                        }
                    }
                }
                return Ok(());
            }
            let old_copies: Vec<(usize, EntityKey)> = match &current {
                Current::Live { entity: old, .. } => self
                    .inner
                    .indexes
                    .iter()
                    .zip(&copies)
                    .enumerate()
                    .filter_map(|(i, (def, copy))| {
                        let old_value = (def.key)(old);
                        (old_value != copy.row_key)
                            .then(|| (i, EntityKey::new(&copy.partition_key, old_value)))
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (i, old) in &old_copies {
                self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), stamp)
                    .await?;
            }
            if !self.write_primary(ctx, &primary, &current).await? {
                continue;
            }
            if stamp == 0 {
                for (def, copy) in self.inner.indexes.iter().zip(&copies) {
                    ctx.insert_or_replace(&self.table_of(def), copy).await?;
                }
                return Ok(());
            }
            // Again after the primary write: a change older than this one
            // that read the primary before it may have written a copy under
            // the old value since (its own re-read came too early to see
            // this change).
            let etags = self.write_copies_only(ctx, &copies).await?;
            for (i, old) in &old_copies {
                self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), stamp)
                    .await?;
            }
            return self.recheck(ctx, &key, &copies, &etags, stamp).await;
        }
        Err(format!("the primary {key} kept changing; will retry later").into())
    }

    async fn write_copies_only(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
    ) -> OpResult<Vec<ETag>> {
        let mut etags = Vec::with_capacity(copies.len());
        for (def, copy) in self.inner.indexes.iter().zip(copies) {
            etags.push(ctx.insert_or_replace(&self.table_of(def), copy).await?);
        }
        Ok(etags)
    }

    async fn write_copies(
        &self,
        ctx: &StepContext,
        key: &EntityKey,
        copies: &[DynamicEntity],
        stamp: i64,
    ) -> OpResult {
        let etags = self.write_copies_only(ctx, copies).await?;
        self.recheck(ctx, key, copies, &etags, stamp).await
    }

    /// Reads the primary again after the copies were written: if a newer
    /// change replaced it meanwhile, the copies just written may be stale.
    async fn recheck(
        &self,
        ctx: &StepContext,
        key: &EntityKey,
        copies: &[DynamicEntity],
        etags: &[ETag],
        stamp: i64,
    ) -> OpResult {
        let current = self.read_primary(ctx, key).await?;
        if let Current::Live { stamp: s, .. } = &current {
            if *s == stamp {
                return Ok(());
            }
        }
        for ((def, copy), etag) in self.inner.indexes.iter().zip(copies).zip(etags) {
            self.settle_copy(ctx, def, copy, etag, &current).await?;
        }
        Ok(())
    }

    async fn apply_remove(
        &self,
        partition_key: &str,
        row_key: &str,
        stamp: i64,
        ctx: &StepContext,
    ) -> OpResult {
        let key = EntityKey::new(self.primary_partition_key(partition_key), row_key);
        key.validate()?;
        let tombstone = DynamicEntity::new(&key.partition_key, &key.row_key)
            .with(CHANGE_STAMP, stamp)
            .with(REMOVED, true);
        for attempt in 1..=MAX_REREADS {
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let current = self.read_primary(ctx, &key).await?;
            match current.stamp() {
                // A newer change, or this one's earlier attempt (a tie: the
                // change stored wins).
                Some(s) if stamp != 0 && s >= stamp => return Ok(()),
                _ => {}
            }
            if stamp == 0 && !matches!(current, Current::Live { .. }) {
                return Ok(()); // as before stamps: nothing to remove
            }
            let old_copies: Vec<(usize, EntityKey)> = match &current {
                Current::Live { entity: old, .. } => self
                    .inner
                    .indexes
                    .iter()
                    .enumerate()
                    .map(|(i, def)| {
                        let pk = format!("{}{partition_key}", def.prefix);
                        (i, EntityKey::new(pk, (def.key)(old)))
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (i, old) in &old_copies {
                self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), stamp)
                    .await?;
            }
            if !self.write_primary(ctx, &tombstone, &current).await? {
                continue;
            }
            if stamp != 0 {
                // As for a put: an older change's late copy write.
                for (i, old) in &old_copies {
                    self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), stamp)
                        .await?;
                }
            }
            return Ok(());
        }
        Err(format!("the primary {key} kept changing; will retry later").into())
    }

    fn decode_primary(&self, mut d: DynamicEntity) -> Result<T> {
        d.partition_key = strip(&self.inner.prefix, &d.partition_key)?.to_owned();
        d.properties.remove(CHANGE_STAMP);
        T::decode(&RawEntity::from_dynamic(&d))
    }

    fn decode_copy(&self, def: &IndexDef<T>, mut d: DynamicEntity) -> Result<T> {
        match d.properties.remove(PRIMARY_ROW_KEY) {
            Some(EdmValue::String(rk)) => d.row_key = rk,
            _ => {
                return Err(DecodeError::for_property(
                    PRIMARY_ROW_KEY,
                    format!(
                        "({:?}, {:?}) is not an index copy: it has no {PRIMARY_ROW_KEY} string",
                        d.partition_key, d.row_key
                    ),
                )
                .into())
            }
        }
        d.partition_key = strip(&def.prefix, &d.partition_key)?.to_owned();
        d.properties.remove(CHANGE_STAMP);
        d.etag = None;
        T::decode(&RawEntity::from_dynamic(&d))
    }

    fn def(&self, index: &InterIndex<T>) -> Result<&Arc<IndexDef<T>>> {
        self.inner
            .indexes
            .iter()
            .find(|d| Arc::ptr_eq(d, &index.def))
            .ok_or_else(|| {
                refused(
                    "inter_index",
                    format!("{:?} is not an index of this table", index.def.name),
                )
            })
    }

    /// Reads an entity by its own keys (`("Sales", "000223")`) from its
    /// primary partition (`empid_Sales`): one point read.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        let key = key.into();
        let pk = self.primary_partition_key(&key.partition_key);
        match self.inner.primary.get((&*pk, &*key.row_key)).await? {
            Some(d) if !is_tombstone(&d) => Ok(Some(self.decode_primary(d)?)),
            _ => Ok(None),
        }
    }

    /// Reads the copy of `index` for `value` in partition `partition_key`
    /// (`email_Sales` / `jonesj@contoso.com`): one point read, no check
    /// against the primary.
    pub async fn lookup(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Option<T>> {
        let def = self.def(index)?;
        let pk = format!("{}{partition_key}", def.prefix);
        match self.table_of(def).get((&*pk, value)).await? {
            Some(d) => Ok(Some(self.decode_copy(def, d)?)),
            None => Ok(None),
        }
    }

    /// Like [`lookup`](Self::lookup), then reads the primary the copy points
    /// at and returns it if its indexed value is still `value`. A copy whose
    /// primary is gone, or has another value, is stale: it is deleted (if
    /// unchanged since read, so a concurrent worker's rewrite wins) and the
    /// answer is `None`.
    pub async fn lookup_verified(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Option<T>> {
        let def = self.def(index)?;
        let pk = format!("{}{partition_key}", def.prefix);
        let table = self.table_of(def);
        let Some(copy) = table.get((&*pk, value)).await? else {
            return Ok(None);
        };
        self.verify(def, &table, copy).await
    }

    async fn verify(
        &self,
        def: &IndexDef<T>,
        table: &TableClient<DynamicEntity>,
        copy: DynamicEntity,
    ) -> Result<Option<T>> {
        let etag: Option<ETag> = copy.etag.clone();
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        let value = copy.row_key.clone();
        let entity = self.decode_copy(def, copy)?;
        let own = to_dynamic(&entity)?;
        let primary = self.get((&*own.partition_key, &*own.row_key)).await?;
        match primary {
            Some(p) if (def.key)(&p) == value => Ok(Some(p)),
            _ => {
                let guard = etag.map_or(IfMatch::Any, IfMatch::ETag);
                match table.delete_if_exists(key, guard).await {
                    Ok(_) => {}
                    Err(e) if e.is_precondition_failed() => {}
                    Err(e) => return Err(e),
                }
                tracing::info!(index = %def.name, value = %value, "stale index entry repaired");
                Ok(None)
            }
        }
    }

    /// The copies of `index` in partition `partition_key` whose values are in
    /// `range`, in value order: one range query (appendix A:
    /// `PartitionKey eq 'email_Sales' and RowKey ge 'a' and RowKey lt 'b'`).
    pub async fn list(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        range: KeyRange,
    ) -> Result<Vec<T>> {
        let def = self.def(index)?;
        let rows = self
            .table_of(def)
            .query()
            .filter_by(range.filter(&format!("{}{partition_key}", def.prefix), ""))
            .fetch_all()
            .await?;
        rows.into_iter().map(|d| self.decode_copy(def, d)).collect()
    }

    /// Like [`list`](Self::list), with each copy checked against its primary
    /// (one point read each) and stale ones repaired and left out, as
    /// [`lookup_verified`](Self::lookup_verified) does.
    pub async fn list_verified(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        range: KeyRange,
    ) -> Result<Vec<T>> {
        let def = self.def(index)?;
        let table = self.table_of(def);
        let rows = table
            .query()
            .filter_by(range.filter(&format!("{}{partition_key}", def.prefix), ""))
            .fetch_all()
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for d in rows {
            if let Some(e) = self.verify(def, &table, d).await? {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// The primaries of partition `partition_key` whose RowKeys are in
    /// `range`, in key order (appendix A: `PartitionKey eq 'empid_Sales' and
    /// RowKey ge '000100' and RowKey le '000199'`).
    pub async fn list_primary(&self, partition_key: &str, range: KeyRange) -> Result<Vec<T>> {
        let rows = self
            .inner
            .primary
            .query()
            .filter_by(range.filter(&self.primary_partition_key(partition_key), ""))
            .fetch_all()
            .await?;
        rows.into_iter()
            .filter(|d| !is_tombstone(d))
            .map(|d| self.decode_primary(d))
            .collect()
    }

    /// Deletes the tombstones that removes left in the primary partitions
    /// (every PartitionKey under this index's primary prefix) whose stamp is
    /// at least `older_than` before now, each under the ETag it was read
    /// with (one that a newer change replaced meanwhile stays). Returns how
    /// many it deleted: one query (a request per page), then one delete each.
    ///
    /// A tombstone is what stops a put older than the remove, delivered late,
    /// from bringing the entity back; so purge only tombstones older than any
    /// message that can still be delivered: the queue's message time-to-live
    /// (7 days unless the messages were sent with another), plus the time a
    /// message may wait in the poison queue if you re-send poisoned messages.
    pub async fn purge_tombstones(&self, older_than: Duration) -> Result<u64> {
        let older = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
        let cutoff = now_micros().saturating_sub(older);
        let prefix = &self.inner.prefix;
        let partition_key = Column::<DynamicEntity, String>::new("PartitionKey");
        let mut filter = Column::<DynamicEntity, bool>::new(REMOVED).eq(true);
        if !prefix.is_empty() {
            filter = filter & partition_key.ge(prefix);
            if let Some(next) = prefix_successor(prefix) {
                filter = filter & partition_key.lt(next);
            }
        }
        let rows = self
            .inner
            .primary
            .query()
            .filter_by(filter)
            .fetch_all()
            .await?;
        let mut purged = 0;
        for d in rows {
            if !is_tombstone(&d) || stamp_of(&d) > cutoff {
                continue;
            }
            let guard = d.etag.clone().map_or(IfMatch::Any, IfMatch::ETag);
            let key = EntityKey::new(&d.partition_key, &d.row_key);
            match self.inner.primary.delete(key, guard).await {
                Ok(()) => purged += 1,
                Err(e) if e.is_precondition_failed() || e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(purged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_increase_even_when_the_clock_stands_still_or_goes_back() {
        assert_eq!(next_stamp(0, 1_000), 1_000);
        assert_eq!(next_stamp(1_000, 1_000), 1_001);
        assert_eq!(next_stamp(1_001, 900), 1_002);
        assert_eq!(next_stamp(1_002, 5_000), 5_000);
    }

    #[test]
    fn a_message_from_before_stamps_reads_with_stamp_zero() {
        let put: Change = serde_json::from_str(r#"{"put":{"entity":{"a":1}}}"#).unwrap();
        assert!(matches!(put, Change::Put { stamp: 0, .. }));
        let remove: Change =
            serde_json::from_str(r#"{"remove":{"partition_key":"p","row_key":"r"}}"#).unwrap();
        assert!(matches!(remove, Change::Remove { stamp: 0, .. }));
        let json = serde_json::to_value(Change::Put {
            entity: serde_json::json!({}),
            stamp: 7,
        })
        .unwrap();
        assert_eq!(json, serde_json::json!({"put": {"entity": {}, "stamp": 7}}));
    }
}
