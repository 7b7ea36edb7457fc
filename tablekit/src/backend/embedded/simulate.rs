//! The service's limits, simulated: an embedded store that answers like
//! Azure Table Storage under load, as a [`Simulation`] describes.
//!
//! [`Simulated`] wraps an [`EmbeddedBackend`]: before the store carries out
//! an operation, the operation waits its sampled latency and is charged to
//! two token buckets, its partition's and the account's, each holding one
//! second of its target. An operation the buckets cannot pay for is refused
//! with the answer the service gives a client over its targets, 503
//! `ServerBusy`, built by the same code that reads that answer off the wire,
//! and retried by the simulation's [`RetryPolicy`] as the HTTP pipeline
//! retries it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use http::StatusCode;

use super::EmbeddedBackend;
use crate::backend::http::wire::service_error;
use crate::backend::{Backend, EntityBody, Operation, Response};
use crate::error::{Error, Result};
use crate::filter::QueryPlan;
use crate::options::full_jitter;
#[cfg(test)]
use crate::simulation::Latency;
use crate::simulation::{OperationClass, Simulation};

/// One target's allowance: up to one second of the target, refilled at the
/// target's rate; negative after a query read more than it had.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: DateTime<Utc>,
}

impl Bucket {
    fn full(target: u32, now: DateTime<Utc>) -> Self {
        Bucket {
            tokens: f64::from(target),
            at: now,
        }
    }

    fn refill(&mut self, target: u32, now: DateTime<Utc>) {
        let secs = (now - self.at).num_nanoseconds().unwrap_or(i64::MAX) as f64 / 1e9;
        if secs > 0.0 {
            self.tokens = (self.tokens + secs * f64::from(target)).min(f64::from(target));
            self.at = now;
        }
    }

    /// Whether `n` entities may pass now: a charge larger than the whole
    /// bucket passes when the bucket is full.
    fn allows(&self, target: u32, n: f64) -> bool {
        self.tokens >= n.min(f64::from(target))
    }
}

#[derive(Debug, Default)]
struct Buckets {
    account: Option<Bucket>,
    /// By (lower-cased table name, PartitionKey).
    partitions: HashMap<(String, String), Bucket>,
}

/// What an operation is charged to.
struct Charge<'a> {
    table: Option<&'a str>,
    partition: Option<Cow<'a, str>>,
    entities: u32,
    class: OperationClass,
}

/// An embedded store behind the simulated limits of a [`Simulation`].
pub(crate) struct Simulated {
    inner: EmbeddedBackend,
    sim: Simulation,
    buckets: Mutex<Buckets>,
    rng: Mutex<fastrand::Rng>,
}

impl fmt::Debug for Simulated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Simulated")
            .field("inner", &self.inner)
            .field("partition_target", &self.sim.partition_target)
            .field("account_target", &self.sim.account_target)
            .finish()
    }
}

/// The partition of a JSON entity body, read without parsing the rest
/// (tablekit's encoder writes the keys first; anything else is parsed whole).
fn json_partition(body: &[u8]) -> Option<Cow<'_, str>> {
    #[derive(serde::Deserialize)]
    struct Keys<'a> {
        #[serde(rename = "PartitionKey", borrow)]
        partition_key: Cow<'a, str>,
    }
    const PREFIX: &[u8] = b"{\"PartitionKey\":";
    if let Some(rest) = body.strip_prefix(PREFIX) {
        let mut de = serde_json::Deserializer::from_slice(rest);
        if let Ok(pk) = <Cow<'_, str> as serde::Deserialize>::deserialize(&mut de) {
            return Some(pk);
        }
    }
    serde_json::from_slice::<Keys<'_>>(body)
        .ok()
        .map(|k| k.partition_key)
}

fn charge_of<'a>(op: &'a Operation<'_>) -> Charge<'a> {
    let (partition, entities, class) = match op {
        Operation::CreateTable { .. } | Operation::DeleteTable { .. } => {
            (None, 1, OperationClass::Write)
        }
        Operation::ListTables { .. } => (None, 1, OperationClass::QueryPage),
        Operation::Insert { body, .. } => {
            let pk = match body {
                EntityBody::Bag(e) => Some(Cow::Borrowed(e.partition_key.as_str())),
                EntityBody::Json(json) => json_partition(json),
            };
            (pk, 1, OperationClass::Write)
        }
        Operation::Write { key, .. } | Operation::Delete { key, .. } => (
            Some(Cow::Borrowed(key.partition_key.as_str())),
            1,
            OperationClass::Write,
        ),
        Operation::Get { key, .. } => (
            Some(Cow::Borrowed(key.partition_key.as_str())),
            1,
            OperationClass::PointRead,
        ),
        Operation::Query { filter, .. } => {
            let plan = filter
                .and_then(|f| crate::filter::parse(f).ok())
                .map(|e| crate::filter::plan(Some(&e)));
            let pk = match plan {
                Some(
                    QueryPlan::Point { partition_key, .. }
                    | QueryPlan::PartitionRange { partition_key }
                    | QueryPlan::PartitionScan { partition_key },
                ) => Some(Cow::Owned(partition_key)),
                _ => None,
            };
            (pk, 1, OperationClass::QueryPage)
        }
        Operation::Transaction { ops, .. } => (
            ops.first()
                .map(|o| Cow::Borrowed(o.key.partition_key.as_str())),
            u32::try_from(ops.len()).unwrap_or(u32::MAX).max(1),
            OperationClass::Transaction,
        ),
    };
    Charge {
        table: op.table(),
        partition,
        entities,
        class,
    }
}

/// The service's answer to a client over a target: 503 `ServerBusy`, with
/// the body the service sends (the partition's message, or the account's).
fn server_busy(account: bool) -> Error {
    let message = if account {
        "Operations per second is over the account limit."
    } else {
        "The server is busy."
    };
    let body = serde_json::json!({
        "odata.error": {
            "code": "ServerBusy",
            "message": { "lang": "en-US", "value": message }
        }
    });
    service_error(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        None,
        body.to_string().as_bytes(),
    )
}

impl Simulated {
    pub(crate) fn new(inner: EmbeddedBackend, sim: Simulation) -> Self {
        Simulated {
            inner,
            sim,
            buckets: Mutex::default(),
            rng: Mutex::new(fastrand::Rng::new()),
        }
    }

    fn draw(&self, class: OperationClass) -> Duration {
        let latency = self.sim.latencies[class as usize];
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        latency.sample(&mut rng)
    }

    /// Charges `n` entities to the account and the partition, or refuses
    /// with the 503 of the first target that cannot pay.
    fn admit(&self, table: Option<&str>, partition: Option<&str>, n: u32) -> Result<()> {
        let now = self.sim.now();
        let (pt, at) = (self.sim.partition_target, self.sim.account_target);
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let n = f64::from(n);
        let account = b.account.get_or_insert_with(|| Bucket::full(at, now));
        account.refill(at, now);
        if !account.allows(at, n) {
            return Err(server_busy(true));
        }
        if let (Some(table), Some(pk)) = (table, partition) {
            if b.partitions.len() > 100_000 {
                // Forget partitions whose bucket has refilled: nothing is lost.
                b.partitions.retain(|_, p| {
                    p.refill(pt, now);
                    p.tokens < f64::from(pt)
                });
            }
            let key = (table.to_ascii_lowercase(), pk.to_owned());
            let p = b
                .partitions
                .entry(key)
                .or_insert_with(|| Bucket::full(pt, now));
            p.refill(pt, now);
            if !p.allows(pt, n) {
                return Err(server_busy(false));
            }
            p.tokens -= n;
        }
        if let Some(a) = b.account.as_mut() {
            a.tokens -= n;
        }
        Ok(())
    }

    /// Charges what a query read beyond the one entity paid up front.
    fn charge_more(&self, table: Option<&str>, partition: Option<&str>, extra: usize) {
        if extra == 0 {
            return;
        }
        let extra = extra as f64;
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = b.account.as_mut() {
            a.tokens -= extra;
        }
        if let (Some(table), Some(pk)) = (table, partition) {
            let key = (table.to_ascii_lowercase(), pk.to_owned());
            if let Some(p) = b.partitions.get_mut(&key) {
                p.tokens -= extra;
            }
        }
    }

    async fn admitted(&self, charge: &Charge<'_>) -> Result<()> {
        let policy = &self.sim.retry;
        let mut retry = 0;
        loop {
            if self.sim.clock.is_none() {
                self.sim.wait(self.draw(charge.class)).await;
            }
            let e = match self.admit(charge.table, charge.partition.as_deref(), charge.entities) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if retry >= policy.max_retries {
                return Err(e);
            }
            let delay = match e.retry_after() {
                Some(asked) => asked.min(policy.max_delay),
                None => full_jitter(policy.base_delay, policy.max_delay, retry),
            };
            tracing::debug!(
                target: "tablekit::simulation",
                table = charge.table,
                partition = charge.partition.as_deref(),
                retry,
                delay_ms = delay.as_millis() as u64,
                "simulated ServerBusy; retrying"
            );
            self.sim.wait(delay).await;
            retry += 1;
        }
    }
}

#[async_trait::async_trait]
impl Backend for Simulated {
    async fn execute(&self, op: Operation<'_>) -> Result<Response> {
        let charge = charge_of(&op);
        let is_query = matches!(op, Operation::Query { .. });
        // The charge borrows the operation; keep what outlives it.
        let table = charge.table.map(str::to_owned);
        let partition = charge.partition.as_deref().map(str::to_owned);
        self.admitted(&charge)
            .await
            .map_err(|e| e.answered_by(self.inner.name()))?;
        drop(charge);
        let resp = self.inner.execute(op).await?;
        if is_query {
            // A page of the file store (records) costs what one of the
            // memory store (entities) does.
            if let Response::Page { payload, .. } = &resp {
                if let Some(n) = payload.stored_len() {
                    self.charge_more(table.as_deref(), partition.as_deref(), n.saturating_sub(1));
                }
            }
        }
        Ok(resp)
    }

    fn stores_property_bags(&self) -> bool {
        self.inner.stores_property_bags()
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        // ACLs and service settings are not throttled by the simulation.
        self.inner.admin(op).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_draws_have_the_median_and_p99_asked_for() {
        let l = Latency::new(Duration::from_millis(10), Duration::from_millis(50));
        let mut rng = fastrand::Rng::with_seed(7);
        let mut draws: Vec<Duration> = (0..20_000).map(|_| l.sample(&mut rng)).collect();
        draws.sort();
        let median = draws[10_000].as_secs_f64() * 1e3;
        let p99 = draws[19_800].as_secs_f64() * 1e3;
        assert!((9.5..10.5).contains(&median), "median {median} ms");
        assert!((45.0..55.0).contains(&p99), "p99 {p99} ms");
        assert_eq!(Latency::ZERO.sample(&mut rng), Duration::ZERO);
        let fixed = Latency::fixed(Duration::from_millis(3));
        assert_eq!(fixed.sample(&mut rng), Duration::from_millis(3));
    }

    #[test]
    fn a_bucket_holds_one_second_and_refills_at_the_target() {
        let t0 = Utc::now();
        let mut b = Bucket::full(100, t0);
        assert!(b.allows(100, 100.0));
        b.tokens -= 100.0;
        assert!(!b.allows(100, 1.0));
        b.refill(100, t0 + chrono::Duration::milliseconds(10));
        assert!(b.allows(100, 1.0));
        assert!(!b.allows(100, 2.0));
        b.refill(100, t0 + chrono::Duration::seconds(60));
        assert_eq!(b.tokens, 100.0, "never more than one second's worth");
        assert!(
            b.allows(100, 250.0),
            "a charge over the bucket passes when it is full"
        );
    }

    #[test]
    fn the_partition_of_a_json_body_is_read_from_its_keys() {
        assert_eq!(
            json_partition(br#"{"PartitionKey":"a\"b","RowKey":"r"}"#).as_deref(),
            Some("a\"b")
        );
        assert_eq!(
            json_partition(br#"{"RowKey":"r","PartitionKey":"p"}"#).as_deref(),
            Some("p")
        );
        assert_eq!(json_partition(b"{}"), None);
    }

    #[test]
    fn the_503_is_the_one_read_off_the_wire() {
        let e = server_busy(false);
        assert_eq!(e.status(), Some(503));
        assert_eq!(e.code(), Some(&crate::error::ErrorCode::ServerBusy));
        assert!(e.is_throttled() && e.is_retryable() && !e.is_ambiguous());
        assert!(e.to_string().contains("The server is busy."), "{e}");
    }
}
