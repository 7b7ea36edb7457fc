//! The one shape of the patterns' test hooks: `step_hook(|step| async move
//! { ...; Ok(()) })`, an async function of the pattern's step (the attempt
//! number of a read–modify–write, a [`large::Step`](crate::large::Step), an
//! [`eventual::Event`](crate::eventual::Event)) that the operation awaits at
//! that step. A test lets another writer in there (awaiting its write), or
//! stops the operation there as a crash would (an error, or a hook that
//! never returns in an aborted task). Every `step_hook` is
//! `#[doc(hidden)]`: for tests, not part of the stable API.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type HookFn<E> =
    dyn Fn(E) -> Pin<Box<dyn Future<Output = tablekit::Result<()>> + Send>> + Send + Sync;

/// A step hook, or none.
pub(crate) struct StepHook<E>(Option<Arc<HookFn<E>>>);

impl<E> Clone for StepHook<E> {
    fn clone(&self) -> Self {
        StepHook(self.0.clone())
    }
}

impl<E> Default for StepHook<E> {
    fn default() -> Self {
        StepHook(None)
    }
}

impl<E: 'static> StepHook<E> {
    pub(crate) fn new<F, Fut>(hook: F) -> Self
    where
        F: Fn(E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = tablekit::Result<()>> + Send + 'static,
    {
        StepHook(Some(Arc::new(move |e| Box::pin(hook(e)))))
    }

    /// Runs the hook at `step`, if there is one.
    pub(crate) async fn call(&self, step: E) -> tablekit::Result<()> {
        match &self.0 {
            Some(hook) => hook(step).await,
            None => Ok(()),
        }
    }
}

impl StepHook<usize> {
    /// `plan`, with this hook run before each of its transactions.
    pub(crate) fn attach<'a>(&self, plan: tablekit::table::Plan<'a>) -> tablekit::table::Plan<'a> {
        match &self.0 {
            Some(hook) => {
                let hook = hook.clone();
                plan.before_send(move |attempt| hook(attempt))
            }
            None => plan,
        }
    }
}

impl<E> fmt::Debug for StepHook<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// The hook of the read–modify–write patterns: run with the attempt number
/// (1 first) after the reads a conditional write depends on and before that
/// write.
pub(crate) type BeforeWrite = StepHook<usize>;
