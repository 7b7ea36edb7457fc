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
//! | the worker, for a put | read primary; per unique index: read the copy under the new value (refused here, before any write, if another entity holds one); per unique index: insert a claim if there is none, restamp this entity's copy, or take over the claim of an older change of this entity (refused if another entity took the value meanwhile); on a refusal or a failure while claiming, per unique index: read the copy again, and the primary once, to take this change off its claims (+1 conditional write or delete per claim it held or waited on; per copy it restamped, +1 conditional write and a read of the primary, again if the primary changed meanwhile); per copy the primary as read names as moved off by the put before: read it, delete it under its ETag if this entity's and older; replace the primary under the ETag read (insert if absent), naming the copies under the values that change; per changed value: read the old copy, delete it under its ETag if this entity's and older; write each copy (unique: replace the claim under its ETag, or, for a copy a newer change of this entity held when it was claimed, read it and write it if that change let it go; non-unique: insert-or-replace); read the primary again (+1 conditional write or delete per copy if a newer change got in); on a last attempt that fails or is refused, what the give-up does: read the primary, take this change off its claims (as on a refusal), and, if the primary is not this change's, per copy whose value changed, insert the stored primary's copy (409 if it is there: always, unless a worker of an earlier version deleted it), then, if one was written, read the primary (+1 conditional write or delete per copy written back, if it changed); if it is, delete the copies it names as moved off (read, delete if older), write the copy of each non-unique index and read the primary again (+1 conditional write or delete per copy if a newer change got in), and turn the claims into copies |
//! | the worker, for a stale put (a newer change is stored) | read primary; read each copy under this change's values (+1 conditional delete or rewrite of each one this change wrote); per unique index: read the copy again (+1 read of the primary, +1 conditional write, if a claim lists this change) |
//! | the worker, for a remove | read primary (newer: done; this remove's tombstone: per copy it names, read, delete if older, done); per copy the primary names as moved off, then per copy: read, delete if this entity's and older; replace the primary by a tombstone naming those copies, under the ETag read (insert if absent); per copy again: read, delete if older; on a last attempt that fails before the tombstone write: per copy, insert it from the primary (409 if it is there), then, if one was written, read the primary (+1 conditional write or delete per copy written back, if it changed); given up after its tombstone write: read primary, per copy it names, read, delete if older |
//! | [`get`](InterPartitionIndex::get), [`lookup`](InterPartitionIndex::lookup) | 1 point read |
//! | [`lookup_all`](InterPartitionIndex::lookup_all), [`list`](InterPartitionIndex::list), [`list_primary`](InterPartitionIndex::list_primary) | 1 range query (a request per page) |
//! | [`lookup_verified`](InterPartitionIndex::lookup_verified) | 2 point reads (+1 conditional delete to repair) |
//! | [`list_verified`](InterPartitionIndex::list_verified) | 1 range query, 1 point read per copy (+1 conditional delete per repair) |
//! | [`purge_tombstones`](InterPartitionIndex::purge_tombstones) | 1 query over the primary partitions (a request per page), 1 conditional delete per old tombstone |
//!
//! A primary write that finds the primary changed since its read (412, or
//! 409 on an insert) starts again from the read, after a jittered pause, at
//! most [`MAX_REREADS`](crate::eventual::MAX_REREADS) times; then the message fails and is retried later.
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
//!   written, or a copy with the entity's previous content. A copy is
//!   written after its primary and deleted before it, except in two races
//!   the exhaustive check found (an older put's copy written just after a
//!   newer remove's tombstone; a give-up writing back a copy that the other
//!   delivery of a remove has just deleted): then a copy names a removed
//!   entity for a moment, until the put's re-read of the primary or the next
//!   delivery deletes it (two crashes in that window could leave it until a
//!   `_verified` read repairs it). [`lookup`](InterPartitionIndex::lookup)
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
//!    is stale, or was refused and gave the claim back). Once this change's
//!    primary is written (by an earlier attempt of it), it finishes instead,
//!    and leaves that claim to the newer change, which turns it into this
//!    primary's copy if it gives up. A claim of an
//!    *older* change of the same entity, or of another delivery of this
//!    same change, is taken over: that change may still be in flight (or
//!    have crashed, to be retried), so the claim lists it as **waiting**
//!    ([`CLAIM_WAITING`]) and goes back to it if this change gives up. On a
//!    **refusal**, and on any failure while claiming, the change gives up
//!    every claim under its values: the copies it restamped are put back
//!    (from the primary as it is then, read again after the write in case
//!    another change of this entity wrote it meanwhile; such a change,
//!    which found the copy held by this newer one and left it, writes it
//!    itself after its primary write if this one has let it go),
//!    and it is taken off each claim, as holder or waiting; a claim left
//!    with no one is deleted (or becomes the primary's copy, if the primary
//!    shows the value). All under ETags. A claim, and a copy restamped,
//!    names the message whose attempt holds it ([`CLAIM_MESSAGE`]): an
//!    attempt gives up what its own message holds (its earlier, crashed
//!    attempts included), never what another delivery of the change holds,
//!    which may still be using it (a copy put back with its earlier stamp
//!    could be deleted by an older change in that delivery's path; a
//!    delivery that finds its copy gone while its primary is written puts
//!    it back). Then a `tracing::warn!` event
//!    names the index, the value and both entities, and the message fails
//!    with [`Error::constraint`](tablekit::Error::constraint)`(index, (copy pk, copy rk), Some((pk, holder rk)))`.
//!    **A refused change writes nothing**: the primary and its copies never
//!    disagree about a unique value. The worker retries a failed message
//!    after its retry delay (the holder may give the value up in a change
//!    still in the queue: delivery is not in order), and after
//!    [`max_dequeue_count`](crate::eventual::WorkerBuilder::max_dequeue_count)
//!    attempts moves it to the poison queue, whose
//!    [`PoisonedMessage::error`](crate::eventual::PoisonedMessage) holds the
//!    constraint text. The [`Report`](crate::eventual::Report) of the run
//!    counts it as failed, then poisoned.
//! 2. deletes the copies the primary as read names as moved off
//!    ([`MOVED_COPIES`]): the put that wrote it may have stopped before
//!    deleting them. The primary no longer shows those values;
//! 3. writes the primary, under the ETag of its read, naming in
//!    [`MOVED_COPIES`] this entity's copies under the values it moves off;
//! 4. deletes those copies. Until the primary has moved off a unique
//!    value, its copy keeps the value from any other entity, so two
//!    primaries never show it; once the primary is written, the old values
//!    are known from it, so an attempt that stops in between leaves the
//!    deletes to the next attempt (which finds its own primary) or to the
//!    give-up (below);
//! 5. writes the copies (a claim becomes a plain copy; if another change of
//!    this entity rewrote it meanwhile, it is read and written again), and
//!    reads the primary again (below).
//!
//! A remove deletes the entity's copies first (so a copy never names a
//! removed entity) and then writes its tombstone, which names them. A
//! remove that stops for good before its tombstone (a failure on its last
//! attempt, or a give-up, below) writes them back from the primary as
//! stored: each is inserted, so never over a copy written since, and
//! brought in line if the primary changed meanwhile.
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
//!   older change wrote it (its stamp is lower), after the primary write
//!   and before its own copies: an older change that read the primary
//!   earlier and writes its copy after this delete reads the primary again
//!   after its copies, finds this change, and takes the copy back.
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
//! * Between the moment a remove deletes a unique copy and its tombstone
//!   write, the value is free while the old primary still shows it:
//!   another entity can claim it then, and for that moment two primaries
//!   show one value. When the remove is applied, the old primary is gone.
//!   If it is not (it stops there and is then given up, or fails its last
//!   attempt), the old primary keeps the value and its copy is written
//!   back, unless another entity took the value in that moment: then both
//!   primaries show it, and the copy, and so the lookups, name the other
//!   one. (A put keeps its old copies until its primary has moved off
//!   them: see step 4.)
//! * During a rolling deployment, a worker of the previous version does
//!   not read [`MOVED_COPIES`]: if it resumes a put whose attempt by this
//!   version stopped between the primary write and step 4, the copies
//!   under the old values stay (with an older stamp than the primary, and
//!   a unique one keeps its value from other entities) until the entity's
//!   next change deletes them or
//!   [`lookup_verified`](InterPartitionIndex::lookup_verified) and
//!   [`list_verified`](InterPartitionIndex::list_verified) repair them (a
//!   delete conditional on the copy's ETag) when they find them. A change
//!   whose last attempt stopped (its worker died) is given up when the
//!   message comes back over its limit: before poisoning it, the worker
//!   takes the change off its claims ([`WorkerBuilder::on_give_up`], registered by
//!   [`attach`](InterPartitionIndex::attach)); if it had written its
//!   primary, the copies it moved off are deleted, the claims become its
//!   copies and its non-unique copies are written; if not, any copy of the
//!   primary as stored under a value it moves off that is missing (a worker
//!   of the previous version deleted them before its primary write) is
//!   written back. A remove given up writes back the
//!   copies of the primary if its tombstone is not written. A last attempt
//!   that fails (its message is then poisoned without running again) does
//!   the same before it returns its error
//!   ([`StepContext::is_last_attempt`](crate::eventual::StepContext::is_last_attempt)):
//!   so a change whose primary an earlier, stopped attempt wrote leaves no
//!   claim even when its later attempts keep failing. Only if that
//!   give-up stops too does a claim stay (or a copy stay deleted); it holds
//!   its value until a newer change of the same entity is applied, and then
//!   that change, if it claims the value too, or the next
//!   [`lookup_verified`](InterPartitionIndex::lookup_verified) of the value
//!   removes it.
//! * A message delivered twice (delivery is at least once) runs as two
//!   messages of one change: one can be refused while the value is taken,
//!   and end in the poison queue, while the other goes through later, after
//!   the holder moved off the value. Before acting on a refused change from
//!   the poison queue, [`get`](InterPartitionIndex::get) the entity and
//!   compare it with the change the message carries (or read the primary's
//!   [`CHANGE_STAMP`] against the message's stamp).
//! * A put older than a purged tombstone would bring the entity back: purge
//!   only past the queue's message time-to-live.
//! * A put that finds, before its primary write, a newer put of the same
//!   entity claiming a unique value fails its attempt and is retried; if
//!   the newer put is itself retried (refused for another value) through
//!   all of this put's attempts, this put ends in the poison queue with
//!   that reason, never applied silently. (After its primary write, it
//!   finishes: see step 1.)
//!
//! # Keys
//!
//! The entity type's own keys (its derive, say `{department}` /
//! `{employee_id:06}`) are stored with a PartitionKey prefix: the primary
//! under `empid_Sales` / `000223`, a copy under `email_Sales` /
//! `jonesj@contoso.com` with the property [`PRIMARY_ROW_KEY`] holding the
//! primary RowKey. An entity type with a property named [`PRIMARY_ROW_KEY`],
//! [`CHANGE_STAMP`], [`MOVED_COPIES`], [`REMOVED`] or [`PENDING`] is refused. Normalise
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
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tablekit::codec::{entity_to_json, to_dynamic};
use tablekit::error::DecodeError;
use tablekit::queue::SentMessage;
use tablekit::{DynamicEntity, EntityKey, QueueClient, Result, TableClient, TableEntity};

use crate::error::refused;
use crate::eventual::{Eventual, StepContext, WorkerBuilder};

mod change;
mod index;
mod reads;
mod step;
use change::{next_stamp, now_micros, Change};
use index::IndexDef;
pub use index::InterIndex;

/// The property of an index copy that holds the RowKey of its primary.
pub const PRIMARY_ROW_KEY: &str = crate::index::PRIMARY_ROW_KEY;

/// The Int64 property of a primary, a copy and a tombstone that holds the
/// stamp of the change that wrote it (microseconds since the Unix epoch).
pub const CHANGE_STAMP: &str = "ChangeStamp";

/// The Boolean property (`true`) that marks a primary as a tombstone: the
/// entity was removed by the change of its [`CHANGE_STAMP`].
pub const REMOVED: &str = "Removed";

/// The String property of a tombstone that names the copies its remove took
/// off, as a JSON array of `[index name, PartitionKey, RowKey]`. A retry of
/// the remove that finds its own tombstone deletes them again: an older
/// change resumed late may have written one back between the remove's
/// first delete and its tombstone.
pub const REMOVED_COPIES: &str = "RemovedCopies";

/// The String property of a primary that names the copies under the values
/// the put that wrote it moved off, as a JSON array of `[index name,
/// PartitionKey, RowKey]` (absent if it moved off none). The put deletes
/// them after its primary write, so a unique value stays held until the
/// primary has moved off it; a retry of the put that finds its own primary
/// deletes them again. Reads leave it out of the entity.
pub const MOVED_COPIES: &str = "MovedCopies";

/// The Boolean property (`true`) that marks a copy of a unique index as a
/// **claim**: written before its primary, it reserves the value for that
/// primary while the change is applied. Reads skip claims; the worker turns
/// a claim into a plain copy once the primary is written.
pub const PENDING: &str = "Pending";

/// The String property of a claim, or of an entity's copy restamped by a
/// change of the same entity, that holds the id of the queue message whose
/// attempt holds it. An attempt gives up only what its own message holds
/// (its earlier, crashed attempts included), never what another delivery
/// of the same change holds, which may still be in flight.
pub const CLAIM_MESSAGE: &str = "ClaimMessage";

/// The String property of a claim that lists the changes waiting on it,
/// oldest first, as `stamp message` separated by `;`: older changes of the
/// same entity, or other deliveries of the same change, whose claim a newer
/// one took over while they were still in flight (or had crashed). When
/// the holder gives up, the claim goes back to the last of them.
pub const CLAIM_WAITING: &str = "ClaimWaiting";

/// What separates the (escaped) value from the primary RowKey in the RowKey
/// of a non-unique index's copy: `jones` + ` ` + `000223`. A space sorts
/// before every character a value can hold once escaped, so the copies of
/// one value are contiguous and in value order.
pub const VALUE_SEPARATOR: char = ' ';

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
    /// Whether a primary write that found the primary changed pauses
    /// before reading it again (always, but for a scheduled test).
    pauses: bool,
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
                pauses: true,
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
                pauses: self.inner.pauses,
                _t: PhantomData,
            }),
        })
    }

    /// The same index, whose worker reads a primary that changed under its
    /// write again at once, without the jittered pause. Only for a test
    /// whose scheduler decides the order of every step itself (the
    /// exhaustive test of this pattern), where the pause is only a real
    /// wait; two workers without it can keep colliding.
    #[doc(hidden)]
    pub fn without_pauses(self) -> Self {
        InterPartitionIndex {
            inner: Arc::new(Inner {
                primary: self.inner.primary.clone(),
                prefix: self.inner.prefix.clone(),
                indexes: self.inner.indexes.clone(),
                queue: self.inner.queue.clone(),
                kind: self.inner.kind.clone(),
                last_stamp: self.inner.last_stamp.clone(),
                pauses: false,
                _t: PhantomData,
            }),
        }
    }

    /// The `kind` of this index's messages: `tablekit.inter_index.<table>`.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The primary PartitionKey of the entities of partition `partition_key`.
    pub fn primary_partition_key(&self, partition_key: &str) -> String {
        format!("{}{partition_key}", self.inner.prefix)
    }

    /// Registers this index's changes with a worker builder, and what a
    /// change gives up when its last attempt stopped without finishing
    /// ([`WorkerBuilder::on_give_up`]): its claims, so they do not hold
    /// their values for good.
    pub fn attach(&self, builder: WorkerBuilder) -> WorkerBuilder {
        let (this, that) = (self.clone(), self.clone());
        builder
            .handle(&self.inner.kind, move |change: Change, ctx: StepContext| {
                let this = this.clone();
                async move { this.apply(change, &ctx).await }
            })
            .on_give_up(&self.inner.kind, move |change: Change, ctx: StepContext| {
                let that = that.clone();
                async move { that.give_up(change, &ctx).await }
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
        for reserved in [
            PRIMARY_ROW_KEY,
            CHANGE_STAMP,
            MOVED_COPIES,
            REMOVED,
            PENDING,
            CLAIM_MESSAGE,
            CLAIM_WAITING,
        ] {
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
        crate::trace::traced(
            "InterPartitionIndex",
            "put",
            Some(self.inner.primary.name()),
            async move {
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
            },
        )
        .await
    }

    /// Sends the message that removes the entity `key` (its own keys, say
    /// `("Sales", "000223")`) and its copies, stamped with this client's
    /// clock. The worker leaves a tombstone in place of the primary.
    pub async fn remove(&self, key: impl Into<EntityKey>) -> Result<SentMessage> {
        crate::trace::traced(
            "InterPartitionIndex",
            "remove",
            Some(self.inner.primary.name()),
            async move {
                let key = key.into();
                key.validate()?;
                EntityKey::new(self.primary_partition_key(&key.partition_key), &key.row_key)
                    .validate()?;
                let change = Change::Remove {
                    partition_key: key.partition_key,
                    row_key: key.row_key,
                    stamp: self.stamp(),
                };
                self.inner
                    .queue
                    .enqueue_kind(&self.inner.kind, &change)
                    .await
            },
        )
        .await
    }
}
