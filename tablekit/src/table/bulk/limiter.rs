//! The bulk writer's client-side rate limits: one bucket per partition and
//! one for the account, each a rate in entities per second that throttling
//! answers halve (or cut) and successes raise again (additive increase,
//! multiplicative decrease).

use std::time::Duration;
// tokio's clock: real time, or a test's paused time (`start_paused`).
use tokio::time::Instant;

/// The lowest rate a bucket falls to, in entities per second.
const FLOOR: f64 = 1.0;

/// A rate limit in entities per second: a batch of `n` may start when the
/// bucket's theoretical arrival time has come, and moves it `n / rate` on.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    /// When the next batch may start.
    next: Instant,
    /// The rate now, at most `ceiling`.
    rate: f64,
    ceiling: f64,
    /// The rate that steps are fractions of, and that an unlimited bucket
    /// falls back to when throttled.
    scale: f64,
}

impl Bucket {
    /// A bucket at `ceiling` entities per second (`f64::INFINITY`: none);
    /// `target` is the rate an unlimited bucket falls back to when throttled.
    pub(crate) fn new(ceiling: f64, target: f64, now: Instant) -> Self {
        Bucket {
            next: now,
            rate: ceiling,
            ceiling,
            scale: if ceiling.is_finite() { ceiling } else { target },
        }
    }

    /// When a batch may start.
    pub(crate) fn ready_at(&self) -> Instant {
        self.next
    }

    /// Takes `n` entities' worth of the rate for a batch starting at `now`.
    pub(crate) fn take(&mut self, n: usize, now: Instant) {
        self.next = self.next.max(now) + per(n, self.rate);
    }

    /// A throttling answer: the rate is multiplied by `factor`, and nothing
    /// starts before `wait` from `now`.
    pub(crate) fn slow_down(&mut self, factor: f64, wait: Duration, now: Instant) {
        let from = if self.rate.is_finite() {
            self.rate
        } else {
            self.scale
        };
        self.rate = (from * factor).max(FLOOR);
        self.next = self.next.max(now + wait);
    }

    /// A success: the rate climbs back by `fraction` of the ceiling (or of
    /// the target, for an unlimited bucket) per second.
    pub(crate) fn speed_up(&mut self, fraction: f64) {
        self.rate = (self.rate + fraction * self.scale).min(self.ceiling);
    }

    /// The rate now.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// Whether nothing waits for the bucket at `now`: forgetting it loses
    /// only a rate lowered by throttling, which the next 503 teaches again.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        self.next <= now
    }
}

/// The time `n` entities take at `rate` per second.
pub(crate) fn per(n: usize, rate: f64) -> Duration {
    if rate.is_finite() && rate > 0.0 {
        Duration::from_secs_f64(n as f64 / rate)
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_spaces_batches_at_its_rate_and_recovers_after_slowing_down() {
        let t0 = Instant::now();
        let mut b = Bucket::new(2000.0, 2000.0, t0);
        assert_eq!(b.ready_at(), t0);
        b.take(100, t0);
        assert_eq!(b.ready_at(), t0 + Duration::from_millis(50));
        b.take(100, t0);
        assert_eq!(b.ready_at(), t0 + Duration::from_millis(100));
        b.slow_down(0.5, Duration::from_secs(1), t0);
        assert_eq!(b.rate(), 1000.0);
        assert_eq!(b.ready_at(), t0 + Duration::from_secs(1));
        b.take(100, t0 + Duration::from_secs(1));
        assert_eq!(b.ready_at(), t0 + Duration::from_millis(1100));
        for _ in 0..30 {
            b.speed_up(0.05);
        }
        assert_eq!(b.rate(), 2000.0, "never above the ceiling");
        assert!(!b.is_idle(t0));
        assert!(b.is_idle(t0 + Duration::from_secs(2)));
        for _ in 0..100 {
            b.slow_down(0.5, Duration::ZERO, t0);
        }
        assert_eq!(b.rate(), FLOOR);
    }

    #[test]
    fn an_unlimited_rate_never_waits() {
        let t0 = Instant::now();
        let mut b = Bucket::new(f64::INFINITY, 2000.0, t0);
        b.take(100, t0);
        assert_eq!(b.ready_at(), t0);
        // Throttled, it falls back to a finite rate, and climbs without end.
        b.slow_down(0.5, Duration::ZERO, t0);
        assert_eq!(b.rate(), 1000.0);
        b.speed_up(0.5);
        b.speed_up(0.5);
        assert_eq!(b.rate(), 3000.0);
    }
}
