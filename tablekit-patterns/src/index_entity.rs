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
//!   No transaction can span the two partitions: see the consistency
//!   trade-off below.
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
//! # Consistency of option 3
//!
//! The guide says option 3 can only be *eventually* consistent with the
//! entities, because the index entity is in another partition: no
//! transaction covers both. [`SeparateIndexEntities`] orders its two writes
//! so that a crash (or a failed request) between them leaves at worst an index
//! entry that points at nothing, never an entity its index does not list:
//!
//! * insert: add the entry to the index (ETag-guarded read–modify–write,
//!   retried on 412/409 with a jittered backoff), then insert the entity;
//! * update changing the value: add the entry to the new value's index,
//!   update the entity under its ETag, then remove the entry from the old
//!   value's index;
//! * delete: delete the entity, then remove its entry.
//!
//! When the entity's write fails, the entry just added is taken out again
//! (unless the entity stored under that key has the value, as when another
//! writer inserted it meanwhile). A lookup reads each listed entity and
//! checks its value, so entries left by a crash are skipped and reported as
//! [`Lookup::dangling`]. They are not removed on read: an entry whose entity
//! is missing may belong to an insert still in flight, and removing it would
//! leave that entity unlisted; [`SeparateIndexEntities::remove_dangling`]
//! removes them when no writer of that value is running.
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
//! Each retry after a concurrent change of an index entity repeats the range
//! query and the write.
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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use tablekit::{
    to_dynamic, DynamicEntity, ETag, EdmValue, EntityKey, Error, IfMatch, Result, TableClient,
    TableEntity, Transaction, UpdateMode,
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
    format!("{prefix}{value}_{n:03}")
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

    fn contains(&self, entry: &str) -> bool {
        self.entries().any(|e| e == entry)
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

    /// The write that removes `entry`, deleting its index entity if it was
    /// the last entry; `None` if no index entity lists it.
    fn remove(&self, entry: &str) -> Option<ChunkWrite> {
        let c = self
            .chunks
            .iter()
            .find(|c| c.entries.iter().any(|e| e == entry))?;
        let etag = c.etag.clone().expect("stored chunks have an ETag");
        let entries: Vec<String> = c.entries.iter().filter(|e| *e != entry).cloned().collect();
        Some(if entries.is_empty() {
            ChunkWrite::Delete(
                EntityKey::new(
                    self.partition_key.as_str(),
                    chunk_row_key(&self.prefix, &self.value, c.number),
                ),
                etag,
            )
        } else {
            ChunkWrite::Update(self.entity(c.number, &entries), etag)
        })
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
        let base = format!("{}{value}_", self.prefix);
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

    /// The entities whose value is `value`: the index entities, then a point
    /// read of each entity (concurrently). An entity listed but missing is
    /// left out.
    pub async fn find(&self, partition_key: &str, value: &str) -> Result<Vec<T>> {
        let ids = self.ids(partition_key, value).await?;
        let found = try_join_all(
            ids.iter()
                .map(|id| self.table.get((partition_key, id.as_str())).send()),
        )
        .await?;
        Ok(found.into_iter().flatten().collect())
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

    /// Deletes `current` (the value as read) under `if_match` and removes its
    /// RowKey from its index entities, in one transaction; starts again when
    /// another writer changed the index entity.
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        self.check(current)?;
        let if_match = if_match.into();
        let pk = current.partition_key().into_owned();
        let rk = current.row_key().into_owned();
        let value = (self.key)(current);
        let mut attempt = 1;
        loop {
            let write = self.store.read(&pk, &value).await?.remove(&rk);
            let mut tx = self.store.raw.transaction();
            tx.delete((pk.as_str(), rk.as_str()), if_match.clone())?;
            if let Some(write) = write {
                write.add_to(&mut tx)?;
            }
            self.before_write.call(attempt);
            match tx.send().await {
                Ok(_) => return Ok(()),
                Err(e) if index_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Replaces `current` (the value as read) with `new` under `if_match`. If
    /// the indexed value changed, one transaction changes three entities: the
    /// entity, the old value's index entity and the new value's; it starts
    /// again when another writer changed either index entity.
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
        let (old_value, new_value) = ((self.key)(current), (self.key)(new));
        if old_value == new_value {
            return self
                .table
                .update(new, UpdateMode::Replace, if_match)
                .await
                .map(drop);
        }
        let pk = new.partition_key().into_owned();
        let rk = new.row_key().into_owned();
        let body = bag(new)?;
        let mut attempt = 1;
        loop {
            let old = self.store.read(&pk, &old_value).await?.remove(&rk);
            let fresh = self.store.read(&pk, &new_value).await?.add(&rk)?;
            let mut tx = self.store.raw.transaction();
            tx.update(&body, UpdateMode::Replace, if_match.clone())?;
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
                Err(e) if index_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// What a lookup through [`SeparateIndexEntities`] found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Lookup<T> {
    /// The listed entities that exist and have the value, in list order.
    pub entities: Vec<T>,
    /// Listed keys whose entity is missing or no longer has the value: what a
    /// crash between the two writes of an insert, update or delete leaves.
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
                raw: index,
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

    /// The keys listed for `value`, in list order: one range query.
    pub async fn keys(&self, value: &str) -> Result<Vec<EntityKey>> {
        Ok(self
            .store
            .read(&self.partition, value)
            .await?
            .entries()
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
    async fn change_index(
        &self,
        value: &str,
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
                Err(e)
                    if (e.is_precondition_failed() || e.is_conflict() || e.is_not_found())
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn add_entry(&self, value: &str, entry: &str) -> Result<bool> {
        self.change_index(value, |c| {
            if c.contains(entry) {
                Ok(None)
            } else {
                c.add(entry).map(Some)
            }
        })
        .await
    }

    async fn remove_entry(&self, value: &str, entry: &str) -> Result<bool> {
        self.change_index(value, |c| Ok(c.remove(entry))).await
    }

    /// After the entity's write failed: takes out the entry added for it,
    /// unless the entity stored under the key has the value (another writer
    /// stored it meanwhile, and the entry is now its).
    async fn take_back(&self, key: &EntityKey, value: &str) {
        let stored = self.table.get(key.clone()).send().await;
        if matches!(&stored, Ok(Some(e)) if (self.key)(e) == value) {
            return;
        }
        // Best effort: if this fails too, the entry points at nothing, which
        // lookups skip and report.
        let _ = self.remove_entry(value, &entry(key)).await;
    }

    /// Lists the entity under its value, then inserts it. A taken key is a
    /// conflict, and the entry is taken out again.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        let key = self.check(entity)?;
        let value = (self.key)(entity);
        let added = self.add_entry(&value, &entry(&key)).await?;
        match self.table.insert(&mut *entity).await {
            Ok(_) => Ok(()),
            Err(e) => {
                if added {
                    self.take_back(&key, &value).await;
                }
                Err(e)
            }
        }
    }

    /// Deletes `current` (the value as read) under `if_match`, then takes its
    /// entry out of its value's index entities.
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        let key = self.check(current)?;
        let value = (self.key)(current);
        self.table.delete(key.clone(), if_match).await?;
        self.remove_entry(&value, &entry(&key)).await.map(drop)
    }

    /// Replaces `current` (the value as read) with `new` under `if_match`. If
    /// the indexed value changed: lists the entity under the new value, writes
    /// it, then takes it out of the old value's list.
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
        let (old_value, new_value) = ((self.key)(current), (self.key)(new));
        if old_value == new_value {
            return self
                .table
                .update(new, UpdateMode::Replace, if_match)
                .await
                .map(drop);
        }
        self.store.check_value(&self.partition, &old_value)?;
        let added = self.add_entry(&new_value, &entry(&key)).await?;
        if let Err(e) = self
            .table
            .update(&mut *new, UpdateMode::Replace, if_match)
            .await
        {
            if added {
                self.take_back(&key, &new_value).await;
            }
            return Err(e);
        }
        self.remove_entry(&old_value, &entry(&key)).await.map(drop)
    }

    /// Takes the [`Lookup::dangling`] entries of `value` out of its index
    /// entities and returns them. Only when no writer of this value is
    /// running: an insert in flight has listed its entity before writing it,
    /// and this would unlist it.
    pub async fn remove_dangling(&self, value: &str) -> Result<Vec<EntityKey>> {
        let dangling = self.find(value).await?.dangling;
        for key in &dangling {
            self.remove_entry(value, &entry(key)).await?;
        }
        Ok(dangling)
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
