//! One-to-many in one partition, and the move to another partition through
//! the queue worker: [`OneToMany`], [`Move`].

use std::fmt;

use serde::{Deserialize, Serialize};
use tablekit::{
    error::ErrorCode, queue::SentMessage, table::TransactionOp, DynamicEntity, EntityKey, IfMatch,
    QueueClient, Result, TableEntity, UpdateMode,
};

use crate::error::refused;
use crate::eventual::{Eventual, OpResult, StepContext, WorkerBuilder, MAX_REREADS};
use crate::plan::Plan;
use crate::summary::CountedPartition;

/// The prefix of the `kind` of a [`OneToMany`]'s move messages; the table's
/// name follows it.
pub const MOVE_KIND_PREFIX: &str = "tablekit.move.";

/// The message of a move: the entity `(partition_key, row_key)` goes to
/// partition `to`, keeping its RowKey. `{"partition_key":"Sales","row_key":"000123","to":"Marketing"}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The partition it leaves (the old department).
    pub partition_key: String,
    /// Its RowKey, the same in both partitions (the employee's id).
    pub row_key: String,
    /// The partition it joins (the new department).
    pub to: String,
}

impl Move {
    /// The key it has before the move.
    pub fn from_key(&self) -> EntityKey {
        EntityKey::new(&self.partition_key, &self.row_key)
    }

    /// The key it has after the move.
    pub fn to_key(&self) -> EntityKey {
        EntityKey::new(&self.to, &self.row_key)
    }
}

/// The seed's first design of a one-to-many relationship: a department and
/// its employees, separate entity types in **one partition** of one table,
/// the department holding the employee count. A thin front on
/// [`CountedPartition`] (which keeps the count in the same transaction as
/// every insert and delete, and reads the partition in one query into a
/// derived enum) that adds what one transaction cannot do: **moving an
/// employee to another department** (two partitions), as an eventually
/// consistent operation run by the queue [`Worker`](crate::eventual::Worker).
/// See the [module docs](super) for the guarantee of a move. Cheap to clone.
pub struct OneToMany<T> {
    counted: CountedPartition<T>,
    eventual: Eventual,
    kind: String,
}

impl<T> Clone for OneToMany<T> {
    fn clone(&self) -> Self {
        OneToMany {
            counted: self.counted.clone(),
            eventual: self.eventual.clone(),
            kind: self.kind.clone(),
        }
    }
}

impl<T> fmt::Debug for OneToMany<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OneToMany")
            .field("counted", &self.counted)
            .field("kind", &self.kind)
            .finish()
    }
}

impl<T: TableEntity + Send + Sync + 'static> OneToMany<T> {
    /// The entities counted by `counted`, moved between partitions through
    /// messages on `queue` (create it first), of kind
    /// `tablekit.move.<table>`.
    pub fn new(counted: CountedPartition<T>, queue: QueueClient) -> Self {
        let kind = format!("{MOVE_KIND_PREFIX}{}", counted.table().name());
        OneToMany {
            counted,
            eventual: Eventual::new(queue),
            kind,
        }
    }

    /// The counted partition this is a front on.
    pub fn counted(&self) -> &CountedPartition<T> {
        &self.counted
    }

    /// The `kind` of this relationship's move messages.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Inserts the entity and adds one to its partition's count, in one
    /// transaction ([`CountedPartition::insert`]); returns the new count.
    pub async fn insert(&self, entity: &mut T) -> Result<i32> {
        crate::trace::traced(
            "OneToMany",
            "insert",
            Some(self.counted.table().name()),
            async move { self.counted.insert(entity).await },
        )
        .await
    }

    /// Deletes the entity under `if_match` and subtracts one from its
    /// partition's count, in one transaction ([`CountedPartition::delete`]).
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<i32> {
        crate::trace::traced(
            "OneToMany",
            "delete",
            Some(self.counted.table().name()),
            async move { self.counted.delete(key, if_match).await },
        )
        .await
    }

    /// The count of a partition: one point read.
    pub async fn count(&self, partition_key: &str) -> Result<i32> {
        crate::trace::traced(
            "OneToMany",
            "count",
            Some(self.counted.table().name()),
            async move { self.counted.count(partition_key).await },
        )
        .await
    }

    /// The whole partition, the "one" and its "many", in **one query**,
    /// decoded into `E` (an enum derived with [`TableEntity`]); see
    /// [`CountedPartition::read_partition`].
    pub async fn read_partition<E: TableEntity>(&self, partition_key: &str) -> Result<Vec<E>> {
        crate::trace::traced(
            "OneToMany",
            "read_partition",
            Some(self.counted.table().name()),
            async move { self.counted.read_partition(partition_key).await },
        )
        .await
    }

    fn check_move(&self, from: &EntityKey, to: &str) -> Result<()> {
        from.validate()?;
        EntityKey::new(to, from.row_key.as_str()).validate()?;
        if from.partition_key == to {
            return Err(refused(
                "relationships",
                format!("{from} is already in partition {to:?}"),
            ));
        }
        if from.row_key == self.counted.summary_row_key() {
            return Err(refused(
                "relationships",
                "the summary entity is not one of the counted entities",
            ));
        }
        Ok(())
    }

    /// Enqueues the move of the entity `key` to partition `to` (its RowKey
    /// kept): one message, checked before it is sent (a key the service
    /// refuses, the summary's RowKey, or a move to the partition it is in
    /// are refused before any request). A worker with this relationship
    /// [attached](Self::attach) runs it.
    pub async fn move_to(&self, key: impl Into<EntityKey>, to: &str) -> Result<SentMessage> {
        crate::trace::traced(
            "OneToMany",
            "move_to",
            Some(self.counted.table().name()),
            async move {
                let key = key.into();
                self.check_move(&key, to)?;
                let message = Move {
                    partition_key: key.partition_key,
                    row_key: key.row_key,
                    to: to.to_owned(),
                };
                self.eventual.enqueue_kind(&self.kind, &message).await
            },
        )
        .await
    }

    /// Registers this relationship's moves with a worker builder.
    pub fn attach(&self, builder: WorkerBuilder) -> WorkerBuilder {
        let this = self.clone();
        builder.handle(&self.kind, move |m: Move, ctx: StepContext| {
            let this = this.clone();
            async move { this.apply_move(&m, &ctx).await }
        })
    }

    /// Runs the steps of a move (what the worker runs for each message;
    /// with a [detached](StepContext::detached) context, in place):
    ///
    /// | step | request | on a retry |
    /// |---|---|---|
    /// | 1 | read the entity in the old partition, with its ETag | not there: an earlier attempt finished (or it was deleted); done |
    /// | 2 | one transaction in the new partition: insert the copy **and** the count + 1 | the copy is there (an earlier attempt): replace it with the version read, the count unchanged |
    /// | 3 | one transaction in the old partition: delete the entity under the ETag of step 1 **and** the count − 1 | 412: it changed since step 1: again from step 1, so the copy is the newest version; 404: another attempt deleted it; done |
    ///
    /// Every property is copied (the entity is read as a
    /// [`DynamicEntity`]); only the PartitionKey changes. Six table
    /// requests when nothing races: the read of step 1; the reads of the
    /// copy's key and of the new department, then the transaction of step
    /// 2; the read of the old department, then the transaction of step 3
    /// (measured on every backend by the tests), besides the worker's
    /// queue requests.
    pub async fn apply_move(&self, m: &Move, ctx: &StepContext) -> OpResult {
        crate::trace::traced_op(
            "OneToMany",
            "apply_move",
            Some(self.counted.table().name()),
            async move {
                // A message is input from outside: check it as `move_to` does.
                let from = m.from_key();
                self.check_move(&from, &m.to)?;
                let raw = self.counted.table().with_type::<DynamicEntity>();
                for _ in 0..MAX_REREADS {
                    let Some((mut copy, etag)) = ctx.read(&raw, from.clone()).await? else {
                        return Ok(()); // moved by an earlier attempt, or deleted
                    };
                    copy.partition_key = m.to.clone();
                    copy.etag = None;
                    copy.timestamp = None;
                    let (counted, target) = (self.counted.clone(), raw.clone());
                    Plan::after_read(&raw, m.to_key(), move |found| match found {
                        None => Plan::op(&target, TransactionOp::Insert(copy.clone()))?
                            .and(counted.plan_count(&copy.partition_key, 1)?),
                        Some(_) => Plan::op(
                            &target,
                            TransactionOp::Upsert(copy.clone(), UpdateMode::Replace),
                        ),
                    })?
                    .send()
                    .await?;
                    ctx.step(&format!("insert {} with the count of {}", raw.name(), m.to))
                        .await?;
                    let done = match self
                        .counted
                        .plan_delete(from.clone(), IfMatch::ETag(etag))?
                        .send()
                        .await
                    {
                        Ok(_) => true,
                        Err(e) if e.is_precondition_failed() => false,
                        Err(e)
                            if e.is_not_found() && e.code() != Some(&ErrorCode::TableNotFound) =>
                        {
                            true
                        }
                        Err(e) => return Err(e.into()),
                    };
                    ctx.step(&format!(
                        "delete {} with the count of {}",
                        raw.name(),
                        m.partition_key
                    ))
                    .await?;
                    if done {
                        return Ok(());
                    }
                }
                Err(format!(
                    "{from} changed {MAX_REREADS} times while being moved; will retry later"
                )
                .into())
            },
        )
        .await
    }
}
