//! The embedded store's queues: the Queue service's semantics in process.
//!
//! A received message turns invisible until its visibility timeout ends, then
//! comes back with its dequeue count one higher; each receive or update issues a
//! new pop receipt and makes the old one stale; a message past its time to live
//! is gone. Time comes from a [`Clock`], so tests move it instead of sleeping.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::backend::queue::{QueueBackend, QueueOp, QueueResponse, RawMessage};
use crate::clock::Clock;
use crate::error::{Error, ErrorCode, Result};

/// The service's default time to live: 7 days.
const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug)]
struct Message {
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
    queues: Mutex<HashMap<String, Vec<Message>>>,
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

impl Queues {
    pub(crate) fn new(clock: Clock) -> Self {
        Queues {
            clock,
            queues: Mutex::default(),
        }
    }

    fn apply(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        let now = self.clock.now();
        let mut all = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let QueueOp::Create { queue } = op {
            // Creating an existing queue (with the same, here empty, metadata) succeeds.
            let created = !all.contains_key(queue);
            all.entry(queue.to_owned()).or_default();
            return Ok(QueueResponse::Created(created));
        }
        if let QueueOp::Delete { queue } = op {
            return match all.remove(queue) {
                Some(_) => Ok(QueueResponse::Done),
                None => Err(queue_not_found()),
            };
        }
        let name = match &op {
            QueueOp::Send { queue, .. }
            | QueueOp::Receive { queue, .. }
            | QueueOp::Peek { queue, .. }
            | QueueOp::Update { queue, .. }
            | QueueOp::DeleteMessage { queue, .. }
            | QueueOp::Clear { queue }
            | QueueOp::Count { queue }
            | QueueOp::Create { queue }
            | QueueOp::Delete { queue } => *queue,
        };
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
            QueueOp::Create { .. } | QueueOp::Delete { .. } => unreachable!("handled above"),
        }
    }
}

#[async_trait::async_trait]
impl QueueBackend for Queues {
    async fn queue(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        self.apply(op)
    }
}
