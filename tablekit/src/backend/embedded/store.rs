//! The store: tables of partitions of entities, each kept in (PartitionKey,
//! RowKey) order, with the service's rules for writes, conditions, transactions
//! and paged queries.
//!
//! Locking follows the service's unit of consistency, the partition: a table
//! holds its partitions behind one lock that is held only to find (or add) a
//! partition, and each partition has its own lock. Writes to different
//! partitions therefore do not wait for each other, a transaction (one
//! partition by rule) is atomic under its partition's lock, and a query sees
//! each partition as of one instant (the service's snapshot isolation holds
//! within a partition, not across). Stored versions are immutable `Arc`s, so a
//! reader keeps what it read without copying and without holding any lock.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::check;
use super::clock::{Clock, Version};
#[cfg(feature = "durable")]
use super::durable::{Durable, Put};
use super::errors;
use super::key::{compare_utf16, Key};
use crate::backend::{BatchKind, BatchOp, StoredEntity, Written};
use crate::continuation::Continuation;
use crate::entity::{DynamicEntity, ETag, EntityKey, IfMatch, Name, Properties, UpdateMode};
use crate::error::{ErrorCode, Result};
use crate::filter::{matches, CmpOp, Expr};
use crate::validate::{MAX_BATCH_BYTES, MAX_BATCH_OPERATIONS, MAX_PAGE_SIZE};
use crate::EdmValue;

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // A panic while holding a lock cannot leave a half-applied change: every
    // change is computed first and applied with infallible map operations.
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

type Partition = BTreeMap<Key, Arc<StoredEntity>>;

/// An account's tables, and the clock that versions its writes.
#[derive(Default)]
pub(crate) struct Store {
    /// Keyed by the lower-cased name: names are case-insensitive, case-preserving.
    tables: RwLock<BTreeMap<Key, Arc<Table>>>,
    clock: Clock,
    /// The file every write is committed to before it is applied here, if any.
    #[cfg(feature = "durable")]
    durable: Option<Durable>,
}

// A client's Debug output names the store, not every entity in it.
impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Store");
        d.field("tables", &read(&self.tables).len());
        #[cfg(feature = "durable")]
        if let Some(file) = &self.durable {
            d.field("file", file);
        }
        d.finish()
    }
}

/// One table.
#[derive(Debug)]
/// One page of a query's entities: shared versions (the in-memory store),
/// or records read from a store file.
pub(crate) enum Page {
    Shared(Vec<Arc<StoredEntity>>),
    #[cfg(feature = "durable")]
    Records(super::durable::rows::Rows),
}

pub(crate) struct Table {
    /// The name as created.
    name: String,
    /// The table's id in the store's file (0 in memory).
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    id: u64,
    /// The entities of a store in memory. A store with a file keeps none
    /// here: its entities are read from the file (through its cache) and
    /// written to it, under the file's partition locks.
    partitions: RwLock<BTreeMap<Key, Arc<RwLock<Partition>>>>,
}

fn lower(name: &str) -> Key {
    Key(name.to_ascii_lowercase())
}

impl Store {
    /// The store kept in the file at `path`: its entities stay in the file.
    #[cfg(feature = "durable")]
    pub(crate) fn open(path: &std::path::Path) -> Result<Store> {
        let (durable, loaded) = Durable::open(path)?;
        Ok(Store::with_file(durable, loaded))
    }

    /// The store of an open file, with the tables it names.
    #[cfg(feature = "durable")]
    pub(crate) fn with_file(durable: Durable, loaded: super::durable::Loaded) -> Store {
        let clock = Clock::default();
        clock.advance_past(loaded.last_version);
        let tables = loaded
            .tables
            .into_iter()
            .map(|t| {
                let table = Table {
                    name: t.name,
                    id: t.id,
                    partitions: RwLock::default(),
                };
                (lower(&table.name), Arc::new(table))
            })
            .collect();
        Store {
            tables: RwLock::new(tables),
            clock,
            durable: Some(durable),
        }
    }

    /// The store's file, if it has one (tests).
    #[cfg(all(test, feature = "durable"))]
    pub(crate) fn file(&self) -> Option<&Durable> {
        self.durable.as_ref()
    }

    /// How the store names itself in its errors (see [`errors::store_name`]).
    pub(crate) fn name(&self) -> String {
        #[cfg(feature = "durable")]
        if let Some(d) = &self.durable {
            return errors::store_name(Some(d.path()));
        }
        errors::store_name(None)
    }

    pub(crate) fn create_table(&self, name: &str) -> Result<()> {
        let mut tables = write(&self.tables);
        let key = lower(name);
        if tables.contains_key(&key) {
            return Err(errors::table_exists());
        }
        #[cfg(feature = "durable")]
        let id = match &self.durable {
            Some(d) => d.create_table(&key.0, name)?,
            None => 0,
        };
        #[cfg(not(feature = "durable"))]
        let id = 0;
        tables.insert(
            key,
            Arc::new(Table {
                name: name.to_owned(),
                id,
                partitions: RwLock::default(),
            }),
        );
        Ok(())
    }

    pub(crate) fn delete_table(&self, name: &str) -> Result<()> {
        let mut tables = write(&self.tables);
        let key = lower(name);
        #[cfg_attr(not(feature = "durable"), allow(unused_variables))]
        let Some(table) = tables.get(&key) else {
            return Err(errors::resource_not_found());
        };
        #[cfg(feature = "durable")]
        if let Some(d) = &self.durable {
            d.delete_table(&key.0, table.id)?;
        }
        tables.remove(&key);
        Ok(())
    }

    /// Table names as created, in order of their lower-cased form, from `next` on.
    pub(crate) fn list_tables(
        &self,
        prefix: Option<&str>,
        filter: Option<&crate::filter::Expr>,
        next: Option<&str>,
        top: Option<usize>,
    ) -> (Vec<String>, Option<String>) {
        let top = top.unwrap_or(MAX_PAGE_SIZE).clamp(1, MAX_PAGE_SIZE);
        let tables = read(&self.tables);
        let start = next.map_or(Bound::Unbounded, |n| Bound::Included(lower(n)));
        let mut names = Vec::new();
        for t in tables.range((start, Bound::Unbounded)).map(|(_, t)| t) {
            if prefix.is_some_and(|p| !t.name.starts_with(p)) {
                continue;
            }
            // A listing's filter is over one property, the table's name.
            if filter.is_some_and(|f| {
                let row =
                    crate::entity::DynamicEntity::new("", "").with("TableName", t.name.as_str());
                !crate::filter::matches(f, &row)
            }) {
                continue;
            }
            if names.len() == top {
                return (names, Some(t.name.clone()));
            }
            names.push(t.name.clone());
        }
        (names, None)
    }

    /// The table of that name (in any case), or 404 `TableNotFound`.
    pub(crate) fn table(&self, name: &str) -> Result<Arc<Table>> {
        read(&self.tables)
            .get(&lower(name))
            .cloned()
            .ok_or_else(errors::table_not_found)
    }
}

/// What one write does to the entity at its key, decided before anything changes.
enum Change {
    Put(DynamicEntity),
    Remove,
}

/// The entity must exist and, for `IfMatch::ETag`, still have that ETag.
fn condition<'a>(
    current: Option<&'a StoredEntity>,
    if_match: &IfMatch,
) -> Result<&'a StoredEntity> {
    let current = current.ok_or_else(errors::resource_not_found)?;
    if let IfMatch::ETag(e) = if_match {
        if current.etag() != Some(e.as_str()) {
            return Err(errors::condition_not_met());
        }
    }
    Ok(current)
}

fn merged(current: &StoredEntity, new: DynamicEntity) -> Result<DynamicEntity> {
    // The stored properties in their order, each replaced by the incoming value of
    // that name if there is one (moved, not cloned), then the new names.
    let DynamicEntity {
        partition_key,
        row_key,
        properties,
        ..
    } = new;
    let mut incoming: Vec<Option<(Name, EdmValue)>> =
        properties.into_entries().into_iter().map(Some).collect();
    let mut out = Properties::with_capacity(current.entity.properties.len() + incoming.len());
    let mut kept_old = false;
    for (name, old) in current.entity.properties.entries() {
        let slot = incoming
            .iter_mut()
            .find(|e| e.as_ref().is_some_and(|(n, _)| n == name));
        match slot.and_then(Option::take) {
            Some((n, v)) => out.push_name(n, v),
            None => {
                // A shared name stays shared.
                out.push_name(name.clone(), old.clone());
                kept_old = true;
            }
        }
    }
    for (n, v) in incoming.into_iter().flatten() {
        out.push_name(n, v);
    }
    let out = DynamicEntity {
        partition_key,
        row_key,
        timestamp: None,
        etag: None,
        properties: out,
    };
    // A merge that keeps stored properties must itself fit the limits (count,
    // size), which the client cannot know: the service checks the result, and so
    // does the store. Without kept properties it is the incoming entity, checked.
    if kept_old {
        check::check(&out)?;
    }
    Ok(out)
}

/// Decides what `kind` does given the stored entity (if any).
fn decide(
    current: Option<&StoredEntity>,
    kind: &BatchKind,
    new: Option<DynamicEntity>,
) -> Result<Change> {
    let body =
        || new.ok_or_else(|| errors::invalid_input("One of the request inputs is not valid."));
    Ok(match kind {
        BatchKind::Insert => {
            if current.is_some() {
                return Err(errors::entity_exists());
            }
            Change::Put(body()?)
        }
        BatchKind::Upsert(mode) => match (current, mode) {
            (Some(cur), UpdateMode::Merge) => Change::Put(merged(cur, body()?)?),
            _ => Change::Put(body()?),
        },
        BatchKind::Update(mode, if_match) => {
            let cur = condition(current, if_match)?;
            match mode {
                UpdateMode::Merge => Change::Put(merged(cur, body()?)?),
                UpdateMode::Replace => Change::Put(body()?),
            }
        }
        BatchKind::Delete(if_match) => {
            condition(current, if_match)?;
            Change::Remove
        }
    })
}

/// A decided change with its new version (Timestamp and ETag), ready to store.
fn versioned(change: Change, clock: &Clock) -> Option<Arc<StoredEntity>> {
    versioned_at(change, || clock.next())
}

/// [`versioned`], with the version `version` gives (called for a put only).
fn versioned_at(change: Change, version: impl FnOnce() -> Version) -> Option<Arc<StoredEntity>> {
    match change {
        Change::Put(mut entity) => {
            let v = version();
            entity.timestamp = Some(v.timestamp);
            entity.etag = Some(v.etag);
            Some(Arc::new(StoredEntity {
                entity,
                timestamp_text: v.text,
            }))
        }
        Change::Remove => None,
    }
}

/// The version a write gave.
fn written_of(stored: &StoredEntity) -> Written {
    Written {
        etag: stored
            .entity
            .etag
            .clone()
            .expect("a stored version has an ETag"),
        timestamp: Some(stored.entity.timestamp),
        confirmed_by_read_back: false,
    }
}

/// Applies a versioned change to the partition.
fn apply(part: &mut Partition, rk: Key, stored: Option<Arc<StoredEntity>>) -> Option<Written> {
    match stored {
        Some(stored) => {
            let written = written_of(&stored);
            part.insert(rk, stored);
            Some(written)
        }
        None => {
            part.remove(&rk);
            None
        }
    }
}

impl Table {
    /// The partition of `pk`; created on demand when `create`.
    fn partition(&self, pk: &str, create: bool) -> Option<Arc<RwLock<Partition>>> {
        let key = Key::new(pk);
        if let Some(p) = read(&self.partitions).get(&key) {
            return Some(p.clone());
        }
        if !create {
            return None;
        }
        Some(write(&self.partitions).entry(key).or_default().clone())
    }

    /// One write or delete of one entity. In a store file it waits for the
    /// commit that holds it (without blocking the thread); in memory it
    /// completes at once.
    pub(crate) async fn write_one(
        &self,
        store: &Store,
        key: &EntityKey,
        kind: &BatchKind,
        entity: Option<DynamicEntity>,
    ) -> Result<Option<Written>> {
        #[cfg(feature = "durable")]
        if let Some(file) = &store.durable {
            let (pk, rk) = (&key.partition_key, &key.row_key);
            // Held from this read to the end of the commit (see `Durable::write`).
            let partition = file.lock_partition(self.id, pk).await;
            let current = file.snapshot(self.id, &self.name)?.get(pk, rk)?;
            let change = decide(current.as_ref(), kind, entity)?;
            let stored = versioned(change, &store.clock);
            let put = Put {
                row_key: rk,
                entity: stored.as_deref(),
            };
            file.write(partition, &lower(&self.name).0, self.id, pk, &[put])
                .await?;
            return Ok(stored.as_deref().map(written_of));
        }
        self.write_one_in_memory(store, key, kind, entity)
    }

    fn write_one_in_memory(
        &self,
        store: &Store,
        key: &EntityKey,
        kind: &BatchKind,
        entity: Option<DynamicEntity>,
    ) -> Result<Option<Written>> {
        let create = matches!(kind, BatchKind::Insert | BatchKind::Upsert(_));
        let Some(part) = self.partition(&key.partition_key, create) else {
            return Err(errors::resource_not_found());
        };
        let mut part = write(&part);
        let rk = Key::new(&key.row_key);
        let change = decide(part.get(&rk).map(|e| &**e), kind, entity)?;
        let stored = versioned(change, &store.clock);
        Ok(apply(&mut part, rk, stored))
    }

    pub(crate) fn get(
        &self,
        #[cfg_attr(not(feature = "durable"), allow(unused_variables))] store: &Store,
        key: &EntityKey,
    ) -> Result<Option<Arc<StoredEntity>>> {
        #[cfg(feature = "durable")]
        if let Some(file) = &store.durable {
            let found = file
                .snapshot(self.id, &self.name)?
                .get(&key.partition_key, &key.row_key)?;
            return Ok(found.map(Arc::new));
        }
        let Some(part) = self.partition(&key.partition_key, false) else {
            return Ok(None);
        };
        Ok(read(&part).get(&Key::new(&key.row_key)).cloned())
    }

    /// An entity group transaction: every operation is decided against the
    /// partition as it is, and only if all succeed are they applied, under one
    /// lock, so nobody sees a part of it. In a store file it waits for the
    /// commit that holds it, as [`Table::write_one`].
    pub(crate) async fn transaction(
        &self,
        store: &Store,
        mut ops: Vec<BatchOp>,
    ) -> Result<Vec<Option<ETag>>> {
        if ops.is_empty() {
            return Err(errors::invalid_input(
                "One of the request inputs is not valid.",
            ));
        }
        if ops.len() > MAX_BATCH_OPERATIONS {
            // The service names the 100th operation (index 99) whatever the count:
            // "99:The batch request operation exceeds the maximum 100 changes per
            // change set." (an answer of Azure quoted in
            // petabridge/Akka.Persistence.Azure#251). Azurite answers index 0.
            return Err(errors::at_index(
                errors::invalid_input(
                    "The batch request operation exceeds the maximum 100 changes per change set.",
                ),
                MAX_BATCH_OPERATIONS - 1,
            ));
        }
        // The JSON's length; for an operation that came as a bag, as the
        // client counted it (without writing it) when it checked the bag.
        let size: usize = ops
            .iter()
            .map(|o| match (&o.body, &o.bag) {
                (Some(body), _) => body.len(),
                (None, Some(_)) => o.bag_json_len,
                (None, None) => 0,
            })
            .sum();
        // The whole request is refused before its operations are read: no index.
        if size > MAX_BATCH_BYTES {
            return Err(errors::service(
                413,
                ErrorCode::RequestBodyTooLarge,
                "The request body is too large and exceeds the maximum permissible limit.",
            ));
        }
        let pk = ops[0].key.partition_key.clone();
        let pk = &pk;
        let mut entities = Vec::with_capacity(ops.len());
        let mut seen = std::collections::HashSet::with_capacity(ops.len());
        for (i, op) in ops.iter_mut().enumerate() {
            let parsed = match (op.bag.take(), &op.body) {
                // Checked by the client when it was added: its proof says so.
                (Some(bag), _) => Some(Ok(check::checked_stored_form(bag))),
                (None, Some(body)) => Some(check::entity_from_body(body)),
                (None, None) => None,
            };
            let entity = match parsed {
                Some(parsed) => {
                    let e = parsed.map_err(|e| errors::at_index(e, i))?;
                    if e.partition_key != op.key.partition_key || e.row_key != op.key.row_key {
                        return Err(errors::at_index(
                            errors::invalid_input("One of the request inputs is not valid."),
                            i,
                        ));
                    }
                    Some(e)
                }
                None => {
                    op.key
                        .validate()
                        .map_err(|v| errors::at_index(errors::from_validation(&v), i))?;
                    None
                }
            };
            if &op.key.partition_key != pk {
                return Err(errors::at_index(
                    errors::service(
                        400,
                        ErrorCode::Other("CommandsInBatchActOnDifferentPartitions".into()),
                        "All commands in a batch must operate on same entity group.",
                    ),
                    i,
                ));
            }
            if !seen.insert(op.key.row_key.as_str()) {
                return Err(errors::at_index(
                    errors::service(
                        400,
                        ErrorCode::InvalidDuplicateRow,
                        "The batch request contains multiple changes with same row key. An entity can appear only once in a batch request.",
                    ),
                    i,
                ));
            }
            entities.push(entity);
        }
        #[cfg(feature = "durable")]
        if let Some(file) = &store.durable {
            // Held from this read to the end of the commit (see `Durable::write`).
            let partition = file.lock_partition(self.id, pk).await;
            let mut changes = Vec::with_capacity(ops.len());
            {
                let snapshot = file.snapshot(self.id, &self.name)?;
                for (i, (op, entity)) in ops.iter_mut().zip(entities).enumerate() {
                    let rk = std::mem::take(&mut op.key.row_key);
                    let current = snapshot.get(pk, &rk)?;
                    let change = decide(current.as_ref(), &op.kind, entity)
                        .map_err(|e| errors::at_index(e, i))?;
                    changes.push((rk, change));
                }
            }
            let changes: Vec<_> = changes
                .into_iter()
                .map(|(rk, change)| (rk, versioned(change, &store.clock)))
                .collect();
            let puts: Vec<Put<'_>> = changes
                .iter()
                .map(|(rk, stored)| Put {
                    row_key: rk,
                    entity: stored.as_deref(),
                })
                .collect();
            file.write(partition, &lower(&self.name).0, self.id, pk, &puts)
                .await?;
            return Ok(changes
                .iter()
                .map(|(_, stored)| stored.as_deref().map(|s| written_of(s).etag))
                .collect());
        }
        let part = self.partition(pk, true).expect("created on demand");
        let mut part = write(&part);
        let mut changes = Vec::with_capacity(ops.len());
        for (i, (op, entity)) in ops.iter_mut().zip(entities).enumerate() {
            // The operations are ours: their keys move into the partition.
            let rk = Key(std::mem::take(&mut op.key.row_key));
            let change = decide(part.get(&rk).map(|e| &**e), &op.kind, entity)
                .map_err(|e| errors::at_index(e, i))?;
            changes.push((rk, change));
        }
        // One read of the system clock for the whole transaction.
        let mut ticks = store.clock.next_ticks(changes.len());
        let changes: Vec<_> = changes
            .into_iter()
            .map(|(rk, change)| {
                let version = || Version::at(ticks.next().expect("a time for each change"));
                (rk, versioned_at(change, version))
            })
            .collect();
        Ok(changes
            .into_iter()
            .map(|(rk, stored)| apply(&mut part, rk, stored).map(|w| w.etag))
            .collect())
    }

    /// One page of a query: at most `top` matching entities from `from` on, in
    /// key order, and where the next page starts (the key of the first entity
    /// not yet examined, which a later page reads with `>=`: entities inserted
    /// before it are not returned, entities from it on are, as the service does).
    pub(crate) fn query(
        &self,
        #[cfg_attr(not(feature = "durable"), allow(unused_variables))] store: &Store,
        filter: Option<&Expr>,
        top: Option<usize>,
        from: Option<&Continuation>,
    ) -> Result<(Page, Option<Continuation>)> {
        let top = top.unwrap_or(MAX_PAGE_SIZE).clamp(1, MAX_PAGE_SIZE);
        let (lo, hi) = partition_bounds(filter);
        #[cfg(feature = "durable")]
        if let Some(file) = &store.durable {
            return file_query(file, (self.id, &self.name), filter, top, (lo, hi), from);
        }
        let (entities, next) = self.memory_query(filter, top, (lo, hi), from);
        Ok((Page::Shared(entities), next))
    }

    fn memory_query(
        &self,
        filter: Option<&Expr>,
        top: usize,
        (lo, hi): (Bound<Key>, Bound<Key>),
        from: Option<&Continuation>,
    ) -> (Vec<Arc<StoredEntity>>, Option<Continuation>) {
        let from_pk = from.map(|c| Key::new(&c.next_partition_key));
        let from_rk = from.and_then(|c| c.next_row_key.as_deref()).map(Key::new);
        let lo = match (lo, &from_pk) {
            (Bound::Included(l), Some(f)) | (Bound::Excluded(l), Some(f)) if f >= &l => {
                Bound::Included(f.clone())
            }
            (Bound::Unbounded, Some(f)) => Bound::Included(f.clone()),
            (lo, _) => lo,
        };
        if matches!((&lo, &hi), (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) if l > h)
        {
            return (Vec::new(), None);
        }
        let mut out = Vec::new();
        let partitions = read(&self.partitions);
        for (pk, part) in partitions.range((lo, hi)) {
            let part = read(part);
            let start = match (&from_pk, &from_rk) {
                (Some(fp), Some(fr)) if fp == pk => Bound::Included(fr.clone()),
                _ => Bound::Unbounded,
            };
            for (rk, e) in part.range((start, Bound::Unbounded)) {
                if out.len() == top {
                    return (
                        out,
                        Some(Continuation {
                            next_partition_key: pk.0.clone(),
                            next_row_key: Some(rk.0.clone()),
                        }),
                    );
                }
                if filter.is_none_or(|f| matches(f, &e.entity)) {
                    out.push(e.clone());
                }
            }
        }
        (out, None)
    }
}

/// One page of a query of a table kept in a file: a scan of the on-disk keys
/// (which are in the service's order) from where the page starts, over the
/// PartitionKey range the filter confines itself to. The filter decides on
/// each entity: on its keys alone if it names no other property, else on the
/// entity decoded. The page keeps the matching entities' records, which the
/// reader decodes straight into its type. The page is read from one snapshot.
#[cfg(feature = "durable")]
fn file_query(
    file: &Durable,
    (id, name): (u64, &str),
    filter: Option<&Expr>,
    top: usize,
    (lo, hi): (Bound<Key>, Bound<Key>),
    from: Option<&Continuation>,
) -> Result<(Page, Option<Continuation>)> {
    use super::key::{decode_entity_key, entity_key, partition_range, split_entity_key};
    let mut start = match &lo {
        Bound::Included(k) | Bound::Excluded(k) => partition_range(&k.0).0,
        Bound::Unbounded => Vec::new(),
    };
    if let Some(c) = from {
        let resume = match &c.next_row_key {
            Some(rk) => entity_key(&c.next_partition_key, rk),
            None => partition_range(&c.next_partition_key).0,
        };
        start = start.max(resume);
    }
    let end = match &hi {
        Bound::Included(k) | Bound::Excluded(k) => Some(partition_range(&k.0).1),
        Bound::Unbounded => None,
    };
    let snapshot = file.snapshot(id, name)?;
    let mut rows = super::durable::rows::Rows::new(snapshot.origin());
    if end.as_ref().is_some_and(|e| &start >= e) {
        return Ok((Page::Records(rows), None));
    }
    let keys_only = filter.is_none_or(names_only_keys);
    let unreadable = || {
        super::durable::read_error(format_args!(
            "{}: an entity key is unreadable",
            snapshot.origin()
        ))
    };
    let mut next = None;
    snapshot.scan(&start, end.as_deref(), |key, value| {
        if rows.len() == top {
            let (pk, rk) = decode_entity_key(key).ok_or_else(unreadable)?;
            next = Some(Continuation {
                next_partition_key: pk,
                next_row_key: Some(rk),
            });
            return Ok(false);
        }
        let keep = match filter {
            None => true,
            Some(f) if keys_only => {
                let (pk, rk) = split_entity_key(key).ok_or_else(unreadable)?;
                matches(f, &DynamicEntity::new(pk, rk))
            }
            Some(f) => matches(
                f,
                &super::durable::decode_row_of(&snapshot, key, value)?.entity,
            ),
        };
        if keep {
            super::durable::push_row(&snapshot, &mut rows, key, value)?;
        }
        Ok(true)
    })?;
    Ok((Page::Records(rows), next))
}

/// Whether a filter names no property but the keys (so it decides on an
/// entity's keys alone).
#[cfg(feature = "durable")]
fn names_only_keys(e: &Expr) -> bool {
    match e {
        Expr::Cmp { property, .. } => property == "PartitionKey" || property == "RowKey",
        Expr::And(a, b) | Expr::Or(a, b) => names_only_keys(a) && names_only_keys(b),
        Expr::Not(a) => names_only_keys(a),
    }
}

/// The PartitionKey range a filter confines itself to, from the comparisons of
/// PartitionKey with a string that the whole filter requires (its top-level
/// `and`s); inclusive bounds, so the evaluator still decides each entity.
fn partition_bounds(filter: Option<&Expr>) -> (Bound<Key>, Bound<Key>) {
    fn walk<'e>(e: &'e Expr, lo: &mut Option<&'e str>, hi: &mut Option<&'e str>) {
        match e {
            Expr::And(a, b) => {
                walk(a, lo, hi);
                walk(b, lo, hi);
            }
            Expr::Cmp {
                property,
                op,
                value: EdmValue::String(v),
            } if property == "PartitionKey" => {
                let raise = |b: &mut Option<&'e str>| {
                    if b.is_none_or(|cur| compare_utf16(v, cur).is_gt()) {
                        *b = Some(v);
                    }
                };
                let lower = |b: &mut Option<&'e str>| {
                    if b.is_none_or(|cur| compare_utf16(v, cur).is_lt()) {
                        *b = Some(v);
                    }
                };
                match op {
                    CmpOp::Eq => {
                        raise(lo);
                        lower(hi);
                    }
                    CmpOp::Gt | CmpOp::Ge => raise(lo),
                    CmpOp::Lt | CmpOp::Le => lower(hi),
                    CmpOp::Ne => {}
                }
            }
            _ => {}
        }
    }
    let (mut lo, mut hi) = (None, None);
    if let Some(f) = filter {
        walk(f, &mut lo, &mut hi);
    }
    let bound = |b: Option<&str>| b.map_or(Bound::Unbounded, |s| Bound::Included(Key::new(s)));
    (bound(lo), bound(hi))
}
