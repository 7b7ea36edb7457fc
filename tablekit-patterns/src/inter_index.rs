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
//! # Unique and non-unique indexes
//!
//! Every [`InterIndex`] says in its declaration which it is:
//!
//! * [`InterIndex::unique`] (an email): one entity per value and partition.
//!   The copy's RowKey is the value (`jonesj@contoso.com`), read with
//!   [`lookup`](InterPartitionIndex::lookup) (`Option`). A change that would
//!   take a value another entity holds is **refused** (below).
//! * [`InterIndex::non_unique`] (a last name): any number of entities per
//!   value. The copy's RowKey is the value, a space ([`VALUE_SEPARATOR`]) and
//!   the primary's RowKey (`jones 000223`), so two Joneses have two copies;
//!   read with [`lookup_all`](InterPartitionIndex::lookup_all) (`Vec`).
//!   A space or `!` inside a value is written `!!` / `!"` in the RowKey, so
//!   no value holds the separator and RowKeys sort as their values do:
//!   [`list`](InterPartitionIndex::list) takes ranges **of values**
//!   (`KeyRange::prefix("jo")`, `KeyRange::inclusive("a", "k")`) on either
//!   kind and turns them into RowKey ranges. `lookup` on a non-unique index
//!   is refused before any request.
//!
//! | operation | requests |
//! |---|---|
//! | [`put`](InterPartitionIndex::put), [`remove`](InterPartitionIndex::remove) (client) | 1 message sent |
//! | the worker, for a put | read primary; per unique index: read the copy under the new value (refused here, before any write, if another entity holds one); per unique index: insert a claim if there is none, or restamp this entity's copy (refused if another entity took it meanwhile: each claim of this change given back); per copy whose value changed: read it, delete it under its ETag if this entity's and older; replace the primary under the ETag read (insert if absent); write each copy (unique: replace the claim under its ETag; non-unique: insert-or-replace); per changed value again: read the old copy, delete it if older; read the primary again (+1 conditional write or delete per copy if a newer change got in) |
//! | the worker, for a stale put (a newer change is stored) | read primary; read each copy under this change's values (+1 conditional delete or rewrite of each one this change wrote) |
//! | the worker, for a remove | read primary (newer or this remove: done); per copy: read, delete if this entity's and older; replace the primary by a tombstone under the ETag read (insert if absent); per copy again: read, delete if older |
//! | [`get`](InterPartitionIndex::get), [`lookup`](InterPartitionIndex::lookup) | 1 point read |
//! | [`lookup_all`](InterPartitionIndex::lookup_all), [`list`](InterPartitionIndex::list), [`list_primary`](InterPartitionIndex::list_primary) | 1 range query (a request per page) |
//! | [`lookup_verified`](InterPartitionIndex::lookup_verified) | 2 point reads (+1 conditional delete to repair) |
//! | [`list_verified`](InterPartitionIndex::list_verified) | 1 range query, 1 point read per copy (+1 conditional delete per repair) |
//! | [`purge_tombstones`](InterPartitionIndex::purge_tombstones) | 1 query over the primary partitions (a request per page), 1 conditional delete per old tombstone |
//!
//! A primary write that finds the primary changed since its read (412, or
//! 409 on an insert) starts again from the read, after a jittered pause, at
//! most [`MAX_REREADS`] times; then the message fails and is retried later.
//!
//! # What is atomic, and what a reader sees
//!
//! **Nothing across partitions is atomic.** Each request the worker sends
//! writes one entity; the primary and each copy change at different times.
//! What holds:
//!
//! * Once the queue is drained, every primary and its copies agree, and each
//!   unique value has at most one entity (eventual consistency).
//! * In between, a reader can see the primary changed and a copy not yet,
//!   or a lookup by the old value find nothing while the new copy is not yet
//!   written, or a copy with the entity's previous content. A copy a reader
//!   sees never points at a missing primary (it is written after the
//!   primary and deleted before it), but [`lookup`](InterPartitionIndex::lookup)
//!   and [`list`](InterPartitionIndex::list) do not check: use the
//!   `_verified` reads to get the primary as stored, at one more read each.
//! * A **claim** (a unique copy marked [`PENDING`]) is written before its
//!   primary; readers never see it.
//!
//! # The order of the writes, and unique values
//!
//! The message is sent first and the worker writes everything, so a change
//! the client was told about is never lost, whatever crashes after. For a
//! put the worker:
//!
//! 1. **claims each unique value** before anything else. It first reads the
//!    copy under every new unique value: one that names another entity
//!    refuses the change before any write. Then it inserts each copy marked
//!    [`PENDING`] (or, if this entity already holds the value, rewrites its
//!    copy with this change's stamp, so an older change racing this one
//!    leaves it). Two changes of two entities that want one value both try
//!    the insert; one gets 409 and is refused. A claim of a *newer* change
//!    of the same entity still being applied makes this attempt fail and
//!    retry later (by then the newer change has gone through, and this one
//!    is stale, or was refused and gave the claim back). On a **refusal**
//!    the claims this change made are given back (deleted, or put back,
//!    under their ETags), a `tracing::warn!` event
//!    names the index, the value and both entities, and the message fails
//!    with [`Error::constraint`]`(index, (copy pk, copy rk), Some((pk, holder rk)))`.
//!    **A refused change writes nothing**: the primary and its copies never
//!    disagree about a unique value. The worker retries a failed message
//!    after its retry delay (the holder may give the value up in a change
//!    still in the queue: delivery is not in order), and after
//!    [`max_dequeue_count`](crate::eventual::WorkerBuilder::max_dequeue_count)
//!    attempts moves it to the poison queue, whose
//!    [`PoisonedMessage::error`](crate::eventual::PoisonedMessage) holds the
//!    constraint text. The [`Report`](crate::eventual::Report) of the run
//!    counts it as failed, then poisoned.
//! 2. deletes this entity's copies under its old values (before the primary
//!    changes, because the old values are known only from the primary as
//!    stored);
//! 3. writes the primary, under the ETag of its read;
//! 4. writes the copies (a claim becomes a plain copy; if another change of
//!    this entity rewrote it meanwhile, it is read and written again);
//! 5. deletes old copies again and reads the primary again (below).
//!
//! **No copy is rewritten or deleted except on behalf of the entity it
//! names** ([`PRIMARY_ROW_KEY`]): every delete and rewrite of a copy, by the
//! worker or by a verified read's repair, first reads the copy, checks that
//! it names this entity, and then writes under the ETag of that read. So a
//! change never removes another entity's copy, whatever the order of
//! delivery.
//!
//! Every step is idempotent, so a worker that stops anywhere is followed by
//! one that redoes the whole change.
//!
//! # Change stamps: out-of-order delivery and racing workers
//!
//! Delivery is at least once, and not in order: a message can run again
//! after a newer change of the same entity (after a crash, a failed step, a
//! lost delete), and two workers can apply two changes of one entity at the
//! same time. So each message carries a **stamp** (required): microseconds
//! since the Unix epoch by the sending client's clock, made strictly
//! increasing per [`InterPartitionIndex`] value (and its clones). The
//! primary, each copy and each tombstone store the stamp of the change that
//! wrote them in [`CHANGE_STAMP`] (Int64). The worker:
//!
//! * applies a put only over an older primary (or none): a primary with a
//!   stamp as new or newer means the message is stale. It then writes
//!   nothing new, but brings in line what an earlier attempt of *this*
//!   message may have left: a copy (or claim) of this entity under its
//!   values that holds its stamp is deleted (or, if the current primary
//!   still has that value, rewritten from it), under the copy's ETag. An
//!   equal stamp with the same entity is this message's own earlier
//!   attempt, which then goes on with the copies. A stale message is never
//!   refused.
//! * writes the primary under the ETag of its read, so of two racing workers
//!   one restarts from a fresh read and finds the other's stamp.
//! * deletes a copy under an old value only if it names this entity and an
//!   older change wrote it (its stamp is lower), before the primary write
//!   and once more after it: an older change that read the primary earlier
//!   can write its copy late.
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
//! * Which of two entities gets a contested unique value is decided by
//!   which change claims it first, not by stamps: with out-of-order
//!   delivery, a later change can win over an earlier one that is refused.
//! * Between step 2 and step 3 of a put that moves off a unique value, the
//!   value is free while the old primary still shows it: another entity can
//!   claim it then, and for that moment two primaries show one value (only
//!   one copy exists). When the change is applied, the old primary moves on.
//! * A worker that crashes between its primary write and its second
//!   delete of old copies, while an older change racing it writes a copy
//!   under the old value, leaves that copy: on redelivery the old value is
//!   no longer known. Such a copy has an older stamp than its primary;
//!   [`lookup_verified`](InterPartitionIndex::lookup_verified) and
//!   [`list_verified`](InterPartitionIndex::list_verified) repair it (a
//!   delete conditional on the copy's ETag) when they find it. A claim
//!   left by a message that never runs again (it crashed after claiming and
//!   was poisoned) holds its value until deleted by hand.
//! * A put older than a purged tombstone would bring the entity back: purge
//!   only past the queue's message time-to-live.
//! * A put that finds a newer put of the same entity claiming a unique
//!   value fails its attempt and is retried; if the newer put is itself
//!   retried (refused for another value) through all of this put's
//!   attempts, this put ends in the poison queue with that reason, never
//!   applied silently.
//!
//! # Keys
//!
//! The entity type's own keys (its derive, say `{department}` /
//! `{employee_id:06}`) are stored with a PartitionKey prefix: the primary
//! under `empid_Sales` / `000223`, a copy under `email_Sales` /
//! `jonesj@contoso.com` with the property [`PRIMARY_ROW_KEY`] holding the
//! primary RowKey. An entity type with a property named [`PRIMARY_ROW_KEY`],
//! [`CHANGE_STAMP`], [`REMOVED`] or [`PENDING`] is refused. Normalise
//! indexed values in the key function (lower case), as RowKeys compare
//! ordinally; a value must be a valid RowKey (no `/ \ # ?`). An entity
//! travels in its message, so it must fit one (about 48 KiB of JSON); a
//! larger one is refused before any request.
//!
//! ```
//! use tablekit::{QueueServiceClient, TableEntity, TableServiceClient};
//! use tablekit_patterns::eventual::Worker;
//! use tablekit_patterns::inter_index::{InterIndex, InterPartitionIndex};
//! use tablekit_patterns::range::KeyRange;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee { department: String, employee_id: u32, last_name: String, email: String }
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
//! let by_email = InterIndex::unique("email", "email_", |e: &Employee| e.email.to_lowercase());
//! let by_name = InterIndex::non_unique("name", "lastname_", |e: &Employee| e.last_name.to_lowercase());
//! let employees = InterPartitionIndex::new(table, "empid_", jobs.clone())
//!     .with_index(&by_email)?
//!     .with_index(&by_name)?;
//!
//! // The client: one message per change.
//! let jones = |id, email: &str| Employee {
//!     department: "Sales".into(), employee_id: id, last_name: "Jones".into(), email: email.into(),
//! };
//! employees.put(&jones(223, "jonesj@contoso.com")).await?;
//! employees.put(&jones(224, "jonesk@contoso.com")).await?;
//!
//! // The worker: claims email_Sales/jonesj@contoso.com, writes
//! // empid_Sales/000223, then the copies; the same for 224.
//! let worker = employees.attach(Worker::builder(jobs, tables)).poison_queue(poison).build()?;
//! worker.drain().await?;
//!
//! let found = employees.lookup(&by_email, "Sales", "jonesj@contoso.com").await?;
//! assert_eq!(found.map(|e| e.employee_id), Some(223));
//! let joneses = employees.lookup_all(&by_name, "Sales", "jones").await?;
//! assert_eq!(joneses.iter().map(|e| e.employee_id).collect::<Vec<_>>(), [223, 224]);
//! let a_to_b = employees.list(&by_email, "Sales", KeyRange::prefix("a")).await?;
//! assert!(a_to_b.is_empty()); // "jonesj" is not in 'a'..'b'
//!
//! // 224 wants 223's email: refused, nothing written.
//! employees.put(&jones(224, "jonesj@contoso.com")).await?;
//! let report = worker.drain().await?;
//! assert_eq!(report.failed, 1);
//! let found = employees.lookup(&by_email, "Sales", "jonesj@contoso.com").await?;
//! assert_eq!(found.map(|e| e.employee_id), Some(223));
//! # Ok(()) }
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tablekit::codec::{entity_from_json, entity_to_json, to_dynamic};
use tablekit::entity::RawEntity;
use tablekit::error::DecodeError;
use tablekit::filter::{prefix_successor, Column};
use tablekit::queue::SentMessage;
use tablekit::{
    DynamicEntity, ETag, EdmValue, EntityKey, Error, IfMatch, QueueClient, Result, TableClient,
    TableEntity,
};

use crate::error::refused;
use crate::eventual::{
    Eventual, Guarded, OpError, OpResult, StepContext, WorkerBuilder, MAX_REREADS,
};
use crate::range::KeyRange;

/// The property of an index copy that holds the RowKey of its primary.
pub const PRIMARY_ROW_KEY: &str = crate::index::PRIMARY_ROW_KEY;

/// The Int64 property of a primary, a copy and a tombstone that holds the
/// stamp of the change that wrote it (microseconds since the Unix epoch).
pub const CHANGE_STAMP: &str = "ChangeStamp";

/// The Boolean property (`true`) that marks a primary as a tombstone: the
/// entity was removed by the change of its [`CHANGE_STAMP`].
pub const REMOVED: &str = "Removed";

/// The Boolean property (`true`) that marks a copy of a unique index as a
/// **claim**: written before its primary, it reserves the value for that
/// primary while the change is applied. Reads skip claims; the worker turns
/// a claim into a plain copy once the primary is written.
pub const PENDING: &str = "Pending";

/// What separates the (escaped) value from the primary RowKey in the RowKey
/// of a non-unique index's copy: `jones` + ` ` + `000223`. A space sorts
/// before every character a value can hold once escaped, so the copies of
/// one value are contiguous and in value order.
pub const VALUE_SEPARATOR: char = ' ';

type KeyFn<T> = dyn Fn(&T) -> String + Send + Sync;

struct IndexDef<T> {
    name: String,
    prefix: String,
    key: Arc<KeyFn<T>>,
    table: Option<TableClient<DynamicEntity>>,
    unique: bool,
}

impl<T> IndexDef<T> {
    /// The RowKey of the copy of the entity with RowKey `primary_row_key`
    /// whose indexed value is `value`.
    fn copy_row_key(&self, value: &str, primary_row_key: &str) -> String {
        if self.unique {
            value.to_owned()
        } else {
            format!("{}{VALUE_SEPARATOR}{primary_row_key}", escape_value(value))
        }
    }

    /// `range` over values, as a range over the RowKeys of the copies.
    fn row_key_range(&self, range: &KeyRange) -> KeyRange {
        if self.unique {
            return range.clone();
        }
        // Copies of value v are `escape(v) + ' ' + rk`; every key of a value
        // above v (escaped) is at least `escape(v) + '!'`.
        let lower = match range.lower() {
            Bound::Included(v) => Bound::Included(escape_value(v)),
            Bound::Excluded(v) => Bound::Included(format!("{}!", escape_value(v))),
            Bound::Unbounded => Bound::Unbounded,
        };
        let upper = match range.upper() {
            Bound::Included(v) => Bound::Excluded(format!("{}!", escape_value(v))),
            Bound::Excluded(v) => Bound::Excluded(escape_value(v)),
            Bound::Unbounded => Bound::Unbounded,
        };
        KeyRange::new(lower, upper)
    }
}

/// A value as it is written before [`VALUE_SEPARATOR`] in a non-unique
/// index's RowKey: `' '` becomes `"!!"` and `'!'` becomes `"!\""`, every
/// other character stays. The code is prefix-free and keeps the order of
/// values, so a prefix or range of values is a prefix or range of RowKeys,
/// and no escaped value holds the separator.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for ch in value.chars() {
        match ch {
            ' ' => out.push_str("!!"),
            '!' => out.push_str("!\""),
            c => out.push(c),
        }
    }
    out
}

/// One index of an [`InterPartitionIndex`]: a name, whether a value belongs
/// to one entity at most ([`unique`](InterIndex::unique)) or to any number
/// ([`non_unique`](InterIndex::non_unique)), the PartitionKey prefix of its
/// copies (`email_`), the function giving an entity's indexed value, and
/// optionally a table of its own. Cheap to clone.
///
/// There is no `InterIndex::new`: whether an index is unique decides what a
/// second entity with the same value gets (a refusal, or a copy of its own),
/// so every declaration says which.
///
/// ```
/// use tablekit::{DynamicEntity, EdmValue};
/// use tablekit_patterns::inter_index::InterIndex;
///
/// let text = |name: &'static str| {
///     move |e: &DynamicEntity| match e.get(name) {
///         Some(EdmValue::String(s)) => s.to_lowercase(),
///         _ => String::new(),
///     }
/// };
/// let by_email = InterIndex::unique("email", "email_", text("Email"));
/// let by_name = InterIndex::non_unique("last name", "lastname_", text("LastName"));
/// let jones = DynamicEntity::new("Sales", "000223")
///     .with("Email", "JonesJ@contoso.com")
///     .with("LastName", "Jones");
/// assert_eq!(by_email.value(&jones), "jonesj@contoso.com");
/// assert_eq!(by_email.partition_key("Sales"), "email_Sales");
/// assert_eq!(by_email.row_key(&jones)?, "jonesj@contoso.com");
/// // A non-unique copy's RowKey is the value, a space and the primary RowKey.
/// assert_eq!(by_name.row_key(&jones)?, "jones 000223");
/// # Ok::<(), tablekit::Error>(())
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
            .field("unique", &self.def.unique)
            .field("prefix", &self.def.prefix)
            .field("table", &self.def.table.as_ref().map(|t| t.name()))
            .finish()
    }
}

impl<T: TableEntity> InterIndex<T> {
    /// A **unique** index named `name`: at most one entity of a partition
    /// per value. The copy of an entity of partition `p` goes to partition
    /// `prefix` + `p` under the RowKey `key(entity)` (the seed's
    /// `email_Sales` / `jonesj@contoso.com`), in the primary's table. A
    /// change that would take a value another entity holds is refused by the
    /// worker with [`Error::constraint`] (see the [module docs](self)).
    pub fn unique(
        name: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        Self::declare(name.into(), prefix.into(), Arc::new(key), true)
    }

    /// A **non-unique** index named `name`: any number of entities per
    /// value. The copy of an entity of partition `p` goes to partition
    /// `prefix` + `p` under the RowKey `key(entity)` + [`VALUE_SEPARATOR`] +
    /// the entity's own RowKey (`lastname_Sales` / `jones 000223`), so two
    /// Joneses have two copies. Read it with
    /// [`lookup_all`](InterPartitionIndex::lookup_all) or
    /// [`list`](InterPartitionIndex::list), which take values, not RowKeys.
    pub fn non_unique(
        name: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        Self::declare(name.into(), prefix.into(), Arc::new(key), false)
    }

    fn declare(name: String, prefix: String, key: Arc<KeyFn<T>>, unique: bool) -> Self {
        InterIndex {
            def: Arc::new(IndexDef {
                name,
                prefix,
                key,
                table: None,
                unique,
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
                unique: self.def.unique,
            }),
        }
    }

    /// The index's name (the name a constraint violation carries).
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// Whether a value belongs to one entity at most.
    pub fn is_unique(&self) -> bool {
        self.def.unique
    }

    /// The PartitionKey of the copies of the entities of partition `partition_key`.
    pub fn partition_key(&self, partition_key: &str) -> String {
        format!("{}{partition_key}", self.def.prefix)
    }

    /// The indexed value of `entity`.
    pub fn value(&self, entity: &T) -> String {
        (self.def.key)(entity)
    }

    /// The RowKey of `entity`'s copy: its value for a unique index; for a
    /// non-unique one the value (a space written `!!`, a `!` written `!"`),
    /// [`VALUE_SEPARATOR`] and the entity's own RowKey. An error if the
    /// entity does not encode.
    pub fn row_key(&self, entity: &T) -> Result<String> {
        let value = self.value(entity);
        if self.def.unique {
            return Ok(value);
        }
        Ok(self.def.copy_row_key(&value, &to_dynamic(entity)?.row_key))
    }
}

/// The message of a change, as it travels. The stamp is required: a message
/// without one does not read, and the worker fails it (then poisons it).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Change {
    Put {
        entity: serde_json::Value,
        stamp: i64,
    },
    Remove {
        partition_key: String,
        row_key: String,
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

/// The stamp stored in `d` (0 if it has none: not written by this module).
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

fn is_pending(d: &DynamicEntity) -> bool {
    matches!(d.get(PENDING), Some(EdmValue::Boolean(true)))
}

/// The primary RowKey a copy names.
fn named_primary(d: &DynamicEntity) -> Option<&str> {
    match d.get(PRIMARY_ROW_KEY) {
        Some(EdmValue::String(rk)) => Some(rk),
        _ => None,
    }
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

/// How a change may write one copy once its primary is written.
enum Slot {
    /// A non-unique index: its RowKey holds the primary's, so no other
    /// entity's copy can be there: insert-or-replace.
    Own,
    /// A unique index whose copy this change holds for its primary (a
    /// claim, or its copy from before, stamped by this change), written
    /// with this ETag: replace under it.
    Held {
        etag: ETag,
        /// What to do with the copy if the change is refused.
        release: Release,
    },
    /// A unique index whose copy a newer change of this primary wrote (its
    /// stamp is higher): never written over with an older stamp, which
    /// would let an older change delete it.
    Newer,
}

/// How a refused change gives back a copy it claimed.
enum Release {
    /// Inserted by this change: delete it.
    Delete,
    /// This primary's copy from before (as found), stamped by this change:
    /// rewritten from the primary as it is then if that shows the value
    /// (another change of this primary may have been applied meanwhile),
    /// else put back as found.
    Restore(DynamicEntity),
    /// Restamped by an earlier attempt of this change (what it was is not
    /// known): rewrite it from the primary as read, or delete it if that
    /// does not show the value.
    Settle,
    /// Not this change's to give back.
    Leave,
}

/// A claim that found the value taken: the RowKey of the primary holding it.
struct Taken(String);

/// A newer change of this entity is claiming the copy `key`: if it goes
/// through, this change is stale; if it is refused, it gives the claim back.
/// Either way, later: the attempt fails and the message is retried.
fn newer_claim(key: &EntityKey) -> OpError {
    format!(
        "the index copy {key} is being claimed by a newer change of this entity; will retry later"
    )
    .into()
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
        for reserved in [PRIMARY_ROW_KEY, CHANGE_STAMP, REMOVED, PENDING] {
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
            copy.row_key = def.copy_row_key(&(def.key)(entity), &own.row_key);
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
    /// refused before any request. Whether a unique value is free is known
    /// only when the worker applies the change (see the [module docs](self)).
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

    /// Claims the copy `copy` of the unique index `def` (as `first_read`
    /// found it) for its primary and this change: an insert (as a claim if `pending`) if there is none; if
    /// this primary holds it under an older stamp and `pending`, the same
    /// copy stamped `stamp` (so an older change racing this one, which
    /// deletes only copies older than itself, leaves it); [`Taken`] if
    /// another primary holds it.
    async fn claim(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        copy: &DynamicEntity,
        stamp: i64,
        pending: bool,
        first_read: Option<(DynamicEntity, ETag)>,
    ) -> OpResult<std::result::Result<Slot, Taken>> {
        let table = self.table_of(def);
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        let own = named_primary(copy).unwrap_or_default();
        let mut first_read = Some(first_read);
        for _ in 0..MAX_REREADS {
            let read = match first_read.take() {
                Some(read) => read,
                None => ctx.read(&table, key.clone()).await?,
            };
            match read {
                Some((found, _)) if named_primary(&found) != Some(own) => {
                    let holder = named_primary(&found).unwrap_or_default().to_owned();
                    return Ok(Err(Taken(holder)));
                }
                Some((found, _)) if is_pending(&found) && stamp_of(&found) > stamp => {
                    return Err(newer_claim(&key));
                }
                Some((found, _)) if stamp_of(&found) > stamp => return Ok(Ok(Slot::Newer)),
                Some((_, etag)) if !pending => {
                    // The primary written: the copy to replace.
                    return Ok(Ok(Slot::Held {
                        etag,
                        release: Release::Leave,
                    }));
                }
                Some((found, etag)) if stamp_of(&found) == stamp => {
                    // This change's claim or restamp from an earlier attempt.
                    let release = if is_pending(&found) {
                        Release::Delete
                    } else {
                        Release::Settle
                    };
                    return Ok(Ok(Slot::Held { etag, release }));
                }
                Some((found, etag)) => {
                    let mut stamped = if is_pending(&found) {
                        copy.clone().with(PENDING, true)
                    } else {
                        found.clone()
                    };
                    stamped.set(CHANGE_STAMP, stamp);
                    match ctx.replace_if_unchanged(&table, &stamped, &etag).await? {
                        Guarded::Done(Some(etag)) => {
                            return Ok(Ok(Slot::Held {
                                etag,
                                release: Release::Restore(found),
                            }))
                        }
                        Guarded::Done(None) | Guarded::Changed | Guarded::Gone => continue,
                    }
                }
                None => {
                    let mut claim = copy.clone();
                    if pending {
                        claim.set(PENDING, true);
                    }
                    let written = match table.insert(&claim).await {
                        Ok(w) => Some(w.etag().clone()),
                        Err(e) if e.is_conflict() => None,
                        Err(e) => return Err(e.into()),
                    };
                    ctx.step(&format!("claim {}", table.name())).await?;
                    if let Some(etag) = written {
                        let release = if pending {
                            Release::Delete
                        } else {
                            Release::Leave
                        };
                        return Ok(Ok(Slot::Held { etag, release }));
                    }
                }
            }
        }
        Err(format!("the index copy {key} kept changing; will retry later").into())
    }

    /// Claims every unique value of `copies` for their primary. First every
    /// unique copy is read: if one is held by another primary, the change is
    /// refused before any write (what an earlier attempt of it left is
    /// given back). Then each value is claimed in index order; one taken
    /// meanwhile by another primary (a race) refuses the change too, after
    /// the claims it made are given back. A refusal is a
    /// [`Error::constraint`] and a `warn` event naming the index, the value
    /// and both primaries.
    async fn claim_all(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        stamp: i64,
        pending: bool,
    ) -> OpResult<Vec<Slot>> {
        let mut reads = Vec::with_capacity(copies.len());
        let mut taken = None;
        for (i, (def, copy)) in self.inner.indexes.iter().zip(copies).enumerate() {
            if !def.unique {
                reads.push(None);
                continue;
            }
            let key = EntityKey::new(&copy.partition_key, &copy.row_key);
            let found = ctx.read(&self.table_of(def), key).await?;
            if let Some((f, _)) = &found {
                if taken.is_none() && named_primary(f) != named_primary(copy) {
                    taken = Some((i, named_primary(f).unwrap_or_default().to_owned()));
                }
            }
            reads.push(Some(found));
        }
        if let Some((i, holder)) = taken {
            let leftovers: Vec<Slot> = reads
                .iter()
                .zip(copies)
                .map(|(read, copy)| match read {
                    Some(Some((f, etag)))
                        if named_primary(f) == named_primary(copy) && stamp_of(f) == stamp =>
                    {
                        Slot::Held {
                            etag: etag.clone(),
                            release: if is_pending(f) {
                                Release::Delete
                            } else {
                                Release::Settle
                            },
                        }
                    }
                    _ => Slot::Own,
                })
                .collect();
            if pending {
                self.release(ctx, copies, &leftovers).await?;
            }
            return Err(self.refusal(&self.inner.indexes[i], &copies[i], &holder));
        }
        let mut slots = Vec::with_capacity(copies.len());
        for ((def, copy), read) in self.inner.indexes.iter().zip(copies).zip(reads) {
            let Some(read) = read else {
                slots.push(Slot::Own);
                continue;
            };
            match self.claim(ctx, def, copy, stamp, pending, read).await {
                Ok(Ok(slot)) => slots.push(slot),
                Ok(Err(Taken(holder))) => {
                    self.release(ctx, copies, &slots).await?;
                    return Err(self.refusal(def, copy, &holder));
                }
                Err(e) => {
                    // Retried later: give back what this attempt claimed.
                    self.release(ctx, copies, &slots).await?;
                    return Err(e);
                }
            }
        }
        Ok(slots)
    }

    /// Gives back what a refused change claimed (`slots`, in index order).
    /// A copy it restamped is rewritten from the primary as it is now if
    /// that shows the value (another delivery of this change, or another
    /// change of this primary, may have been applied meanwhile), else put
    /// back as found (or deleted, if what it was is not known).
    async fn release(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        slots: &[Slot],
    ) -> OpResult {
        for (i, ((def, copy), slot)) in self.inner.indexes.iter().zip(copies).zip(slots).enumerate()
        {
            let Slot::Held { etag, release } = slot else {
                continue;
            };
            let table = self.table_of(def);
            let key = EntityKey::new(&copy.partition_key, &copy.row_key);
            match release {
                Release::Delete => {
                    ctx.delete_if_unchanged(&table, key, etag).await?;
                }
                Release::Restore(_) | Release::Settle => {
                    let primary_key = EntityKey::new(
                        self.primary_partition_key(
                            copy.partition_key
                                .strip_prefix(&def.prefix)
                                .unwrap_or_default(),
                        ),
                        named_primary(copy).unwrap_or_default(),
                    );
                    let fresh = match self.read_primary(ctx, &primary_key).await? {
                        Current::Live { entity, stamp, .. } => {
                            Some(self.stored(&entity, stamp)?.1.swap_remove(i))
                        }
                        _ => None,
                    };
                    match (fresh, release) {
                        (Some(fresh), _) if fresh.row_key == copy.row_key => {
                            ctx.replace_if_unchanged(&table, &fresh, etag).await?;
                        }
                        (_, Release::Restore(found)) => {
                            ctx.replace_if_unchanged(&table, found, etag).await?;
                        }
                        _ => {
                            ctx.delete_if_unchanged(&table, key, etag).await?;
                        }
                    }
                }
                Release::Leave => {}
            }
        }
        Ok(())
    }

    fn refusal(&self, def: &IndexDef<T>, copy: &DynamicEntity, holder: &str) -> OpError {
        let own_partition = copy
            .partition_key
            .strip_prefix(&def.prefix)
            .unwrap_or(&copy.partition_key);
        let own_row = named_primary(copy).unwrap_or_default();
        tracing::warn!(
            index = %def.name,
            value = %copy.row_key,
            partition_key = %own_partition,
            primary = %own_row,
            held_by = %holder,
            "change refused: the unique value is held by another entity"
        );
        Box::new(Error::constraint(
            def.name.clone(),
            (copy.partition_key.clone(), copy.row_key.clone()),
            Some((own_partition.to_owned(), holder.to_owned())),
        ))
    }

    /// Deletes the copy `key` of `def` if it names the primary `own` and a
    /// change older than `stamp` wrote it (under its ETag, reading again if
    /// it changed meanwhile): a copy of another primary, or one a newer
    /// change wrote, is left alone.
    async fn delete_older_copy(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        key: EntityKey,
        own: &str,
        stamp: i64,
    ) -> OpResult {
        let table = self.table_of(def);
        for _ in 0..MAX_REREADS {
            let Some((copy, etag)) = ctx.read(&table, key.clone()).await? else {
                return Ok(());
            };
            if named_primary(&copy) != Some(own) || stamp_of(&copy) >= stamp {
                return Ok(());
            }
            match ctx.delete_if_unchanged(&table, key.clone(), &etag).await? {
                Guarded::Changed => continue,
                Guarded::Done(_) | Guarded::Gone => return Ok(()),
            }
        }
        Err(format!("the index copy {key} kept changing; will retry later").into())
    }

    /// Brings a copy this change wrote (`copy`, whose stored ETag is `etag`,
    /// so it still names this primary) in line with the primary `current`,
    /// which a newer change wrote: the copy is rewritten from it if it still
    /// has the copy's value, deleted otherwise; both under `etag`, so a newer
    /// change's own write of the copy wins.
    async fn settle_copy(
        &self,
        ctx: &StepContext,
        index: usize,
        copy: &DynamicEntity,
        etag: &ETag,
        current: &Current<T>,
    ) -> OpResult {
        let def = &self.inner.indexes[index];
        let table = self.table_of(def);
        if let Current::Live { entity, stamp, .. } = current {
            let (_, fresh) = self.stored(entity, *stamp)?;
            if fresh[index].row_key == copy.row_key {
                ctx.replace_if_unchanged(&table, &fresh[index], etag)
                    .await?;
                return Ok(());
            }
        }
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        ctx.delete_if_unchanged(&table, key, etag).await?;
        Ok(())
    }

    /// The copies of the old primary `current` whose RowKeys differ from the
    /// new `copies`: to delete.
    fn old_copies(
        &self,
        current: &Current<T>,
        copies: &[DynamicEntity],
    ) -> Vec<(usize, EntityKey)> {
        let Current::Live { entity: old, .. } = current else {
            return Vec::new();
        };
        let Ok((_, old_copies)) = self.stored(old, 0) else {
            return Vec::new();
        };
        old_copies
            .into_iter()
            .zip(copies)
            .enumerate()
            .filter(|(_, (old, new))| old.row_key != new.row_key)
            .map(|(i, (old, _))| (i, EntityKey::new(old.partition_key, old.row_key)))
            .collect()
    }

    async fn apply_put(&self, entity: &T, stamp: i64, ctx: &StepContext) -> OpResult {
        let (primary, copies) = self.stored(entity, stamp)?;
        let key = EntityKey::new(&primary.partition_key, &primary.row_key);
        let own = primary.row_key.as_str();
        for attempt in 1..=MAX_REREADS {
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let current = self.read_primary(ctx, &key).await?;
            if let Some(stored) = current.stamp().filter(|s| *s >= stamp) {
                let resumed = match &current {
                    Current::Live { entity: c, .. } if stored == stamp => {
                        entity_to_json(c)? == entity_to_json(entity)?
                    }
                    _ => false,
                };
                if resumed {
                    // An earlier attempt of this message wrote the primary
                    // (after claiming its unique values).
                    let slots = self.claim_all(ctx, &copies, stamp, false).await?;
                    let etags = self.write_copies(ctx, &copies, &slots).await?;
                    return self.recheck(ctx, &key, &copies, &etags, stamp).await;
                }
                // A newer change (or, on a tie, the one stored) wins; undo
                // what an earlier attempt of this one may have left (a claim,
                // or a copy written after the newer change's).
                for (i, (def, copy)) in self.inner.indexes.iter().zip(&copies).enumerate() {
                    let copy_key = EntityKey::new(&copy.partition_key, &copy.row_key);
                    if let Some((found, etag)) = ctx.read(&self.table_of(def), copy_key).await? {
                        if named_primary(&found) == Some(own) && stamp_of(&found) == stamp {
                            self.settle_copy(ctx, i, copy, &etag, &current).await?;
                        }
                    }
                }
                return Ok(());
            }
            // Claim the unique values first: a refused change writes nothing.
            let slots = self.claim_all(ctx, &copies, stamp, true).await?;
            let old_copies = self.old_copies(&current, &copies);
            for (i, old) in &old_copies {
                self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), own, stamp)
                    .await?;
            }
            if !self.write_primary(ctx, &primary, &current).await? {
                continue;
            }
            let etags = self.write_copies(ctx, &copies, &slots).await?;
            // Again after the primary write: a change older than this one
            // that read the primary before it may have written a copy under
            // the old value since (its own re-read came too early to see
            // this change).
            for (i, old) in &old_copies {
                self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), own, stamp)
                    .await?;
            }
            return self.recheck(ctx, &key, &copies, &etags, stamp).await;
        }
        Err(format!("the primary {key} kept changing; will retry later").into())
    }

    /// Writes each copy as its slot allows; the ETag of each one written.
    async fn write_copies(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        slots: &[Slot],
    ) -> OpResult<Vec<Option<ETag>>> {
        let mut etags = Vec::with_capacity(copies.len());
        for ((def, copy), slot) in self.inner.indexes.iter().zip(copies).zip(slots) {
            let table = self.table_of(def);
            etags.push(match slot {
                Slot::Own => Some(ctx.insert_or_replace(&table, copy).await?),
                Slot::Held { etag, .. } => self.replace_own_copy(ctx, &table, copy, etag).await?,
                Slot::Newer => None,
            });
        }
        Ok(etags)
    }

    /// Replaces this primary's unique copy `copy` (its ETag as last seen:
    /// `etag`) once the primary is written. If another change of this
    /// primary rewrote it meanwhile with a stamp no newer (a refused one
    /// putting back what it found), it is read again and replaced all the
    /// same. A newer change's copy is left (`None`); a newer change's claim
    /// still in flight fails the attempt, to retry later. `None` also if the
    /// copy is gone (a newer change of this primary moved off the value) or
    /// another primary's.
    async fn replace_own_copy(
        &self,
        ctx: &StepContext,
        table: &TableClient<DynamicEntity>,
        copy: &DynamicEntity,
        etag: &ETag,
    ) -> OpResult<Option<ETag>> {
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        let mut etag = etag.clone();
        for _ in 0..MAX_REREADS {
            match ctx.replace_if_unchanged(table, copy, &etag).await? {
                Guarded::Done(written) => return Ok(written),
                Guarded::Gone => return Ok(None),
                Guarded::Changed => match ctx.read(table, key.clone()).await? {
                    Some((found, _)) if named_primary(&found) != named_primary(copy) => {
                        return Ok(None)
                    }
                    Some((found, _)) if stamp_of(&found) > stamp_of(copy) => {
                        if is_pending(&found) {
                            return Err(newer_claim(&key));
                        }
                        return Ok(None);
                    }
                    Some((_, fresh)) => etag = fresh,
                    None => return Ok(None),
                },
            }
        }
        Err(format!("the index copy {key} kept changing; will retry later").into())
    }

    /// Reads the primary again after the copies were written: if a newer
    /// change replaced it meanwhile, the copies just written may be stale.
    async fn recheck(
        &self,
        ctx: &StepContext,
        key: &EntityKey,
        copies: &[DynamicEntity],
        etags: &[Option<ETag>],
        stamp: i64,
    ) -> OpResult {
        let current = self.read_primary(ctx, key).await?;
        if let Current::Live { stamp: s, .. } = &current {
            if *s == stamp {
                return Ok(());
            }
        }
        for (i, (copy, etag)) in copies.iter().zip(etags).enumerate() {
            if let Some(etag) = etag {
                self.settle_copy(ctx, i, copy, etag, &current).await?;
            }
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
            if current.stamp().is_some_and(|s| s >= stamp) {
                // A newer change, or this one's earlier attempt (a tie: the
                // change stored wins).
                return Ok(());
            }
            let old_copies: Vec<(usize, EntityKey)> = match &current {
                Current::Live { entity: old, .. } => {
                    let (_, old_copies) = self.stored(old, 0)?;
                    old_copies
                        .into_iter()
                        .enumerate()
                        .map(|(i, c)| (i, EntityKey::new(c.partition_key, c.row_key)))
                        .collect()
                }
                _ => Vec::new(),
            };
            for (i, old) in &old_copies {
                self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), row_key, stamp)
                    .await?;
            }
            if !self.write_primary(ctx, &tombstone, &current).await? {
                continue;
            }
            // As for a put: an older change's late copy write.
            for (i, old) in &old_copies {
                self.delete_older_copy(ctx, &self.inner.indexes[*i], old.clone(), row_key, stamp)
                    .await?;
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
        d.properties.remove(PENDING);
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

    fn unique_def(&self, index: &InterIndex<T>, method: &str) -> Result<&Arc<IndexDef<T>>> {
        let def = self.def(index)?;
        if !def.unique {
            return Err(refused(
                "inter_index",
                format!(
                    "index {:?} is not unique: a value can have several entities; \
                     use {method}_all or list",
                    def.name
                ),
            ));
        }
        Ok(def)
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

    /// Reads the copy of the **unique** `index` for `value` in partition
    /// `partition_key` (`email_Sales` / `jonesj@contoso.com`): one point
    /// read, no check against the primary. A claim (a change still being
    /// applied) reads as `None`. On a non-unique index it is refused before
    /// any request: use [`lookup_all`](Self::lookup_all).
    pub async fn lookup(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Option<T>> {
        let def = self.unique_def(index, "lookup")?;
        let pk = format!("{}{partition_key}", def.prefix);
        match self.table_of(def).get((&*pk, value)).await? {
            Some(d) if !is_pending(&d) => Ok(Some(self.decode_copy(def, d)?)),
            _ => Ok(None),
        }
    }

    /// Every entity whose value in `index` is `value`, in partition
    /// `partition_key`, in the order of their RowKeys: one range query (for
    /// a non-unique index, `RowKey ge 'jones ' and RowKey lt 'jones!'`), no
    /// check against the primaries. For a unique index, zero or one.
    pub async fn lookup_all(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Vec<T>> {
        self.list(index, partition_key, KeyRange::inclusive(value, value))
            .await
    }

    /// Like [`lookup`](Self::lookup), then reads the primary the copy names
    /// and returns it if its indexed value is still `value`. A copy whose
    /// primary is gone, or has another value, is stale: it is deleted (if
    /// unchanged since read, so a concurrent worker's rewrite wins) and the
    /// answer is `None`. A claim whose change has not written the primary
    /// yet is left alone (`None`); one whose primary shows the value counts.
    /// Unique indexes only, like `lookup`.
    pub async fn lookup_verified(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Option<T>> {
        let def = self.unique_def(index, "lookup")?;
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
        let (pending, copy_stamp) = (is_pending(&copy), stamp_of(&copy));
        let entity = self.decode_copy(def, copy)?;
        let own = to_dynamic(&entity)?;
        // The primary the copy names (its PrimaryRowKey): only its state
        // decides whether the copy is stale.
        let pk = self.primary_partition_key(&own.partition_key);
        let primary = self.inner.primary.get((&*pk, &*own.row_key)).await?;
        let primary_stamp = primary.as_ref().map(stamp_of);
        let primary = match primary {
            Some(d) if !is_tombstone(&d) => Some(self.decode_primary(d)?),
            _ => None,
        };
        if let Some(p) = primary {
            if def.copy_row_key(&(def.key)(&p), &own.row_key) == key.row_key {
                // (A claim counts once its primary shows the value: only
                // the confirming write is still to come.)
                return Ok(Some(p));
            }
        }
        if pending && primary_stamp.is_none_or(|s| s < copy_stamp) {
            // A claim whose change has not written the primary yet.
            return Ok(None);
        }
        let guard = etag.map_or(IfMatch::Any, IfMatch::ETag);
        match table.delete_if_exists(key, guard).await {
            Ok(_) => {}
            Err(e) if e.is_precondition_failed() => {}
            Err(e) => return Err(e),
        }
        tracing::info!(index = %def.name, row_key = %own.row_key, "stale index entry repaired");
        Ok(None)
    }

    async fn copies_in(
        &self,
        def: &IndexDef<T>,
        partition_key: &str,
        range: &KeyRange,
    ) -> Result<Vec<DynamicEntity>> {
        let rows = self
            .table_of(def)
            .query()
            .filter_by(
                def.row_key_range(range)
                    .filter(&format!("{}{partition_key}", def.prefix), ""),
            )
            .fetch_all()
            .await?;
        Ok(rows)
    }

    /// The copies of `index` in partition `partition_key` whose **values**
    /// are in `range`, in value order (then, for a non-unique index, primary
    /// RowKey order): one range query (appendix A: `PartitionKey eq
    /// 'email_Sales' and RowKey ge 'a' and RowKey lt 'b'`). Claims are left
    /// out; no check against the primaries.
    pub async fn list(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        range: KeyRange,
    ) -> Result<Vec<T>> {
        let def = self.def(index)?;
        let rows = self.copies_in(def, partition_key, &range).await?;
        rows.into_iter()
            .filter(|d| !is_pending(d))
            .map(|d| self.decode_copy(def, d))
            .collect()
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
        let rows = self.copies_in(def, partition_key, &range).await?;
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
    fn a_message_carries_its_stamp_and_one_without_is_refused() {
        let json = serde_json::to_value(Change::Put {
            entity: serde_json::json!({}),
            stamp: 7,
        })
        .unwrap();
        assert_eq!(json, serde_json::json!({"put": {"entity": {}, "stamp": 7}}));
        assert!(serde_json::from_str::<Change>(r#"{"put":{"entity":{"a":1}}}"#).is_err());
        assert!(serde_json::from_str::<Change>(
            r#"{"remove":{"partition_key":"p","row_key":"r"}}"#
        )
        .is_err());
    }

    fn def(unique: bool) -> IndexDef<()> {
        IndexDef {
            name: "n".into(),
            prefix: "p_".into(),
            key: Arc::new(|_: &()| String::new()),
            table: None,
            unique,
        }
    }

    #[test]
    fn escaped_values_keep_their_order_and_never_hold_the_separator() {
        let values = [
            "", " ", "!", "a", "a b", "a!", "a c", "ab", "van dyke", "van", "vana",
        ];
        let non_unique = def(false);
        let mut by_value: Vec<&str> = values.to_vec();
        by_value.sort();
        let mut by_key: Vec<(String, &str)> = values
            .iter()
            .map(|v| (non_unique.copy_row_key(v, "000223"), *v))
            .collect();
        by_key.sort();
        assert_eq!(by_key.iter().map(|(_, v)| *v).collect::<Vec<_>>(), by_value);
        for v in values {
            assert!(!escape_value(v).contains(VALUE_SEPARATOR), "{v:?}");
        }
        assert_eq!(non_unique.copy_row_key("jones", "000223"), "jones 000223");
        assert_eq!(def(true).copy_row_key("jones", "000223"), "jones");
    }

    #[test]
    fn a_value_range_selects_exactly_the_copies_of_those_values() {
        let non_unique = def(false);
        let keys: Vec<(String, &str)> = ["van", "van dyke", "vana", "vb", "va", "van!"]
            .iter()
            .flat_map(|v| ["000001", "0 2"].map(|rk| (non_unique.copy_row_key(v, rk), *v)))
            .collect();
        let within = |range: KeyRange, value: &str| {
            let range = non_unique.row_key_range(&range);
            let ok_lower = match range.lower() {
                Bound::Included(b) => value >= b.as_str(),
                Bound::Excluded(b) => value > b.as_str(),
                Bound::Unbounded => true,
            };
            let ok_upper = match range.upper() {
                Bound::Included(b) => value <= b.as_str(),
                Bound::Excluded(b) => value < b.as_str(),
                Bound::Unbounded => true,
            };
            ok_lower && ok_upper
        };
        type Case = (KeyRange, fn(&str) -> bool);
        let cases: Vec<Case> = vec![
            (KeyRange::inclusive("van", "van"), |v| v == "van"),
            (KeyRange::prefix("van"), |v| v.starts_with("van")),
            (KeyRange::inclusive("va", "van"), |v| {
                ("va"..="van").contains(&v)
            }),
            (KeyRange::half_open("van", "vana"), |v| {
                ("van".."vana").contains(&v)
            }),
            (
                KeyRange::new(Bound::Excluded("van".into()), Bound::Unbounded),
                |v| v > "van",
            ),
        ];
        for (range, want) in cases {
            for (key, value) in &keys {
                assert_eq!(
                    within(range.clone(), key),
                    want(value),
                    "{range:?} {value:?}"
                );
            }
        }
    }
}
