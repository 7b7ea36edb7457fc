//! Option 2, [`IndexEntities`]: index entities in the partition of the
//! entities they list, written with them in one transaction.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use futures::future::try_join_all;
use tablekit::{DynamicEntity, Error, IfMatch, Result, TableClient, TableEntity, UpdateMode};

use crate::error::refused;
use crate::hook::BeforeWrite;

use super::chunks::{check_capacity, Store};
use super::{bag, index_race, set_etag, KeyFn, Replacing, MAX_ATTEMPTS, MAX_CHUNK_UNITS};

/// Entities of type `T` with index entities (option 2) for one non-unique
/// value, in the entities' own partitions; see the [module docs](super).
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
    /// value (see the [module docs](super#writes-under-ifmatchany)).
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        self.check(current)?;
        let if_match = if_match.into();
        let key = current.key();
        let (pk, rk) = (key.partition_key.as_str(), key.row_key.as_str());
        let mut attempt = 1;
        loop {
            let was = Replacing::of(&self.table, &*self.key, current, &if_match).await?;
            let write = self.store.read(pk, &was.value).await?.remove(rk)?;
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
    /// value (see the [module docs](super#writes-under-ifmatchany)).
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
            let old = self.store.read(&pk, &was.value).await?.remove(&rk)?;
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
