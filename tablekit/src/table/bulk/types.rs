//! The vocabulary of bulk writes: operations, outcomes, progress, settings.

use std::sync::Arc;
use std::time::Duration;

use crate::entity::{ETag, EntityKey, IfMatch, TableEntity, UpdateMode};
use crate::error::Error;

/// The documented scalability target of one partition, in entities per second.
pub const PARTITION_TARGET: f64 = 2_000.0;
/// The documented scalability target of one storage account, in entities per second.
pub const ACCOUNT_TARGET: f64 = 20_000.0;

/// One write of a bulk write.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BulkOp<T> {
    /// Insert the entity; refused (409) if one with its keys exists.
    Insert(T),
    /// Insert the entity, or merge it into / replace the stored one.
    Upsert(T, UpdateMode),
    /// Merge into or replace the stored entity under the condition.
    Update(T, UpdateMode, IfMatch),
    /// Delete the entity under the condition.
    Delete(EntityKey, IfMatch),
}

impl<T: TableEntity> BulkOp<T> {
    /// The keys of the entity the operation writes.
    pub fn key(&self) -> EntityKey {
        match self {
            BulkOp::Insert(e) | BulkOp::Upsert(e, _) | BulkOp::Update(e, ..) => e.key(),
            BulkOp::Delete(k, _) => k.clone(),
        }
    }
}

/// What happened to one entity of a bulk write.
#[derive(Debug, Clone)]
pub struct EntityOutcome {
    /// The entity's position in the input (counted from the checkpoint's
    /// position when resuming, else from 0).
    pub position: u64,
    /// The entity's keys.
    pub key: EntityKey,
    /// What happened.
    pub result: BulkResult,
}

/// What happened to one entity; see [`EntityOutcome`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BulkResult {
    /// Written (deleted, for a delete): its transaction was applied.
    Written {
        /// The entity's new ETag (`None` for a delete).
        etag: Option<ETag>,
        /// The transaction's answer was lost, or the entity was in doubt
        /// after a resume, and reading it back showed the write applied.
        confirmed_by_read_back: bool,
    },
    /// Not written: the service (or the client, before sending) refused this
    /// entity, for the reason the error gives (409 for an insert of an
    /// existing entity, 412, an invalid property, throttling that outlasted
    /// [`BulkWriter::max_attempts`](super::BulkWriter::max_attempts), ...). The other entities of its
    /// transaction were sent again without it.
    Refused(Arc<Error>),
    /// Unknown: the transaction's answer was lost and reading the entities
    /// back did not show it applied ([`Error::read_back`] says what was found).
    Ambiguous(Arc<Error>),
}

impl BulkResult {
    /// Whether the entity was written.
    pub fn is_written(&self) -> bool {
        matches!(self, BulkResult::Written { .. })
    }
}

/// How far a bulk write got: passed to [`BulkWriter::on_progress`](super::BulkWriter::on_progress) after
/// every transaction, and returned at the end as the run's report.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct BulkProgress {
    /// Entities taken from the input by this run.
    pub read: u64,
    /// Entities written.
    pub written: u64,
    /// Entities refused ([`BulkResult::Refused`]).
    pub refused: u64,
    /// Entities whose outcome is unknown ([`BulkResult::Ambiguous`]).
    pub ambiguous: u64,
    /// Entities skipped because an earlier run (per the checkpoint) settled them.
    pub skipped: u64,
    /// Transactions sent (each attempt counts: a billable request each).
    pub transactions: u64,
    /// Throttling answers (503 Server Busy, 429) met.
    pub throttled: u64,
    /// Every input position before this one is settled: where a resume starts.
    pub position: u64,
    /// Time since the run started.
    pub elapsed: Duration,
    /// The account-wide rate limit now, in entities per second (lowered by
    /// throttling, raised back by successes).
    pub account_rate: f64,
    /// Partitions the writer holds state for now (their waiting entities
    /// and rate); idle ones are forgotten, so this stays bounded by the
    /// buffer, not by the number of partitions in the input.
    pub partitions: usize,
}

impl BulkProgress {
    /// Entities written per second since the start.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.written as f64 / secs
        } else {
            0.0
        }
    }

    /// Entities whose outcome is settled (written, refused, ambiguous or skipped).
    pub fn settled(&self) -> u64 {
        self.written + self.refused + self.ambiguous + self.skipped
    }
}

/// The settings of a bulk write.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) partition_rate: f64,
    pub(crate) account_rate: f64,
    pub(crate) in_flight: usize,
    pub(crate) buffer: usize,
    pub(crate) max_attempts: u32,
}

pub(crate) type OutcomeFn<'a> = Box<dyn FnMut(EntityOutcome) + Send + 'a>;
pub(crate) type ProgressFn<'a> = Box<dyn FnMut(&BulkProgress) + Send + 'a>;
