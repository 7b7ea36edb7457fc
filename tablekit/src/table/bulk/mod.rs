//! Bulk writes: [`TableClient::bulk`] turns a stream of entities (or of
//! operations) of any length into entity group transactions, at the
//! service's scalability targets, with an outcome per entity and a
//! checkpoint to resume from.
//!
//! **Not atomic.** Each transaction (up to 100 operations of one partition,
//! up to 4 MiB) is applied whole or not at all, but a bulk write is many
//! transactions: when it stops early, some are applied and others not. Each
//! entity's outcome is reported ([`EntityOutcome`]); the
//! [`Checkpoint`] says where to resume.

mod checkpoint;
mod engine;
mod limiter;
mod types;

use std::fmt;

use futures::{Stream, StreamExt as _};

pub use checkpoint::Checkpoint;
pub use types::{
    BulkOp, BulkProgress, BulkResult, EntityOutcome, ACCOUNT_TARGET, PARTITION_TARGET,
};
use types::{OutcomeFn, ProgressFn, Settings};

use crate::entity::{TableEntity, UpdateMode};
use crate::error::Result;
use crate::table::TableClient;

/// A bulk write being set up; see [`TableClient::bulk`]. Run it with
/// [`run`](Self::run) (operations), [`upsert_all`](Self::upsert_all) or
/// [`insert_all`](Self::insert_all) (entities).
#[must_use = "a bulk write does nothing until run"]
pub struct BulkWriter<'a, T> {
    table: TableClient<T>,
    settings: Settings,
    checkpoint: Option<Checkpoint>,
    on_outcome: Option<OutcomeFn<'a>>,
    on_progress: Option<ProgressFn<'a>>,
}

impl<T> fmt::Debug for BulkWriter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkWriter")
            .field("table", &self.table.name())
            .field("settings", &self.settings)
            .field(
                "checkpoint",
                &self.checkpoint.as_ref().map(Checkpoint::path),
            )
            .finish()
    }
}

impl<T: TableEntity> TableClient<T> {
    /// A bulk write into this table: any number of entities or operations,
    /// grouped by partition into entity group transactions (up to 100
    /// operations and 4 MiB each), several in flight at once, under the
    /// service's scalability targets (2,000 entities/s per partition, 20,000
    /// per account, by default), slowing down when the service answers
    /// 503 Server Busy or 429 and speeding up again as it recovers.
    ///
    /// Not atomic across transactions: see the [module](crate::table::bulk).
    /// Operations on one partition are applied in input order (one
    /// transaction of a partition is in flight at a time; an entity met
    /// twice closes the transaction that holds it), partitions in any order.
    /// Memory stays flat for any input length: the writer holds at most
    /// [`buffer`](BulkWriter::buffer) entities waiting plus those in flight.
    ///
    /// With the HTTP backend, the client's own [`RetryPolicy`](crate::options::RetryPolicy)
    /// retries a throttled request first; the writer sees (and adapts to)
    /// the throttling that outlasts it. Fewer retries there make it adapt sooner.
    ///
    /// The run stops with an error at the first failure that is not about
    /// one entity (the table is missing, the credentials are refused, the
    /// service stays unreachable), after the transactions in flight end.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tablekit::Result<()> {
    /// use tablekit::{DynamicEntity, TableServiceClient, UpdateMode};
    ///
    /// let service = TableServiceClient::embedded();
    /// let table = service.table::<DynamicEntity>("Readings")?;
    /// table.create_table().await?;
    /// let readings = (0..1_000).map(|i| {
    ///     DynamicEntity::new(format!("sensor{}", i % 7), format!("{i:06}")).with("Value", i)
    /// });
    /// let report = table
    ///     .bulk()
    ///     .on_progress(|p| eprintln!("{} written", p.written))
    ///     .upsert_all(futures::stream::iter(readings), UpdateMode::Replace)
    ///     .await?;
    /// assert_eq!(report.written, 1_000);
    /// assert!(report.transactions >= 11, "7 partitions of about 143 entities");
    /// # Ok(()) }
    /// ```
    pub fn bulk(&self) -> BulkWriter<'static, T> {
        // A plain embedded store never throttles: its writes go at its own
        // speed. The service and a simulation of it get their targets.
        // Without throttling, more transactions in flight share each commit
        // (one `fsync`), and a larger window grows the transactions of input
        // interleaved over many partitions (see `buffer`).
        let (partition_rate, account_rate, in_flight, buffer) =
            if self.handle().backend.may_throttle() {
                (PARTITION_TARGET, ACCOUNT_TARGET, 8, 10_000)
            } else {
                (f64::INFINITY, f64::INFINITY, 64, 100_000)
            };
        BulkWriter {
            table: self.clone(),
            settings: Settings {
                partition_rate,
                account_rate,
                in_flight,
                buffer,
                max_attempts: 20,
            },
            checkpoint: None,
            on_outcome: None,
            on_progress: None,
        }
    }
}

impl<'a, T: TableEntity> BulkWriter<'a, T> {
    /// The rate limit of one partition, in entities per second (default
    /// [`PARTITION_TARGET`] over HTTP and on a simulation of the service,
    /// none on a plain embedded store, which never throttles;
    /// `f64::INFINITY` for none).
    pub fn partition_rate(mut self, per_second: f64) -> Self {
        self.settings.partition_rate = per_second;
        self
    }

    /// The rate limit of the whole write, in entities per second (default
    /// [`ACCOUNT_TARGET`] over HTTP and on a simulation of the service, none
    /// on a plain embedded store; `f64::INFINITY` for none). Several writers on one
    /// account share its target: give each its share.
    pub fn account_rate(mut self, per_second: f64) -> Self {
        self.settings.account_rate = per_second;
        self
    }

    /// How many transactions may be in flight at once (at least 1; default
    /// 8, and 64 on a plain embedded store, where the transactions in flight
    /// share the store's commits: one `fsync` for many).
    pub fn in_flight(mut self, transactions: usize) -> Self {
        self.settings.in_flight = transactions.max(1);
        self
    }

    /// How many entities may wait in partially filled transactions before
    /// the oldest is sent anyway (at least 100; default 10,000, and 100,000
    /// on a plain embedded store). The input is read no further ahead than
    /// this, so it bounds the writer's memory: about 1 KiB an entity of eight
    /// properties (the `durable_store` bench's `bulk`: 100,000 rows over 997
    /// partitions peak at about 160 MB resident at the default, sorted
    /// at about 85 MB).
    ///
    /// Input not sorted by PartitionKey spreads over many open transactions:
    /// with P partitions interleaved each is sent with about `buffer / P`
    /// entities, and a store file writes a transaction of few entities at a
    /// higher cost per entity (each rewrites the pages at its partition's
    /// end). Without rate limits (a plain embedded store) the writer reads
    /// ahead only while fewer transactions are ready to go than may be in
    /// flight, so sorted input holds little of this buffer.
    pub fn buffer(mut self, entities: usize) -> Self {
        self.settings.buffer = entities.max(100);
        self
    }

    /// How often one transaction is sent when the service throttles it or
    /// cannot be reached (default 20); then its entities are refused with
    /// the last error (throttling) or the run stops (unreachable).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts.max(1);
        self
    }

    /// Keeps the run's state in `checkpoint` so that a run that stopped can
    /// be resumed: the input is numbered from [`Checkpoint::position`], and
    /// must be the same input from there on. What a resume guarantees is said
    /// on [`Checkpoint`].
    pub fn checkpoint(mut self, checkpoint: Checkpoint) -> Self {
        self.checkpoint = Some(checkpoint);
        self
    }

    /// Calls `f` with each entity's outcome, as it is settled (in the order
    /// transactions end, not the input's).
    pub fn on_outcome<'b>(self, f: impl FnMut(EntityOutcome) + Send + 'b) -> BulkWriter<'b, T>
    where
        'a: 'b,
    {
        BulkWriter {
            table: self.table,
            settings: self.settings,
            checkpoint: self.checkpoint,
            on_outcome: Some(Box::new(f)),
            on_progress: self.on_progress,
        }
    }

    /// Calls `f` after each transaction ends, with the counts so far (for a
    /// progress bar, or to watch the achieved [rate](BulkProgress::rate)).
    pub fn on_progress<'b>(self, f: impl FnMut(&BulkProgress) + Send + 'b) -> BulkWriter<'b, T>
    where
        'a: 'b,
    {
        BulkWriter {
            table: self.table,
            settings: self.settings,
            checkpoint: self.checkpoint,
            on_outcome: self.on_outcome,
            on_progress: Some(Box::new(f)),
        }
    }

    /// Writes every operation of `ops`; resolves to the final counts once
    /// every entity is settled.
    pub async fn run<S>(self, ops: S) -> Result<BulkProgress>
    where
        S: Stream<Item = BulkOp<T>> + Send,
        T: Send + 'static,
    {
        engine::Engine::new(
            self.table,
            self.settings,
            self.checkpoint,
            self.on_outcome,
            self.on_progress,
        )
        .run(ops)
        .await
    }

    /// Upserts every entity of `entities` ([`BulkOp::Upsert`]): safe to repeat.
    pub async fn upsert_all<S>(self, entities: S, mode: UpdateMode) -> Result<BulkProgress>
    where
        S: Stream<Item = T> + Send,
        T: Send + 'static,
    {
        self.run(entities.map(move |e| BulkOp::Upsert(e, mode)))
            .await
    }

    /// Inserts every entity of `entities` ([`BulkOp::Insert`]): an entity
    /// whose keys exist is refused (409), the others are written.
    pub async fn insert_all<S>(self, entities: S) -> Result<BulkProgress>
    where
        S: Stream<Item = T> + Send,
        T: Send + 'static,
    {
        self.run(entities.map(BulkOp::Insert)).await
    }
}
