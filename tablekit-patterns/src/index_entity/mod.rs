//! The index entities pattern (design guide §3.4): for a value many entities
//! share (a last name), index entities list the keys of the entities that
//! have it, so a lookup is one range query for the lists and one point read
//! per entity instead of a partition or table scan.
//!
//! Two of the guide's three options are here:
//!
//! * **Option 2**, [`IndexEntities`]: the index entities live in the
//!   partition of the entities they list and hold their RowKeys. Every write
//!   changes the entity and the index entities in one entity group
//!   transaction under the index entities' ETags, so they never disagree.
//!   Lookups stay within one partition (Jones in Sales).
//! * **Option 3**, [`SeparateIndexEntities`]: the index entities live in a
//!   partition (or table) of their own and hold (PartitionKey, RowKey) pairs,
//!   so one lookup finds the entities of every partition (all the Joneses).
//!   No transaction can span the two partitions: see [what a reader can rely
//!   on](#what-a-reader-can-rely-on).
//!
//! (Option 1, a blob per value, belongs with the blob-based patterns.)
//!
//! The guide leaves some decisions open (§8 item 1); this module takes these:
//!
//! * A value's list is split over index entities with RowKeys
//!   `{prefix}{value}_000`, `_001`, … (at most [`MAX_CHUNKS`]); the prefix
//!   keeps them apart from the entities' RowKeys (`000152`). A lookup reads
//!   all of a value's index entities with one range query
//!   (`ge '{prefix}{value}_000' and le '{prefix}{value}_999'`).
//! * Each index entity holds its list in the String property [`ENTITY_IDS`],
//!   entries joined by `\n` (an option 3 entry is `PartitionKey\tRowKey`); no
//!   key may contain a control character, so no escaping is needed.
//! * A String property holds at most 64 KiB, 32,768 UTF-16 code units (far
//!   below the 1 MB the guide assumes, errata §7 item 8): an entry goes to the
//!   first index entity with room for it, else into a new one; a write changes
//!   at most one index entity per value, under that entity's ETag (or
//!   inserting it). [`with_chunk_capacity`](IndexEntities::with_chunk_capacity)
//!   sets a smaller capacity.
//! * An index entity whose last entry goes is deleted, so the lists shrink
//!   back as entities are removed.
//! * The first entity with a value inserts the index entity; if a concurrent
//!   writer created it first, the write fails with a conflict and starts
//!   again from the read (at most [`MAX_ATTEMPTS`] times).
//!
//! # What a reader can rely on
//!
//! Both options keep one invariant, at every moment, whatever writers race
//! and wherever a process dies:
//!
//! > **Every stored entity is listed by the index entities of its value.**
//!
//! The converse does not hold for option 3: its index entities may list a key
//! whose entity is gone or has another value, or list a key twice. A lookup
//! reads each listed entity and keeps it only if it has the value, so
//! `find(value)` returns exactly the entities that have the value when it
//! reads them, and [`ids`](IndexEntities::ids) /
//! [`keys`](SeparateIndexEntities::keys) return a superset of their keys.
//!
//! ## Option 2: atomic
//!
//! Each write is one entity group transaction in the entity's partition: the
//! entity, and the index entity it joins or leaves (both, for a change of
//! value), under the ETags the index entities were read with. It is applied
//! whole or not at all, and a change of an index entity by another writer
//! since the read fails it (409, 412 or 404 on that index entity), after
//! which it starts again from the read. So the index entities list exactly
//! the entities of each value, each once, and a reader never sees one
//! without the other.
//!
//! ## Option 3: eventually consistent, never unlisted
//!
//! The guide says option 3 can only be *eventually* consistent with the
//! entities, because the index entity is in another partition: no
//! transaction covers both, so each write is two or three requests, each
//! atomic on its own. An entry is one writer's *claim* that the entity has
//! (or is about to have) the value: a writer adds its own claim before the
//! entity has the value, and takes one out only after it no longer has it,
//! for a change of the entity that it made itself:
//!
//! * insert: add a claim to the value's index entities (an ETag-guarded
//!   read–modify–write, retried on 412/409/404 with a jittered backoff),
//!   then insert the entity;
//! * update changing the value: add a claim under the new value, update the
//!   entity under the ETag of the version that had the old value, then take
//!   one claim out of the old value's list;
//! * delete: delete the entity under the ETag of the version that had the
//!   value, then take one claim out of its list.
//!
//! A key listed once can thus be listed twice while a delete of it and a new
//! insert of it overlap: the delete takes out one claim, the insert's stays.
//! (Were the insert to rely on an entry it found, the delete would take that
//! entry out after the insert, and the entity would be stored and unlisted.)
//!
//! When the entity's write fails with an answer saying nothing was written
//! (a 409, 412 or 404 that is not [ambiguous](Error::is_ambiguous)), the
//! writer takes its claim out again; after an ambiguous failure it leaves it.
//! A crash between the requests, a lost answer of an index write, or a
//! failed removal likewise leaves one claim too many, never one too few.
//! [`SeparateIndexEntities::find`] reports the keys listed but missing or
//! with another value as [`Lookup::dangling`] and does not return them.
//! They are not removed on read: an entry whose entity is missing may be the
//! claim of an insert still in flight, and removing it would leave that
//! entity unlisted; [`SeparateIndexEntities::remove_dangling`] removes them
//! (and repeated entries) when no writer of that value is running.
//!
//! One case is left: when the answer to the entity's write is lost and the
//! table client's [read-back](tablekit::table::AmbiguousWrites::ReadBack) reports it
//! done because another writer made the very same change at the same moment,
//! both take a claim out for one change. Choose [`AmbiguousWrites::Report`](tablekit::table::AmbiguousWrites::Report)
//! on the entities' table client to rule it out.
//!
//! ## Writes under `IfMatch::Any`
//!
//! Which list a write leaves is the value the entity has when the write
//! lands. Under an ETag that is the value of `current` (pass the entity as
//! read with that ETag). Under [`IfMatch::Any`] both options first read the
//! stored entity (one more request) and write under its ETag, reading again
//! if another writer changed it meanwhile: still last writer wins, but the
//! right list is changed. An entity missing at that read is a not-found
//! error.
//!
//! | operation | requests |
//! |---|---|
//! | [`IndexEntities::insert`], [`delete`](IndexEntities::delete) | 1 range query (index entities) + 1 transaction of 2 |
//! | [`IndexEntities::update`] changing the value | 2 range queries + 1 transaction of 3; not changing it: 1 update |
//! | [`IndexEntities::ids`] | 1 range query |
//! | [`IndexEntities::find`] | 1 range query + 1 point read per entity (concurrently) |
//! | [`SeparateIndexEntities::insert`] | 1 range query + 1 index write + 1 insert |
//! | [`SeparateIndexEntities::delete`] | 1 delete + 1 range query + 1 index write |
//! | [`SeparateIndexEntities::update`] changing the value | 2 range queries + 2 index writes + 1 update |
//! | [`SeparateIndexEntities::find`] | 1 range query + 1 point read per entity (concurrently) |
//!
//! An update or delete under [`IfMatch::Any`] adds one read of the stored
//! entity. Each retry after a concurrent change of an index entity repeats
//! the range query and the write; under `IfMatch::Any`, a concurrent change
//! of the entity repeats its read too.
//!
//! ```
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::index_entity::{IndexEntities, SeparateIndexEntities};
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     last_name: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! let employees = service.table::<Employee>("Employees")?;
//! employees.create_table().await?;
//!
//! // Option 2: Jones in Sales, kept in step by one transaction per write.
//! let by_last_name = IndexEntities::new(employees.clone(), "lastname_", |e: &Employee| {
//!     e.last_name.clone()
//! });
//! let mut e = Employee { department: "Sales".into(), employee_id: 152, last_name: "Jones".into() };
//! by_last_name.insert(&mut e).await?; // 000152 and lastname_Jones_000 (EntityIDs += 000152)
//! assert_eq!(by_last_name.ids("Sales", "Jones").await?, ["000152"]);
//! assert_eq!(by_last_name.find("Sales", "Jones").await?.len(), 1);
//!
//! // Option 3: every Jones of the company, in an index table of its own.
//! let index = service.table::<tablekit::DynamicEntity>("LastNames")?;
//! index.create_table().await?;
//! let everywhere = SeparateIndexEntities::new(employees, index, "lastname", "", |e: &Employee| {
//!     e.last_name.clone()
//! });
//! let mut ken = Employee { department: "Marketing".into(), employee_id: 10, last_name: "Jones".into() };
//! everywhere.insert(&mut ken).await?;
//! let found = everywhere.find("Jones").await?;
//! assert_eq!(found.entities.len(), 1);
//! assert!(found.dangling.is_empty());
//! # Ok(()) }
//! ```

use tablekit::{
    codec::to_dynamic, entity::RawEntity, error::DecodeError, DynamicEntity, ETag, Error, IfMatch,
    Result, TableClient, TableEntity,
};

mod chunks;
mod same_partition;
mod separate;
use chunks::chunks_prefix;
pub use same_partition::IndexEntities;
pub use separate::{Lookup, SeparateIndexEntities};

/// The String property of an index entity that lists its entries, separated
/// by `\n`.
pub const ENTITY_IDS: &str = "EntityIDs";

/// How many times a write starts again after a concurrent change of an index entity.
pub const MAX_ATTEMPTS: usize = 16;

/// The most UTF-16 code units one index entity's list holds: the 64 KiB a
/// String property may hold.
pub const MAX_CHUNK_UNITS: usize = tablekit::validate::MAX_VALUE_BYTES / 2;

/// The most index entities one value's list is split over (`_000` to `_999`).
pub const MAX_CHUNKS: usize = 1000;

/// The RowKey of index entity `n` of `value`: `{prefix}{value}_{n:03}`.
///
/// ```
/// use tablekit_patterns::index_entity::chunk_row_key;
/// assert_eq!(chunk_row_key("lastname_", "Jones", 0), "lastname_Jones_000");
/// assert_eq!(chunk_row_key("lastname_", "Jones", 12), "lastname_Jones_012");
/// ```
pub fn chunk_row_key(prefix: &str, value: &str, n: usize) -> String {
    format!("{}{n:03}", chunks_prefix(prefix, value))
}

type KeyFn<T> = dyn Fn(&T) -> String + Send + Sync;

fn bag<T: TableEntity>(entity: &T) -> Result<DynamicEntity> {
    let mut d = to_dynamic(entity)?;
    d.etag = None;
    Ok(d)
}

fn set_etag<T: TableEntity>(entity: &mut T, etag: Option<ETag>) {
    if let Some(etag) = etag {
        entity.set_etag(etag);
    }
}

/// A transaction that failed on an index entity (operation 1 or later)
/// because another writer changed, created or deleted it since the read.
fn index_race(e: &Error) -> bool {
    e.batch_index().is_some_and(|i| i >= 1)
        && (e.is_precondition_failed() || e.is_conflict() || e.is_not_found())
}

/// What an update or delete replaces: the stored entity's indexed value, and
/// the condition under which the write replaces exactly that version.
#[derive(Debug)]
struct Replacing {
    value: String,
    if_match: IfMatch,
    /// Read from the store for a write under `IfMatch::Any`: a 412 on the
    /// entity means it changed since, and the write reads it again.
    read: bool,
}

impl Replacing {
    /// Under an ETag: the value of `current`, which the caller read with it.
    /// Under `IfMatch::Any`: the value and ETag of the stored entity, read
    /// now; an error that [`Error::is_not_found`] when there is none.
    async fn of<T: TableEntity>(
        table: &TableClient<T>,
        key: &KeyFn<T>,
        current: &T,
        if_match: &IfMatch,
    ) -> Result<Replacing> {
        if let IfMatch::ETag(_) = if_match {
            return Ok(Replacing {
                value: key(current),
                if_match: if_match.clone(),
                read: false,
            });
        }
        let k = current.key();
        let (pk, rk) = (k.partition_key.as_str(), k.row_key.as_str());
        // fetch_one: a missing entity is the not-found error the write under
        // `IfMatch::Any` would have met.
        let stored = table
            .with_type::<DynamicEntity>()
            .query()
            .filter(|e| e.partition_key.eq(pk) & e.row_key.eq(rk))
            .fetch_one()
            .await?;
        let etag = stored.etag.clone().ok_or_else(|| {
            Error::from(DecodeError::new(format!(
                "entity ({pk}, {rk}) was read without its ETag (odata.etag), which a write \
                 under IfMatch::Any is made under here: the server or a proxy dropped it"
            )))
        })?;
        Ok(Replacing {
            value: key(&T::decode(&RawEntity::from_dynamic(&stored))?),
            if_match: IfMatch::ETag(etag),
            read: true,
        })
    }

    /// Whether the write that failed with `e` starts again from the reads:
    /// another writer changed an index entity it wrote (a transaction's
    /// operation 1 or later), or the entity it read itself under
    /// `IfMatch::Any` (a 412 on the entity).
    fn retry_after(&self, e: &Error) -> bool {
        index_race(e)
            || (self.read && e.is_precondition_failed() && e.batch_index().unwrap_or(0) == 0)
    }
}
