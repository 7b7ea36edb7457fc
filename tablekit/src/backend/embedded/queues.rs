//! The embedded store's queues: the Queue service's semantics in process.
//!
//! A received message turns invisible until its visibility timeout ends, then
//! comes back with its dequeue count one higher; each receive or update issues a
//! new pop receipt and makes the old one stale; a message past its time to live
//! is gone. Time comes from a [`Clock`], so tests move it instead of sleeping.
//!
//! Kept in a store file ([`QueueServiceClient::embedded_at`](crate::QueueServiceClient::embedded_at)),
//! every change is committed to the file before it is applied and answered, as
//! for tables (see the `durable` module): an operation runs on a copy of its
//! queue, the messages it changed are committed (one redb write transaction,
//! durable), then the copy replaces the queue. The file holds:
//!
//! - `queues`: the queue name → 0.
//! - `messages`: (queue name, sequence number) → the message as JSON: its id,
//!   text, times (inserted, expires, visible again), dequeue count and pop
//!   receipt, so a reopened store hands out the same messages at the same
//!   times, and a receipt issued before the reopen still deletes its message.
//!   The sequence number is the sending order, which is the order of equally
//!   visible messages.
//! - `queue_metadata`: the queue name → its metadata as JSON pairs, for queues
//!   that have any.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
#[cfg(feature = "durable")]
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
#[cfg(feature = "durable")]
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[cfg(feature = "durable")]
use super::durable::{commit, open_error, write_error, Claim, Service};

use crate::backend::queue::{QueueBackend, QueueOp, QueueResponse, RawMessage};
use crate::clock::Clock;
use crate::error::{Error, ErrorCode, Result};

/// The service's default time to live: 7 days.
const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone, PartialEq)]
struct Message {
    /// The sending order (the key in the store file).
    seq: u64,
    id: String,
    text: String,
    inserted_on: DateTime<Utc>,
    expires_on: Option<DateTime<Utc>>,
    visible_on: DateTime<Utc>,
    dequeue_count: u32,
    pop_receipt: Option<String>,
}

impl Message {
    fn expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_on.is_some_and(|e| e <= now)
    }

    fn report(&self, with_receipt: bool) -> RawMessage {
        RawMessage {
            id: self.id.clone(),
            pop_receipt: if with_receipt {
                self.pop_receipt.clone()
            } else {
                None
            },
            dequeue_count: self.dequeue_count,
            inserted_on: self.inserted_on,
            expires_on: self.expires_on,
            next_visible_on: with_receipt.then_some(self.visible_on),
            text: self.text.clone(),
        }
    }
}

/// Every queue of one embedded store, by name (queue names are lower case, so
/// the name is the key as given).
#[derive(Debug, Default)]
pub(crate) struct Queues {
    clock: Clock,
    /// Queue ACLs and the service's settings (kept in memory only).
    #[cfg(feature = "admin")]
    admin: super::admin::AdminState,
    queues: Mutex<HashMap<String, Vec<Message>>>,
    /// Each queue's metadata (names lower case, sorted), when it has any;
    /// locked after `queues`, never alone for a change.
    metadata: Mutex<HashMap<String, Vec<(String, String)>>>,
    /// The next message's sequence number (changed under `queues`' lock).
    next_seq: std::sync::atomic::AtomicU64,
    /// The file every change is committed to first, if any.
    #[cfg(feature = "durable")]
    file: Option<Claim>,
}

#[cfg(feature = "durable")]
const QUEUES: TableDefinition<&str, u64> = TableDefinition::new("queues");
#[cfg(feature = "durable")]
const MESSAGES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("messages");
/// The queue name → its metadata as JSON pairs; only queues that have any.
/// (A file written before queue metadata has no such table.)
#[cfg(feature = "durable")]
const QUEUE_METADATA: TableDefinition<&str, &[u8]> = TableDefinition::new("queue_metadata");

/// A time as seconds and nanoseconds since the Unix epoch.
#[cfg(feature = "durable")]
type Instant = (i64, u32);

#[cfg(feature = "durable")]
fn instant(t: DateTime<Utc>) -> Instant {
    (t.timestamp(), t.timestamp_subsec_nanos())
}

#[cfg(feature = "durable")]
fn from_instant((s, n): Instant) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(s, n)
}

/// A message as the store file holds it.
#[cfg(feature = "durable")]
#[derive(Serialize, Deserialize)]
struct Record {
    id: String,
    text: String,
    inserted: Instant,
    expires: Option<Instant>,
    visible: Instant,
    dequeues: u32,
    receipt: Option<String>,
}

#[cfg(feature = "durable")]
impl Record {
    fn of(m: &Message) -> Record {
        Record {
            id: m.id.clone(),
            text: m.text.clone(),
            inserted: instant(m.inserted_on),
            expires: m.expires_on.map(instant),
            visible: instant(m.visible_on),
            dequeues: m.dequeue_count,
            receipt: m.pop_receipt.clone(),
        }
    }

    fn message(self, seq: u64) -> Option<Message> {
        Some(Message {
            seq,
            id: self.id,
            text: self.text,
            inserted_on: from_instant(self.inserted)?,
            expires_on: match self.expires {
                Some(e) => Some(from_instant(e)?),
                None => None,
            },
            visible_on: from_instant(self.visible)?,
            dequeue_count: self.dequeues,
            pop_receipt: self.receipt,
        })
    }
}

/// The changes from `old` to `new` (both in sequence order): the messages
/// written and the sequence numbers removed.
#[cfg(feature = "durable")]
fn diff<'a>(old: &[Message], new: &'a [Message]) -> (Vec<&'a Message>, Vec<u64>) {
    let (mut puts, mut dels) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    loop {
        match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o.seq == n.seq => {
                if o != n {
                    puts.push(n);
                }
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o.seq < n.seq => {
                dels.push(o.seq);
                i += 1;
            }
            (Some(o), None) => {
                dels.push(o.seq);
                i += 1;
            }
            (_, Some(n)) => {
                puts.push(n);
                j += 1;
            }
            (None, None) => return (puts, dels),
        }
    }
}

fn after(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn queue_not_found() -> Error {
    Error::service(
        404,
        ErrorCode::QueueNotFound,
        "The specified queue does not exist.",
    )
}

fn message_not_found() -> Error {
    Error::service(
        404,
        ErrorCode::MessageNotFound,
        "The specified message does not exist.",
    )
}

fn pop_receipt_mismatch() -> Error {
    Error::service(
        400,
        ErrorCode::PopReceiptMismatch,
        "The specified pop receipt did not match the pop receipt for a dequeued message.",
    )
}

/// The first `max` visible messages in the order the service hands them out:
/// by the time they became visible, then by when they were sent. (The service
/// promises no order; this is what it and Azurite do.)
fn visible_order(messages: &[Message], now: DateTime<Utc>, max: u8) -> Vec<usize> {
    let mut visible: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i].visible_on <= now)
        .collect();
    // Stable: equal visibility times keep the sending order.
    visible.sort_by_key(|&i| messages[i].visible_on);
    visible.truncate(usize::from(max));
    visible
}

fn queue_name<'a>(op: &QueueOp<'a>) -> Option<&'a str> {
    Some(match op {
        QueueOp::Send { queue, .. }
        | QueueOp::Receive { queue, .. }
        | QueueOp::Peek { queue, .. }
        | QueueOp::Update { queue, .. }
        | QueueOp::DeleteMessage { queue, .. }
        | QueueOp::Clear { queue }
        | QueueOp::Count { queue }
        | QueueOp::Create { queue }
        | QueueOp::Delete { queue }
        | QueueOp::Properties { queue }
        | QueueOp::SetMetadata { queue, .. } => queue,
        QueueOp::List { .. } => return None,
    })
}

impl Queues {
    pub(crate) fn new(clock: Clock) -> Self {
        Queues {
            clock,
            ..Default::default()
        }
    }

    /// The queues kept in the store file at `path` (created if missing), with
    /// every message the file holds that has not expired by `clock`.
    #[cfg(feature = "durable")]
    pub(crate) fn open(path: &std::path::Path, clock: Clock) -> Result<Self> {
        Queues::from_claim(Claim::open(path, Service::Queues)?, clock)
    }

    /// The queues of a claimed store file, read.
    #[cfg(feature = "durable")]
    pub(crate) fn from_claim(claim: Claim, clock: Clock) -> Result<Self> {
        let path = claim.path().to_owned();
        let fail = |e: &dyn std::fmt::Display| open_error(&path, e);
        let now = clock.now();
        let mut queues: HashMap<String, Vec<Message>> = HashMap::new();
        let mut metadata: HashMap<String, Vec<(String, String)>> = HashMap::new();
        let mut expired = Vec::new();
        let mut next_seq = 0;
        {
            let txn = claim.db().begin_read().map_err(|e| fail(&e))?;
            match txn.open_table(QUEUES) {
                Ok(t) => {
                    for row in t.iter().map_err(|e| fail(&e))? {
                        let (k, _) = row.map_err(|e| fail(&e))?;
                        queues.insert(k.value().to_owned(), Vec::new());
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(fail(&e)),
            }
            match txn.open_table(MESSAGES) {
                Ok(t) => {
                    for row in t.iter().map_err(|e| fail(&e))? {
                        let (k, v) = row.map_err(|e| fail(&e))?;
                        let (queue, seq) = k.value();
                        next_seq = next_seq.max(seq + 1);
                        let message = serde_json::from_slice::<Record>(v.value())
                            .ok()
                            .and_then(|r| r.message(seq))
                            .ok_or_else(|| {
                                fail(&format_args!("a message of queue {queue:?} is unreadable"))
                            })?;
                        if message.expired(now) {
                            expired.push((queue.to_owned(), seq));
                        } else if let Some(q) = queues.get_mut(queue) {
                            q.push(message);
                        }
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(fail(&e)),
            }
            match txn.open_table(QUEUE_METADATA) {
                Ok(t) => {
                    for row in t.iter().map_err(|e| fail(&e))? {
                        let (k, v) = row.map_err(|e| fail(&e))?;
                        let pairs: Vec<(String, String)> = serde_json::from_slice(v.value())
                            .map_err(|_| {
                                fail(&format_args!(
                                    "the metadata of queue {:?} is unreadable",
                                    k.value()
                                ))
                            })?;
                        if queues.contains_key(k.value()) {
                            metadata.insert(k.value().to_owned(), pairs);
                        }
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(fail(&e)),
            }
        }
        if !expired.is_empty() {
            let txn = claim.db().begin_write().map_err(|e| fail(&e))?;
            {
                let mut t = txn.open_table(MESSAGES).map_err(|e| fail(&e))?;
                for (q, seq) in &expired {
                    t.remove((q.as_str(), *seq)).map_err(|e| fail(&e))?;
                }
            }
            txn.commit().map_err(|e| fail(&e))?;
        }
        Ok(Queues {
            clock,
            #[cfg(feature = "admin")]
            admin: Default::default(),
            queues: Mutex::new(queues),
            metadata: Mutex::new(metadata),
            next_seq: next_seq.into(),
            file: Some(claim),
        })
    }

    /// Commits a new queue (`Some`) or the deletion of a queue and its messages.
    #[cfg(feature = "durable")]
    fn commit_queue(claim: &Claim, name: &str, deleted: Option<&[Message]>) -> Result<()> {
        let txn = claim.db().begin_write().map_err(write_error)?;
        {
            let mut queues = txn.open_table(QUEUES).map_err(write_error)?;
            let mut messages = txn.open_table(MESSAGES).map_err(write_error)?;
            match deleted {
                None => {
                    queues.insert(name, 0).map_err(write_error)?;
                }
                Some(gone) => {
                    queues.remove(name).map_err(write_error)?;
                    for m in gone {
                        messages.remove((name, m.seq)).map_err(write_error)?;
                    }
                    txn.open_table(QUEUE_METADATA)
                        .map_err(write_error)?
                        .remove(name)
                        .map_err(write_error)?;
                }
            }
        }
        commit(txn)
    }

    /// Commits the messages of queue `name` written and removed.
    #[cfg(feature = "durable")]
    fn commit_messages(claim: &Claim, name: &str, puts: &[&Message], dels: &[u64]) -> Result<()> {
        let txn = claim.db().begin_write().map_err(write_error)?;
        {
            let mut messages = txn.open_table(MESSAGES).map_err(write_error)?;
            for m in puts {
                let bytes =
                    serde_json::to_vec(&Record::of(m)).map_err(|e| Error::decode(e.to_string()))?;
                messages
                    .insert((name, m.seq), bytes.as_slice())
                    .map_err(write_error)?;
            }
            for seq in dels {
                messages.remove((name, *seq)).map_err(write_error)?;
            }
        }
        commit(txn)
    }

    fn apply(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        match op {
            QueueOp::List {
                prefix,
                marker,
                max,
                metadata,
            } => return Ok(self.list(prefix, marker, max, metadata)),
            QueueOp::Properties { queue } => {
                let QueueResponse::Count(count) = self.apply(QueueOp::Count { queue })? else {
                    unreachable!("a count answers a count")
                };
                let metadata = lock(&self.metadata).get(queue).cloned().unwrap_or_default();
                return Ok(QueueResponse::Properties { count, metadata });
            }
            QueueOp::SetMetadata { queue, metadata } => {
                return self
                    .set_metadata(queue, metadata)
                    .map(|()| QueueResponse::Done)
            }
            _ => {}
        }
        let now = self.clock.now();
        let mut all = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        #[cfg(feature = "durable")]
        if let Some(claim) = &self.file {
            return self.apply_committed(claim, &mut all, op, now);
        }
        self.run(&mut all, op, now)
    }

    /// [`Queues::apply`] on a store file: what changes is committed first.
    #[cfg(feature = "durable")]
    fn apply_committed(
        &self,
        claim: &Claim,
        all: &mut HashMap<String, Vec<Message>>,
        op: QueueOp<'_>,
        now: DateTime<Utc>,
    ) -> Result<QueueResponse> {
        let Some(name) = queue_name(&op) else {
            return self.run(all, op, now);
        };
        match op {
            QueueOp::Create { .. } => {
                if !all.contains_key(name) {
                    Queues::commit_queue(claim, name, None)?;
                }
                self.run(all, op, now)
            }
            QueueOp::Delete { .. } => {
                if let Some(gone) = all.get(name) {
                    Queues::commit_queue(claim, name, Some(gone))?;
                }
                self.run(all, op, now)
            }
            _ => {
                let Some(old) = all.get(name) else {
                    return self.run(all, op, now);
                };
                // Decided on a copy, committed, then applied: a change the
                // file refused is not made.
                let mut one = HashMap::from([(name.to_owned(), old.clone())]);
                let answer = self.run(&mut one, op, now)?;
                let new = one.remove(name).expect("the queue stays in its copy");
                let (puts, dels) = diff(old, &new);
                if !puts.is_empty() || !dels.is_empty() {
                    Queues::commit_messages(claim, name, &puts, &dels)?;
                }
                all.insert(name.to_owned(), new);
                Ok(answer)
            }
        }
    }

    /// The operation on the queues `all`, in memory.
    fn run(
        &self,
        all: &mut HashMap<String, Vec<Message>>,
        op: QueueOp<'_>,
        now: DateTime<Utc>,
    ) -> Result<QueueResponse> {
        if let QueueOp::Create { queue } = op {
            // Creating an existing queue with the same (here empty) metadata
            // succeeds; with other metadata it is a conflict, as in the service.
            if lock(&self.metadata)
                .get(queue)
                .is_some_and(|m| !m.is_empty())
            {
                return Err(Error::service(
                    409,
                    ErrorCode::QueueAlreadyExists,
                    "The specified queue already exists.",
                ));
            }
            let created = !all.contains_key(queue);
            all.entry(queue.to_owned()).or_default();
            return Ok(QueueResponse::Created(created));
        }
        if let QueueOp::Delete { queue } = op {
            return match all.remove(queue) {
                Some(_) => {
                    lock(&self.metadata).remove(queue);
                    Ok(QueueResponse::Done)
                }
                None => Err(queue_not_found()),
            };
        }
        let name = queue_name(&op).expect("every other operation names its queue");
        let messages = all.get_mut(name).ok_or_else(queue_not_found)?;
        messages.retain(|m| !m.expired(now));
        match op {
            QueueOp::Send {
                text,
                visibility_delay,
                time_to_live,
                ..
            } => {
                let ttl = time_to_live.unwrap_or(Some(DEFAULT_TTL));
                let message = Message {
                    seq: self
                        .next_seq
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    id: Uuid::new_v4().to_string(),
                    text: text.to_owned(),
                    inserted_on: now,
                    expires_on: ttl.map(|t| after(now, t)),
                    visible_on: after(now, visibility_delay),
                    dequeue_count: 0,
                    pop_receipt: Some(Uuid::new_v4().simple().to_string()),
                };
                let mut sent = message.report(true);
                sent.text.clear();
                messages.push(message);
                Ok(QueueResponse::Sent(sent))
            }
            QueueOp::Receive {
                max,
                visibility_timeout,
                ..
            } => {
                let mut out = Vec::new();
                for i in visible_order(messages, now, max) {
                    let m = &mut messages[i];
                    m.dequeue_count += 1;
                    m.pop_receipt = Some(Uuid::new_v4().simple().to_string());
                    m.visible_on = after(now, visibility_timeout);
                    out.push(m.report(true));
                }
                Ok(QueueResponse::Messages(out))
            }
            QueueOp::Peek { max, .. } => Ok(QueueResponse::Messages(
                visible_order(messages, now, max)
                    .into_iter()
                    .map(|i| messages[i].report(false))
                    .collect(),
            )),
            QueueOp::Update {
                id,
                pop_receipt,
                visibility_timeout,
                text,
                ..
            } => {
                let m = messages
                    .iter_mut()
                    .find(|m| m.id == id)
                    .ok_or_else(message_not_found)?;
                if m.pop_receipt.as_deref() != Some(pop_receipt) {
                    return Err(pop_receipt_mismatch());
                }
                let receipt = Uuid::new_v4().simple().to_string();
                m.pop_receipt = Some(receipt.clone());
                m.visible_on = after(now, visibility_timeout);
                if let Some(t) = text {
                    m.text = t.to_owned();
                }
                Ok(QueueResponse::Updated {
                    pop_receipt: receipt,
                    next_visible_on: m.visible_on,
                })
            }
            QueueOp::DeleteMessage {
                id, pop_receipt, ..
            } => {
                let i = messages
                    .iter()
                    .position(|m| m.id == id)
                    .ok_or_else(message_not_found)?;
                if messages[i].pop_receipt.as_deref() != Some(pop_receipt) {
                    return Err(pop_receipt_mismatch());
                }
                messages.remove(i);
                Ok(QueueResponse::Done)
            }
            QueueOp::Clear { .. } => {
                messages.clear();
                Ok(QueueResponse::Done)
            }
            QueueOp::Count { .. } => Ok(QueueResponse::Count(messages.len() as u64)),
            QueueOp::Create { .. }
            | QueueOp::Delete { .. }
            | QueueOp::Properties { .. }
            | QueueOp::SetMetadata { .. }
            | QueueOp::List { .. } => unreachable!("handled above"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The most queues one listing page holds, as the service.
const MAX_LIST: usize = 5000;

impl Queues {
    /// One page of the queues by name (the service's order: names are lower
    /// case ASCII, so byte order), from `marker` (the first name of the page).
    fn list(
        &self,
        prefix: Option<&str>,
        marker: Option<&str>,
        max: Option<usize>,
        with_metadata: bool,
    ) -> QueueResponse {
        let all = lock(&self.queues);
        let metadata = lock(&self.metadata);
        let mut names: Vec<&String> = all
            .keys()
            .filter(|n| prefix.is_none_or(|p| n.starts_with(p)))
            .filter(|n| marker.is_none_or(|m| n.as_str() >= m))
            .collect();
        names.sort();
        let max = max.unwrap_or(MAX_LIST).clamp(1, MAX_LIST);
        let next_marker = names.get(max).map(|n| (*n).clone());
        names.truncate(max);
        let queues = names
            .into_iter()
            .map(|n| {
                let m = if with_metadata {
                    metadata.get(n).cloned().unwrap_or_default()
                } else {
                    Vec::new()
                };
                (n.clone(), m)
            })
            .collect();
        QueueResponse::Queues {
            queues,
            next_marker,
        }
    }

    /// Replaces a queue's metadata (committed to the file first, if any).
    fn set_metadata(&self, queue: &str, metadata: &[(String, String)]) -> Result<()> {
        let all = lock(&self.queues);
        if !all.contains_key(queue) {
            return Err(queue_not_found());
        }
        let mut pairs = metadata.to_vec();
        pairs.sort();
        #[cfg(feature = "durable")]
        if let Some(claim) = &self.file {
            let txn = claim.db().begin_write().map_err(write_error)?;
            {
                let mut t = txn.open_table(QUEUE_METADATA).map_err(write_error)?;
                if pairs.is_empty() {
                    t.remove(queue).map_err(write_error)?;
                } else {
                    let bytes =
                        serde_json::to_vec(&pairs).map_err(|e| Error::decode(e.to_string()))?;
                    t.insert(queue, bytes.as_slice()).map_err(write_error)?;
                }
            }
            commit(txn)?;
        }
        let mut md = lock(&self.metadata);
        if pairs.is_empty() {
            md.remove(queue);
        } else {
            md.insert(queue.to_owned(), pairs);
        }
        Ok(())
    }
}

impl Queues {
    /// The store's file, if it has one (for the name its errors carry).
    fn path(&self) -> Option<&std::path::Path> {
        #[cfg(feature = "durable")]
        if let Some(claim) = &self.file {
            return Some(claim.path());
        }
        None
    }
}

#[async_trait::async_trait]
impl QueueBackend for Queues {
    async fn queue(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        // A queue deleted or created anew has no policy.
        #[cfg(feature = "admin")]
        let renewed = match op {
            QueueOp::Create { queue } | QueueOp::Delete { queue } => Some(queue.to_owned()),
            _ => None,
        };
        let answer = self
            .apply(op)
            .map_err(|e| e.answered_by(super::errors::store_name(self.path())))?;
        #[cfg(feature = "admin")]
        if let (Some(queue), QueueResponse::Done | QueueResponse::Created(true)) =
            (renewed, &answer)
        {
            self.admin.forget(&queue);
        }
        Ok(answer)
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        let queue_key = |name: &str| {
            let all = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            if all.contains_key(name) {
                Ok(name.to_owned())
            } else {
                Err(queue_not_found())
            }
        };
        self.admin
            .run(op, queue_key, self.clock.now())
            .map_err(|e| e.answered_by(super::errors::store_name(self.path())))
    }
}

#[cfg(all(test, feature = "durable"))]
mod full_disk {
    //! A full disk under a queue store file (ENOSPC injected through redb's
    //! storage backend API, as for tables in `durable.rs`).

    use std::sync::atomic::Ordering;

    use super::*;
    use crate::backend::embedded::durable::full_disk::{
        assert_not_applied, assert_refused_for_space, claim_on_full_disk, TempFile,
    };

    fn send(q: &Queues, text: &str) -> Result<QueueResponse> {
        q.apply(QueueOp::Send {
            queue: "jobs",
            text,
            visibility_delay: Duration::ZERO,
            time_to_live: None,
        })
    }

    /// The visible messages' texts and dequeue counts (a peek writes nothing).
    fn visible(q: &Queues) -> Vec<(String, u32)> {
        match q.apply(QueueOp::Peek {
            queue: "jobs",
            max: 32,
        }) {
            Ok(QueueResponse::Messages(m)) => {
                m.into_iter().map(|m| (m.text, m.dequeue_count)).collect()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_full_disk_refuses_sends_and_receives_clearly_and_loses_no_acknowledged_message() {
        let path = TempFile::new();
        let (claim, full) = claim_on_full_disk(&path.0, Service::Queues);
        let q = Queues::from_claim(claim, Clock::default()).unwrap();
        q.apply(QueueOp::Create { queue: "jobs" }).unwrap();
        send(&q, "kept").unwrap();

        full.store(true, Ordering::SeqCst);
        assert_refused_for_space(&send(&q, "lost").unwrap_err());
        // A receive changes the message (dequeue count, receipt, visibility):
        // refused as a whole, the message stays as it was.
        let err = q
            .apply(QueueOp::Receive {
                queue: "jobs",
                max: 1,
                visibility_timeout: Duration::from_secs(30),
            })
            .unwrap_err();
        assert_not_applied(&err);
        assert_not_applied(&q.apply(QueueOp::Create { queue: "other" }).unwrap_err());
        assert_eq!(
            visible(&q),
            [("kept".to_owned(), 0)],
            "nothing refused is visible"
        );
        assert!(matches!(
            q.apply(QueueOp::Count { queue: "jobs" }),
            Ok(QueueResponse::Count(1))
        ));

        // Space again: the database refuses writes until it is reopened (its
        // state after a failed commit is known only to its recovery on open).
        full.store(false, Ordering::SeqCst);
        let err = send(&q, "later").unwrap_err();
        assert_not_applied(&err);
        assert!(err.to_string().contains("re-open"), "{err}");
        drop(q);

        let q = Queues::open(&path.0, Clock::default()).unwrap();
        assert_eq!(
            visible(&q),
            [("kept".to_owned(), 0)],
            "every acknowledged message, once"
        );
        assert!(q.apply(QueueOp::Count { queue: "other" }).is_err());
        send(&q, "after").unwrap();
        let got = match q
            .apply(QueueOp::Receive {
                queue: "jobs",
                max: 32,
                visibility_timeout: Duration::from_secs(30),
            })
            .unwrap()
        {
            QueueResponse::Messages(m) => m,
            other => panic!("{other:?}"),
        };
        let texts: Vec<_> = got.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["kept", "after"], "the reopened store is usable");
    }
}
