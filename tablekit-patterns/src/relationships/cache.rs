//! Join in the client: [`LookupCache`], a typed client-side copy of a
//! small, rarely changing table, and its join over a query stream.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use tablekit::{clock::ManualClock, EntityKey, Result, TableClient, TableEntity};

use crate::error::refused;
use crate::hook::BeforeWrite;

/// How many entities a [`LookupCache`] holds at most unless told otherwise.
pub const DEFAULT_MAX_ENTITIES: usize = 10_000;

/// One load of the cached table: its entities by key, and when it was read.
pub struct Snapshot<T> {
    entities: HashMap<EntityKey, T>,
    loaded_at: DateTime<Utc>,
}

impl<T> Snapshot<T> {
    /// The entity with this key, as loaded.
    pub fn get(&self, key: &EntityKey) -> Option<&T> {
        self.entities.get(key)
    }

    /// How many entities were loaded.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    /// Whether the table (or partition) was empty.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// Every entity loaded, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.entities.values()
    }

    /// When the load began (by the cache's clock): the snapshot holds every
    /// change made before then.
    pub fn loaded_at(&self) -> DateTime<Utc> {
        self.loaded_at
    }
}

impl<T> fmt::Debug for Snapshot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("len", &self.entities.len())
            .field("loaded_at", &self.loaded_at)
            .finish()
    }
}

struct CacheInner<T> {
    table: TableClient<T>,
    partition: Option<String>,
    ttl: Duration,
    max_entities: usize,
    clock: Option<ManualClock>,
    current: RwLock<Option<Arc<Snapshot<T>>>>,
    refreshing: tokio::sync::Mutex<()>,
    loads: AtomicU64,
    before_load: BeforeWrite,
}

/// A typed client-side cache of a small, rarely changing table (or one
/// partition of it): the seed's departments, downloaded once and used as
/// lookup data so that each employee read does not cost a department read.
///
/// **Refresh policy.** A load is good for the time to live: a read of an
/// older one (or of none) loads the table again, in one query (one request
/// per 1,000 entities), before it answers; [`refresh`](Self::refresh)
/// loads again at once (after a change the application knows of), and
/// [`invalidate`](Self::invalidate) drops the load so the next read makes
/// one. Readers never see an entity older than the time to live, measured
/// from the start of the load that read it. A failed load is returned to
/// the reader that made it, and the previous load stays unused (it is past
/// its time); the next read tries again.
///
/// **No stampede.** However many tasks read at once when the load expires,
/// one loads the table and the others wait for its result, then use it: one
/// refresh at a time, and none right after another.
///
/// Time is the system clock's, or a [`ManualClock`]'s
/// ([`with_clock`](Self::with_clock)) that tests move forward instead of
/// sleeping. Cheap to clone; clones share the cached load (a clone
/// configured further, by `partition`, `max_entities` or `with_clock`, is a
/// new cache of its own).
pub struct LookupCache<T> {
    inner: Arc<CacheInner<T>>,
}

impl<T> Clone for LookupCache<T> {
    fn clone(&self) -> Self {
        LookupCache {
            inner: self.inner.clone(),
        }
    }
}

impl<T> fmt::Debug for LookupCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LookupCache")
            .field("table", &self.inner.table.name())
            .field("partition", &self.inner.partition)
            .field("ttl", &self.inner.ttl)
            .field("loads", &self.inner.loads.load(Ordering::SeqCst))
            .finish()
    }
}

impl<T: TableEntity + Send + Sync + 'static> LookupCache<T> {
    /// A cache of every entity of `table`, each load good for `ttl`.
    pub fn new(table: TableClient<T>, ttl: Duration) -> Self {
        LookupCache {
            inner: Arc::new(CacheInner {
                table,
                partition: None,
                ttl,
                max_entities: DEFAULT_MAX_ENTITIES,
                clock: None,
                current: RwLock::new(None),
                refreshing: tokio::sync::Mutex::new(()),
                loads: AtomicU64::new(0),
                before_load: BeforeWrite::default(),
            }),
        }
    }

    /// Changes the configuration: in place, or, when the cache is shared
    /// with clones, as a new cache of its own (no load yet) that the clones
    /// do not see.
    fn configure(mut self, f: impl FnOnce(&mut CacheInner<T>)) -> Self {
        if Arc::get_mut(&mut self.inner).is_none() {
            let i = &self.inner;
            self.inner = Arc::new(CacheInner {
                table: i.table.clone(),
                partition: i.partition.clone(),
                ttl: i.ttl,
                max_entities: i.max_entities,
                clock: i.clock.clone(),
                current: RwLock::new(None),
                refreshing: tokio::sync::Mutex::new(()),
                loads: AtomicU64::new(0),
                before_load: i.before_load.clone(),
            });
        }
        f(Arc::get_mut(&mut self.inner).expect("not shared: made just above if it was"));
        self
    }

    /// Caches only the partition `partition_key` (one partition query per load).
    pub fn partition(self, partition_key: impl Into<String>) -> Self {
        let pk = partition_key.into();
        self.configure(|i| i.partition = Some(pk))
    }

    /// Refuses to cache more than `n` entities (default
    /// [`DEFAULT_MAX_ENTITIES`]): a load that finds more is an error, as the
    /// table is not the small one this pattern is for.
    pub fn max_entities(self, n: usize) -> Self {
        self.configure(|i| i.max_entities = n)
    }

    /// Measures the time to live on `clock` instead of the system clock.
    pub fn with_clock(self, clock: ManualClock) -> Self {
        self.configure(|i| i.clock = Some(clock))
    }

    /// Runs `hook` with the load's number (1 first) before each load's query:
    /// in tests, the place to hold a load while other readers arrive.
    #[doc(hidden)]
    pub fn load_hook<F, Fut>(self, hook: F) -> Self
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        self.configure(|i| i.before_load = BeforeWrite::new(hook))
    }

    /// The table cached.
    pub fn table(&self) -> &TableClient<T> {
        &self.inner.table
    }

    /// How many loads this cache (and its clones) made.
    pub fn loads(&self) -> u64 {
        self.inner.loads.load(Ordering::SeqCst)
    }

    fn now(&self) -> DateTime<Utc> {
        self.inner
            .clock
            .as_ref()
            .map_or_else(Utc::now, ManualClock::now)
    }

    fn fresh(&self) -> Option<Arc<Snapshot<T>>> {
        let current = self.inner.current.read().unwrap_or_else(|e| e.into_inner());
        let snapshot = current.as_ref()?;
        let age = (self.now() - snapshot.loaded_at)
            .to_std()
            .unwrap_or_default();
        (age < self.inner.ttl).then(|| snapshot.clone())
    }

    async fn load(&self) -> Result<Arc<Snapshot<T>>> {
        let n = self.inner.loads.fetch_add(1, Ordering::SeqCst) + 1;
        self.inner.before_load.call(n as usize).await?;
        let loaded_at = self.now();
        let mut query = self
            .inner
            .table
            .with_type::<tablekit::DynamicEntity>()
            .query();
        if let Some(pk) = &self.inner.partition {
            let pk = pk.clone();
            query = query.filter(move |e| e.partition_key.eq(pk.as_str()));
        }
        let mut rows = query.stream();
        let mut entities = HashMap::new();
        while let Some(row) = rows.next().await {
            let row = row?;
            if entities.len() == self.inner.max_entities {
                return Err(refused(
                    "relationships",
                    format!(
                        "table {} holds more than the {} entities a lookup cache keeps",
                        self.inner.table.name(),
                        self.inner.max_entities
                    ),
                ));
            }
            let entity = T::decode(&tablekit::entity::RawEntity::from_dynamic(&row))?;
            entities.insert(EntityKey::new(&row.partition_key, &row.row_key), entity);
        }
        let snapshot = Arc::new(Snapshot {
            entities,
            loaded_at,
        });
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(snapshot.clone());
        Ok(snapshot)
    }

    /// The current load, loading the table first if there is none or it is
    /// older than the time to live (one load at a time: a reader that
    /// waited for another's load uses it).
    pub async fn snapshot(&self) -> Result<Arc<Snapshot<T>>> {
        crate::trace::traced(
            "LookupCache",
            "snapshot",
            Some(self.inner.table.name()),
            async move {
                if let Some(s) = self.fresh() {
                    return Ok(s);
                }
                let _one_at_a_time = self.inner.refreshing.lock().await;
                if let Some(s) = self.fresh() {
                    return Ok(s); // loaded by the reader we waited for
                }
                self.load().await
            },
        )
        .await
    }

    /// Loads the table again now, whatever the age of the current load (a
    /// load under way is waited for first, then this one is made).
    pub async fn refresh(&self) -> Result<Arc<Snapshot<T>>> {
        crate::trace::traced(
            "LookupCache",
            "refresh",
            Some(self.inner.table.name()),
            async move {
                let _one_at_a_time = self.inner.refreshing.lock().await;
                self.load().await
            },
        )
        .await
    }

    /// Drops the current load: the next read loads the table.
    pub fn invalidate(&self) {
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The entity with this key, from the current load (loading first as
    /// [`snapshot`](Self::snapshot) does).
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>>
    where
        T: Clone,
    {
        crate::trace::traced(
            "LookupCache",
            "get",
            Some(self.inner.table.name()),
            async move {
                let key = key.into();
                Ok(self.snapshot().await?.get(&key).cloned())
            },
        )
        .await
    }

    /// The join in the client: each item of `stream` (a query's entities, for
    /// example employees) with the cached entity `key_of` names (its
    /// department), `None` when the cache has no such entity. An error of
    /// the stream or of a load is passed on as an item. Each item is joined
    /// with the load current when it arrives, so a long stream crosses
    /// refreshes as any reader would.
    pub fn join<E, S, F>(&self, stream: S, key_of: F) -> impl Stream<Item = Result<(E, Option<T>)>>
    where
        T: Clone,
        S: Stream<Item = Result<E>>,
        F: Fn(&E) -> EntityKey,
    {
        let cache = self.clone();
        stream.then(move |item| {
            let cache = cache.clone();
            let key = item.as_ref().ok().map(&key_of);
            async move {
                let entity = item?;
                let snapshot = cache.snapshot().await?;
                let joined = key.and_then(|k| snapshot.get(&k).cloned());
                Ok((entity, joined))
            }
        })
    }
}
