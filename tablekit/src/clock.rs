//! Time as the embedded store sees it: the system clock, or a [`ManualClock`]
//! that tests move forward, so visibility timeouts and message lifetimes can be
//! tested without sleeping.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A clock that stands still until told to move: give it to an embedded store
/// ([`QueueServiceClient::embedded_with_clock`](crate::QueueServiceClient::embedded_with_clock))
/// and call [`advance`](ManualClock::advance) where a test would otherwise sleep.
/// Clones share one time.
///
/// ```
/// use std::time::Duration;
/// use tablekit::clock::ManualClock;
///
/// let clock = ManualClock::new("2014-07-31T18:00:00Z".parse().unwrap());
/// clock.advance(Duration::from_secs(90));
/// assert_eq!(clock.now().to_rfc3339(), "2014-07-31T18:01:30+00:00");
/// ```
#[derive(Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// A clock showing the current system time, from then on moved only by hand.
    pub fn starting_now() -> Self {
        Self::new(Utc::now())
    }

    /// The time it shows.
    pub fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
        let mut now = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *now = now
            .checked_add_signed(by)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}

/// Where the embedded store reads the time.
#[cfg(all(feature = "embedded", any(feature = "queue", feature = "blob")))]
#[derive(Debug, Clone, Default)]
pub(crate) enum Clock {
    #[default]
    System,
    Manual(ManualClock),
}

#[cfg(all(feature = "embedded", any(feature = "queue", feature = "blob")))]
impl Clock {
    pub(crate) fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::Manual(c) => c.now(),
        }
    }
}
