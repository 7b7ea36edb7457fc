//! The worker: receives, runs, heartbeats, retries, and poisons what keeps failing.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use serde::de::DeserializeOwned;
use tablekit::{queue::QueueMessage, BlobServiceClient, QueueClient, Result, TableServiceClient};
use tracing::Instrument;

use super::context::{ContextInner, Event, Hook, StepContext};
use super::envelope::{read_message, Envelope, Unreadable};
use super::poison::{keep_body, INLINE_ENTRY_MAX, PREVIEW_MAX};
use super::{BoxFuture, OpResult, Operation, PoisonedMessage, POISON_BODY_TABLE};
use crate::error::refused;

// ---------------------------------------------------------------------------
// The worker.

type Handler = Box<dyn Fn(serde_json::Value, StepContext) -> BoxFuture<OpResult> + Send + Sync>;

/// `f` as a [`Handler`] of messages of kind `kind`, whose operation reads as
/// `M`.
fn erase<M, F, Fut>(kind: &str, f: F) -> Handler
where
    M: DeserializeOwned + Send + 'static,
    F: Fn(M, StepContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = OpResult> + Send + 'static,
{
    let f = Arc::new(f);
    let kind = kind.to_owned();
    Box::new(move |value, ctx| {
        let f = f.clone();
        let kind = kind.clone();
        Box::pin(async move {
            let op: M = serde_json::from_value(value)
                .map_err(|e| format!("the {kind} operation does not read: {e}"))?;
            f(op, ctx).await
        })
    })
}

/// What a worker did: counts of messages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Run to completion and deleted.
    pub succeeded: u64,
    /// Failed and left on the queue for another attempt.
    pub failed: u64,
    /// Moved to the poison queue.
    pub poisoned: u64,
    /// Not run because this worker does not know their kind or format
    /// version (a newer client's), and left on the queue, hidden for the
    /// [unknown delay](WorkerBuilder::unknown_delay), for a worker that does.
    pub deferred: u64,
}

impl Report {
    /// How many messages it handled in all.
    pub fn total(&self) -> u64 {
        self.succeeded + self.failed + self.poisoned + self.deferred
    }

    fn add(&mut self, other: Report) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.poisoned += other.poisoned;
        self.deferred += other.deferred;
    }
}

/// Options and operations of a [`Worker`]; see [`Worker::builder`].
#[must_use = "a worker is made by build()"]
pub struct WorkerBuilder {
    queue: QueueClient,
    poison: Option<QueueClient>,
    body_table: String,
    tables: TableServiceClient,
    blobs: Option<BlobServiceClient>,
    handlers: HashMap<String, Handler>,
    give_ups: HashMap<String, Handler>,
    duplicate_kind: Option<String>,
    options: Options,
    hook: Option<Hook>,
}

#[derive(Debug, Clone)]
struct Options {
    concurrency: usize,
    visibility_timeout: Duration,
    heartbeat: Option<Duration>,
    retry_delay: Option<Duration>,
    unknown_delay: Option<Duration>,
    poison_unknown_at_once: bool,
    max_dequeue_count: u32,
    poll_min: Duration,
    poll_max: Duration,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&String> = self.handlers.keys().collect();
        kinds.sort();
        let mut give_ups: Vec<&String> = self.give_ups.keys().collect();
        give_ups.sort();
        f.debug_struct("WorkerBuilder")
            .field("queue", &self.queue.name())
            .field("poison", &self.poison.as_ref().map(QueueClient::name))
            .field("body_table", &self.body_table)
            .field("kinds", &kinds)
            .field("give_ups", &give_ups)
            .field("options", &self.options)
            .finish()
    }
}

impl WorkerBuilder {
    /// Runs up to `n` messages at once (default 1; 1 to 1,024). They run
    /// concurrently on the worker's task, not in parallel threads: the steps
    /// wait on requests.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.options.concurrency = n;
        self
    }

    /// Hides a received message for this long (default 30 s; 1 s to 7 days),
    /// renewed by the heartbeat while it runs. See "Sizing the visibility
    /// timeout" in the [module docs](super).
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.options.visibility_timeout = timeout;
        self
    }

    /// Extends a running message's visibility this often (default a third of
    /// the visibility timeout; must be shorter than it).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.options.heartbeat = Some(every);
        self
    }

    /// How long a failed message stays hidden before its next attempt
    /// (default: the visibility timeout, as after a crash).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.options.retry_delay = Some(delay);
        self
    }

    /// How long a message this worker cannot run because it does not know
    /// its kind or its format version (a newer client's, during a rolling
    /// deployment) is hidden before a worker may receive it again (default:
    /// the [retry delay](Self::retry_delay), at least 1 s; 1 s to 7 days). Each time, the
    /// worker logs a `tracing::warn!` and leaves the message as it is; once
    /// it has been received [`max_dequeue_count`](Self::max_dequeue_count)
    /// times it goes to the poison queue. So `unknown_delay` times the
    /// dequeue limit is how long old and new workers may run side by side
    /// before an old one poisons what only the new ones can run.
    pub fn unknown_delay(mut self, delay: Duration) -> Self {
        self.options.unknown_delay = Some(delay);
        self
    }

    /// Moves a message whose kind or format version this worker does not
    /// know to the poison queue on its first receive, instead of leaving it
    /// for another worker (see [`unknown_delay`](Self::unknown_delay)): for
    /// a queue that only ever has one version of workers. A message that is
    /// not an envelope at all (not JSON, no version) goes there at once
    /// either way.
    pub fn poison_unknown_at_once(mut self) -> Self {
        self.options.poison_unknown_at_once = true;
        self
    }

    /// A message received this many times that fails again (default 5), or
    /// received more often than this, goes to the poison queue.
    pub fn max_dequeue_count(mut self, n: u32) -> Self {
        self.options.max_dequeue_count = n;
        self
    }

    /// When the queue is empty, [`Worker::run`] polls again after `min`,
    /// doubling up to `max` while it stays empty (default 100 ms to 10 s).
    pub fn poll_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.options.poll_min = min;
        self.options.poll_max = max;
        self
    }

    /// The poison queue (required; for example the main queue's name with
    /// `-poison` appended). Create it before the worker runs.
    pub fn poison_queue(mut self, queue: QueueClient) -> Self {
        self.poison = Some(queue);
        self
    }

    /// The table that keeps the whole body of a poisoned message whose
    /// poison entry cannot carry it (default [`POISON_BODY_TABLE`]); the
    /// worker creates it the first time it needs it. See
    /// [`PoisonedMessage`].
    pub fn poison_body_table(mut self, table: impl Into<String>) -> Self {
        self.body_table = table.into();
        self
    }

    /// The Blob service the steps reach through [`StepContext::blobs`].
    pub fn blobs(mut self, blobs: BlobServiceClient) -> Self {
        self.blobs = Some(blobs);
        self
    }

    /// Runs messages of kind `O::KIND` as `O`.
    pub fn operation<O: Operation>(self) -> Self {
        self.handle(O::KIND, |op: O, ctx: StepContext| async move {
            op.run(&ctx).await
        })
    }

    /// Runs messages of kind `kind` with `handler`, given the message's
    /// operation read as `M`: the form for operations that need state the
    /// message does not carry (clients, key functions), such as
    /// [`inter_index`](crate::inter_index). An operation that does not read
    /// as `M` fails (and is retried, then poisoned).
    pub fn handle<M, F, Fut>(mut self, kind: &str, handler: F) -> Self
    where
        M: DeserializeOwned + Send + 'static,
        F: Fn(M, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = OpResult> + Send + 'static,
    {
        if self
            .handlers
            .insert(kind.to_owned(), erase(kind, handler))
            .is_some()
        {
            self.duplicate_kind.get_or_insert_with(|| kind.to_owned());
        }
        self
    }

    /// Runs `give_up` when a message of kind `kind` is poisoned because its
    /// last attempt stopped without finishing (the worker running it died,
    /// or was stopped): the message comes back once more than
    /// [`max_dequeue_count`](Self::max_dequeue_count) allows. Instead of
    /// running the operation again (it may be what stops the workers), the
    /// worker runs `give_up` with the message's operation, then poisons the
    /// message. A give-up releases what the operation holds on behalf of a
    /// later attempt, which will never come (the
    /// [`inter_index`](crate::inter_index) gives up its claims on unique
    /// values); it must be idempotent, as every step is. It runs once: if
    /// it stops too, the next receive poisons the message without it. Its
    /// error, if any, is added to the poisoned message's error text. An
    /// attempt that fails (rather than stops) on its last receive has its
    /// own error path, and no give-up runs. A give-up for a kind with no
    /// handler is refused by [`build`](Self::build).
    pub fn on_give_up<M, F, Fut>(mut self, kind: &str, give_up: F) -> Self
    where
        M: DeserializeOwned + Send + 'static,
        F: Fn(M, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = OpResult> + Send + 'static,
    {
        self.give_ups.insert(kind.to_owned(), erase(kind, give_up));
        self
    }

    /// Calls `hook` at every step boundary (after each building block of
    /// [`StepContext`] and each [`StepContext::step`]), before every
    /// heartbeat, and between the requests that move a message to the
    /// poison queue ([`Event`]). An error it returns fails the step (or
    /// stops the move); a hook that never returns holds the worker there
    /// (until it is aborted): the crash tests stop workers at each boundary
    /// in turn this way.
    #[doc(hidden)]
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = OpResult> + Send + 'static,
    {
        self.hook = Some(Arc::new(move |e| Box::pin(hook(e))));
        self
    }

    /// Checks the options (before any request) and makes the worker.
    pub fn build(self) -> Result<Worker> {
        let o = &self.options;
        if let Some(kind) = &self.duplicate_kind {
            return Err(refused(
                "eventual",
                format!("two handlers for the kind {kind:?}"),
            ));
        }
        let mut orphans: Vec<&String> = self
            .give_ups
            .keys()
            .filter(|k| !self.handlers.contains_key(*k))
            .collect();
        if !orphans.is_empty() {
            orphans.sort();
            return Err(refused(
                "eventual",
                format!("a give-up for kinds this worker does not run: {orphans:?}"),
            ));
        }
        if self.handlers.is_empty() {
            return Err(refused(
                "eventual",
                "a worker needs at least one operation (WorkerBuilder::operation or handle)",
            ));
        }
        if !(1..=1024).contains(&o.concurrency) {
            return Err(refused(
                "eventual",
                format!("a concurrency of {} is outside 1..=1024", o.concurrency),
            ));
        }
        if o.visibility_timeout < Duration::from_secs(1)
            || o.visibility_timeout > tablekit::queue::MAX_VISIBILITY
        {
            return Err(refused(
                "eventual",
                format!(
                    "a visibility timeout of {:?} is outside the service's 1 s to 7 days",
                    o.visibility_timeout
                ),
            ));
        }
        let heartbeat = o.heartbeat.unwrap_or(o.visibility_timeout / 3);
        if heartbeat.is_zero() || heartbeat >= o.visibility_timeout {
            return Err(refused("eventual", format!(
                "a heartbeat every {heartbeat:?} does not renew a visibility timeout of {:?} in time",
                o.visibility_timeout
            )));
        }
        let retry_delay = o.retry_delay.unwrap_or(o.visibility_timeout);
        if retry_delay > tablekit::queue::MAX_VISIBILITY {
            return Err(refused(
                "eventual",
                format!("a retry delay of {retry_delay:?} is over the service's 7 days"),
            ));
        }
        let unknown_delay = o
            .unknown_delay
            .unwrap_or(retry_delay.max(Duration::from_secs(1)));
        if unknown_delay < Duration::from_secs(1) || unknown_delay > tablekit::queue::MAX_VISIBILITY
        {
            return Err(refused(
                "eventual",
                format!(
                    "an unknown-message delay of {unknown_delay:?} is outside 1 s to the service's 7 days"
                ),
            ));
        }
        if o.max_dequeue_count == 0 {
            return Err(refused(
                "eventual",
                "a max dequeue count of 0 would poison every message",
            ));
        }
        if o.poll_min.is_zero() || o.poll_min > o.poll_max {
            return Err(refused(
                "eventual",
                format!(
                    "a poll backoff from {:?} to {:?} is not a growing, non-zero range",
                    o.poll_min, o.poll_max
                ),
            ));
        }
        let Some(poison) = self.poison else {
            return Err(refused(
                "eventual",
                format!(
                "name a poison queue for {} (WorkerBuilder::poison_queue), for example {}-poison",
                self.queue.name(),
                self.queue.name()
            ),
            ));
        };
        if poison.name() == self.queue.name() {
            return Err(refused(
                "eventual",
                "the poison queue must not be the main queue",
            ));
        }
        tablekit::validate::table_name(&self.body_table)?;
        Ok(Worker {
            inner: Arc::new(WorkerInner {
                queue: self.queue,
                poison,
                body_table: self.body_table,
                tables: self.tables,
                blobs: self.blobs,
                handlers: self.handlers,
                give_ups: self.give_ups,
                hook: self.hook,
                heartbeat,
                retry_delay,
                unknown_delay,
                options: self.options,
            }),
        })
    }
}

/// Runs the operations of one queue: receives each message hidden for the
/// visibility timeout, runs it with a heartbeat, deletes it after success,
/// records the error and leaves it for a later attempt after a failure, and
/// moves it to the poison queue when it keeps failing. Cheap to clone.
///
/// Three ways to run it:
///
/// * [`run_once`](Worker::run_once): one receive of up to `concurrency`
///   messages, each run to its end; for tests and cron-style jobs.
/// * [`drain`](Worker::drain): `run_once` until a receive finds nothing.
/// * [`run`](Worker::run): the long-lived loop, until a shutdown signal.
///
/// Progress goes to `tracing`: one `eventual.message` span per message
/// (queue, message id, dequeue count, kind), with events at `debug` for each
/// step, `info` on success, `warn` on a failure and `error` on poisoning.
/// Inside it, the run of the operation itself is a `tablekit.request` span
/// named `Worker.run_operation` for OpenTelemetry (kind internal), with
/// `error.type` and `otel.status_code = "ERROR"` when it failed (a tablekit
/// error's type, or `operation` for any other error); the operation's own
/// spans and table calls are its children.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<WorkerInner>,
}

struct WorkerInner {
    queue: QueueClient,
    poison: QueueClient,
    body_table: String,
    tables: TableServiceClient,
    blobs: Option<BlobServiceClient>,
    handlers: HashMap<String, Handler>,
    give_ups: HashMap<String, Handler>,
    hook: Option<Hook>,
    heartbeat: Duration,
    retry_delay: Duration,
    unknown_delay: Duration,
    options: Options,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&String> = self.inner.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("Worker")
            .field("queue", &self.inner.queue.name())
            .field("poison", &self.inner.poison.name())
            .field("body_table", &self.inner.body_table)
            .field("kinds", &kinds)
            .field("options", &self.inner.options)
            .field("heartbeat", &self.inner.heartbeat)
            .field("retry_delay", &self.inner.retry_delay)
            .field("unknown_delay", &self.inner.unknown_delay)
            .finish()
    }
}

const ERROR_TEXT_MAX: usize = 2 * 1024;

pub(super) fn cut(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

enum Outcome {
    Succeeded,
    Failed,
    Poisoned,
    Deferred,
}

impl Worker {
    /// A worker for the operations on `queue`, whose steps use `tables`.
    /// Register at least one operation, then [`build`](WorkerBuilder::build).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tablekit::{DynamicEntity, QueueServiceClient, TableServiceClient};
    /// use tablekit_patterns::eventual::{Archive, Worker};
    ///
    /// let queues = QueueServiceClient::embedded();
    /// let queue = queues.queue("archive-jobs").unwrap();
    /// let worker = Worker::builder(queue.clone(), TableServiceClient::embedded())
    ///     .operation::<Archive<DynamicEntity>>()
    ///     .poison_queue(queues.queue("archive-jobs-poison").unwrap())
    ///     .concurrency(8)
    ///     .visibility_timeout(Duration::from_secs(60))
    ///     .max_dequeue_count(3)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(worker.poison_queue().name(), "archive-jobs-poison");
    ///
    /// // Options the queue cannot honour are refused before any request.
    /// let err = Worker::builder(queue, TableServiceClient::embedded())
    ///     .operation::<Archive<DynamicEntity>>()
    ///     .poison_queue(queues.queue("archive-jobs-poison").unwrap())
    ///     .visibility_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.is_invalid_input());
    /// ```
    pub fn builder(queue: QueueClient, tables: TableServiceClient) -> WorkerBuilder {
        WorkerBuilder {
            queue,
            poison: None,
            body_table: POISON_BODY_TABLE.to_owned(),
            tables,
            blobs: None,
            handlers: HashMap::new(),
            give_ups: HashMap::new(),
            duplicate_kind: None,
            options: Options {
                concurrency: 1,
                visibility_timeout: Duration::from_secs(30),
                heartbeat: None,
                retry_delay: None,
                unknown_delay: None,
                poison_unknown_at_once: false,
                max_dequeue_count: 5,
                poll_min: Duration::from_millis(100),
                poll_max: Duration::from_secs(10),
            },
            hook: None,
        }
    }

    /// The queue it works on.
    pub fn queue(&self) -> &QueueClient {
        &self.inner.queue
    }

    /// The queue it moves poisoned messages to.
    pub fn poison_queue(&self) -> &QueueClient {
        &self.inner.poison
    }

    /// Receives up to `concurrency` messages once and runs each to its end
    /// (success, failure or poison). An error means the receive itself failed.
    pub async fn run_once(&self) -> Result<Report> {
        let n = self
            .inner
            .options
            .concurrency
            .min(tablekit::queue::MAX_MESSAGES_PER_REQUEST);
        let messages = self.receive(n).await?;
        let mut report = Report::default();
        let mut running: FuturesUnordered<_> = messages
            .into_iter()
            .map(|m| self.inner.clone().process(m))
            .collect();
        while let Some(outcome) = running.next().await {
            report.add(outcome);
        }
        Ok(report)
    }

    /// Runs [`run_once`](Worker::run_once) until a receive finds no visible
    /// message. Messages that failed are hidden for the retry delay, and
    /// those this worker cannot run for the unknown delay, so a drain ends
    /// even when some keep failing.
    pub async fn drain(&self) -> Result<Report> {
        let mut report = Report::default();
        loop {
            let once = self.run_once().await?;
            if once.total() == 0 {
                return Ok(report);
            }
            report.add(once);
        }
    }

    /// Runs until `shutdown` completes: keeps up to `concurrency` messages
    /// running, receiving more as slots free up, and polls with a growing
    /// backoff while the queue is empty. A failed receive is logged and
    /// retried after the backoff; it does not stop the worker.
    ///
    /// On shutdown it stops receiving and **finishes** the messages it holds
    /// (each is already running, with its heartbeat), then returns. To bound
    /// that, put a timeout around the whole call: dropping the future abandons
    /// the running messages, which come back after their visibility timeout,
    /// exactly as after a crash.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Report {
        use futures::FutureExt as _;
        let opts = &self.inner.options;
        let mut report = Report::default();
        let mut running = FuturesUnordered::new();
        let mut backoff = opts.poll_min;
        tokio::pin!(shutdown);
        let mut stopping = false;
        loop {
            // A busy queue never lets the waits below see the signal: look here too.
            if !stopping && shutdown.as_mut().now_or_never().is_some() {
                stopping = true;
            }
            if stopping {
                while let Some(outcome) = running.next().await {
                    report.add(outcome);
                }
                tracing::info!(queue = %self.inner.queue.name(), ?report, "worker stopped");
                return report;
            }
            if running.len() < opts.concurrency {
                let free = (opts.concurrency - running.len())
                    .min(tablekit::queue::MAX_MESSAGES_PER_REQUEST);
                // The running messages make progress while the receive waits;
                // the receive itself is never cancelled, so no message it
                // took is left hidden for nothing.
                let receive = self.receive(free);
                tokio::pin!(receive);
                let received = loop {
                    tokio::select! {
                        biased;
                        r = &mut receive => break r,
                        Some(outcome) = running.next(), if !running.is_empty() => report.add(outcome),
                    }
                };
                match received {
                    Ok(messages) if !messages.is_empty() => {
                        backoff = opts.poll_min;
                        for m in messages {
                            running.push(self.inner.clone().process(m));
                        }
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(queue = %self.inner.queue.name(), error = %e, "receive failed");
                    }
                }
                // Nothing received: wait for the backoff, a finished message or shutdown.
                let sleep = tokio::time::sleep(backoff);
                backoff = (backoff * 2).min(opts.poll_max);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        biased;
                        _ = &mut shutdown => { stopping = true; break; }
                        Some(outcome) = running.next(), if !running.is_empty() => report.add(outcome),
                        _ = &mut sleep => break,
                    }
                }
                continue;
            }
            // Every slot busy: wait for one to free up, or for shutdown.
            tokio::select! {
                biased;
                _ = &mut shutdown => stopping = true,
                Some(outcome) = running.next() => report.add(outcome),
            }
        }
    }

    async fn receive(&self, n: usize) -> Result<Vec<QueueMessage>> {
        self.inner
            .queue
            .receive()
            .max_messages(n)
            .visibility_timeout(self.inner.options.visibility_timeout)
            .await
    }
}

impl Report {
    fn of(outcome: Outcome) -> Report {
        let mut r = Report::default();
        match outcome {
            Outcome::Succeeded => r.succeeded = 1,
            Outcome::Failed => r.failed = 1,
            Outcome::Poisoned => r.poisoned = 1,
            Outcome::Deferred => r.deferred = 1,
        }
        r
    }
}

impl WorkerInner {
    async fn process(self: Arc<Self>, message: QueueMessage) -> Report {
        let span = tracing::info_span!(
            "eventual.message",
            queue = %self.queue.name(),
            message_id = %message.id(),
            dequeue_count = message.dequeue_count(),
            kind = tracing::field::Empty,
        );
        let outcome = self
            .process_in_span(message, span.clone())
            .instrument(span)
            .await;
        Report::of(outcome)
    }

    async fn process_in_span(&self, mut message: QueueMessage, span: tracing::Span) -> Outcome {
        let envelope = match read_message(&message) {
            Ok(env) => env,
            Err(Unreadable::Newer { why, kind }) => {
                if let Some(kind) = &kind {
                    span.record("kind", kind.as_str());
                }
                return self.defer_unknown(&mut message, &why).await;
            }
            Err(e) => return self.poison(&message, e.why()).await,
        };
        span.record("kind", envelope.kind.as_str());
        let count = message.dequeue_count();
        if count > self.options.max_dequeue_count {
            let mut why = format!(
                "received {count} times, over the limit of {}; last error: {}",
                self.options.max_dequeue_count,
                envelope.last_error.as_deref().unwrap_or(
                    "none recorded (the workers that received it stopped before finishing)"
                ),
            );
            // Once: a give-up that stopped too is not run again.
            let give_up = self.give_ups.get(&envelope.kind);
            if let Some(give_up) = give_up.filter(|_| count == self.options.max_dequeue_count + 1) {
                match give_up(envelope.op.clone(), self.context(&message, count)).await {
                    Ok(()) => why.push_str("; what it held was given up"),
                    Err(e) => why.push_str(&format!("; giving up what it held failed: {e}")),
                }
            }
            return self.poison(&message, &why).await;
        }
        let Some(handler) = self.handlers.get(&envelope.kind) else {
            let mut kinds: Vec<&String> = self.handlers.keys().collect();
            kinds.sort();
            let why = format!(
                "unknown operation kind {:?}: this worker runs {kinds:?}",
                envelope.kind
            );
            return self.defer_unknown(&mut message, &why).await;
        };
        let result = {
            let run = crate::trace::traced_op(
                "Worker",
                "run_operation",
                None,
                handler(envelope.op.clone(), self.context(&message, count)),
            );
            tokio::pin!(run);
            let mut beat = tokio::time::interval_at(
                tokio::time::Instant::now() + self.heartbeat,
                self.heartbeat,
            );
            beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    r = &mut run => break r,
                    _ = beat.tick() => self.heartbeat(&mut message).await,
                }
            }
        };
        match result {
            Ok(()) => {
                match self.queue.delete_message(&message).await {
                    Ok(()) => tracing::info!("operation done, message deleted"),
                    // Done, but another worker holds the message now (our
                    // visibility lapsed): it will find the work done.
                    Err(e) => {
                        tracing::warn!(error = %e, "operation done; the message could not be deleted and will run again")
                    }
                }
                Outcome::Succeeded
            }
            Err(e) => {
                let text = e.to_string();
                if count >= self.options.max_dequeue_count {
                    return self.poison(&message, &text).await;
                }
                tracing::warn!(error = %text, "operation failed; left for another attempt");
                let (short, _) = cut(&text, ERROR_TEXT_MAX);
                let env = Envelope {
                    last_error: Some(short.to_owned()),
                    ..envelope
                };
                let body = serde_json::to_vec(&env).unwrap_or_else(|_| message.body().to_vec());
                if let Err(e) = self
                    .queue
                    .update_message(&mut message, self.retry_delay, Some(&body))
                    .await
                {
                    tracing::warn!(error = %e, "could not record the error in the message");
                }
                Outcome::Failed
            }
        }
    }

    /// The context of an attempt of `message`, received `count` times.
    fn context(&self, message: &QueueMessage, count: u32) -> StepContext {
        StepContext {
            inner: Arc::new(ContextInner {
                tables: self.tables.clone(),
                blobs: self.blobs.clone(),
                message_id: message.id().to_owned(),
                dequeue_count: count,
                max_dequeue_count: self.options.max_dequeue_count,
                hook: self.hook.clone(),
                steps: AtomicUsize::new(0),
            }),
        }
    }

    /// A message this worker cannot run but a newer one may (an unknown
    /// kind or a newer format version): hidden for the unknown delay, its
    /// body untouched, until the dequeue limit; then, or at once if so
    /// configured, poisoned.
    async fn defer_unknown(&self, message: &mut QueueMessage, why: &str) -> Outcome {
        let count = message.dequeue_count();
        let limit = self.options.max_dequeue_count;
        if self.options.poison_unknown_at_once {
            return self.poison(message, why).await;
        }
        if count >= limit {
            let why = format!(
                "{why}; received {count} times (the limit is {limit}) and no worker that runs it took it"
            );
            return self.poison(message, &why).await;
        }
        tracing::warn!(
            reason = %why,
            retry_in = ?self.unknown_delay,
            "this worker cannot run the message (a newer client's?); left on the queue for a worker that can"
        );
        if let Err(e) = self
            .queue
            .update_message(message, self.unknown_delay, None)
            .await
        {
            tracing::warn!(error = %e, "could not hide the message for the unknown delay; it comes back after its visibility timeout");
        }
        Outcome::Deferred
    }

    async fn heartbeat(&self, message: &mut QueueMessage) {
        if let Some(hook) = &self.hook {
            let event = Event::Heartbeat {
                message_id: message.id().to_owned(),
            };
            if let Err(e) = hook(event).await {
                tracing::debug!(error = %e, "heartbeat skipped by the hook");
                return;
            }
        }
        match self
            .queue
            .update_message(message, self.options.visibility_timeout, None)
            .await
        {
            Ok(()) => {
                tracing::debug!(next_visible_on = ?message.next_visible_on(), "visibility extended")
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; the message may run twice"),
        }
    }

    /// Copies the message to the poison queue, then deletes it from the main
    /// queue: a crash in between leaves a duplicate, never a loss. A body the
    /// entry cannot carry whole (too large once escaped in it, or not UTF-8)
    /// is first written to the body table, which the entry names.
    async fn poison(&self, message: &QueueMessage, why: &str) -> Outcome {
        let body = message.body();
        let (error, _) = cut(why, ERROR_TEXT_MAX);
        let mut entry = PoisonedMessage {
            queue: self.queue.name().to_owned(),
            message_id: message.id().to_owned(),
            dequeue_count: message.dequeue_count(),
            error: error.to_owned(),
            body: String::from_utf8_lossy(body).into_owned(),
            body_truncated: false,
            body_table: None,
        };
        if std::str::from_utf8(body).is_err() || !fits(&entry) {
            if let Err(e) = keep_body(
                &self.tables,
                &self.body_table,
                &entry.queue,
                &entry.message_id,
                body,
            )
            .await
            {
                tracing::error!(error = %e, reason = %why, table = %self.body_table, "could not keep the whole body for the poison queue; the message stays");
                return Outcome::Failed;
            }
            let kept = Event::PoisonBodyKept {
                message_id: entry.message_id.clone(),
                table: self.body_table.clone(),
            };
            if !self.poisoning_hook(kept).await {
                return Outcome::Failed;
            }
            entry.body_table = Some(self.body_table.clone());
            let whole = std::mem::take(&mut entry.body);
            let mut max = PREVIEW_MAX;
            loop {
                let (preview, cut_short) = cut(&whole, max);
                entry.body = preview.to_owned();
                entry.body_truncated = cut_short;
                if max == 0 || fits(&entry) {
                    break;
                }
                max /= 2;
            }
        }
        let sent = self.poison.send_json(&entry).never_expire().await;
        if let Err(e) = sent {
            tracing::error!(error = %e, reason = %why, "could not move the message to the poison queue; it stays");
            return Outcome::Failed;
        }
        let sent = Event::PoisonEntrySent {
            message_id: entry.message_id.clone(),
        };
        if !self.poisoning_hook(sent).await {
            return Outcome::Failed;
        }
        if let Err(e) = self.queue.delete_message(message).await {
            tracing::warn!(error = %e, "poisoned, but the message could not be deleted from the main queue");
        }
        tracing::error!(reason = %why, poison_queue = %self.poison.name(), "message moved to the poison queue");
        Outcome::Poisoned
    }

    /// Runs the step hook at a boundary of the move to the poison queue;
    /// `false` if it stops the move there.
    async fn poisoning_hook(&self, event: Event) -> bool {
        let Some(hook) = &self.hook else {
            return true;
        };
        match hook(event).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "the step hook stopped the move to the poison queue; the message stays");
                false
            }
        }
    }
}

/// Whether `entry` fits one message of the poison queue, whichever way it
/// encodes messages.
fn fits(entry: &PoisonedMessage) -> bool {
    serde_json::to_vec(entry).is_ok_and(|json| json.len() <= INLINE_ENTRY_MAX)
}
