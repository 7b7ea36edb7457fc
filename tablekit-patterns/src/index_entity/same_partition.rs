//! Option 2, [`IndexEntities`]: index entities in the partition of the
//! entities they list, written with them in one transaction.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use futures::future::try_join_all;
use tablekit::{
    entity::RawEntity,
    error::{DecodeError, ErrorKind},
    table::{PlanTarget, TransactionOp},
    DynamicEntity, EntityKey, Error, IfMatch, Result, TableClient, TableEntity, UpdateMode,
};

use crate::error::refused;
use crate::hook::BeforeWrite;
use crate::plan::Plan;

use super::chunks::{check_capacity, chunks_prefix, entries_of, fits, Store};
use super::{
    bag, chunk_row_key, index_race, set_etag, KeyFn, Replacing, ENTITY_IDS, MAX_ATTEMPTS,
    MAX_CHUNK_UNITS,
};

/// One index entity of a value, named by its number: what a planned change
/// of the value's list changes.
#[derive(Clone)]
struct ChunkRef {
    store: Store,
    partition_key: String,
    value: String,
    number: usize,
}

impl ChunkRef {
    fn key(&self) -> EntityKey {
        EntityKey::new(
            self.partition_key.as_str(),
            chunk_row_key(&self.store.prefix, &self.value, self.number),
        )
    }

    fn describe(&self) -> String {
        let key = self.key();
        format!("index entity ({}, {})", key.partition_key, key.row_key)
    }

    /// The index entity listing `entries`: `None` (deleted) when none.
    fn holding(&self, entries: &[String]) -> Option<DynamicEntity> {
        let key = self.key();
        (!entries.is_empty()).then(|| {
            DynamicEntity::new(key.partition_key, key.row_key).with(ENTITY_IDS, entries.join("\n"))
        })
    }

    /// `entry` added to this index entity, planned as a [`Plan::modify`]: to
    /// the list as the plan's earlier changes leave it (the read, then
    /// those changes), written whole under the ETag read (or inserted). When
    /// an earlier change left no room for it, the plan is refused: the entry
    /// would go to another index entity, which this change cannot choose.
    fn add(&self, entry: &str) -> Result<Plan<'static>> {
        let (this, entry) = (self.clone(), entry.to_owned());
        Plan::modify(&self.store.raw, self.key(), move |now| {
            let mut entries = now.map(entries_of).unwrap_or_default();
            if !fits(this.store.capacity, &entries, &entry) {
                return Err(refused(
                    "index_entity",
                    format!(
                        "{} has no room for {entry:?} after the plan's earlier changes of the \
                         list of {:?}: the entry would go to another index entity, which one \
                         plan cannot choose; send these changes as separate plans",
                        this.describe(),
                        this.value
                    ),
                ));
            }
            entries.push(entry.clone());
            Ok(this.holding(&entries))
        })
    }

    /// One occurrence of `entry` removed from this index entity, planned as a
    /// [`Plan::modify`] of it as the plan's earlier changes leave it (deleted
    /// when it was its last). `listed`: the read lists the entry here, so
    /// when it no longer does an earlier change of the plan took it out, and
    /// this second removal of one entry is refused. Not `listed`: only an
    /// earlier change of the plan can have added it here; without one the
    /// index entity is left as it is (rewritten unchanged when it is stored
    /// and nothing earlier in the plan wrote it: a change by
    /// [`Plan::modify`] cannot leave an entity unwritten).
    fn remove(&self, entry: &str, listed: bool) -> Result<Plan<'static>> {
        let (this, entry) = (self.clone(), entry.to_owned());
        Plan::modify(&self.store.raw, self.key(), move |now| {
            let Some(now) = now else {
                if listed {
                    return Err(this.removed_twice(&entry));
                }
                return Ok(None);
            };
            let mut entries = entries_of(now);
            match entries.iter().position(|e| *e == entry) {
                Some(at) => {
                    entries.remove(at);
                    Ok(this.holding(&entries))
                }
                None if listed => Err(this.removed_twice(&entry)),
                None => Ok(Some(now.clone())),
            }
        })
    }

    fn removed_twice(&self, entry: &str) -> Error {
        refused(
            "index_entity",
            format!(
                "{} no longer lists {entry:?} after the plan's earlier changes: two removals \
                 of one entry from the list of {:?} in one plan; send them as separate plans",
                self.describe(),
                self.value
            ),
        )
    }
}

/// `entry` added to the index entities of `value`, planned: the index entity
/// it goes to is chosen from them as read when the plan is sent (one range
/// query, shared with every part of the plan that reads it), and the entry
/// added to that one as the plan's earlier changes leave it
/// ([`ChunkRef::add`]).
fn plan_add_entry(
    store: &Store,
    partition_key: &str,
    value: &str,
    entry: &str,
) -> Result<Plan<'static>> {
    store.check_value(partition_key, value)?;
    let prefix = chunks_prefix(&store.prefix, value);
    let raw = store.raw.clone();
    let (store, pk, value, entry) = (
        store.clone(),
        partition_key.to_owned(),
        value.to_owned(),
        entry.to_owned(),
    );
    Plan::after_range(&raw, &pk.clone(), &prefix, None, move |rows| {
        add_over(&store, &pk, &value, &entry, rows.to_vec())
    })
}

/// The change that adds `entry` to the index entities `rows`: to the first
/// with room for it, or to a new one. The new one is read first, as absent
/// (a point read): a transaction refused because another writer created it
/// meanwhile (409) is then stale, and the plan is worked out again, where a
/// range query's absence would not make it so. Found there, it joins `rows`
/// and the entry is placed again.
fn add_over(
    store: &Store,
    partition_key: &str,
    value: &str,
    entry: &str,
    rows: Vec<DynamicEntity>,
) -> Result<Plan<'static>> {
    let place = store
        .chunks(partition_key, value, rows.iter().cloned())
        .place(entry)?;
    let slot = ChunkRef {
        store: store.clone(),
        partition_key: partition_key.to_owned(),
        value: value.to_owned(),
        number: place.number,
    };
    if place.stored {
        return slot.add(entry);
    }
    let entry = entry.to_owned();
    Plan::after_read(&store.raw.clone(), slot.key(), move |found| match found {
        None => slot.add(&entry),
        Some(found) => {
            let mut rows = rows.clone();
            rows.push(found.clone());
            add_over(&slot.store, &slot.partition_key, &slot.value, &entry, rows)
        }
    })
}

/// One occurrence of `entry` removed from the index entities of `value`,
/// planned: worked out from them as read when the plan is sent
/// ([`remove_over`]).
fn plan_remove_entry(
    store: &Store,
    partition_key: &str,
    value: &str,
    entry: &str,
) -> Result<Plan<'static>> {
    store.check_value(partition_key, value)?;
    let prefix = chunks_prefix(&store.prefix, value);
    let (store, pk, value, entry) = (
        store.clone(),
        partition_key.to_owned(),
        value.to_owned(),
        entry.to_owned(),
    );
    Plan::after_range(
        &store.raw.clone(),
        &pk.clone(),
        &prefix,
        None,
        move |rows| remove_over(&store, &pk, &value, &entry, rows.to_vec()),
    )
}

/// The change that removes `entry` from the index entities `rows`: from the
/// first listing it. When none does, from the one an addition of it joins
/// ([`add_over`], which reads a new one first, as this does), the only
/// place where an earlier change of the same plan can have put it; nothing
/// when no addition of it can be made.
fn remove_over(
    store: &Store,
    partition_key: &str,
    value: &str,
    entry: &str,
    rows: Vec<DynamicEntity>,
) -> Result<Plan<'static>> {
    let chunks = store.chunks(partition_key, value, rows.iter().cloned());
    let slot = |number| ChunkRef {
        store: store.clone(),
        partition_key: partition_key.to_owned(),
        value: value.to_owned(),
        number,
    };
    if let Some(number) = chunks.listing(entry) {
        return slot(number).remove(entry, true);
    }
    let Ok(place) = chunks.place(entry) else {
        return Ok(Plan::new());
    };
    let slot = slot(place.number);
    if place.stored {
        return slot.remove(entry, false);
    }
    let entry = entry.to_owned();
    Plan::after_read(&store.raw.clone(), slot.key(), move |found| match found {
        None => slot.remove(&entry, false),
        Some(found) => {
            let mut rows = rows.clone();
            rows.push(found.clone());
            remove_over(&slot.store, &slot.partition_key, &slot.value, &entry, rows)
        }
    })
}

/// Entities of type `T` with index entities (option 2) for one non-unique
/// value, in the entities' own partitions; see the [module docs](super).
/// Cheap to clone.
///
/// Every write is one transaction in the entity's partition, so it can also
/// be **planned**: [`plan_insert`](Self::plan_insert),
/// [`plan_update`](Self::plan_update) and [`plan_delete`](Self::plan_delete)
/// return a [`Plan`] (synchronously, with no request) that reads the index
/// entities when it is sent and joins other writes of the partition, such as
/// a [`CountedPartition`](crate::summary::CountedPartition)'s count, in one
/// transaction ([`crate::plan`]). [`delete`](Self::delete) sends its plan;
/// [`insert`](Self::insert) and [`update`](Self::update) make the same
/// change with their own requests (a plan creating an index entity reads it
/// first, one request more, and an update that keeps the value is one
/// single write, not a transaction).
///
/// ```
/// use tablekit::{TableEntity, TableServiceClient};
/// use tablekit_patterns::index_entity::IndexEntities;
/// use tablekit_patterns::summary::CountedPartition;
///
/// #[derive(TableEntity, Debug, Clone)]
/// #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
/// struct Employee {
///     department: String,
///     employee_id: u32,
///     last_name: String,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tablekit::Result<()> {
/// let service = TableServiceClient::embedded();
/// let employees = service.table::<Employee>("Employees")?;
/// employees.create_table().await?;
/// let by_last_name = IndexEntities::new(employees.clone(), "lastname_", |e: &Employee| e.last_name.clone());
/// let counted = CountedPartition::new(employees, "Department", "EmployeeCount");
///
/// let jones = Employee { department: "Sales".into(), employee_id: 152, last_name: "Jones".into() };
/// // One transaction: the employee, lastname_Jones_000 and the count.
/// let applied = by_last_name
///     .plan_insert(&jones)?
///     .and(counted.plan_count("Sales", 1)?)?
///     .await?;
/// assert_eq!(applied.len(), 3);
/// assert_eq!(by_last_name.ids("Sales", "Jones").await?, ["000152"]);
/// assert_eq!(counted.count("Sales").await?, 1);
/// # Ok(()) }
/// ```
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
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    /// The typed table client.
    pub fn table(&self) -> &TableClient<T> {
        &self.table
    }

    pub(super) fn check(&self, entity: &T) -> Result<()> {
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
        crate::trace::traced(
            "IndexEntities",
            "ids",
            Some(self.table.name()),
            async move {
                Ok(self
                    .store
                    .read(partition_key, value)
                    .await?
                    .entries()
                    .cloned()
                    .collect())
            },
        )
        .await
    }

    /// The entities of partition `partition_key` whose value is `value`, in
    /// list order: the index entities, then a point read of each listed
    /// entity (concurrently). An entity listed but missing, or with another
    /// value, is left out.
    pub async fn find(&self, partition_key: &str, value: &str) -> Result<Vec<T>> {
        crate::trace::traced(
            "IndexEntities",
            "find",
            Some(self.table.name()),
            async move {
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
            },
        )
        .await
    }

    /// The indexed value and ETag of the stored entity `key` as a plan read
    /// it: not found when there is none (the error a write under
    /// [`IfMatch::Any`] would meet).
    fn stored(&self, key: &EntityKey, stored: Option<&DynamicEntity>) -> Result<(String, IfMatch)> {
        let Some(stored) = stored else {
            return Err(ErrorKind::NoEntity(self.table.name().to_owned()).into());
        };
        let etag = stored.etag.clone().ok_or_else(|| {
            Error::from(DecodeError::new(format!(
                "entity {key} was read without its ETag (odata.etag), which a write under \
                 IfMatch::Any is made under here: the server or a proxy dropped it"
            )))
        })?;
        let value = (self.key)(&T::decode(&RawEntity::from_dynamic(stored))?);
        Ok((value, IfMatch::ETag(etag)))
    }

    /// The entry `key` moved from the index entities of `old` to those of
    /// `new`, planned (nothing when the value is the same).
    fn plan_move(&self, key: &EntityKey, old: &str, new: &str) -> Result<Plan<'static>> {
        if old == new {
            return Ok(Plan::new());
        }
        let (pk, rk) = (key.partition_key.as_str(), key.row_key.as_str());
        plan_remove_entry(&self.store, pk, old, rk)?.and(plan_add_entry(&self.store, pk, new, rk)?)
    }

    /// The insert of the entity and the addition of its RowKey to its
    /// value's index entities, planned: the writes [`insert`](Self::insert)
    /// sends, for a transaction composed with other writes of the partition
    /// ([`crate::plan`]), such as the partition's
    /// [count](crate::summary::CountedPartition::plan_count). The index
    /// entities are read when the plan is sent (one range query) and the
    /// change is made under the ETag read, so the plan is worked out again
    /// when another writer changed them. When the entry needs a new index
    /// entity, the plan also reads that one (one point read, which `insert`
    /// does not make): another writer creating it meanwhile then makes the
    /// plan be worked out again instead of failing it. Passed by `&mut`, the
    /// entity gets its new ETag when the plan succeeds.
    ///
    /// **Changes of one value's list compose.** Each change of an index
    /// entity is a [`Plan::modify`] of it: the entry is added to (or removed
    /// from) its list as the plan's earlier changes leave it. Two Joneses
    /// inserted in one plan, one renamed to Jones and another inserted, or
    /// one Jones inserted and another deleted, are listed as the writes one
    /// after another would list them (a new index entity both join is one
    /// insert). Which index entity an entry joins is chosen from the read:
    ///
    /// * when an earlier change of the plan left that one no room for it,
    ///   the plan is refused before the transaction (an invalid-input error
    ///   naming the index entity), rather than the entry put elsewhere: send
    ///   such changes as separate plans;
    /// * when an earlier removal of the plan freed room in an index entity
    ///   ahead of that one, the entry still joins the one chosen: a later
    ///   one than separate writes would pick, with the same entries listed.
    ///
    /// Two removals of one entry from one value's list in one plan (two
    /// changes of one entity under [`IfMatch::Any`], which both take its
    /// entry out of the value read) are refused likewise.
    pub fn plan_insert<'a>(&self, entity: impl PlanTarget<'a, T>) -> Result<Plan<'a>> {
        let e = entity.entity();
        self.check(e)?;
        let key = e.key();
        let value = (self.key)(e);
        let list = plan_add_entry(&self.store, &key.partition_key, &value, &key.row_key)?;
        self.table.plan_insert(entity)?.and(list)
    }

    /// The update of `current` (the value as read with the ETag of
    /// `if_match`) to `new` and, when the indexed value changes, the move of
    /// its RowKey from the old value's index entities to the new value's,
    /// planned: the writes [`update`](Self::update) sends, the entity's
    /// as a replace under `if_match`. Under [`IfMatch::Any`] the plan reads
    /// the stored entity when sent, for its value, and writes under its ETag
    /// (again from a fresh read when it changed meanwhile); not found when
    /// there is none. Passed by `&mut`, `new` gets its new ETag when the plan
    /// succeeds. Changes of one value's list in one plan compose (see
    /// [`plan_insert`](Self::plan_insert)).
    pub fn plan_update<'a>(
        &self,
        current: &T,
        new: impl PlanTarget<'a, T>,
        if_match: impl Into<IfMatch>,
    ) -> Result<Plan<'a>> {
        let e = new.entity();
        self.check(e)?;
        let key = e.key();
        if current.key() != key {
            return Err(refused(
                "index_entity",
                "an update keeps the entity's key; delete and insert to move it",
            ));
        }
        let new_value = (self.key)(e);
        match if_match.into() {
            IfMatch::ETag(etag) => {
                let lists = self.plan_move(&key, &(self.key)(current), &new_value)?;
                self.table
                    .plan_update(new, UpdateMode::Replace, IfMatch::ETag(etag))?
                    .and(lists)
            }
            IfMatch::Any => {
                let this = self.clone();
                let at = key.clone();
                let read = Plan::after_read(&self.store.raw, key, move |stored| {
                    let (old_value, etag) = this.stored(&at, stored)?;
                    // The update made under the ETag read: an empty merge
                    // under it, folded with the replace into one operation.
                    let unchanged =
                        DynamicEntity::new(at.partition_key.as_str(), at.row_key.as_str());
                    Plan::op(
                        &this.store.raw,
                        TransactionOp::update(&unchanged, UpdateMode::Merge, etag)?,
                    )?
                    .and(this.plan_move(&at, &old_value, &new_value)?)
                })?;
                self.table
                    .plan_update(new, UpdateMode::Replace, IfMatch::Any)?
                    .and(read)
            }
        }
    }

    /// The delete of `current` (the value as read with the ETag of
    /// `if_match`) and the removal of its RowKey from its value's index
    /// entities, planned: the writes [`delete`](Self::delete) sends. Under
    /// [`IfMatch::Any`] the plan reads the stored entity when sent, for its
    /// value, and deletes under its ETag; not found when there is none.
    /// Changes of one value's list in one plan compose (see
    /// [`plan_insert`](Self::plan_insert)): after an update of the same plan
    /// that renamed the entity to this value, the entry that update added is
    /// taken out again. So when the index entities read do not list the
    /// entry, the removal is a change of the one an addition of it joins,
    /// the only place such an update puts it. When no earlier change put it
    /// there (an entity written around the pattern, which no index entity
    /// lists), that costs a point read of that index entity if it is not
    /// stored, else a rewrite of it, unchanged, under the ETag read.
    pub fn plan_delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<Plan<'static>> {
        self.check(current)?;
        let key = current.key();
        match if_match.into() {
            IfMatch::ETag(etag) => {
                let list = plan_remove_entry(
                    &self.store,
                    &key.partition_key,
                    &(self.key)(current),
                    &key.row_key,
                )?;
                self.table.plan_delete(key, IfMatch::ETag(etag))?.and(list)
            }
            IfMatch::Any => {
                let this = self.clone();
                let at = key.clone();
                Plan::after_read(&self.store.raw, key, move |stored| {
                    let (value, etag) = this.stored(&at, stored)?;
                    let list =
                        plan_remove_entry(&this.store, &at.partition_key, &value, &at.row_key)?;
                    this.table.plan_delete(at.clone(), etag)?.and(list)
                })
            }
        }
    }

    /// Inserts the entity and adds its RowKey to its value's index entities,
    /// in one transaction under the changed index entity's ETag (or inserting
    /// it); starts again from the read when another writer changed it. A
    /// taken key is a conflict.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced(
            "IndexEntities",
            "insert",
            Some(self.table.name()),
            async move {
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
                    self.before_write.call(attempt).await?;
                    match tx.send().await {
                        Ok(done) => {
                            set_etag(entity, done.etag(0).cloned());
                            return Ok(());
                        }
                        Err(e) if index_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                        Err(e) => return Err(e),
                    }
                }
            },
        )
        .await
    }

    /// Deletes `current` (the value as read with the ETag of `if_match`) and
    /// removes its RowKey from its value's index entities, in one
    /// transaction; starts again when another writer changed the index
    /// entity. Under [`IfMatch::Any`] the stored entity is read first, for its
    /// value (see the [module docs](super#writes-under-ifmatchany)).
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        crate::trace::traced(
            "IndexEntities",
            "delete",
            Some(self.table.name()),
            async move {
                let plan = self.plan_delete(current, if_match)?;
                self.before_write.attach(plan).send().await.map(drop)
            },
        )
        .await
    }

    /// Replaces `current` (the value as read with the ETag of `if_match`)
    /// with `new`. If the indexed value changed, one transaction changes
    /// three entities: the entity, the old value's index entity and the new
    /// value's; it starts again when another writer changed either index
    /// entity. Under [`IfMatch::Any`] the stored entity is read first, for its
    /// value (see the [module docs](super#writes-under-ifmatchany)).
    pub async fn update(
        &self,
        current: &T,
        new: &mut T,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        crate::trace::traced(
            "IndexEntities",
            "update",
            Some(self.table.name()),
            async move {
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
                    let old = self.store.read(&pk, &was.value).await?.remove(&rk)?;
                    let fresh = self.store.read(&pk, &new_value).await?.add(&rk)?;
                    let mut tx = self.store.raw.transaction();
                    tx.update(&body, UpdateMode::Replace, was.if_match.clone())?;
                    if let Some(old) = old {
                        old.add_to(&mut tx)?;
                    }
                    fresh.add_to(&mut tx)?;
                    self.before_write.call(attempt).await?;
                    match tx.send().await {
                        Ok(done) => {
                            set_etag(new, done.etag(0).cloned());
                            return Ok(());
                        }
                        Err(e) if was.retry_after(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                        Err(e) => return Err(e),
                    }
                }
            },
        )
        .await
    }
}
