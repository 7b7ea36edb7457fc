//! Read–modify–write of one entity: [`TableClient::modify`](super::TableClient::modify)
//! and [`try_modify`](super::TableClient::try_modify), their [`Modify`] builder and
//! what a step decides ([`ModifyStep`], [`Modified`]).

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::time::Duration;

use crate::entity::{EntityKey, IfMatch, TableEntity, UpdateMode};
use crate::error::Result;
use crate::options::full_jitter;

use super::TableClient;

/// What a [`TableClient::modify`] closure returns (`()`: always write) or a
/// [`TableClient::try_modify`] closure returns ([`ControlFlow`]: `Break` stops
/// without writing). Sealed.
pub trait ModifyStep<T>: Send + sealed::Sealed {
    /// What the `modify` call resolves to.
    type Output;
    #[doc(hidden)]
    fn decide(self) -> ControlFlow<Self::Output>;
    #[doc(hidden)]
    fn written(entity: T) -> Self::Output;
    #[doc(hidden)]
    fn missing() -> Self::Output;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for () {}
    impl<B> Sealed for std::ops::ControlFlow<B> {}
}

impl<T> ModifyStep<T> for () {
    type Output = Option<T>;
    fn decide(self) -> ControlFlow<Option<T>> {
        ControlFlow::Continue(())
    }
    fn written(entity: T) -> Option<T> {
        Some(entity)
    }
    fn missing() -> Option<T> {
        None
    }
}

impl<T, B: Send> ModifyStep<T> for ControlFlow<B> {
    type Output = Modified<T, B>;
    fn decide(self) -> ControlFlow<Modified<T, B>> {
        match self {
            ControlFlow::Continue(()) => ControlFlow::Continue(()),
            ControlFlow::Break(b) => ControlFlow::Break(Modified::Aborted(b)),
        }
    }
    fn written(entity: T) -> Modified<T, B> {
        Modified::Written(entity)
    }
    fn missing() -> Modified<T, B> {
        Modified::Missing
    }
}

/// The outcome of a [`TableClient::try_modify`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Modified<T, B> {
    /// The change was written; this is the entity as written, with its new ETag.
    Written(T),
    /// The closure returned `Break(value)`: nothing was written.
    Aborted(B),
    /// There is no entity with that key; the closure was not called.
    Missing,
}

impl<T, B> Modified<T, B> {
    /// The written entity, if the change was written.
    pub fn written(self) -> Option<T> {
        match self {
            Modified::Written(e) => Some(e),
            _ => None,
        }
    }

    /// The closure's `Break` value, if it stopped.
    pub fn aborted(self) -> Option<B> {
        match self {
            Modified::Aborted(b) => Some(b),
            _ => None,
        }
    }
}

/// A read-modify-write in progress; see [`TableClient::modify`] and
/// [`TableClient::try_modify`]. Await it, or set
/// [`max_attempts`](Self::max_attempts) first.
#[must_use = "modify does nothing until awaited"]
pub struct Modify<'a, T, F> {
    pub(super) table: &'a TableClient<T>,
    pub(super) key: EntityKey,
    pub(super) mode: UpdateMode,
    pub(super) change: F,
    max_attempts: u32,
}

impl<T, F> fmt::Debug for Modify<'_, T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Modify")
            .field("table", &self.table.handle.name)
            .field("key", &self.key)
            .field("mode", &self.mode)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl<'a, T, F> Modify<'a, T, F> {
    pub(super) fn new(
        table: &'a TableClient<T>,
        key: EntityKey,
        mode: UpdateMode,
        change: F,
    ) -> Self {
        Modify {
            table,
            key,
            mode,
            change,
            max_attempts: 16,
        }
    }
}

impl<'a, T, F, R> Modify<'a, T, F>
where
    T: TableEntity,
    F: FnMut(&mut T) -> R + Send + 'a,
    R: ModifyStep<T>,
{
    const BACKOFF_BASE: Duration = Duration::from_millis(10);
    const BACKOFF_MAX: Duration = Duration::from_secs(1);

    /// How many read-change-write rounds to try before giving up with the
    /// last 412 (default 16; values below 1 count as 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Runs the read-modify-write.
    pub async fn send(mut self) -> Result<R::Output> {
        self.key.validate()?;
        let mut attempt = 0;
        loop {
            let Some((mut entity, etag)) = self.table.handle.get_with_etag(&self.key, None).await?
            else {
                return Ok(R::missing());
            };
            if let ControlFlow::Break(stop) = (self.change)(&mut entity).decide() {
                return Ok(stop);
            }
            let if_match = etag.map_or(IfMatch::Any, IfMatch::ETag);
            match self.table.update(&mut entity, self.mode, if_match).await {
                Ok(_) => return Ok(R::written(entity)),
                Err(e) if e.is_precondition_failed() && attempt + 1 < self.max_attempts => {
                    tokio::time::sleep(full_jitter(Self::BACKOFF_BASE, Self::BACKOFF_MAX, attempt))
                        .await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl<'a, T, F, R> IntoFuture for Modify<'a, T, F>
where
    T: TableEntity,
    F: FnMut(&mut T) -> R + Send + 'a,
    R: ModifyStep<T> + 'a,
    R::Output: Send,
{
    type Output = Result<R::Output>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}
