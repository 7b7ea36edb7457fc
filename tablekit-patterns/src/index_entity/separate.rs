//! Option 3, [`SeparateIndexEntities`]: index entities in a partition (or
//! table) of their own, written before or after the entity.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use tablekit::{
    table::AmbiguousWrites, DynamicEntity, EntityKey, Error, IfMatch, Result, TableClient,
    TableEntity, UpdateMode,
};

use crate::error::refused;
use crate::hook::BeforeWrite;

use super::chunks::{check_capacity, ChunkWrite, Chunks, Store};
use super::{KeyFn, Replacing, MAX_ATTEMPTS, MAX_CHUNK_UNITS};

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
/// see the [module docs](super) for the order of the writes and what a
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

pub(super) fn entry(key: &EntityKey) -> String {
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

    pub(super) fn check(&self, entity: &T) -> Result<EntityKey> {
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
    /// [module docs](super#option-3-eventually-consistent-never-unlisted)).
    pub async fn keys(&self, value: &str) -> Result<Vec<EntityKey>> {
        crate::trace::traced(
            "SeparateIndexEntities",
            "keys",
            Some(self.table.name()),
            async move {
                let chunks = self.store.read(&self.partition, value).await?;
                let mut seen = HashSet::new();
                Ok(chunks
                    .entries()
                    .filter(|e| seen.insert(e.as_str()))
                    .filter_map(|e| parse_entry(e))
                    .collect())
            },
        )
        .await
    }

    /// The entities whose value is `value`: the index entities (one range
    /// query), then a point read of each listed entity (concurrently). Listed
    /// entities that are missing or have another value are reported in
    /// [`Lookup::dangling`] and not returned.
    pub async fn find(&self, value: &str) -> Result<Lookup<T>> {
        crate::trace::traced(
            "SeparateIndexEntities",
            "find",
            Some(self.table.name()),
            async move {
                let keys = self.keys(value).await?;
                let found =
                    try_join_all(keys.iter().map(|k| self.table.get(k.clone()).send())).await?;
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
            },
        )
        .await
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
            self.before_write.call(attempt).await?;
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
        self.change_index(value, false, |c| c.remove(&entry))
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
        crate::trace::traced(
            "SeparateIndexEntities",
            "insert",
            Some(self.table.name()),
            async move {
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
            },
        )
        .await
    }

    /// Deletes `current` (the value as read with the ETag of `if_match`),
    /// then takes one claim of its key out of its value's index entities.
    /// Under [`IfMatch::Any`] the stored entity is read first, for its value,
    /// and deleted under its ETag (see the
    /// [module docs](super#writes-under-ifmatchany)).
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        crate::trace::traced(
            "SeparateIndexEntities",
            "delete",
            Some(self.table.name()),
            async move {
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
            },
        )
        .await
    }

    /// Replaces `current` (the value as read with the ETag of `if_match`)
    /// with `new`. If the indexed value changed: claims the key under the new
    /// value, writes the entity, then takes one claim out of the old value's
    /// list. Under [`IfMatch::Any`] the stored entity is read first, for its
    /// value, and replaced under its ETag (see the
    /// [module docs](super#writes-under-ifmatchany)).
    pub async fn update(
        &self,
        current: &T,
        new: &mut T,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        crate::trace::traced(
            "SeparateIndexEntities",
            "update",
            Some(self.table.name()),
            async move {
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
            },
        )
        .await
    }

    /// Takes the [`Lookup::dangling`] entries of `value` out of its index
    /// entities, and every repeat of an entry, and returns the dangling keys.
    /// Only when no writer of this value is running: an entry whose entity is
    /// missing may be the claim of an insert in flight, and a repeated one
    /// the claim of a writer about to take one out; removing either could
    /// leave an entity unlisted.
    pub async fn remove_dangling(&self, value: &str) -> Result<Vec<EntityKey>> {
        crate::trace::traced(
            "SeparateIndexEntities",
            "remove_dangling",
            Some(self.table.name()),
            async move {
                let found = self.find(value).await?;
                let live: HashSet<String> =
                    found.entities.iter().map(|e| entry(&e.key())).collect();
                while self.change_index(value, false, |c| c.prune(&live)).await? {}
                Ok(found.dangling)
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_3_entries_round_trip() {
        let k = EntityKey::new("Sales", "000152");
        assert_eq!(entry(&k), "Sales\t000152");
        assert_eq!(parse_entry(&entry(&k)), Some(k));
        assert!(backoff(2) >= Duration::from_millis(5));
        assert!(backoff(40) <= Duration::from_millis(640));
    }
}
