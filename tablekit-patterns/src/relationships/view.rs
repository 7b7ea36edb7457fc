//! The materialized view of CQRS (seed §3.14): [`MaterializedView`], a view
//! table kept from the writes of a source table through the queue worker,
//! rebuildable from the source, with its lag observable.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tablekit::{
    clock::ManualClock, error::DecodeError, queue::SentMessage, DynamicEntity, EdmValue, EntityKey,
    Error, IfMatch, QueueClient, Result, TableClient, TableEntity, TableServiceClient,
};

use crate::error::refused;
use crate::eventual::{Eventual, Guarded, OpResult, StepContext, WorkerBuilder, MAX_REREADS};

/// The prefix of the `kind` of a [`MaterializedView`]'s messages; the view
/// table's name follows it.
pub const VIEW_KIND_PREFIX: &str = "tablekit.view.";

/// The property of a row of the keys table that lists the view rows of its
/// source entity, as a JSON array of `[PartitionKey, RowKey]` pairs.
pub const ROWS_PROPERTY: &str = "ViewRows";

/// The message of a [`MaterializedView`]: the source entity with this key
/// changed (was inserted, updated or deleted) at `at`. It carries no state:
/// the worker reads the source's current state, so messages may run in any
/// order and any number of times.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The source entity's PartitionKey.
    pub partition_key: String,
    /// Its RowKey.
    pub row_key: String,
    /// When the change was enqueued (by the enqueuing side's clock), in
    /// milliseconds since 1970 ([`at`](Self::at)).
    pub at_ms: i64,
}

impl Changed {
    /// When the change was enqueued.
    pub fn at(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.at_ms).unwrap_or_default()
    }
}

/// The last change a worker of this process applied to the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastApplied {
    /// When its message was enqueued.
    pub changed_at: DateTime<Utc>,
    /// When the worker finished applying it.
    pub applied_at: DateTime<Utc>,
}

impl LastApplied {
    /// How long the change took to reach the view.
    pub fn delay(&self) -> Duration {
        (self.applied_at - self.changed_at)
            .to_std()
            .unwrap_or_default()
    }
}

/// How far the view is behind its source ([`MaterializedView::lag`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ViewLag {
    /// The queue's approximate count of messages: changes not yet applied
    /// (those being run included).
    pub pending: u64,
    /// The age of the oldest change waiting for a worker (of the first 32
    /// visible messages: a message being run is hidden); `None` if none
    /// waits.
    pub oldest_pending: Option<Duration>,
    /// The last change the workers of this process applied, if any since
    /// it started.
    pub last_applied: Option<LastApplied>,
}

/// What a [`MaterializedView::rebuild`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebuildReport {
    /// Source entities whose view rows were written again.
    pub sources: u64,
    /// Source entities gone whose view rows (and keys row) were removed.
    pub gone: u64,
    /// View rows no source entity lists, deleted.
    pub strays: u64,
}

type Project<S, V> = dyn Fn(&S) -> Vec<V> + Send + Sync;

struct ViewInner<S, V> {
    tables: TableServiceClient,
    source: TableClient<S>,
    view: TableClient<V>,
    keys: TableClient<DynamicEntity>,
    project: Arc<Project<S, V>>,
    eventual: Eventual,
    kind: String,
    clock: Option<ManualClock>,
    last_applied: Mutex<Option<LastApplied>>,
}

/// A materialized view (CQRS): the rows of the table `view` are worked out
/// from the entities of the table `source` by `project` (an entity gives
/// zero or more view rows), and kept up to date by the queue worker. See
/// the [module docs](super) for the guarantee.
///
/// * The writing side writes the source as it likes, then calls
///   [`changed`](Self::changed) with the key: one message, "this source
///   entity changed", no state.
/// * A worker with the view [attached](Self::attach) reads the source's
///   current state and upserts its view rows, deleting those it no longer
///   gives ([`apply`](Self::apply)). Which rows an entity gave last is kept
///   in a third table, the **keys table**, one row per source entity
///   under the source's key.
/// * [`rebuild`](Self::rebuild) makes the view again from the source (after
///   a change of `project`, a lost queue, or to start a view of existing
///   data).
/// * [`lag`](Self::lag) tells how far behind the view is.
///
/// Each view row belongs to one source entity: two entities whose rows have
/// the same key overwrite each other's, and the first one to drop it deletes
/// it. The keys row lists an entity's rows in one string property (at most
/// 32K characters): a source entity gives a few rows, not hundreds.
/// Cheap to clone.
pub struct MaterializedView<S, V> {
    inner: Arc<ViewInner<S, V>>,
}

impl<S, V> Clone for MaterializedView<S, V> {
    fn clone(&self) -> Self {
        MaterializedView {
            inner: self.inner.clone(),
        }
    }
}

impl<S, V> fmt::Debug for MaterializedView<S, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaterializedView")
            .field("source", &self.inner.source.name())
            .field("view", &self.inner.view.name())
            .field("keys", &self.inner.keys.name())
            .field("kind", &self.inner.kind)
            .finish()
    }
}

fn keys_to_json(keys: &BTreeSet<EntityKey>) -> String {
    let pairs: Vec<[&str; 2]> = keys
        .iter()
        .map(|k| [k.partition_key.as_str(), k.row_key.as_str()])
        .collect();
    serde_json::to_string(&pairs).expect("strings serialise")
}

/// The keys of every entity of `table` (one scan, keys only).
async fn keys_of(table: TableClient<DynamicEntity>) -> Result<BTreeSet<EntityKey>> {
    let mut out = BTreeSet::new();
    let mut rows = table.query().select(["RowKey"]).stream();
    while let Some(row) = rows.next().await {
        let row = row?;
        out.insert(EntityKey::new(row.partition_key, row.row_key));
    }
    Ok(out)
}

fn keys_from_row(row: &DynamicEntity) -> Result<BTreeSet<EntityKey>> {
    let bad = |why: String| Error::from(DecodeError::for_property(ROWS_PROPERTY, why));
    let Some(EdmValue::String(json)) = row.get(ROWS_PROPERTY) else {
        return Err(bad(format!("the keys row has no {ROWS_PROPERTY} string")));
    };
    let pairs: Vec<(String, String)> =
        serde_json::from_str(json).map_err(|e| bad(format!("not a list of keys: {e}")))?;
    Ok(pairs
        .into_iter()
        .map(|(pk, rk)| EntityKey::new(pk, rk))
        .collect())
}

impl<S, V> MaterializedView<S, V>
where
    S: TableEntity + Send + Sync + 'static,
    V: TableEntity + Send + Sync + 'static,
{
    /// The view table `view` of the table `source`, both of `tables`, each
    /// source entity giving the rows `project` returns, the rows each gave
    /// last kept in the table `keys`, and the changes sent to `queue`
    /// (create the three tables and the queue first) as messages of kind
    /// `tablekit.view.<view>`. The names are checked here; three distinct
    /// tables are needed.
    pub fn new(
        tables: &TableServiceClient,
        source: &str,
        view: &str,
        keys: &str,
        queue: QueueClient,
        project: impl Fn(&S) -> Vec<V> + Send + Sync + 'static,
    ) -> Result<Self> {
        let (s, v, k) = (
            tables.table::<S>(source)?,
            tables.table::<V>(view)?,
            tables.table::<DynamicEntity>(keys)?,
        );
        let lower = [source, view, keys].map(str::to_ascii_lowercase);
        if lower[0] == lower[1] || lower[0] == lower[2] || lower[1] == lower[2] {
            return Err(refused(
                "relationships",
                "a view needs three tables: the source, the view and the keys",
            ));
        }
        Ok(MaterializedView {
            inner: Arc::new(ViewInner {
                tables: tables.clone(),
                source: s,
                view: v,
                keys: k,
                project: Arc::new(project),
                eventual: Eventual::new(queue),
                kind: format!("{VIEW_KIND_PREFIX}{view}"),
                clock: None,
                last_applied: Mutex::new(None),
            }),
        })
    }

    /// Changes the configuration: in place, or, when the view is shared
    /// with clones, as a copy of its own that the clones do not see.
    fn configure(mut self, f: impl FnOnce(&mut ViewInner<S, V>)) -> Self {
        if Arc::get_mut(&mut self.inner).is_none() {
            let i = &self.inner;
            self.inner = Arc::new(ViewInner {
                tables: i.tables.clone(),
                source: i.source.clone(),
                view: i.view.clone(),
                keys: i.keys.clone(),
                project: i.project.clone(),
                eventual: i.eventual.clone(),
                kind: i.kind.clone(),
                clock: i.clock.clone(),
                last_applied: Mutex::new(None),
            });
        }
        f(Arc::get_mut(&mut self.inner).expect("not shared: made just above if it was"));
        self
    }

    /// Stamps changes and measures the lag on `clock` instead of the
    /// system clock (the clock of an embedded queue in tests).
    pub fn with_clock(self, clock: ManualClock) -> Self {
        self.configure(|i| i.clock = Some(clock))
    }

    /// The table of the keys rows.
    pub fn keys(&self) -> &TableClient<DynamicEntity> {
        &self.inner.keys
    }

    /// The view table.
    pub fn view(&self) -> &TableClient<V> {
        &self.inner.view
    }

    /// The source table.
    pub fn source(&self) -> &TableClient<S> {
        &self.inner.source
    }

    /// The `kind` of this view's messages.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    fn now(&self) -> DateTime<Utc> {
        self.inner
            .clock
            .as_ref()
            .map_or_else(Utc::now, ManualClock::now)
    }

    /// Enqueues "the source entity `key` changed": call it after each write
    /// of the source (insert, update or delete). The view catches up when a
    /// worker runs the message. The key is checked before any request.
    pub async fn changed(&self, key: impl Into<EntityKey>) -> Result<SentMessage> {
        crate::trace::traced(
            "MaterializedView",
            "changed",
            Some(self.inner.view.name()),
            async move {
                let key = key.into();
                key.validate()?;
                let message = Changed {
                    partition_key: key.partition_key,
                    row_key: key.row_key,
                    at_ms: self.now().timestamp_millis(),
                };
                self.inner
                    .eventual
                    .enqueue_kind(&self.inner.kind, &message)
                    .await
            },
        )
        .await
    }

    /// Registers this view's changes with a worker builder.
    pub fn attach(&self, builder: WorkerBuilder) -> WorkerBuilder {
        let this = self.clone();
        builder.handle(&self.inner.kind, move |c: Changed, ctx: StepContext| {
            let this = this.clone();
            async move {
                let key = EntityKey::new(&c.partition_key, &c.row_key);
                this.apply(key, &ctx).await?;
                let applied = LastApplied {
                    changed_at: c.at(),
                    applied_at: this.now(),
                };
                let mut last = this
                    .inner
                    .last_applied
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if last.is_none_or(|l| l.changed_at <= applied.changed_at) {
                    *last = Some(applied);
                }
                Ok(())
            }
        })
    }

    /// Brings the view rows of the source entity `key` up to its current
    /// state (what the worker runs for each message; with a
    /// [detached](StepContext::detached) context, in place):
    ///
    /// | step | request | why |
    /// |---|---|---|
    /// | 1 | read the keys row of `key` (the rows it gave last), with its ETag | |
    /// | 2 | read the source entity | its rows now: `project` of it, none if it is gone |
    /// | 3 | write the keys row listing the old rows **and** the new ones, under the ETag of step 1 | a row is listed before it is written, so no row is ever written that no keys row names; 412: another worker is at it, again from step 1 |
    /// | 4 | insert-or-replace each new row | |
    /// | 5 | delete-if-exists each old row that is not a new one | |
    /// | 6 | write the keys row listing the new rows only (or delete it if there are none), under the ETag of step 3 | 412: another worker began meanwhile, from a read that may be older or newer than ours: again from step 1, deleting what this run wrote if it is no longer wanted |
    ///
    /// Requests when nothing races: 4 (two reads, two writes of the keys
    /// row) plus one per row written and one per row deleted; a rename of
    /// an employee in the one-row view is 6.
    ///
    /// Each time it starts again it first pauses a random while (up to 2
    /// ms, doubling to 64 ms), so that runs of one key at once take turns.
    /// Every run ends with the rows of a source state read after its last
    /// step 3, and only a run whose keys row was not touched from its step
    /// 3 to its step 6 ends at all, so of two runs at once the one that
    /// ends last read the source last: the view ends at the latest state,
    /// whatever order the messages ran in.
    pub async fn apply(&self, key: EntityKey, ctx: &StepContext) -> OpResult {
        crate::trace::traced_op("MaterializedView", "apply", Some(self.inner.view.name()), async move {
            key.validate()?;
            let i = &self.inner;
            let mut written: BTreeSet<EntityKey> = BTreeSet::new();
            for attempt in 0..MAX_REREADS {
                if attempt > 0 {
                    // Runs of one key at once take turns: a random pause,
                    // growing, so that one gets from its step 3 to its step 6.
                    let ceiling = 2u64 << attempt.min(5);
                    tokio::time::sleep(Duration::from_micros(fastrand::u64(0..=ceiling * 1000))).await;
                }
                let (old, etag) = match ctx.read(&i.keys, key.clone()).await? {
                    Some((row, etag)) => (keys_from_row(&row)?, Some(etag)),
                    None => (BTreeSet::new(), None),
                };
                let rows = match i.source.get(key.clone()).await? {
                    Some(entity) => (i.project)(&entity),
                    None => Vec::new(),
                };
                ctx.step(&format!("read {}", i.source.name())).await?;
                let new: BTreeSet<EntityKey> = rows
                    .iter()
                    .map(|r| EntityKey::new(r.partition_key(), r.row_key()))
                    .collect();
                let listed: BTreeSet<EntityKey> = old.union(&written).chain(&new).cloned().collect();
                let listing = DynamicEntity::new(key.partition_key.as_str(), key.row_key.as_str())
                    .with(ROWS_PROPERTY, keys_to_json(&listed));
                let etag = match etag {
                    None => {
                        let inserted = match i.keys.insert(&listing).await {
                            Ok(w) => Some(w.etag().clone()),
                            Err(e) if e.is_conflict() => None,
                            Err(e) => return Err(e.into()),
                        };
                        ctx.step(&format!("insert {}", i.keys.name())).await?;
                        match inserted {
                            Some(etag) => etag,
                            None => continue,
                        }
                    }
                    Some(etag) => match ctx.replace_if_unchanged(&i.keys, &listing, &etag).await? {
                        Guarded::Done(Some(etag)) => etag,
                        _ => continue,
                    },
                };
                for row in &rows {
                    ctx.insert_or_replace(&i.view, row).await?;
                    written.insert(EntityKey::new(row.partition_key(), row.row_key()));
                }
                for stale in listed.difference(&new) {
                    ctx.delete_if_exists(&i.view, stale.clone()).await?;
                }
                let finished = if new.is_empty() {
                    ctx.delete_if_unchanged(&i.keys, key.clone(), &etag).await?
                } else {
                    let listing = DynamicEntity::new(key.partition_key.as_str(), key.row_key.as_str())
                        .with(ROWS_PROPERTY, keys_to_json(&new));
                    ctx.replace_if_unchanged(&i.keys, &listing, &etag).await?
                };
                if matches!(finished, Guarded::Done(_)) {
                    return Ok(());
                }
            }
            Err(format!(
                "{key} changed {MAX_REREADS} times while its view rows were written; will retry later"
            )
            .into())
        })
        .await
    }

    /// Makes the view again from the source, while workers may run:
    ///
    /// 1. reads the keys of every view row (one scan of the view);
    /// 2. [applies](Self::apply) every source entity (one scan of the
    ///    source, then its steps for each);
    /// 3. applies every keys row whose source entity is gone (one scan of
    ///    the keys table), which deletes its rows;
    /// 4. deletes the rows of step 1 that no keys row lists (a scan of the
    ///    keys table): rows of an older `project`, or written by hand.
    ///
    /// Step 1 comes first because a worker lists a row before writing it: a
    /// row seen in step 1 is listed in step 4 unless it is no longer wanted.
    pub async fn rebuild(&self) -> Result<RebuildReport> {
        crate::trace::traced(
            "MaterializedView",
            "rebuild",
            Some(self.inner.view.name()),
            async move {
                let i = &self.inner;
                let ctx = StepContext::detached(i.tables.clone(), None);
                // The steps fail with tablekit's errors, boxed; give them back as they were.
                let run = |r: OpResult| {
                    r.map_err(|e| match e.downcast::<Error>() {
                        Ok(e) => *e,
                        Err(other) => Error::from(DecodeError::new(other.to_string())),
                    })
                };
                let mut report = RebuildReport::default();
                let before = keys_of(i.view.with_type()).await?;
                let sources = keys_of(i.source.with_type()).await?;
                for key in &sources {
                    run(self.apply(key.clone(), &ctx).await)?;
                    report.sources += 1;
                }
                for key in keys_of(i.keys.clone()).await? {
                    if !sources.contains(&key) {
                        run(self.apply(key, &ctx).await)?;
                        report.gone += 1;
                    }
                }
                let mut listed = BTreeSet::new();
                let mut rows = i.keys.query().stream();
                while let Some(row) = rows.next().await {
                    listed.extend(keys_from_row(&row?)?);
                }
                for stray in before.difference(&listed) {
                    if i.view.delete_if_exists(stray.clone(), IfMatch::Any).await? {
                        report.strays += 1;
                    }
                }
                Ok(report)
            },
        )
        .await
    }

    /// How far the view is behind: the changes waiting, the age of the
    /// oldest (by the view's clock), and the last change applied by a
    /// worker of this process. Two requests (a count and a peek).
    pub async fn lag(&self) -> Result<ViewLag> {
        crate::trace::traced(
            "MaterializedView",
            "lag",
            Some(self.inner.view.name()),
            async move {
                let queue = self.inner.eventual.queue();
                let pending = queue.approximate_message_count().await?;
                let oldest = queue.peek(32).await?.iter().map(|m| m.inserted_on()).min();
                let now = self.now();
                Ok(ViewLag {
                    pending,
                    oldest_pending: oldest.map(|t| (now - t).to_std().unwrap_or_default()),
                    last_applied: *self
                        .inner
                        .last_applied
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()),
                })
            },
        )
        .await
    }
}
