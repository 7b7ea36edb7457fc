//! Cost and heat: what a client's requests cost ([`Stats`]), and `tracing`
//! warnings when a partition runs hot or a query scans.
//!
//! Every table request a [`TableServiceClient`](crate::TableServiceClient)
//! (and every [`TableClient`](crate::TableClient) made from it) sends goes
//! through one counter set, at the client layer, so the HTTP backend and the
//! embedded store count alike. Counting is atomics on the happy path: the
//! only allocations are the first request of a table and of a partition.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use crate::backend::{Backend, EntityBody, Operation, Payload, Response};
use crate::clock::ManualClock;
use crate::error::Result;
use crate::filter::QueryPlan;
use tracing::Instrument as _;

/// Azure's published target for one partition: 2,000 entities per second.
pub const PARTITION_TARGET: u32 = 2_000;
/// Azure's published target for one account's Table service: 20,000
/// entities per second.
pub const ACCOUNT_TARGET: u32 = 20_000;

/// What a partition's rate must reach, as a share of its target, before a
/// heat warning: 80%.
pub const HEAT_SHARE: f64 = 0.8;

/// How often, at most, one partition (or one table's scans) is warned about:
/// once per 10 seconds.
pub const WARNING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Per table, how many partitions are counted one by one before the cold
/// ones are let go: when a new partition would pass this number, those that
/// had no request in the last second or took under a tenth of their target
/// in it leave [`Stats::partitions`] (the table's totals keep their counts).
/// A load over millions of partitions keeps a bounded memory this way.
pub const MAX_PARTITIONS: usize = 1_024;

/// The kinds of request counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestKind {
    /// An insert.
    Insert,
    /// An upsert (insert-or-merge, insert-or-replace).
    Upsert,
    /// A conditional update (merge or replace).
    Update,
    /// A delete.
    Delete,
    /// A point read.
    Get,
    /// One page of a query.
    QueryPage,
    /// An entity group transaction, whatever it holds.
    Transaction,
    /// Creating, deleting or listing tables.
    Table,
}

impl RequestKind {
    /// Every kind, in the order of the enum.
    pub const ALL: [RequestKind; 8] = [
        RequestKind::Insert,
        RequestKind::Upsert,
        RequestKind::Update,
        RequestKind::Delete,
        RequestKind::Get,
        RequestKind::QueryPage,
        RequestKind::Transaction,
        RequestKind::Table,
    ];

    /// The kind's name, as in the enum (`QueryPage`): the metrics' attribute.
    #[cfg(feature = "opentelemetry")]
    fn name(self) -> &'static str {
        match self {
            RequestKind::Insert => "Insert",
            RequestKind::Upsert => "Upsert",
            RequestKind::Update => "Update",
            RequestKind::Delete => "Delete",
            RequestKind::Get => "Get",
            RequestKind::QueryPage => "QueryPage",
            RequestKind::Transaction => "Transaction",
            RequestKind::Table => "Table",
        }
    }

    fn of(op: &Operation<'_>) -> Self {
        match op {
            Operation::Insert { .. } => RequestKind::Insert,
            Operation::Write { if_match: None, .. } => RequestKind::Upsert,
            Operation::Write { .. } => RequestKind::Update,
            Operation::Delete { .. } => RequestKind::Delete,
            Operation::Get { .. } => RequestKind::Get,
            Operation::Query { .. } => RequestKind::QueryPage,
            Operation::Transaction { .. } => RequestKind::Transaction,
            Operation::CreateTable { .. }
            | Operation::DeleteTable { .. }
            | Operation::ListTables { .. } => RequestKind::Table,
        }
    }
}

/// One partition's share of a table's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionStats {
    /// The table, as the client names it.
    pub table: String,
    /// The PartitionKey.
    pub partition_key: String,
    /// Requests that named this partition (a query only when its filter
    /// names one partition).
    pub requests: u64,
    /// Entities written to or read from it.
    pub entities: u64,
}

/// What a client's requests cost so far: a snapshot, from
/// [`TableServiceClient::stats`](crate::TableServiceClient::stats) (every
/// table) or [`TableClient::stats`](crate::TableClient::stats) (one table).
///
/// Counted per call the client makes, answered or not: the billable
/// transactions of Azure Table Storage's pricing, where an entity group
/// transaction is one transaction whatever it holds and a query is one per
/// page. The HTTP backend's retries of a call are attempts of that one call
/// and are not counted again (the service bills each attempt it answers).
///
/// Bytes are the entities' bodies: over HTTP, the JSON sent and received
/// (entity and transaction bodies, answer pages); on the embedded store,
/// the JSON of transactions as over HTTP, and for single entities their
/// size by the service's formula ([`entity_size`](crate::validate::entity_size)),
/// which the store keeps instead of JSON. Headers and the multipart framing
/// of transactions are not counted.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
/// use tablekit::table::RequestKind;
/// use tablekit::{DynamicEntity, TableServiceClient};
///
/// let svc = TableServiceClient::embedded();
/// let t = svc.table::<DynamicEntity>("Costs")?;
/// t.create_table().await?;
/// let mut tx = t.transaction();
/// for i in 0..10 {
///     tx.insert(&DynamicEntity::new("p", format!("{i}")))?;
/// }
/// tx.send().await?;
/// t.get(("p", "3")).await?;
/// let stats = t.stats();
/// assert_eq!(stats.transactions, 3, "the creation, the batch (one) and the read");
/// assert_eq!(stats.requests(RequestKind::Transaction), 1);
/// assert_eq!(stats.entities_written, 10);
/// assert_eq!(stats.partitions[0].entities, 11);
/// assert_eq!(svc.stats().requests(RequestKind::Table), 1, "the table's creation");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Billable transactions: every request, an entity group transaction
    /// and a query page each one.
    pub transactions: u64,
    /// Requests by kind, in the order of [`RequestKind::ALL`].
    pub by_kind: [u64; 8],
    /// Entities sent to be written (inserted, updated, upserted or
    /// deleted), whether the write succeeded or not.
    pub entities_written: u64,
    /// Entities read (point reads and query pages).
    pub entities_read: u64,
    /// Bytes of entity bodies sent: the entities' JSON. A store that keeps
    /// property bags writes no JSON: there a transaction's entities count
    /// the length their JSON would have, and a single write its entity's
    /// size as the service counts it.
    pub bytes_up: u64,
    /// Bytes of entity bodies received.
    pub bytes_down: u64,
    /// Requests answered 503 `ServerBusy` or 429 (after any retries).
    pub throttled: u64,
    /// Requests that failed, throttled ones included.
    pub failed: u64,
    /// Per partition, busiest (most entities) first.
    pub partitions: Vec<PartitionStats>,
}

impl Stats {
    /// The requests of one kind.
    pub fn requests(&self, kind: RequestKind) -> u64 {
        self.by_kind[kind as usize]
    }

    fn add(&mut self, t: &TableCounters, table: &str) {
        self.transactions += t.by_kind.iter().map(|c| c.load(Relaxed)).sum::<u64>();
        for (sum, c) in self.by_kind.iter_mut().zip(&t.by_kind) {
            *sum += c.load(Relaxed);
        }
        self.entities_written += t.entities_written.load(Relaxed);
        self.entities_read += t.entities_read.load(Relaxed);
        self.bytes_up += t.bytes_up.load(Relaxed);
        self.bytes_down += t.bytes_down.load(Relaxed);
        self.throttled += t.throttled.load(Relaxed);
        self.failed += t.failed.load(Relaxed);
        let partitions = t.partitions.read().unwrap_or_else(|e| e.into_inner());
        self.partitions
            .extend(partitions.iter().map(|(pk, p)| PartitionStats {
                table: table.to_owned(),
                partition_key: pk.to_string(),
                requests: p.requests.load(Relaxed),
                entities: p.entities.load(Relaxed),
            }));
    }

    fn sorted(mut self) -> Self {
        self.partitions.sort_by(|a, b| {
            b.entities
                .cmp(&a.entities)
                .then_with(|| a.table.cmp(&b.table))
                .then_with(|| a.partition_key.cmp(&b.partition_key))
        });
        self
    }
}

#[derive(Debug)]
struct PartitionCounter {
    partition_key: Box<str>,
    requests: AtomicU64,
    entities: AtomicU64,
    /// The one-second window the rate is measured over: its start (ms) and
    /// the entities in it.
    window_start: AtomicI64,
    window_entities: AtomicU64,
    last_warned: AtomicI64,
}

#[derive(Debug)]
struct TableCounters {
    /// The table's name as first used.
    name: Box<str>,
    /// The name as the metrics' attribute, shared (no copy per request).
    #[cfg(feature = "opentelemetry")]
    otel_name: opentelemetry::StringValue,
    by_kind: [AtomicU64; 8],
    entities_written: AtomicU64,
    entities_read: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    throttled: AtomicU64,
    failed: AtomicU64,
    partitions: RwLock<HashMap<Box<str>, Arc<PartitionCounter>>>,
    last_scan_warning: AtomicI64,
}

impl TableCounters {
    fn new(name: &str) -> Self {
        TableCounters {
            name: name.into(),
            #[cfg(feature = "opentelemetry")]
            otel_name: Arc::<str>::from(name).into(),
            by_kind: Default::default(),
            entities_written: AtomicU64::new(0),
            entities_read: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            partitions: RwLock::default(),
            last_scan_warning: AtomicI64::new(i64::MIN),
        }
    }
}

/// The counters of one service client: what [`Counted`] records and
/// [`Stats`] reads.
pub(crate) struct Recorder {
    clock: Option<ManualClock>,
    partition_target: u32,
    /// Tables by lower-cased name (names are case-insensitive).
    tables: RwLock<HashMap<Box<str>, Arc<TableCounters>>>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("partition_target", &self.partition_target)
            .finish_non_exhaustive()
    }
}

/// A table name lower-cased without allocating (names are ASCII, at most 63).
fn lower<'b>(name: &str, buf: &'b mut [u8; 64]) -> Option<&'b str> {
    let bytes = name.as_bytes();
    let out = buf.get_mut(..bytes.len())?;
    out.copy_from_slice(bytes);
    out.make_ascii_lowercase();
    std::str::from_utf8(out).ok()
}

/// Whether to warn now, `interval_ms` after the last warning: claims the
/// warning for this caller if so.
fn due(last: &AtomicI64, now: i64, interval_ms: i64) -> bool {
    let prev = last.load(Relaxed);
    (prev == i64::MIN || now.saturating_sub(prev) >= interval_ms)
        && last.compare_exchange(prev, now, Relaxed, Relaxed).is_ok()
}

impl Recorder {
    pub(crate) fn new(clock: Option<ManualClock>, partition_target: u32) -> Self {
        Recorder {
            clock,
            partition_target: partition_target.max(1),
            tables: RwLock::default(),
        }
    }

    fn now_ms(&self) -> i64 {
        match &self.clock {
            Some(c) => c.now().timestamp_millis(),
            None => chrono::Utc::now().timestamp_millis(),
        }
    }

    fn table(&self, name: &str) -> Arc<TableCounters> {
        let mut buf = [0u8; 64];
        let key = lower(name, &mut buf).unwrap_or(name);
        if let Some(t) = self
            .tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return t.clone();
        }
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        tables
            .entry(key.into())
            .or_insert_with(|| Arc::new(TableCounters::new(name)))
            .clone()
    }

    /// The counter of partition `pk` of table `t` (made on its first use).
    fn partition(&self, t: &TableCounters, pk: &str) -> Arc<PartitionCounter> {
        if let Some(p) = t
            .partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(pk)
        {
            return p.clone();
        }
        let now = self.now_ms();
        let mut map = t.partitions.write().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_PARTITIONS && !map.contains_key(pk) {
            // Keep the warm ones; what remains is small, so this runs again
            // only after as many new partitions.
            let warm = u64::from(self.partition_target / 10);
            map.retain(|_, p| {
                now.saturating_sub(p.window_start.load(Relaxed)) < 1_000
                    && p.window_entities.load(Relaxed) >= warm
            });
        }
        map.entry(pk.into())
            .or_insert_with(|| {
                Arc::new(PartitionCounter {
                    partition_key: pk.into(),
                    requests: AtomicU64::new(0),
                    entities: AtomicU64::new(0),
                    window_start: AtomicI64::new(now),
                    window_entities: AtomicU64::new(0),
                    last_warned: AtomicI64::new(i64::MIN),
                })
            })
            .clone()
    }

    /// One request of `entities` entities on partition `p`; warns when its
    /// rate approaches the target.
    fn count(&self, t: &TableCounters, p: &PartitionCounter, entities: u64) {
        let now = self.now_ms();
        p.requests.fetch_add(1, Relaxed);
        p.entities.fetch_add(entities, Relaxed);
        let start = p.window_start.load(Relaxed);
        if now.saturating_sub(start) >= 1_000
            && p.window_start
                .compare_exchange(start, now, Relaxed, Relaxed)
                .is_ok()
        {
            p.window_entities.store(0, Relaxed);
        }
        let in_window = p.window_entities.fetch_add(entities, Relaxed) + entities;
        let target = f64::from(self.partition_target);
        if in_window as f64 >= HEAT_SHARE * target
            && due(&p.last_warned, now, WARNING_INTERVAL.as_millis() as i64)
        {
            tracing::warn!(
                target: "tablekit::stats",
                table = &*t.name,
                partition = &*p.partition_key,
                rate = in_window,
                target = self.partition_target,
                "a partition approaches its scalability target (entities per second)"
            );
        }
    }

    /// A query about to run with `plan`: a scan is warned about, once per
    /// interval and table.
    pub(crate) fn query_planned(&self, table: &str, plan: &QueryPlan, filter: Option<&str>) {
        if !matches!(plan, QueryPlan::TableScan | QueryPlan::PartitionScan { .. }) {
            return;
        }
        let t = self.table(table);
        if due(
            &t.last_scan_warning,
            self.now_ms(),
            WARNING_INTERVAL.as_millis() as i64,
        ) {
            let partition = match plan {
                QueryPlan::PartitionScan { partition_key } => Some(partition_key.as_str()),
                _ => None,
            };
            let rate = t.by_kind[RequestKind::QueryPage as usize].load(Relaxed);
            tracing::warn!(
                target: "tablekit::stats",
                table,
                plan = plan.name(),
                partition,
                filter = filter.unwrap_or(""),
                query_pages = rate,
                "a query scans"
            );
        }
    }

    /// Everything counted, or one table's (`None` if it has no requests).
    pub(crate) fn stats(&self, table: Option<&str>) -> Stats {
        let mut stats = Stats::default();
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        match table {
            Some(name) => {
                let mut buf = [0u8; 64];
                let key = lower(name, &mut buf).unwrap_or(name);
                if let Some(t) = tables.get(key) {
                    stats.add(t, &t.name);
                }
            }
            None => {
                for t in tables.values() {
                    stats.add(t, &t.name);
                }
            }
        }
        stats.sorted()
    }
}

/// The entity bytes of a single write's body.
fn body_bytes(body: &EntityBody) -> u64 {
    match body {
        EntityBody::Json(b) => b.len() as u64,
        EntityBody::Bag(e) => {
            crate::validate::entity_size(&e.partition_key, &e.row_key, e.properties.iter()) as u64
        }
    }
}

/// The bytes of an answer's payload.
fn payload_bytes(p: &Payload) -> u64 {
    match p {
        Payload::Json { body, .. } => body.len() as u64,
        Payload::Stored { entities, .. } => entities
            .iter()
            .map(|s| {
                let e = &s.entity;
                crate::validate::entity_size(&e.partition_key, &e.row_key, e.properties.iter())
                    as u64
            })
            .sum(),
        // A page of an embedded store file: its keys and records as stored.
        #[cfg(feature = "durable")]
        Payload::Records { rows, .. } => rows
            .iter()
            .map(|(key, record)| (key.len() + record.len()) as u64)
            .sum(),
    }
}

/// A backend whose table requests are counted by a [`Recorder`].
///
/// A table's handle calls [`Counted::execute_in`] with its table's counters,
/// found once when the handle was made: a request then looks up only its
/// partition; the backend's future is the one boxed future of a request (the
/// [`Backend`] trait's, measured as free: see `backend::http::pipeline`). Requests by
/// table name (creating, deleting and listing tables) find the table's
/// counters by name.
pub(crate) struct Counted {
    pub(crate) inner: Arc<dyn Backend>,
    pub(crate) recorder: Arc<Recorder>,
}

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The backend it counts for, as before counting existed.
        self.inner.fmt(f)
    }
}

/// The counters of one table, as a table's handle keeps them.
#[derive(Clone)]
pub(crate) struct TableCount(Arc<TableCounters>);

impl fmt::Debug for TableCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TableCount").field(&self.0.name).finish()
    }
}

impl Counted {
    /// The counters of table `name`, for a handle of it to keep.
    pub(crate) fn table(&self, name: &str) -> TableCount {
        TableCount(self.recorder.table(name))
    }

    /// Carries out `op`, counted for its table.
    pub(crate) async fn execute(&self, op: Operation<'_>) -> Result<Response> {
        match op.table() {
            Some(name) => {
                let t = self.recorder.table(name);
                self.execute_in(&TableCount(t), op).await
            }
            None => self.inner.execute(op).await,
        }
    }

    /// Carries out `op`, an operation on the table `t` counts.
    // Not an `async fn`: its arguments would be kept twice in the future,
    // once as captured and once moved into locals.
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn execute_in<'a>(
        &'a self,
        t: &'a TableCount,
        op: Operation<'a>,
    ) -> impl std::future::Future<Output = Result<Response>> + Send + 'a {
        async move {
            let rec = &self.recorder;
            let t = &*t.0;
            t.by_kind[RequestKind::of(&op) as usize].fetch_add(1, Relaxed);
            // Entities written, bytes sent and the partition, known before sending.
            // (A query's partition and entities are counted by the query, which
            // knows its plan and decodes its pages: see `Counted::page_read_in`.)
            let (written, up, partition) = match &op {
                Operation::Insert { body, .. } => {
                    let pk = match body {
                        EntityBody::Bag(e) => Some(e.partition_key.as_str()),
                        EntityBody::Json(json) => json_partition_str(json),
                    };
                    (1, body_bytes(body), pk)
                }
                Operation::Write { key, body, .. } => {
                    (1, body_bytes(body), Some(key.partition_key.as_str()))
                }
                Operation::Delete { key, .. } => (1, 0, Some(key.partition_key.as_str())),
                Operation::Get { key, .. } => (0, 0, Some(key.partition_key.as_str())),
                Operation::Transaction { ops, .. } => (
                    ops.len() as u64,
                    // The entities' JSON, sent as it is or, to a store of
                    // property bags, counted when the bag was checked.
                    ops.iter()
                        .map(|o| o.body.as_ref().map_or(o.bag_json_len, |b| b.len()) as u64)
                        .sum(),
                    ops.first().map(|o| o.key.partition_key.as_str()),
                ),
                _ => (0, 0, None),
            };
            t.entities_written.fetch_add(written, Relaxed);
            t.bytes_up.fetch_add(up, Relaxed);
            let partition = partition.map(|pk| rec.partition(t, pk));
            #[cfg(feature = "opentelemetry")]
            let kind = RequestKind::of(&op);
            // The public call's span (see `crate::observe`), around the
            // backend's, HTTP or embedded alike.
            let span = crate::observe::table_call_span(&op);
            let backend = self.inner.execute(op);
            let result = if span.is_disabled() {
                backend.await
            } else {
                backend.instrument(span.clone()).await
            };
            crate::observe::end_call(&span, &result);
            let (read, down) = match &result {
                Ok(Response::Entity(Some(p))) => (1, payload_bytes(p)),
                Ok(Response::Page { payload, .. }) => (0, payload_bytes(payload)),
                Ok(_) => (0, 0),
                Err(e) => {
                    t.failed.fetch_add(1, Relaxed);
                    if e.is_throttled() {
                        t.throttled.fetch_add(1, Relaxed);
                    }
                    (0, 0)
                }
            };
            t.bytes_down.fetch_add(down, Relaxed);
            t.entities_read.fetch_add(read, Relaxed);
            #[cfg(feature = "opentelemetry")]
            crate::observe::count_table_call(
                kind.name(),
                &t.otel_name,
                &result,
                written,
                read,
                up,
                down,
            );
            if let Some(p) = partition {
                rec.count(t, &p, written + read);
            }
            result
        }
    }

    /// A page of a query over the table `t` read `entities`; `partition` is
    /// the one its filter names, if one.
    pub(crate) fn page_read_in(&self, t: &TableCount, partition: Option<&str>, entities: usize) {
        let t = &*t.0;
        t.entities_read.fetch_add(entities as u64, Relaxed);
        #[cfg(feature = "opentelemetry")]
        crate::observe::count_page_read(&t.otel_name, entities as u64);
        if let Some(pk) = partition {
            let p = self.recorder.partition(t, pk);
            self.recorder.count(t, &p, entities as u64);
        }
    }

    /// See [`Backend::admin`](crate::backend::Backend::admin): ACLs and service settings are not entity
    /// traffic, and are not counted.
    #[cfg(feature = "admin")]
    pub(crate) async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        self.inner.admin(op).await
    }

    /// See [`Backend::stores_property_bags`](crate::backend::Backend::stores_property_bags).
    pub(crate) fn stores_property_bags(&self) -> bool {
        self.inner.stores_property_bags()
    }

    /// See [`Backend::table_endpoint`](crate::backend::Backend::table_endpoint).
    pub(crate) fn table_endpoint(&self) -> Option<&str> {
        self.inner.table_endpoint()
    }

    /// See [`Backend::may_throttle`](crate::backend::Backend::may_throttle).
    pub(crate) fn may_throttle(&self) -> bool {
        self.inner.may_throttle()
    }
}

/// The PartitionKey of tablekit's own entity JSON (its first property), if
/// it needs no unescaping.
fn json_partition_str(body: &[u8]) -> Option<&str> {
    let rest = body.strip_prefix(b"{\"PartitionKey\":\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] != b'"' {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()
}
