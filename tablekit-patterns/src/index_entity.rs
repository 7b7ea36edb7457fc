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
//! both take a claim out for one change. Choose [`AmbiguousWrites::Report`]
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

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use tablekit::{
    codec::to_dynamic,
    entity::RawEntity,
    table::{AmbiguousWrites, Transaction},
    DynamicEntity, ETag, EdmValue, EntityKey, Error, IfMatch, Result, TableClient, TableEntity,
    UpdateMode,
};

use crate::error::refused;
use crate::hook::BeforeWrite;
use crate::range::KeyRange;

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

/// What the RowKeys of every index entity of `value` start with:
/// `{prefix}{value}_`.
fn chunks_prefix(prefix: &str, value: &str) -> String {
    format!("{prefix}{value}_")
}

type KeyFn<T> = dyn Fn(&T) -> String + Send + Sync;

/// One stored (or about to be stored) index entity of a value.
#[derive(Debug, Clone)]
struct Chunk {
    number: usize,
    entries: Vec<String>,
    etag: Option<ETag>,
}

/// The write that changes one index entity.
#[derive(Debug)]
enum ChunkWrite {
    Insert(DynamicEntity),
    Update(DynamicEntity, ETag),
    Delete(EntityKey, ETag),
}

impl ChunkWrite {
    fn add_to(self, tx: &mut Transaction<DynamicEntity>) -> Result<()> {
        match self {
            ChunkWrite::Insert(e) => tx.insert(&e).map(drop),
            ChunkWrite::Update(e, etag) => tx
                .update(&e, UpdateMode::Replace, IfMatch::ETag(etag))
                .map(drop),
            ChunkWrite::Delete(key, etag) => tx.delete(key, IfMatch::ETag(etag)).map(drop),
        }
    }

    async fn send(self, raw: &TableClient<DynamicEntity>) -> Result<()> {
        match self {
            ChunkWrite::Insert(e) => raw.insert(&e).await.map(drop),
            ChunkWrite::Update(e, etag) => raw
                .update(&e, UpdateMode::Replace, IfMatch::ETag(etag))
                .await
                .map(drop),
            ChunkWrite::Delete(key, etag) => raw.delete(key, IfMatch::ETag(etag)).await,
        }
    }
}

fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// The index entities of one value, as read by one range query.
#[derive(Debug)]
struct Chunks {
    partition_key: String,
    prefix: String,
    value: String,
    capacity: usize,
    chunks: Vec<Chunk>,
}

impl Chunks {
    fn entries(&self) -> impl Iterator<Item = &String> {
        self.chunks.iter().flat_map(|c| c.entries.iter())
    }

    fn entity(&self, number: usize, entries: &[String]) -> DynamicEntity {
        DynamicEntity::new(
            self.partition_key.as_str(),
            chunk_row_key(&self.prefix, &self.value, number),
        )
        .with(ENTITY_IDS, entries.join("\n"))
    }

    /// The write that adds `entry`: to the first index entity with room for
    /// it, else into a new one under the lowest free number.
    fn add(&self, entry: &str) -> Result<ChunkWrite> {
        let len = utf16_len(entry);
        if len > self.capacity {
            return Err(refused(
                "index_entity",
                format!(
                    "an index entry of {len} UTF-16 code units does not fit an index entity of {}",
                    self.capacity
                ),
            ));
        }
        for c in &self.chunks {
            let used: usize =
                c.entries.iter().map(|e| utf16_len(e)).sum::<usize>() + c.entries.len();
            // `used` counts one separator per entry: the new entry's own is the one before it.
            if used + len <= self.capacity {
                let mut entries = c.entries.clone();
                entries.push(entry.to_owned());
                let etag = c.etag.clone().expect("stored chunks have an ETag");
                return Ok(ChunkWrite::Update(self.entity(c.number, &entries), etag));
            }
        }
        let free = (0..MAX_CHUNKS)
            .find(|n| self.chunks.iter().all(|c| c.number != *n))
            .ok_or_else(|| {
                refused(
                    "index_entity",
                    format!(
                        "the index of {:?} is full: {MAX_CHUNKS} index entities",
                        self.value
                    ),
                )
            })?;
        Ok(ChunkWrite::Insert(
            self.entity(free, std::slice::from_ref(&entry.to_owned())),
        ))
    }

    /// The write that removes one occurrence of `entry` (from the first index
    /// entity listing it), deleting that index entity if it was its last
    /// entry; `None` if no index entity lists it.
    fn remove(&self, entry: &str) -> Option<ChunkWrite> {
        self.chunks.iter().find_map(|c| {
            let at = c.entries.iter().position(|e| e == entry)?;
            let mut entries = c.entries.clone();
            entries.remove(at);
            Some(self.rewrite(c, entries))
        })
    }

    /// The write that keeps, in the first index entity where anything goes,
    /// only the entries in `live` not listed before it; `None` if nothing goes.
    fn prune(&self, live: &HashSet<String>) -> Option<ChunkWrite> {
        let mut seen = HashSet::new();
        self.chunks.iter().find_map(|c| {
            let kept: Vec<String> = c
                .entries
                .iter()
                .filter(|e| live.contains(*e) && seen.insert(e.as_str()))
                .cloned()
                .collect();
            (kept.len() != c.entries.len()).then(|| self.rewrite(c, kept))
        })
    }

    /// The write that leaves `c` holding `entries`: deleting it if none.
    fn rewrite(&self, c: &Chunk, entries: Vec<String>) -> ChunkWrite {
        let etag = c.etag.clone().expect("stored chunks have an ETag");
        if entries.is_empty() {
            ChunkWrite::Delete(
                EntityKey::new(
                    self.partition_key.as_str(),
                    chunk_row_key(&self.prefix, &self.value, c.number),
                ),
                etag,
            )
        } else {
            ChunkWrite::Update(self.entity(c.number, &entries), etag)
        }
    }
}

/// Where the index entities live and how they are read: shared by both options.
#[derive(Clone)]
struct Store {
    raw: TableClient<DynamicEntity>,
    prefix: String,
    capacity: usize,
}

impl Store {
    fn check_value(&self, partition_key: &str, value: &str) -> Result<()> {
        if value.contains(['\n', '\t']) {
            return Err(refused(
                "index_entity",
                "an indexed value holds no control characters",
            ));
        }
        EntityKey::new(partition_key, chunk_row_key(&self.prefix, value, 0))
            .validate()
            .map_err(Error::from)
    }

    /// Every index entity of `value`: one range query.
    async fn read(&self, partition_key: &str, value: &str) -> Result<Chunks> {
        self.check_value(partition_key, value)?;
        let base = chunks_prefix(&self.prefix, value);
        let rows = self
            .raw
            .query()
            .filter_by(KeyRange::inclusive("000", "999").filter(partition_key, &base))
            .fetch_all()
            .await?;
        let mut chunks = Vec::new();
        for row in rows {
            // A longer value that starts with `{value}_` may fall in the range.
            let Some(number) = row
                .row_key
                .strip_prefix(&base)
                .filter(|n| n.len() == 3 && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let entries = match row.get(ENTITY_IDS) {
                Some(EdmValue::String(s)) if !s.is_empty() => {
                    s.split('\n').map(str::to_owned).collect()
                }
                _ => Vec::new(),
            };
            chunks.push(Chunk {
                number,
                entries,
                etag: row.etag,
            });
        }
        Ok(Chunks {
            partition_key: partition_key.to_owned(),
            prefix: self.prefix.clone(),
            value: value.to_owned(),
            capacity: self.capacity,
            chunks,
        })
    }
}

fn check_capacity(units: usize) -> Result<usize> {
    if units == 0 || units > MAX_CHUNK_UNITS {
        return Err(refused(
            "index_entity",
            format!("an index entity holds 1 to {MAX_CHUNK_UNITS} UTF-16 code units, not {units}"),
        ));
    }
    Ok(units)
}

/// Entities of type `T` with index entities (option 2) for one non-unique
/// value, in the entities' own partitions; see the [module docs](self).
/// Cheap to clone.
pub struct IndexEntities<T> {
    table: TableClient<T>,
    store: Store,
    key: Arc<KeyFn<T>>,
    before_write: BeforeWrite,
}

impl<T> Clone for IndexEntities<T> {
    fn clone(&self) -> Self {
        IndexEntities {
            table: self.table.clone(),
            store: self.store.clone(),
            key: self.key.clone(),
            before_write: self.before_write.clone(),
        }
    }
}

impl<T> fmt::Debug for IndexEntities<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexEntities")
            .field("table", &self.table.name())
            .field("prefix", &self.store.prefix)
            .field("chunk_capacity", &self.store.capacity)
            .finish()
    }
}

impl<T: TableEntity> IndexEntities<T> {
    /// Index entities with RowKeys `prefix` + `key(entity)` + `_000`… in each
    /// entity's partition. The prefix must keep them apart from the entities'
    /// RowKeys.
    pub fn new(
        table: TableClient<T>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        IndexEntities {
            store: Store {
                raw: table.with_type::<DynamicEntity>(),
                prefix: prefix.into(),
                capacity: MAX_CHUNK_UNITS,
            },
            table,
            key: Arc::new(key),
            before_write: BeforeWrite::default(),
        }
    }

    /// At most `units` UTF-16 code units per index entity (1 to
    /// [`MAX_CHUNK_UNITS`], the default), so lists split sooner.
    pub fn with_chunk_capacity(mut self, units: usize) -> Result<Self> {
        self.store.capacity = check_capacity(units)?;
        Ok(self)
    }

    /// Runs `hook` with the attempt number (1 first) after each write's reads
    /// of the index entities and before its transaction: for tracing retries,
    /// and in tests the exact place to let another client change an index
    /// entity.
    pub fn before_write(mut self, hook: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    /// The typed table client.
    pub fn table(&self) -> &TableClient<T> {
        &self.table
    }

    fn check(&self, entity: &T) -> Result<()> {
        if self.store.prefix.is_empty() || entity.row_key().starts_with(&self.store.prefix) {
            return Err(refused(
                "index_entity",
                format!(
                    "RowKey {:?} would mix with the index entities of prefix {:?}",
                    entity.row_key(),
                    self.store.prefix
                ),
            ));
        }
        entity.key().validate().map_err(Error::from)
    }

    /// The RowKeys of the entities of partition `partition_key` whose value is
    /// `value`, in the order they were added (while no index entity was
    /// emptied): one range query over the value's index entities.
    pub async fn ids(&self, partition_key: &str, value: &str) -> Result<Vec<String>> {
        Ok(self
            .store
            .read(partition_key, value)
            .await?
            .entries()
            .cloned()
            .collect())
    }

    /// The entities of partition `partition_key` whose value is `value`, in
    /// list order: the index entities, then a point read of each listed
    /// entity (concurrently). An entity listed but missing, or with another
    /// value, is left out.
    pub async fn find(&self, partition_key: &str, value: &str) -> Result<Vec<T>> {
        let mut ids = self.ids(partition_key, value).await?;
        let mut seen = HashSet::new();
        ids.retain(|id| seen.insert(id.clone()));
        let found = try_join_all(
            ids.iter()
                .map(|id| self.table.get((partition_key, id.as_str())).send()),
        )
        .await?;
        Ok(found
            .into_iter()
            .flatten()
            .filter(|e| (self.key)(e) == value)
            .collect())
    }

    /// Inserts the entity and adds its RowKey to its value's index entities,
    /// in one transaction under the changed index entity's ETag (or inserting
    /// it); starts again from the read when another writer changed it. A
    /// taken key is a conflict.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        self.check(entity)?;
        let pk = entity.partition_key().into_owned();
        let rk = entity.row_key().into_owned();
        let value = (self.key)(entity);
        let body = bag(entity)?;
        let mut attempt = 1;
        loop {
            let write = self.store.read(&pk, &value).await?.add(&rk)?;
            let mut tx = self.store.raw.transaction();
            tx.insert(&body)?;
            write.add_to(&mut tx)?;
            self.before_write.call(attempt);
            match tx.send().await {
                Ok(done) => {
                    set_etag(entity, done.etag(0).cloned());
                    return Ok(());
                }
                Err(e) if index_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes `current` (the value as read with the ETag of `if_match`) and
    /// removes its RowKey from its value's index entities, in one
    /// transaction; starts again when another writer changed the index
    /// entity. Under [`IfMatch::Any`] the stored entity is read first, for its
    /// value (see the [module docs](self#writes-under-ifmatchany)).
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        self.check(current)?;
        let if_match = if_match.into();
        let key = current.key();
        let (pk, rk) = (key.partition_key.as_str(), key.row_key.as_str());
        let mut attempt = 1;
        loop {
            let was = Replacing::of(&self.table, &*self.key, current, &if_match).await?;
            let write = self.store.read(pk, &was.value).await?.remove(rk);
            let mut tx = self.store.raw.transaction();
            tx.delete((pk, rk), was.if_match.clone())?;
            if let Some(write) = write {
                write.add_to(&mut tx)?;
            }
            self.before_write.call(attempt);
            match tx.send().await {
                Ok(_) => return Ok(()),
                Err(e) if was.retry_after(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Replaces `current` (the value as read with the ETag of `if_match`)
    /// with `new`. If the indexed value changed, one transaction changes
    /// three entities: the entity, the old value's index entity and the new
    /// value's; it starts again when another writer changed either index
    /// entity. Under [`IfMatch::Any`] the stored entity is read first, for its
    /// value (see the [module docs](self#writes-under-ifmatchany)).
    pub async fn update(
        &self,
        current: &T,
        new: &mut T,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        self.check(new)?;
        if current.key() != new.key() {
            return Err(refused(
                "index_entity",
                "an update keeps the entity's key; delete and insert to move it",
            ));
        }
        let if_match = if_match.into();
        let new_value = (self.key)(new);
        let pk = new.partition_key().into_owned();
        let rk = new.row_key().into_owned();
        let body = bag(new)?;
        let mut attempt = 1;
        loop {
            let was = Replacing::of(&self.table, &*self.key, current, &if_match).await?;
            if was.value == new_value {
                match self
                    .table
                    .update(&mut *new, UpdateMode::Replace, was.if_match.clone())
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(e) if was.retry_after(&e) && attempt < MAX_ATTEMPTS => {
                        attempt += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let old = self.store.read(&pk, &was.value).await?.remove(&rk);
            let fresh = self.store.read(&pk, &new_value).await?.add(&rk)?;
            let mut tx = self.store.raw.transaction();
            tx.update(&body, UpdateMode::Replace, was.if_match.clone())?;
            if let Some(old) = old {
                old.add_to(&mut tx)?;
            }
            fresh.add_to(&mut tx)?;
            self.before_write.call(attempt);
            match tx.send().await {
                Ok(done) => {
                    set_etag(new, done.etag(0).cloned());
                    return Ok(());
                }
                Err(e) if was.retry_after(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
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
        let etag = stored
            .etag
            .clone()
            .expect("the service returns every entity with its ETag");
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

/// What a lookup through [`SeparateIndexEntities`] found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Lookup<T> {
    /// The listed entities that exist and have the value, in list order.
    pub entities: Vec<T>,
    /// Listed keys whose entity is missing or no longer has the value: the
    /// claims of writes in flight, or what a crash or a failure between the
    /// two requests of a write left.
    pub dangling: Vec<EntityKey>,
}

/// Entities of type `T` with index entities (option 3) in a partition of
/// their own, listing (PartitionKey, RowKey) pairs across every partition;
/// see the [module docs](self) for the order of the writes and what a
/// failure between them leaves. Cheap to clone.
pub struct SeparateIndexEntities<T> {
    table: TableClient<T>,
    store: Store,
    partition: String,
    key: Arc<KeyFn<T>>,
    before_write: BeforeWrite,
}

impl<T> Clone for SeparateIndexEntities<T> {
    fn clone(&self) -> Self {
        SeparateIndexEntities {
            table: self.table.clone(),
            store: self.store.clone(),
            partition: self.partition.clone(),
            key: self.key.clone(),
            before_write: self.before_write.clone(),
        }
    }
}

impl<T> fmt::Debug for SeparateIndexEntities<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeparateIndexEntities")
            .field("table", &self.table.name())
            .field("index_table", &self.store.raw.name())
            .field("partition", &self.partition)
            .field("prefix", &self.store.prefix)
            .field("chunk_capacity", &self.store.capacity)
            .finish()
    }
}

fn entry(key: &EntityKey) -> String {
    format!("{}\t{}", key.partition_key, key.row_key)
}

fn parse_entry(entry: &str) -> Option<EntityKey> {
    let (pk, rk) = entry.split_once('\t')?;
    Some(EntityKey::new(pk, rk))
}

/// The pause before retry `attempt` (2 or more) of an index write: 5 ms
/// doubling to at most 320 ms, each with up to as much again of jitter, so
/// writers that collided do not collide again in lockstep.
fn backoff(attempt: usize) -> Duration {
    let base = 5u64 << attempt.saturating_sub(2).min(6);
    Duration::from_millis(base + fastrand::u64(0..=base))
}

impl<T: TableEntity> SeparateIndexEntities<T> {
    /// Index entities in partition `partition` of the table `index` (which may
    /// be the entities' own table), with RowKeys `prefix` + `key(entity)` +
    /// `_000`…, listing the keys of `table`'s entities.
    pub fn new(
        table: TableClient<T>,
        index: TableClient<DynamicEntity>,
        partition: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        SeparateIndexEntities {
            table,
            store: Store {
                // A lost answer is handled here (see `change_index`): a
                // read-back could take another writer's identical list for ours.
                raw: index.with_ambiguous_writes(AmbiguousWrites::Report),
                prefix: prefix.into(),
                capacity: MAX_CHUNK_UNITS,
            },
            partition: partition.into(),
            key: Arc::new(key),
            before_write: BeforeWrite::default(),
        }
    }

    /// At most `units` UTF-16 code units per index entity (1 to
    /// [`MAX_CHUNK_UNITS`], the default), so lists split sooner.
    pub fn with_chunk_capacity(mut self, units: usize) -> Result<Self> {
        self.store.capacity = check_capacity(units)?;
        Ok(self)
    }

    /// Runs `hook` with the attempt number (1 first) after each read of an
    /// index entity and before its conditional write: for tracing retries,
    /// and in tests the exact place to let another client change it.
    pub fn before_write(mut self, hook: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    /// The typed table client.
    pub fn table(&self) -> &TableClient<T> {
        &self.table
    }

    fn check(&self, entity: &T) -> Result<EntityKey> {
        let key = entity.key();
        key.validate().map_err(Error::from)?;
        if self.store.raw.name() == self.table.name()
            && key.partition_key == self.partition
            && key.row_key.starts_with(&self.store.prefix)
        {
            return Err(refused(
                "index_entity",
                format!(
                    "entity {key:?} would mix with the index entities of prefix {:?}",
                    self.store.prefix
                ),
            ));
        }
        self.store
            .check_value(&self.partition, &(self.key)(entity))?;
        Ok(key)
    }

    /// The keys listed for `value`, in list order, each once: one range
    /// query. Every entity that has the value is among them; so may be keys
    /// whose entity is missing or has another value (see the
    /// [module docs](self#option-3-eventually-consistent-never-unlisted)).
    pub async fn keys(&self, value: &str) -> Result<Vec<EntityKey>> {
        let chunks = self.store.read(&self.partition, value).await?;
        let mut seen = HashSet::new();
        Ok(chunks
            .entries()
            .filter(|e| seen.insert(e.as_str()))
            .filter_map(|e| parse_entry(e))
            .collect())
    }

    /// The entities whose value is `value`: the index entities (one range
    /// query), then a point read of each listed entity (concurrently). Listed
    /// entities that are missing or have another value are reported in
    /// [`Lookup::dangling`] and not returned.
    pub async fn find(&self, value: &str) -> Result<Lookup<T>> {
        let keys = self.keys(value).await?;
        let found = try_join_all(keys.iter().map(|k| self.table.get(k.clone()).send())).await?;
        let mut lookup = Lookup {
            entities: Vec::new(),
            dangling: Vec::new(),
        };
        for (key, entity) in keys.into_iter().zip(found) {
            match entity {
                Some(e) if (self.key)(&e) == value => lookup.entities.push(e),
                _ => lookup.dangling.push(key),
            }
        }
        Ok(lookup)
    }

    /// Makes one index entity change: reads the value's index entities, asks
    /// `change` for the write (none: nothing to do) and sends it under the
    /// index entity's ETag, starting again after a jittered pause when another
    /// writer changed it meanwhile. Returns whether it wrote.
    ///
    /// A write whose outcome is unknown ([`Error::is_ambiguous`]) is sent
    /// again when `again_if_unknown` (an added claim: at worst it is then
    /// there twice), and otherwise left (a removed claim: at worst it stays).
    async fn change_index(
        &self,
        value: &str,
        again_if_unknown: bool,
        change: impl Fn(&Chunks) -> Result<Option<ChunkWrite>>,
    ) -> Result<bool> {
        let mut attempt = 1;
        loop {
            let chunks = self.store.read(&self.partition, value).await?;
            let Some(write) = change(&chunks)? else {
                return Ok(false);
            };
            self.before_write.call(attempt);
            match write.send(&self.store.raw).await {
                Ok(()) => return Ok(true),
                Err(e) if e.is_ambiguous() && !again_if_unknown => return Ok(false),
                Err(e)
                    if (e.is_precondition_failed()
                        || e.is_conflict()
                        || e.is_not_found()
                        || e.is_ambiguous())
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Adds a claim that the entity under `key` has `value`: always a new
    /// entry, even when the key is listed already (that entry is another
    /// writer's claim, which it may take out at any time).
    async fn claim(&self, value: &str, key: &EntityKey) -> Result<()> {
        let entry = entry(key);
        self.change_index(value, true, |c| c.add(&entry).map(Some))
            .await
            .map(drop)
    }

    /// Takes one claim that the entity under `key` has `value` out.
    async fn unclaim(&self, value: &str, key: &EntityKey) -> Result<()> {
        let entry = entry(key);
        self.change_index(value, false, |c| Ok(c.remove(&entry)))
            .await
            .map(drop)
    }

    /// After the entity's write under the claim failed with `e`: takes the
    /// claim out again if the answer says nothing was written, and leaves it
    /// (one claim too many at worst) if the write may have landed.
    async fn take_back(&self, value: &str, key: &EntityKey, e: &Error) {
        if !e.is_ambiguous() {
            // Best effort: if this fails too, the entry points at nothing,
            // which lookups skip and report.
            let _ = self.unclaim(value, key).await;
        }
    }

    /// Claims the entity's key under its value, then inserts it. A taken key
    /// is a conflict, and the claim is taken out again.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        let key = self.check(entity)?;
        let value = (self.key)(entity);
        self.claim(&value, &key).await?;
        match self.table.insert(&mut *entity).await {
            Ok(_) => Ok(()),
            Err(e) => {
                self.take_back(&value, &key, &e).await;
                Err(e)
            }
        }
    }

    /// Deletes `current` (the value as read with the ETag of `if_match`),
    /// then takes one claim of its key out of its value's index entities.
    /// Under [`IfMatch::Any`] the stored entity is read first, for its value,
    /// and deleted under its ETag (see the
    /// [module docs](self#writes-under-ifmatchany)).
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        let key = self.check(current)?;
        let if_match = if_match.into();
        let mut attempt = 1;
        let value = loop {
            let was = Replacing::of(&self.table, &*self.key, current, &if_match).await?;
            self.store.check_value(&self.partition, &was.value)?;
            match self.table.delete(key.clone(), was.if_match.clone()).await {
                Ok(()) => break was.value,
                Err(e) if was.retry_after(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        self.unclaim(&value, &key).await
    }

    /// Replaces `current` (the value as read with the ETag of `if_match`)
    /// with `new`. If the indexed value changed: claims the key under the new
    /// value, writes the entity, then takes one claim out of the old value's
    /// list. Under [`IfMatch::Any`] the stored entity is read first, for its
    /// value, and replaced under its ETag (see the
    /// [module docs](self#writes-under-ifmatchany)).
    pub async fn update(
        &self,
        current: &T,
        new: &mut T,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        let key = self.check(new)?;
        if current.key() != key {
            return Err(refused(
                "index_entity",
                "an update keeps the entity's key; delete and insert to move it",
            ));
        }
        let if_match = if_match.into();
        let new_value = (self.key)(new);
        let mut attempt = 1;
        loop {
            let was = Replacing::of(&self.table, &*self.key, current, &if_match).await?;
            let changes = was.value != new_value;
            if changes {
                self.store.check_value(&self.partition, &was.value)?;
                self.claim(&new_value, &key).await?;
            }
            match self
                .table
                .update(&mut *new, UpdateMode::Replace, was.if_match.clone())
                .await
            {
                Ok(_) if changes => return self.unclaim(&was.value, &key).await,
                Ok(_) => return Ok(()),
                Err(e) => {
                    if changes {
                        self.take_back(&new_value, &key, &e).await;
                    }
                    if !(was.retry_after(&e) && attempt < MAX_ATTEMPTS) {
                        return Err(e);
                    }
                    attempt += 1;
                }
            }
        }
    }

    /// Takes the [`Lookup::dangling`] entries of `value` out of its index
    /// entities, and every repeat of an entry, and returns the dangling keys.
    /// Only when no writer of this value is running: an entry whose entity is
    /// missing may be the claim of an insert in flight, and a repeated one
    /// the claim of a writer about to take one out; removing either could
    /// leave an entity unlisted.
    pub async fn remove_dangling(&self, value: &str) -> Result<Vec<EntityKey>> {
        let found = self.find(value).await?;
        let live: HashSet<String> = found.entities.iter().map(|e| entry(&e.key())).collect();
        while self
            .change_index(value, false, |c| Ok(c.prune(&live)))
            .await?
        {}
        Ok(found.dangling)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(capacity: usize, stored: &[(usize, &[&str])]) -> Chunks {
        Chunks {
            partition_key: "Sales".into(),
            prefix: "lastname_".into(),
            value: "Jones".into(),
            capacity,
            chunks: stored
                .iter()
                .map(|(n, e)| Chunk {
                    number: *n,
                    entries: e.iter().map(|s| s.to_string()).collect(),
                    etag: Some(ETag::new(format!("W/\"{n}\""))),
                })
                .collect(),
        }
    }

    fn row_key(w: &ChunkWrite) -> &str {
        match w {
            ChunkWrite::Insert(e) | ChunkWrite::Update(e, _) => &e.row_key,
            ChunkWrite::Delete(k, _) => &k.row_key,
        }
    }

    #[test]
    fn an_entry_goes_to_the_first_index_entity_with_room() {
        // "a\nb" is 3 units; "a\nb\nc" is 5.
        let c = chunks(5, &[(0, &["a", "b"]), (1, &["x"])]);
        let w = c.add("c").unwrap();
        assert!(matches!(&w, ChunkWrite::Update(e, _)
            if e.row_key == "lastname_Jones_000"
            && e.get(ENTITY_IDS) == Some(&EdmValue::from("a\nb\nc"))));
        // "a\nb\ncd" would be 6: on to chunk 1 ("x\ncd" is 4).
        assert_eq!(row_key(&c.add("cd").unwrap()), "lastname_Jones_001");
        // Nothing fits: the lowest free number.
        assert!(
            matches!(c.add("wxyz").unwrap(), ChunkWrite::Insert(e) if e.row_key == "lastname_Jones_002")
        );
        let holes = chunks(3, &[(1, &["abc"])]);
        assert_eq!(row_key(&holes.add("d").unwrap()), "lastname_Jones_000");
        assert!(c.add("toolong").unwrap_err().is_invalid_input());
    }

    #[test]
    fn removing_the_last_entry_deletes_its_index_entity() {
        let c = chunks(10, &[(0, &["a", "b"]), (1, &["x"])]);
        assert!(
            matches!(c.remove("x").unwrap(), ChunkWrite::Delete(k, _) if k.row_key == "lastname_Jones_001")
        );
        assert!(matches!(c.remove("a").unwrap(), ChunkWrite::Update(e, _)
            if e.get(ENTITY_IDS) == Some(&EdmValue::from("b"))));
        assert!(c.remove("zz").is_none());
    }

    #[test]
    fn a_repeated_entry_is_removed_once_and_pruned_to_one() {
        let c = chunks(20, &[(0, &["a", "b"]), (1, &["a", "x"])]);
        assert!(matches!(c.remove("a").unwrap(), ChunkWrite::Update(e, _)
            if e.row_key == "lastname_Jones_000"
            && e.get(ENTITY_IDS) == Some(&EdmValue::from("b"))));
        let live: HashSet<String> = ["a".to_owned(), "b".to_owned()].into();
        // Chunk 0 keeps all; chunk 1 loses the repeat of "a" and the dead "x".
        assert!(
            matches!(c.prune(&live).unwrap(), ChunkWrite::Delete(k, _) if k.row_key == "lastname_Jones_001")
        );
        let c = chunks(20, &[(0, &["a", "a", "b"])]);
        assert!(matches!(c.prune(&live).unwrap(), ChunkWrite::Update(e, _)
            if e.get(ENTITY_IDS) == Some(&EdmValue::from("a\nb"))));
        assert!(chunks(20, &[(0, &["a", "b"])]).prune(&live).is_none());
    }

    #[test]
    fn capacity_counts_utf16_code_units() {
        // "é" is one unit, "😀" two.
        let c = chunks(4, &[(0, &["é"])]);
        assert_eq!(row_key(&c.add("😀").unwrap()), "lastname_Jones_000"); // "é\n😀": 4
        let c = chunks(4, &[(0, &["éé"])]);
        assert_eq!(row_key(&c.add("😀").unwrap()), "lastname_Jones_001");
        assert!(check_capacity(MAX_CHUNK_UNITS + 1).is_err());
        assert!(check_capacity(0).is_err());
    }

    #[test]
    fn option_3_entries_round_trip() {
        let k = EntityKey::new("Sales", "000152");
        assert_eq!(entry(&k), "Sales\t000152");
        assert_eq!(parse_entry(&entry(&k)), Some(k));
        assert!(backoff(2) >= Duration::from_millis(5));
        assert!(backoff(40) <= Duration::from_millis(640));
    }
}
