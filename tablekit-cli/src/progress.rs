//! The progress line of `copy`, `import` and `export`: a spinner on standard
//! error with the counts and the rate, drawn only when standard error is a
//! terminal (so scripts and tests see nothing of it).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tablekit::table::bulk::BulkProgress;

/// A progress line for one table.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A progress line labelled `label` (a verb and the table's name).
    pub(crate) fn new(label: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(5));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix}: {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(label.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    /// Shows a bulk write's counts.
    pub(crate) fn bulk(&self, p: &BulkProgress) {
        self.bar.set_message(format!(
            "{} written, {} refused, {} ambiguous, {} skipped, {:.0}/s{}",
            p.written,
            p.refused,
            p.ambiguous,
            p.skipped,
            p.rate(),
            if p.throttled > 0 {
                format!(", throttled {} times", p.throttled)
            } else {
                String::new()
            }
        ));
    }

    /// Shows a count of entities read.
    pub(crate) fn read(&self, n: u64, rate: f64) {
        self.bar.set_message(format!("{n} entities, {rate:.0}/s"));
    }

    /// Takes the line away.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// The one-line summary of a bulk write into `table`.
pub(crate) fn summary(verb: &str, table: &str, p: &BulkProgress) -> String {
    format!(
        "{verb} {table}: {} written, {} refused, {} ambiguous, {} skipped (done before), {} transactions, {} throttled, in {:.1}s ({:.0} entities/s)",
        p.written,
        p.refused,
        p.ambiguous,
        p.skipped,
        p.transactions,
        p.throttled,
        p.elapsed.as_secs_f64(),
        p.rate()
    )
}
