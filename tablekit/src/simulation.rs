//! The service's limits, simulated: what
//! [`TableServiceClient::embedded_simulated`](crate::TableServiceClient::embedded_simulated)
//! takes to make the embedded store behave like Azure Table Storage under
//! load ([`Simulation`]), and the latency distributions it draws from
//! ([`Latency`]).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::clock::ManualClock;
use crate::options::RetryPolicy;
use crate::table::stats::{ACCOUNT_TARGET, PARTITION_TARGET};

/// How long one kind of operation takes, as a distribution: log-normal with
/// the given median and 99th percentile (the long right tail real latencies
/// have). [`Latency::ZERO`] takes no time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    median: Duration,
    p99: Duration,
}

impl Latency {
    /// No latency at all.
    pub const ZERO: Latency = Latency {
        median: Duration::ZERO,
        p99: Duration::ZERO,
    };

    /// A log-normal distribution with this median and 99th percentile (a
    /// `p99` below `median` is taken as `median`: a fixed latency).
    pub fn new(median: Duration, p99: Duration) -> Self {
        Latency {
            median,
            p99: p99.max(median),
        }
    }

    /// Always exactly `latency`.
    pub fn fixed(latency: Duration) -> Self {
        Latency::new(latency, latency)
    }

    /// The median.
    pub fn median(&self) -> Duration {
        self.median
    }

    /// The 99th percentile.
    pub fn p99(&self) -> Duration {
        self.p99
    }

    /// One draw from the distribution.
    pub(crate) fn sample(&self, rng: &mut fastrand::Rng) -> Duration {
        if self.median.is_zero() || self.p99 == self.median {
            return self.median;
        }
        // ln X ~ N(ln median, sigma), with the 99th percentile at z = 2.3263.
        let sigma = (self.p99.as_secs_f64() / self.median.as_secs_f64()).ln() / 2.326_348;
        // Box–Muller: one standard normal draw from two uniform ones.
        let u1 = 1.0 - rng.f64();
        let u2 = rng.f64();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let secs = self.median.as_secs_f64() * (sigma * z).exp();
        // Capped at a minute: a tail draw never stalls a test run.
        Duration::from_secs_f64(secs.min(60.0))
    }
}

/// The kinds of operation a [`Simulation`] gives latencies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperationClass {
    /// A point read (`get`).
    PointRead,
    /// A single write: insert, update, upsert, delete, and the table
    /// operations.
    Write,
    /// An entity group transaction.
    Transaction,
    /// One page of a query, or of the table listing.
    QueryPage,
}

/// The embedded store behaving like the service under load, for testing a
/// partition design, a hot partition and a retry policy on a laptop; off
/// unless asked for
/// ([`TableServiceClient::embedded_simulated`](crate::TableServiceClient::embedded_simulated),
/// [`Storage::embedded_simulated`](crate::Storage::embedded_simulated)).
///
/// - **Throughput targets.** Each partition may take
///   [`partition_target`](Simulation::partition_target) entities per second
///   (2,000 by default, Azure's published figure) and the account
///   [`account_target`](Simulation::account_target) (20,000). An entity is
///   one written, deleted or read: a transaction of 40 operations costs 40,
///   a query page the entities it returns (at least one), a table operation
///   one (of the account only). Each target is a token bucket holding one
///   second of it, so a burst of up to one second's worth passes at once and
///   then the rate is the target. An operation over a target is refused
///   with what the service answers then, 503 `ServerBusy` with the
///   service's error body: the error the HTTP backend produces for that
///   answer, so [`Error::is_throttled`](crate::Error::is_throttled) and
///   [`Error::is_retryable`](crate::Error::is_retryable) hold.
///   A query charges its partition when its filter names one (a point,
///   partition range or partition scan) and otherwise only the account.
/// - **Retries.** A refused operation is retried by
///   [`retry`](Simulation::retry) (the default [`RetryPolicy`], as over
///   HTTP): full-jitter backoff, and only after the last retry does the
///   503 reach the caller. [`RetryPolicy::none`] lets every 503 through.
/// - **Latency.** Each operation first waits a draw from its class's
///   [`Latency`] distribution.
/// - **Time.** On the system clock the waits are real (`tokio` sleeps) and
///   the buckets follow tokio's clock, so under a paused tokio runtime
///   (`#[tokio::test(start_paused = true)]`) the simulation and a
///   [`BulkWriter`](crate::table::bulk::BulkWriter) share its virtual time
///   and a run of many simulated seconds takes none. On
///   a [`ManualClock`] ([`clock`](Simulation::clock)) nothing sleeps: the
///   buckets refill as the test advances the clock, a retry's backoff moves
///   the clock forward by its length (the simulation stands in for the
///   sleep, so a retry can succeed without the test's help), and latencies
///   are not applied (the test decides how much time passes between its
///   requests).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
/// use tablekit::clock::ManualClock;
/// use tablekit::options::RetryPolicy;
/// use tablekit::simulation::Simulation;
/// use tablekit::{DynamicEntity, TableServiceClient};
///
/// let clock = ManualClock::starting_now();
/// let service = TableServiceClient::embedded_simulated(
///     Simulation::new().partition_target(10).retry(RetryPolicy::none()).clock(clock.clone()),
/// );
/// let hot = service.table::<DynamicEntity>("Hot")?;
/// hot.create_table().await?;
/// for i in 0..10 {
///     hot.insert(&DynamicEntity::new("p", format!("{i}"))).await?;
/// }
/// let refused = hot.insert(&DynamicEntity::new("p", "10")).await.unwrap_err();
/// assert!(refused.is_throttled());
/// clock.advance(std::time::Duration::from_millis(100)); // one more entity's worth
/// hot.insert(&DynamicEntity::new("p", "10")).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Simulation {
    pub(crate) partition_target: u32,
    pub(crate) account_target: u32,
    pub(crate) latencies: [Latency; 4],
    pub(crate) retry: RetryPolicy,
    pub(crate) clock: Option<ManualClock>,
    /// Without a manual clock: the wall time and tokio's instant when it was
    /// made, so that its time is tokio's (monotonic; a test's paused time
    /// under `#[tokio::test(start_paused = true)]`).
    origin: (DateTime<Utc>, tokio::time::Instant),
}

impl Default for Simulation {
    fn default() -> Self {
        Simulation::new()
    }
}

impl Simulation {
    /// Azure's targets (2,000 entities/s per partition, 20,000 per account),
    /// the default [`RetryPolicy`], the system clock, and latencies of a
    /// client near its region (median / p99: point read 5 / 20 ms, write
    /// 8 / 30 ms, transaction 15 / 60 ms, query page 15 / 100 ms; an
    /// assumption for testing, not a measurement of the service).
    pub fn new() -> Self {
        let ms = Duration::from_millis;
        Simulation {
            partition_target: PARTITION_TARGET,
            account_target: ACCOUNT_TARGET,
            latencies: [
                Latency::new(ms(5), ms(20)),
                Latency::new(ms(8), ms(30)),
                Latency::new(ms(15), ms(60)),
                Latency::new(ms(15), ms(100)),
            ],
            retry: RetryPolicy::default(),
            clock: None,
            origin: (Utc::now(), tokio::time::Instant::now()),
        }
    }

    /// Entities per second one partition takes (at least 1).
    pub fn partition_target(mut self, entities_per_second: u32) -> Self {
        self.partition_target = entities_per_second.max(1);
        self
    }

    /// Entities per second the account takes, all partitions and tables
    /// together (at least 1).
    pub fn account_target(mut self, entities_per_second: u32) -> Self {
        self.account_target = entities_per_second.max(1);
        self
    }

    /// The latency distribution of one class of operation.
    pub fn latency(mut self, class: OperationClass, latency: Latency) -> Self {
        self.latencies[class as usize] = latency;
        self
    }

    /// The same latency for every class ([`Latency::ZERO`]: none).
    pub fn all_latencies(mut self, latency: Latency) -> Self {
        self.latencies = [latency; 4];
        self
    }

    /// How refused operations are retried before the 503 reaches the caller.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Runs on this clock instead of the system's: no real waits.
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The per-partition target, in entities per second.
    pub fn partition_target_value(&self) -> u32 {
        self.partition_target
    }

    /// The account target, in entities per second.
    pub fn account_target_value(&self) -> u32 {
        self.account_target
    }

    /// The manual clock it runs on, if any.
    pub fn manual_clock(&self) -> Option<&ManualClock> {
        self.clock.as_ref()
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        match &self.clock {
            Some(c) => c.now(),
            None => {
                let (wall, at) = self.origin;
                wall + tokio::time::Instant::now().saturating_duration_since(at)
            }
        }
    }

    pub(crate) async fn wait(&self, d: Duration) {
        if d.is_zero() {
            return;
        }
        match &self.clock {
            Some(c) => c.advance(d),
            None => tokio::time::sleep(d).await,
        }
    }
}
