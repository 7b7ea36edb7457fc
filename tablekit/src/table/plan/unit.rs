//! A unit of work: writes of many tables and partitions collected, then
//! saved with one call, each partition's writes grouped into transactions.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use futures::StreamExt;

use crate::entity::EntityKey;
use crate::error::{Error, Result};

use super::{Part, Plan, TableRef};

/// How many partitions a [`UnitOfWork`] saves at once.
const PARTITIONS_IN_FLIGHT: usize = 8;

/// Writes collected across tables and partitions and saved together, for
/// code coming from the .NET `DataServiceContext`: what `AddObject`,
/// `UpdateObject` and `DeleteObject` collect and
/// `SaveChanges(SaveChangesOptions.Batch)` sends.
///
/// Each [`add`](Self::add)ed write is a [`Plan`] (a plain write, or a
/// pattern's composed writes). [`save`](Self::save) groups the plans of
/// each partition, in the order added, into transactions of at most 100
/// operations; a plan is never split, and two plans that write one entity
/// go to successive transactions, so the store ends as the writes one by
/// one would leave it. Partitions are saved side by side. A transaction
/// refused leaves its partition's later transactions unsent (their writes
/// may depend on it); the other partitions go on.
///
/// | `DataServiceContext` | tablekit |
/// |---|---|
/// | `AddObject(table, e)` | `uow.add(table.plan_insert(&mut e)?)` |
/// | `UpdateObject(e)` (merge) | `uow.add(table.plan_update(&mut e, UpdateMode::Merge, etag)?)` |
/// | `DeleteObject(e)` | `uow.add(table.plan_delete(key, etag)?)` |
/// | `SaveChanges(SaveChangesOptions.Batch)` | `uow.save().await` |
///
/// ```
/// use tablekit::{DynamicEntity, TableServiceClient, table::UnitOfWork};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tablekit::Result<()> {
/// let service = TableServiceClient::embedded();
/// let orders = service.table::<DynamicEntity>("Orders")?;
/// orders.create_table().await?;
/// let mut rows: Vec<DynamicEntity> = ["alice", "bob"]
///     .iter()
///     .flat_map(|c| (0..150).map(move |n| DynamicEntity::new(*c, format!("{n:03}"))))
///     .collect();
/// let mut uow = UnitOfWork::new();
/// for row in &mut rows {
///     uow.add(orders.plan_insert(row)?); // by `&mut`: each row gets its ETag
/// }
/// let saved = uow.save().await;
/// assert!(saved.all_written());
/// assert_eq!(saved.transactions(), 4); // 100 + 50 per customer
/// assert!(rows.iter().all(|r| r.etag.is_some()));
/// # Ok(()) }
/// ```
#[derive(Default)]
#[must_use = "a unit of work does nothing until saved"]
pub struct UnitOfWork<'a> {
    items: Vec<Plan<'a>>,
}

impl fmt::Debug for UnitOfWork<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnitOfWork")
            .field("writes", &self.items.len())
            .finish()
    }
}

/// The entities a plan names before its reads, or `None` when a range read
/// decides them.
fn named_keys(plan: &Plan<'_>) -> Option<Vec<EntityKey>> {
    plan.parts
        .iter()
        .map(|p| match p {
            Part::Op(op) => Some(op.key()),
            Part::Add { key, .. } | Part::Read { key, .. } | Part::Modify { key, .. } => {
                Some(key.clone())
            }
            Part::Range { .. } => None,
        })
        .collect()
}

/// What became of one write: the transaction that carried it, or why not.
type ItemResult = std::result::Result<Arc<super::Applied>, Arc<Error>>;

/// The plans of one partition, with their indexes.
type Partition<'a> = Vec<(usize, Plan<'a>)>;

/// A transaction of a partition: sent (with its result), or not sent after
/// an earlier one of its partition failed.
enum Sent {
    Sent(Result<super::Applied>),
    NotSent,
}

/// The outcome of [`UnitOfWork::save`]: one per write added, in order.
#[derive(Debug)]
pub struct SaveOutcome {
    items: Vec<ItemResult>,
    transactions: usize,
}

impl SaveOutcome {
    /// What became of write `index` (in the order added): the transaction
    /// that carried it, or why it was refused or not sent.
    pub fn get(&self, index: usize) -> Option<std::result::Result<&super::Applied, &Error>> {
        self.items
            .get(index)
            .map(|r| r.as_ref().map(|a| &**a).map_err(|e| &**e))
    }

    /// How many writes were added.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no write was added.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether every write was written.
    pub fn all_written(&self) -> bool {
        self.items.iter().all(|r| r.is_ok())
    }

    /// The writes not written, with why, by index.
    pub fn failures(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| (i, &**e)))
    }

    /// How many transactions were sent.
    pub fn transactions(&self) -> usize {
        self.transactions
    }
}

impl<'a> UnitOfWork<'a> {
    /// An empty unit of work.
    pub fn new() -> Self {
        UnitOfWork { items: Vec::new() }
    }

    /// Adds a write (or a pattern's composed writes); returns its index in
    /// the [`SaveOutcome`].
    pub fn add(&mut self, plan: Plan<'a>) -> usize {
        self.items.push(plan);
        self.items.len() - 1
    }

    /// How many writes were added.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no write was added.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sends every partition's writes as transactions (see the
    /// [type docs](Self)); never fails as a whole: each write's outcome is
    /// in the result.
    pub async fn save(self) -> SaveOutcome {
        let n = self.items.len();
        // The partitions, in the order first written, each with its plans.
        let mut groups: Vec<((TableRef, String), Partition<'a>)> = Vec::new();
        for (i, plan) in self.items.into_iter().enumerate() {
            let Some(t) = plan.target.as_ref() else {
                continue;
            };
            let at = (t.table.clone(), t.partition_key.clone());
            match groups.iter_mut().find(|(g, _)| *g == at) {
                Some((_, plans)) => plans.push((i, plan)),
                None => groups.push((at, vec![(i, plan)])),
            }
        }
        let mut items: Vec<Option<ItemResult>> = (0..n).map(|_| None).collect();
        let results: Vec<Vec<(Vec<usize>, Sent)>> =
            futures::stream::iter(groups.into_iter().map(|(_, plans)| save_partition(plans)))
                .buffer_unordered(PARTITIONS_IN_FLIGHT)
                .collect()
                .await;
        let mut transactions = 0;
        for (indexes, sent) in results.into_iter().flatten() {
            let result = match sent {
                Sent::Sent(result) => {
                    transactions += 1;
                    result
                }
                Sent::NotSent => Err(not_sent()),
            };
            let shared = result.map(Arc::new).map_err(Arc::new);
            for i in indexes {
                items[i] = Some(shared.clone());
            }
        }
        SaveOutcome {
            items: items
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Ok(Arc::new(super::Applied::default()))))
                .collect(),
            transactions,
        }
    }
}

fn not_sent() -> Error {
    Error::invalid(crate::error::ValidationError::Plan {
        reason: "not sent: an earlier transaction of its partition failed".into(),
    })
}

/// The plans of one partition as successive transactions, in order.
async fn save_partition(plans: Partition<'_>) -> Vec<(Vec<usize>, Sent)> {
    let mut out = Vec::new();
    let mut chunks: Vec<Partition<'_>> = Vec::new();
    let mut current: Partition<'_> = Vec::new();
    let mut parts = 0;
    let mut keys: HashSet<EntityKey> = HashSet::new();
    for (i, plan) in plans {
        let named = named_keys(&plan);
        let clash = match &named {
            Some(k) => k.iter().any(|k| keys.contains(k)),
            None => !current.is_empty(),
        };
        if !current.is_empty()
            && (clash || parts + plan.len() > crate::validate::MAX_BATCH_OPERATIONS)
        {
            chunks.push(std::mem::take(&mut current));
            parts = 0;
            keys.clear();
        }
        parts += plan.len();
        match named {
            Some(k) => keys.extend(k),
            // A range read decides what it writes: it goes alone.
            None => parts = crate::validate::MAX_BATCH_OPERATIONS,
        }
        current.push((i, plan));
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    let mut failed = false;
    for chunk in chunks {
        let indexes: Vec<usize> = chunk.iter().map(|(i, _)| *i).collect();
        if failed {
            out.push((indexes, Sent::NotSent));
            continue;
        }
        // One table and partition: joining cannot be refused.
        let mut combined = Ok(Plan::new());
        for (_, p) in chunk {
            combined = combined.and_then(|c| c.and(p));
        }
        let result = match combined {
            Ok(plan) => plan.send().await,
            Err(e) => Err(e),
        };
        failed = result.is_err();
        out.push((indexes, Sent::Sent(result)));
    }
    out
}
