//! The callback the retrying patterns run between the reads a conditional
//! write depends on and that write.

use std::fmt;
use std::sync::Arc;

/// A callback run with the attempt number (1 for the first) after the reads
/// of a read–modify–write and before its conditional write. A write another
/// client makes from inside it is the race the pattern must detect and retry,
/// at a precise step; counting its calls counts the attempts.
#[derive(Clone, Default)]
pub(crate) struct BeforeWrite(Option<Arc<dyn Fn(usize) + Send + Sync>>);

impl BeforeWrite {
    pub(crate) fn new(hook: impl Fn(usize) + Send + Sync + 'static) -> Self {
        BeforeWrite(Some(Arc::new(hook)))
    }

    /// `plan`, with this hook run before each of its transactions.
    pub(crate) fn attach<'a>(&self, plan: tablekit::table::Plan<'a>) -> tablekit::table::Plan<'a> {
        match &self.0 {
            Some(hook) => plan.before_send(hook.clone()),
            None => plan,
        }
    }

    pub(crate) fn call(&self, attempt: usize) {
        if let Some(hook) = &self.0 {
            hook(attempt);
        }
    }
}

impl fmt::Debug for BeforeWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}
