//! The bulk writer's loop: reads the input into per-partition transactions,
//! sends them under the rate limits, and settles each entity's outcome.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
// tokio's clock: real time, or a test's paused time (`start_paused`).
use tokio::time::Instant;

use futures::stream::FuturesUnordered;
use futures::{FutureExt as _, Stream, StreamExt as _};

use super::checkpoint::{key_hash, Checkpoint, Seen};
use super::limiter::{per, Bucket};
use super::types::{
    BulkOp, BulkProgress, BulkResult, EntityOutcome, OutcomeFn, ProgressFn, Settings,
    ACCOUNT_TARGET, PARTITION_TARGET,
};
use crate::entity::{EntityKey, TableEntity};
use crate::error::{Error, ErrorCode, Result};
use crate::table::outcome;
use crate::table::{TableClient, Transaction, TransactionResult};
use crate::validate::MAX_BATCH_OPERATIONS;

/// One entity of a transaction being built or sent.
#[derive(Debug)]
struct Item {
    position: u64,
    key: EntityKey,
    hash: u64,
    /// Sent by an earlier run whose outcome is unknown.
    in_doubt: bool,
}

/// One transaction of one partition, with its entities.
struct Batch<T> {
    tx: Transaction<T>,
    items: Vec<Item>,
    /// Sends that met throttling or an unreachable service.
    attempts: u32,
    not_before: Option<Instant>,
}

impl<T> Batch<T> {
    fn first(&self) -> u64 {
        self.items.first().map_or(u64::MAX, |i| i.position)
    }

    /// The batch without the entities `keep` refuses, to send again.
    fn keeping(&self, keep: impl Fn(usize) -> bool + Copy, items: Vec<Item>) -> Batch<T> {
        Batch {
            tx: self.tx.copy_keeping(keep),
            items,
            attempts: self.attempts,
            not_before: None,
        }
    }
}

/// The state of one partition.
struct Part<T> {
    open: Option<Batch<T>>,
    queued: VecDeque<Batch<T>>,
    /// A transaction of the partition is in flight.
    busy: bool,
    bucket: Bucket,
    /// The key under which the partition is in `Engine::runnable`.
    runnable_at: Option<u64>,
}

/// How a sent transaction ended.
enum Answer {
    Applied(TransactionResult),
    Failed(Error),
    /// An entity in doubt was refused in a way its own earlier attempt may
    /// have caused, so nothing was applied: the entities in doubt were read
    /// back, and these (by index) are settled; the others are sent again.
    InDoubtSettled(Vec<(usize, BulkResult)>),
}

struct Done<T> {
    partition: String,
    batch: Batch<T>,
    answer: Answer,
}

type Sending<T> = Pin<Box<dyn Future<Output = Done<T>> + Send>>;

enum Wake<T, O> {
    Input(Option<O>),
    Done(Box<Done<T>>),
    Timer,
}

pub(crate) struct Engine<'a, T> {
    table: TableClient<T>,
    settings: Settings,
    checkpoint: Option<Checkpoint>,
    on_outcome: Option<OutcomeFn<'a>>,
    on_progress: Option<ProgressFn<'a>>,
    parts: HashMap<String, Part<T>>,
    /// Partitions with a queued transaction and none in flight, by the
    /// first position of that transaction (oldest first).
    runnable: BTreeMap<u64, String>,
    /// Partitions with an open transaction, by its first position.
    open: BTreeMap<u64, String>,
    /// Entities in open and queued transactions.
    buffered: usize,
    account: Bucket,
    /// The next input position.
    next: u64,
    /// Settled positions at or above the watermark, with their keys.
    window: BTreeMap<u64, EntityKey>,
    last_key: Option<EntityKey>,
    progress: BulkProgress,
    start: Instant,
    /// Transactions ended, for the periodic sweep of idle partitions.
    ended: u64,
    /// Something changed that may let a transaction start.
    dirty: bool,
}

/// Past this many partitions held, idle ones are swept every [`SWEEP_EVERY`]
/// transactions, so that an input of many partitions keeps memory flat.
const SWEEP_ABOVE: usize = 1024;
const SWEEP_EVERY: u64 = 256;

impl<'a, T: TableEntity + Send + 'static> Engine<'a, T> {
    pub(crate) fn new(
        table: TableClient<T>,
        settings: Settings,
        checkpoint: Option<Checkpoint>,
        on_outcome: Option<OutcomeFn<'a>>,
        on_progress: Option<ProgressFn<'a>>,
    ) -> Self {
        let start = Instant::now();
        let next = checkpoint.as_ref().map_or(0, Checkpoint::position);
        Engine {
            account: Bucket::new(settings.account_rate, ACCOUNT_TARGET, start),
            table,
            settings,
            checkpoint,
            on_outcome,
            on_progress,
            parts: HashMap::new(),
            runnable: BTreeMap::new(),
            open: BTreeMap::new(),
            buffered: 0,
            next,
            window: BTreeMap::new(),
            last_key: None,
            progress: BulkProgress {
                position: next,
                ..BulkProgress::default()
            },
            start,
            ended: 0,
            dirty: true,
        }
    }

    pub(crate) async fn run<S>(mut self, ops: S) -> Result<BulkProgress>
    where
        S: Stream<Item = BulkOp<T>> + Send,
    {
        let mut input = pin!(ops);
        let mut input_done = false;
        let mut sending: FuturesUnordered<Sending<T>> = FuturesUnordered::new();
        let mut fatal: Option<Error> = None;
        let mut deadline: Option<Instant> = None;
        let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
        loop {
            // Looked at again only when something changed: a transaction
            // queued or ended, a limit's time came, the input ended.
            if fatal.is_none() && self.dirty {
                self.dirty = false;
                if input_done {
                    self.seal_all();
                }
                match self.launch(&mut sending) {
                    Ok(wait) if wait != deadline => {
                        deadline = wait;
                        timer = wait.map(|at| Box::pin(tokio::time::sleep_until(at)));
                    }
                    Ok(_) => {}
                    Err(e) => fatal = Some(e),
                }
            }
            let nothing_left = fatal.is_some() || (input_done && self.buffered == 0);
            if nothing_left && sending.is_empty() {
                break;
            }
            let want_input = !input_done
                && fatal.is_none()
                && self.buffered < self.settings.buffer
                && !self.enough_ready();
            let wake = poll_fn(|cx| {
                if let Poll::Ready(Some(done)) = sending.poll_next_unpin(cx) {
                    return Poll::Ready(Wake::Done(Box::new(done)));
                }
                if want_input {
                    if let Poll::Ready(op) = input.as_mut().poll_next(cx) {
                        return Poll::Ready(Wake::Input(op));
                    }
                }
                if let Some(t) = timer.as_mut() {
                    if t.poll_unpin(cx).is_ready() {
                        return Poll::Ready(Wake::Timer);
                    }
                }
                Poll::Pending
            })
            .await;
            let step = match wake {
                Wake::Input(Some(op)) => self.add(op),
                Wake::Input(None) => {
                    input_done = true;
                    self.dirty = true;
                    Ok(())
                }
                Wake::Done(done) => {
                    self.dirty = true;
                    self.finish(*done)
                }
                Wake::Timer => {
                    (deadline, timer) = (None, None);
                    self.dirty = true;
                    Ok(())
                }
            };
            if let Err(e) = step {
                fatal.get_or_insert(e);
            }
        }
        // Whatever stopped the run, the checkpoint gets the last watermark.
        let flushed = self.record_settled(&[]);
        if let Some(e) = fatal {
            return Err(e);
        }
        flushed?;
        Ok(self.snapshot())
    }

    /// Whether reading further ahead can wait: without rate limits (a
    /// store that never throttles), once there are transactions ready for
    /// every slot of `in_flight`, reading on would only hold more entities
    /// in memory. Open transactions (those still growing) are not ready, so
    /// input interleaved over many partitions is still read up to `buffer`
    /// to grow them; sorted input stops at about `in_flight` transactions
    /// ahead. With rate limits a ready partition may wait for its limit
    /// while another further on could go, so the input is read up to
    /// `buffer` as before.
    fn enough_ready(&self) -> bool {
        let unlimited =
            self.settings.partition_rate.is_infinite() && self.settings.account_rate.is_infinite();
        unlimited && self.runnable.len() >= self.settings.in_flight
    }

    fn snapshot(&self) -> BulkProgress {
        BulkProgress {
            partitions: self.parts.len(),
            elapsed: self.start.elapsed(),
            account_rate: self.account.rate(),
            ..self.progress.clone()
        }
    }

    fn part(&mut self, partition: &str) -> &mut Part<T> {
        if !self.parts.contains_key(partition) {
            let bucket = Bucket::new(
                self.settings.partition_rate,
                PARTITION_TARGET,
                Instant::now(),
            );
            self.parts.insert(
                partition.to_owned(),
                Part {
                    open: None,
                    queued: VecDeque::new(),
                    busy: false,
                    bucket,
                    runnable_at: None,
                },
            );
        }
        self.parts.get_mut(partition).expect("inserted above")
    }

    /// Takes one operation from the input.
    fn add(&mut self, op: BulkOp<T>) -> Result<()> {
        let position = self.next;
        self.next += 1;
        self.progress.read += 1;
        let key = op.key();
        let hash = key_hash(&key);
        let seen = match &self.checkpoint {
            Some(cp) => cp.seen(position, hash)?,
            None => Seen::New,
        };
        if seen == Seen::Settled {
            self.progress.skipped += 1;
            self.window.insert(position, key);
            return Ok(());
        }
        let item = Item {
            position,
            key,
            hash,
            in_doubt: seen == Seen::InDoubt,
        };
        let partition = item.key.partition_key.clone();
        let full = self.part(&partition).open.as_ref().is_some_and(|b| {
            b.items.len() >= MAX_BATCH_OPERATIONS || b.tx.has_row_key(&item.key.row_key)
        });
        if full {
            self.seal(&partition);
        }
        let table = self.table.clone();
        let part = self.part(&partition);
        let mut batch = part.open.take().unwrap_or_else(|| Batch {
            tx: table.transaction(),
            items: Vec::new(),
            attempts: 0,
            not_before: None,
        });
        let pushed = push(&mut batch.tx, &op);
        let refused = match pushed {
            Ok(()) => None,
            // The transaction may be full by size: try the entity alone.
            Err(_) if !batch.items.is_empty() => {
                let mut fresh = table.transaction();
                match push(&mut fresh, &op) {
                    Ok(()) => {
                        self.part(&partition).open = Some(batch);
                        self.seal(&partition);
                        batch = Batch {
                            tx: fresh,
                            items: Vec::new(),
                            attempts: 0,
                            not_before: None,
                        };
                        None
                    }
                    Err(e) => Some(e),
                }
            }
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            if !batch.items.is_empty() {
                self.part(&partition).open = Some(batch);
            }
            let pair = [(item.position, item.hash)];
            self.settle(item, BulkResult::Refused(Arc::new(e)));
            return self.record_settled(&pair);
        }
        if batch.items.is_empty() {
            self.open.insert(item.position, partition.clone());
        }
        batch.items.push(item);
        self.buffered += 1;
        if self.buffered >= self.settings.buffer {
            self.dirty = true;
        }
        let full = batch.items.len() >= MAX_BATCH_OPERATIONS;
        self.part(&partition).open = Some(batch);
        // A full transaction goes at once: left open until its partition's
        // next entity, it would hold the watermark (and the settled
        // entities after it) back for as long as that takes.
        if full {
            self.seal(&partition);
        }
        // So does one the input left behind: a partition's last entities.
        let behind = self.next.saturating_sub(self.settings.buffer as u64);
        while let Some((&first, p)) = self.open.first_key_value() {
            if first >= behind {
                break;
            }
            let p = p.clone();
            self.seal(&p);
        }
        Ok(())
    }

    /// Moves the partition's open transaction to its queue.
    fn seal(&mut self, partition: &str) {
        let part = self.part(partition);
        let Some(batch) = part.open.take() else {
            return;
        };
        let first = batch.first();
        part.queued.push_back(batch);
        self.open.remove(&first);
        self.schedule(partition);
    }

    fn seal_all(&mut self) {
        while let Some((_, partition)) = self.open.pop_first() {
            // `seal` removes it again: put it back first.
            if let Some(first) = self.parts[&partition].open.as_ref().map(Batch::first) {
                self.open.insert(first, partition.clone());
            }
            self.seal(&partition);
        }
    }

    /// Puts the partition in `runnable` if it has a queued transaction and
    /// none in flight, under its head's first position.
    fn schedule(&mut self, partition: &str) {
        let Some(part) = self.parts.get_mut(partition) else {
            return;
        };
        if let Some(at) = part.runnable_at.take() {
            self.runnable.remove(&at);
        }
        if !part.busy {
            if let Some(head) = part.queued.front() {
                let at = head.first();
                part.runnable_at = Some(at);
                self.runnable.insert(at, partition.to_owned());
                self.dirty = true;
            }
        }
    }

    /// Sends what the limits allow; returns when to look again, if
    /// something waits for a limit.
    fn launch(&mut self, sending: &mut FuturesUnordered<Sending<T>>) -> Result<Option<Instant>> {
        let mut wait: Option<Instant> = None;
        let earliest = |at: Instant, wait: &mut Option<Instant>| {
            *wait = Some(wait.map_or(at, |w: Instant| w.min(at)));
        };
        loop {
            // Over the buffer: the oldest open transaction goes out as it is.
            if self.buffered >= self.settings.buffer
                && sending.len() < self.settings.in_flight
                && self.runnable.is_empty()
            {
                let oldest = self
                    .open
                    .values()
                    .find(|p| !self.parts[p.as_str()].busy)
                    .cloned();
                match oldest {
                    Some(p) => self.seal(&p),
                    None => break,
                }
            }
            let now = Instant::now();
            let mut launched = false;
            let candidates: Vec<u64> = self.runnable.keys().copied().collect();
            for at in candidates {
                if sending.len() >= self.settings.in_flight {
                    return Ok(wait);
                }
                if self.account.ready_at() > now {
                    earliest(self.account.ready_at(), &mut wait);
                    return Ok(wait);
                }
                let Some(partition) = self.runnable.get(&at) else {
                    continue;
                };
                let part = &self.parts[partition.as_str()];
                let head = part.queued.front().expect("runnable has a queued batch");
                let ready = part.bucket.ready_at().max(head.not_before.unwrap_or(now));
                if ready > now {
                    earliest(ready, &mut wait);
                    continue;
                }
                let partition = partition.clone();
                self.send(&partition, now, sending)?;
                launched = true;
            }
            let over = self.buffered >= self.settings.buffer && !self.open.is_empty();
            if !(launched && over) || sending.len() >= self.settings.in_flight {
                return Ok(wait);
            }
        }
        Ok(wait)
    }

    fn send(
        &mut self,
        partition: &str,
        now: Instant,
        sending: &mut FuturesUnordered<Sending<T>>,
    ) -> Result<()> {
        let part = self.parts.get_mut(partition).expect("a runnable partition");
        let mut batch = part.queued.pop_front().expect("a queued batch");
        let n = batch.items.len();
        part.busy = true;
        part.bucket.take(n, now);
        self.account.take(n, now);
        self.buffered -= n;
        self.schedule(partition);
        self.progress.transactions += 1;
        if let Some(cp) = &mut self.checkpoint {
            let pairs: Vec<(u64, u64)> = batch.items.iter().map(|i| (i.position, i.hash)).collect();
            cp.sending(&pairs)?;
        }
        let tx = std::mem::replace(&mut batch.tx, self.table.transaction());
        let partition = partition.to_owned();
        sending.push(Box::pin(async move {
            batch.tx = tx.copy_keeping(|_| true);
            let handle = tx.table().handle().clone();
            let answer = match tx.send().await {
                Ok(result) => Answer::Applied(result),
                Err(e) => match in_doubt_refusal(&batch, &e) {
                    Some(index) => {
                        Answer::InDoubtSettled(read_back_in_doubt(&batch, index, e, &handle).await)
                    }
                    None => Answer::Failed(e),
                },
            };
            Done {
                partition,
                batch,
                answer,
            }
        }));
        Ok(())
    }

    /// Settles what an ended transaction decided, and queues again what it did not.
    fn finish(&mut self, done: Done<T>) -> Result<()> {
        let Done {
            partition,
            mut batch,
            answer,
        } = done;
        let now = Instant::now();
        self.part(&partition).busy = false;
        let mut settled = Vec::new();
        let mut again: Vec<Batch<T>> = Vec::new();
        let mut fatal = None;
        match answer {
            Answer::Applied(result) => {
                let confirmed = result.confirmed_by_read_back();
                for (i, item) in batch.items.drain(..).enumerate() {
                    settled.push((item, written(result.etag(i).cloned(), confirmed)));
                }
                self.part(&partition).bucket.speed_up(0.05);
                self.account.speed_up(0.01);
            }
            Answer::InDoubtSettled(outcomes) => {
                let gone: Vec<usize> = outcomes.iter().map(|(i, _)| *i).collect();
                let mut outcomes: HashMap<usize, BulkResult> = outcomes.into_iter().collect();
                let mut rest = Vec::new();
                for (i, item) in batch.items.drain(..).enumerate() {
                    match outcomes.remove(&i) {
                        Some(outcome) => settled.push((item, outcome)),
                        None => rest.push(item),
                    }
                }
                if !rest.is_empty() {
                    again.push(batch.keeping(|i| !gone.contains(&i), rest));
                }
            }
            Answer::Failed(e) => {
                let n = batch.items.len();
                let index = e.batch_index().or((n == 1).then_some(0)).filter(|i| *i < n);
                if e.is_ambiguous() {
                    let e = Arc::new(e);
                    for item in batch.items.drain(..) {
                        settled.push((item, BulkResult::Ambiguous(e.clone())));
                    }
                } else if e.is_throttled() {
                    self.progress.throttled += 1;
                    batch.attempts += 1;
                    if batch.attempts >= self.settings.max_attempts {
                        let e = Arc::new(e);
                        for item in batch.items.drain(..) {
                            settled.push((item, BulkResult::Refused(e.clone())));
                        }
                    } else {
                        let part = self.part(&partition);
                        part.bucket.slow_down(0.5, Duration::ZERO, now);
                        let wait = e
                            .retry_after()
                            .unwrap_or_else(|| per(n, part.bucket.rate()));
                        part.bucket.slow_down(1.0, wait, now);
                        self.account.slow_down(0.9, Duration::ZERO, now);
                        again.push(batch);
                    }
                } else if is_about_entities(&e) {
                    match index {
                        Some(index) => {
                            let (rest, item) = split_off(&mut batch, index);
                            settled.push((item, BulkResult::Refused(Arc::new(e))));
                            if !rest.is_empty() {
                                again.push(batch.keeping(|i| i != index, rest));
                            }
                        }
                        // No index: each entity alone says which.
                        None => {
                            let items: Vec<Item> = batch.items.drain(..).collect();
                            for (i, item) in items.into_iter().enumerate() {
                                again.push(batch.keeping(move |j| j == i, vec![item]));
                            }
                        }
                    }
                } else if e.is_retryable() && batch.attempts + 1 < self.settings.max_attempts {
                    batch.attempts += 1;
                    let backoff = Duration::from_millis(100) * (1 << batch.attempts.min(6));
                    batch.not_before = Some(now + backoff);
                    again.push(batch);
                } else {
                    // Not applied (not ambiguous), not about one entity:
                    // the run stops; a resume sends these again.
                    fatal = Some(e);
                }
            }
        }
        for b in again.into_iter().rev() {
            self.buffered += b.items.len();
            self.part(&partition).queued.push_front(b);
        }
        self.schedule(&partition);
        let pairs: Vec<(u64, u64)> = settled.iter().map(|(i, _)| (i.position, i.hash)).collect();
        for (item, result) in settled {
            self.settle(item, result);
        }
        self.record_settled(&pairs)?;
        self.forget_if_idle(&partition, now);
        self.ended += 1;
        if self.parts.len() > SWEEP_ABOVE && self.ended.is_multiple_of(SWEEP_EVERY) {
            self.parts.retain(|_, p| {
                p.busy || p.open.is_some() || !p.queued.is_empty() || !p.bucket.is_idle(now)
            });
        }
        self.progress.partitions = self.parts.len();
        if let Some(f) = self.on_progress.as_mut() {
            let p = BulkProgress {
                elapsed: self.start.elapsed(),
                account_rate: self.account.rate(),
                ..self.progress.clone()
            };
            f(&p);
        }
        match fatal {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn forget_if_idle(&mut self, partition: &str, now: Instant) {
        let idle = self.parts.get(partition).is_some_and(|p| {
            !p.busy && p.open.is_none() && p.queued.is_empty() && p.bucket.is_idle(now)
        });
        if idle {
            self.parts.remove(partition);
        }
    }

    fn settle(&mut self, item: Item, result: BulkResult) {
        match &result {
            BulkResult::Written { .. } => self.progress.written += 1,
            BulkResult::Refused(_) => self.progress.refused += 1,
            BulkResult::Ambiguous(_) => self.progress.ambiguous += 1,
        }
        if let Some(f) = self.on_outcome.as_mut() {
            f(EntityOutcome {
                position: item.position,
                key: item.key.clone(),
                result,
            });
        }
        self.window.insert(item.position, item.key);
    }

    /// Moves the watermark over the settled prefix and records `pairs` (and
    /// the watermark, if it moved) in the checkpoint.
    fn record_settled(&mut self, pairs: &[(u64, u64)]) -> Result<()> {
        let before = self.progress.position;
        while let Some(key) = self.window.remove(&self.progress.position) {
            self.last_key = Some(key);
            self.progress.position += 1;
        }
        let moved = self.progress.position > before;
        let Some(cp) = &mut self.checkpoint else {
            return Ok(());
        };
        if pairs.is_empty() && !moved {
            return Ok(());
        }
        let watermark = match (&self.last_key, moved) {
            (Some(k), true) => Some((self.progress.position, k)),
            _ => None,
        };
        cp.settled(pairs, watermark)
    }
}

fn written(etag: Option<crate::entity::ETag>, confirmed: bool) -> BulkResult {
    BulkResult::Written {
        etag,
        confirmed_by_read_back: confirmed,
    }
}

/// Takes entity `index` out of the batch's items; returns the others.
fn split_off<T>(batch: &mut Batch<T>, index: usize) -> (Vec<Item>, Item) {
    let mut items: Vec<Item> = batch.items.drain(..).collect();
    let item = items.remove(index);
    (items, item)
}

/// Adds `op` to `tx`.
fn push<T: TableEntity>(tx: &mut Transaction<T>, op: &BulkOp<T>) -> Result<()> {
    match op {
        BulkOp::Insert(e) => tx.insert(e),
        BulkOp::Upsert(e, mode) => tx.upsert(e, *mode),
        BulkOp::Update(e, mode, if_match) => tx.update(e, *mode, if_match.clone()),
        BulkOp::Delete(key, if_match) => tx.delete(key.clone(), if_match.clone()),
    }
    .map(drop)
}

/// Whether `e` refuses entities of the transaction rather than the whole
/// write: an answer of the 400 family other than those that would refuse
/// any transaction (credentials, a missing table, throttling, a timeout).
fn is_about_entities(e: &Error) -> bool {
    if e.is_invalid_input() || e.batch_index().is_some() {
        return true;
    }
    match e.status() {
        Some(401 | 403 | 408 | 429) => false,
        Some(404) => e.code() != Some(&ErrorCode::TableNotFound),
        Some(s) => (400..500).contains(&s),
        None => false,
    }
}

/// Reads back every entity in doubt of `batch`, refused at `refused` by
/// `error`: those holding what was sent are written (by the earlier run);
/// the refused one, if not, is ambiguous; the others are sent again.
async fn read_back_in_doubt<T>(
    batch: &Batch<T>,
    refused: usize,
    error: Error,
    handle: &crate::table::handle::TableHandle,
) -> Vec<(usize, BulkResult)> {
    let mut error = Some(error);
    let mut settled = Vec::new();
    for (i, item) in batch.items.iter().enumerate() {
        if !item.in_doubt {
            continue;
        }
        let intent = match batch.tx.sent_op(i).map(|op| op.intent()) {
            Some(Ok(intent)) => intent,
            Some(Err(e)) if i == refused => {
                settled.push((i, BulkResult::Ambiguous(Arc::new(e))));
                continue;
            }
            _ => continue,
        };
        // `resolve` hands back the error it was given when the intent is
        // not met: the refusal for the refused entity, a stand-in otherwise.
        let given = if i == refused {
            error.take().map(Error::into_ambiguous)
        } else {
            None
        }
        .unwrap_or_else(|| Error::decode("an entity in doubt, not refused").into_ambiguous());
        match outcome::resolve(handle, "bulk", vec![intent], given).await {
            Ok(mut written) => settled.push((
                i,
                BulkResult::Written {
                    etag: written.pop().flatten().map(|w| w.etag),
                    confirmed_by_read_back: true,
                },
            )),
            Err(e) if i == refused => settled.push((i, BulkResult::Ambiguous(Arc::new(e)))),
            Err(_) => {}
        }
    }
    settled
}

/// When the transaction was refused for an entity sent by an earlier run
/// whose outcome is unknown, in a way that run's own attempt would cause
/// (409 on an insert, 412 on a conditional write, 404 on a delete): its index.
fn in_doubt_refusal<T>(batch: &Batch<T>, e: &Error) -> Option<usize> {
    if e.is_ambiguous() || !matches!(e.status(), Some(404 | 409 | 412)) {
        return None;
    }
    if e.code() == Some(&ErrorCode::TableNotFound) {
        return None;
    }
    let n = batch.items.len();
    let index = e.batch_index().or((n == 1).then_some(0))?;
    batch.items.get(index).filter(|i| i.in_doubt).map(|_| index)
}
