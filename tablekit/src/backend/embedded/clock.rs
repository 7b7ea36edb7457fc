//! Timestamps and ETags of writes: strictly increasing, so two writes of one
//! store never share an ETag, in the service's ETag form.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

use crate::edm::format_datetime;
use crate::entity::ETag;

/// Hands out write times in 100 ns ticks since the Unix epoch (the service's
/// resolution), each later than the one before, even within one tick of the clock.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    last: AtomicI64,
}

/// One write's version: its Timestamp, the Timestamp's text, and the ETag.
pub(crate) struct Version {
    pub(crate) timestamp: DateTime<Utc>,
    pub(crate) text: Box<str>,
    pub(crate) etag: ETag,
}

impl Clock {
    pub(crate) fn next(&self) -> Version {
        Version::at(self.next_ticks(1).start)
    }

    /// `n` (at least one) consecutive write times, each later than the one
    /// before, as `n` calls of [`next`](Self::next) in a row would give
    /// them, with one read of the system clock: the versions of a
    /// transaction's writes.
    pub(crate) fn next_ticks(&self, n: usize) -> std::ops::Range<i64> {
        let n = i64::try_from(n.max(1)).unwrap_or(i64::MAX);
        let now = Utc::now();
        let now_ticks =
            now.timestamp() * 10_000_000 + i64::from(now.timestamp_subsec_nanos() / 100);
        let mut prev = self.last.load(Ordering::Relaxed);
        loop {
            let first = now_ticks.max(prev + 1);
            let last = first.saturating_add(n - 1);
            match self
                .last
                .compare_exchange_weak(prev, last, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break first..last + 1,
                Err(actual) => prev = actual,
            }
        }
    }

    /// Makes every later version newer than `ticks`: a store loaded from a
    /// file never hands out an ETag it already stored, even if the system
    /// clock went back.
    #[cfg(feature = "durable")]
    pub(crate) fn advance_past(&self, ticks: i64) {
        self.last.fetch_max(ticks, Ordering::Relaxed);
    }
}

impl Version {
    /// The version of a write at `ticks` (100 ns since the Unix epoch).
    pub(crate) fn at(ticks: i64) -> Version {
        let timestamp = DateTime::from_timestamp(
            ticks.div_euclid(10_000_000),
            (ticks.rem_euclid(10_000_000) * 100) as u32,
        )
        .unwrap_or(DateTime::UNIX_EPOCH);
        let text = format_datetime(&timestamp);
        // The service's form: W/"datetime'2008-10-01T15%3A27%3A34.4838174Z'".
        let mut etag = String::with_capacity(text.len() + 18);
        etag.push_str("W/\"datetime'");
        for part in text.split(':') {
            if etag.len() > 12 {
                etag.push_str("%3A");
            }
            etag.push_str(part);
        }
        etag.push_str("'\"");
        let etag = ETag::new(etag);
        Version {
            timestamp,
            text: text.into_boxed_str(),
            etag,
        }
    }
}

/// A Timestamp in 100 ns ticks since the Unix epoch (versions have no finer digits).
#[cfg(feature = "durable")]
pub(crate) fn ticks_of(t: &DateTime<Utc>) -> i64 {
    t.timestamp() * 10_000_000 + i64::from(t.timestamp_subsec_nanos() / 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_strictly_increase_and_the_etag_carries_the_timestamp() {
        let clock = Clock::default();
        let mut prev = clock.next();
        for _ in 0..10_000 {
            let v = clock.next();
            assert!(v.timestamp > prev.timestamp);
            assert_ne!(v.etag, prev.etag);
            assert_eq!(v.etag.timestamp(), Some(v.timestamp));
            assert_eq!(Version::at(ticks_of(&v.timestamp)).etag, v.etag);
            prev = v;
        }
        let run = clock.next_ticks(3);
        assert_eq!(run.end - run.start, 3);
        assert!(run.start > ticks_of(&prev.timestamp));
        assert!(Version::at(run.start).etag != prev.etag);
        let after = clock.next();
        assert!(
            ticks_of(&after.timestamp) >= run.end,
            "a run's times are taken"
        );
        prev = after;
        clock.advance_past(ticks_of(&prev.timestamp) + 1_000_000_000);
        assert!(clock.next().timestamp > prev.timestamp + chrono::Duration::seconds(100));
    }
}
