//! The progress line of `copy`, `import` and `export`: a spinner on standard
//! error with the counts and the rate, drawn only when standard error is a
//! terminal (so scripts and tests see nothing of it). When the input's size
//! is known (`import` from a file), the line also shows how much of it is
//! done and when the rest should be.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tablekit::table::bulk::BulkProgress;

/// How far through its input, in bytes, an import is: the input's end of
/// each entity handed to the bulk writer, until the writer settles it.
#[derive(Debug)]
pub(crate) struct InputShare {
    total: u64,
    state: Mutex<Handed>,
}

#[derive(Debug)]
struct Handed {
    /// The writer's input position of the first entry of `ends`.
    first: u64,
    /// Where each entity handed to the writer and not settled ends.
    ends: VecDeque<u64>,
    /// Where the last settled entity ends.
    done: u64,
}

impl InputShare {
    /// For an input of `total` bytes whose first entity handed to the writer
    /// has input position `first` (the checkpoint's position on a resume).
    pub(crate) fn new(total: u64, first: u64) -> Self {
        InputShare {
            total,
            state: Mutex::new(Handed {
                first,
                ends: VecDeque::new(),
                done: 0,
            }),
        }
    }

    /// The next entity handed to the writer ends at byte `end` of the input.
    pub(crate) fn handed(&self, end: u64) {
        self.state.lock().unwrap().ends.push_back(end);
    }

    /// The bytes before the end of the last entity of the settled prefix
    /// (every input position before `position` is settled).
    fn settled(&self, position: u64) -> u64 {
        let mut s = self.state.lock().unwrap();
        while s.first < position {
            let Some(end) = s.ends.pop_front() else { break };
            s.done = end;
            s.first += 1;
        }
        s.done
    }
}

/// A progress line for one table.
pub(crate) struct Progress<'a> {
    bar: ProgressBar,
    share: Option<&'a InputShare>,
}

impl<'a> Progress<'a> {
    /// A progress line labelled `label` (a verb and the table's name).
    pub(crate) fn new(label: &str) -> Progress<'a> {
        Progress::with_share(label, None)
    }

    /// A progress line that also shows the share of the input done, and the
    /// time left at the rate so far.
    pub(crate) fn with_share(label: &str, share: Option<&'a InputShare>) -> Progress<'a> {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(5));
        let template = match share {
            Some(s) => {
                bar.set_length(s.total);
                "{spinner} {prefix}: {bar:20} {msg} [{elapsed}]"
            }
            None => "{spinner} {prefix}: {msg} [{elapsed}]",
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(label.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar, share }
    }

    /// Shows a bulk write's counts.
    pub(crate) fn bulk(&self, p: &BulkProgress) {
        let share = self.share.map(|s| {
            let done = s.settled(p.position);
            self.bar.set_position(done);
            format!("{}; ", of_total(done, s.total, p.elapsed))
        });
        self.bar.set_message(format!(
            "{}{} written, {} refused, {} ambiguous, {} skipped, {:.0}/s{}",
            share.unwrap_or_default(),
            p.written,
            p.refused,
            p.ambiguous,
            p.skipped,
            p.rate(),
            if p.throttled > 0 {
                format!(", throttled {}", count(p.throttled, "time", "times"))
            } else {
                String::new()
            }
        ));
    }

    /// Shows a count of entities read.
    pub(crate) fn read(&self, n: u64, rate: f64) {
        self.bar
            .set_message(format!("{}, {rate:.0}/s", count(n, "entity", "entities")));
    }

    /// Takes the line away.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `done` of `total` bytes after `elapsed`: the share, the size and the time
/// left at the rate so far (`37% of 12.00 MiB, ETA 1m 05s`).
pub(crate) fn of_total(done: u64, total: u64, elapsed: Duration) -> String {
    let percent = (done.min(total) * 100).checked_div(total).unwrap_or(100);
    let eta = if done == 0 {
        "ETA unknown".to_owned()
    } else {
        let left = elapsed.as_secs_f64() * (total.saturating_sub(done)) as f64 / done as f64;
        let left = left.round() as u64;
        match (left / 3600, left / 60 % 60, left % 60) {
            (0, 0, s) => format!("ETA {s}s"),
            (0, m, s) => format!("ETA {m}m {s:02}s"),
            (h, m, _) => format!("ETA {h}h {m:02}m"),
        }
    };
    format!("{percent}% of {}, {eta}", HumanBytes(total))
}

/// `n` and the noun that fits it: `1 entity`, `2 entities`.
pub(crate) fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The one-line summary of a bulk write into `table`.
pub(crate) fn summary(verb: &str, table: &str, p: &BulkProgress) -> String {
    format!(
        "{verb} {table}: {} written, {} refused, {} ambiguous, {} skipped (done before), {}, {} throttled, in {:.1}s ({:.0} entities/s)",
        p.written,
        p.refused,
        p.ambiguous,
        p.skipped,
        count(p.transactions, "transaction", "transactions"),
        p.throttled,
        p.elapsed.as_secs_f64(),
        p.rate()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_of_a_known_input_comes_with_the_time_left() {
        let s = Duration::from_secs;
        assert_eq!(of_total(250, 1000, s(10)), "25% of 1000 B, ETA 30s");
        assert_eq!(
            of_total(1 << 20, 13 << 20, s(10)),
            "7% of 13.00 MiB, ETA 2m 00s"
        );
        assert_eq!(of_total(1, 1000, s(10)), "0% of 1000 B, ETA 2h 46m");
        assert_eq!(of_total(0, 1000, s(10)), "0% of 1000 B, ETA unknown");
        assert_eq!(of_total(1000, 1000, s(10)), "100% of 1000 B, ETA 0s");
    }

    #[test]
    fn the_share_counts_the_bytes_of_the_settled_prefix_only() {
        let share = InputShare::new(100, 0);
        for end in [10, 20, 30, 40] {
            share.handed(end);
        }
        assert_eq!(share.settled(0), 0);
        assert_eq!(share.settled(2), 20);
        assert_eq!(share.settled(2), 20);
        assert_eq!(share.settled(4), 40);
        // A resume numbers the writer's input from the checkpoint's position.
        let resumed = InputShare::new(100, 7);
        resumed.handed(80);
        assert_eq!(resumed.settled(7), 0);
        assert_eq!(resumed.settled(8), 80);
    }

    #[test]
    fn counts_take_the_noun_that_fits() {
        assert_eq!(count(1, "entity", "entities"), "1 entity");
        assert_eq!(count(0, "entity", "entities"), "0 entities");
        assert_eq!(count(2, "entity", "entities"), "2 entities");
    }
}
