//! The poison queue's entries, and the table row that keeps a poisoned
//! message's whole body when the entry cannot carry it.

use serde::{Deserialize, Serialize};
use tablekit::{
    error::{DecodeError, ErrorCode},
    DynamicEntity, EdmValue, Error, IfMatch, Result, TableServiceClient, UpdateMode,
};

/// The table a [`Worker`](super::Worker) keeps the whole body of a poisoned
/// message in when the poison entry cannot carry it, unless
/// [`WorkerBuilder::poison_body_table`](super::WorkerBuilder::poison_body_table)
/// names another. The worker creates it the first time it needs it.
pub const POISON_BODY_TABLE: &str = "TablekitPoisonBodies";

/// The most bytes of JSON a poison entry inline may be: a message of it
/// fits the queue's 64 KiB whichever way the poison queue encodes it (as is,
/// or Base64, which makes 48 KiB into 64).
pub(super) const INLINE_ENTRY_MAX: usize = tablekit::queue::MAX_MESSAGE_BYTES / 4 * 3;

/// The most of the body an entry whose whole body is in the table shows.
pub(super) const PREVIEW_MAX: usize = 16 * 1024;

/// The bytes of one Binary property of a kept body: half of what one may hold.
const PART_BYTES: usize = 32 * 1024;

/// The kept body's length in bytes (Int64), and its parts (Binary,
/// `Body0`, `Body1`, …).
const LENGTH: &str = "Length";
const PART: &str = "Body";

/// A message the worker gave up on, as it is stored in the poison queue
/// (JSON). Read it with `poison.receive().json::<PoisonedMessage>()`; its
/// [`whole_body`](PoisonedMessage::whole_body) is the original message,
/// which [`Eventual::requeue`](super::Eventual::requeue) sends again once
/// the cause is fixed.
///
/// Every message the worker receives is kept whole, up to the largest a
/// queue holds (64 KiB): when the entry with the body would not fit a queue
/// message (its JSON over 48 KiB, the body escaped inside it), or the body
/// is not UTF-8, the worker first writes the body to a row of
/// [`body_table`](PoisonedMessage::body_table) (PartitionKey: the queue's
/// name, RowKey: the message id), and the entry carries a preview in
/// `body`.
///
/// ```
/// use tablekit::{QueueServiceClient, TableServiceClient};
/// use tablekit_patterns::eventual::{Eventual, PoisonedMessage, Worker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tablekit::Result<()> {
/// let (tables, queues) = (TableServiceClient::embedded(), QueueServiceClient::embedded());
/// let (jobs, poison) = (queues.queue("jobs")?, queues.queue("jobs-poison")?);
/// jobs.create_queue().await?;
/// poison.create_queue().await?;
/// // An operation of 60 KiB, and no worker that can run it.
/// let big = "x".repeat(60 * 1024);
/// let eventual = Eventual::new(jobs.clone());
/// eventual.enqueue_kind("resize", &big).await?;
/// let worker = Worker::builder(jobs.clone(), tables.clone())
///     .handle("resize", |_: String, _| async { Err("no room".into()) })
///     .poison_queue(poison.clone())
///     .max_dequeue_count(1)
///     .build()?;
/// worker.drain().await?;
///
/// let (entry, dead) = poison.receive_json::<PoisonedMessage>().await?.expect("poisoned");
/// assert!(dead.body_truncated, "60 KiB do not fit the entry");
/// let whole = dead.whole_body(&tables).await?;
/// assert_eq!(whole.len(), 60 * 1024 + r#"{"v":1,"kind":"resize","op":""}"#.len());
///
/// // Fixed: send it again, then forget the entry and its kept body.
/// eventual.requeue(&dead, &tables).await?;
/// poison.delete_message(&entry).await?;
/// assert!(dead.delete_kept_body(&tables).await?);
/// assert_eq!(jobs.approximate_message_count().await?, 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoisonedMessage {
    /// The queue it came from.
    pub queue: String,
    /// Its id in that queue.
    pub message_id: String,
    /// How many times it had been received.
    pub dequeue_count: u32,
    /// The last error, or why the worker could not run it.
    pub error: String,
    /// The original message text (UTF-8, lossily), whole unless
    /// `body_truncated`; [`whole_body`](PoisonedMessage::whole_body) is
    /// always the whole message.
    pub body: String,
    /// Whether `body` is only the start of the message: the whole is in
    /// [`body_table`](PoisonedMessage::body_table).
    pub body_truncated: bool,
    /// The table holding the whole body (PartitionKey `queue`, RowKey
    /// `message_id`), when `body` is not all of it (cut short, or the
    /// message was not UTF-8); `None` when `body` is the whole message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_table: Option<String>,
}

impl PoisonedMessage {
    /// The original message's bytes, whole: `body`, or the row of
    /// [`body_table`](PoisonedMessage::body_table) read with `tables` (the
    /// Table service of the worker that poisoned it). A decode error if the
    /// row is gone ([`delete_kept_body`](PoisonedMessage::delete_kept_body)
    /// ran, for a duplicate of this entry) or is not a kept body, and for
    /// an entry an older worker cut short without keeping the rest.
    pub async fn whole_body(&self, tables: &TableServiceClient) -> Result<Vec<u8>> {
        let Some(table) = &self.body_table else {
            if self.body_truncated {
                return Err(self.unreadable(
                    "was cut short by a worker that did not keep the whole body; the rest is lost",
                ));
            }
            return Ok(self.body.clone().into_bytes());
        };
        let row = tables
            .table::<DynamicEntity>(table)?
            .get((self.queue.as_str(), self.message_id.as_str()))
            .await?
            .ok_or_else(|| {
                self.unreadable(&format!(
                    "names the row ({}, {}) of table {table} for its body, and there is none",
                    self.queue, self.message_id
                ))
            })?;
        read_row(&row).ok_or_else(|| {
            self.unreadable(&format!(
                "names the row ({}, {}) of table {table} for its body, which does not hold one",
                self.queue, self.message_id
            ))
        })
    }

    /// Deletes the row that keeps the whole body, if the entry names one;
    /// returns whether it was there. Once the message is sent again (or
    /// given up for good) and its entry deleted from the poison queue.
    pub async fn delete_kept_body(&self, tables: &TableServiceClient) -> Result<bool> {
        let Some(table) = &self.body_table else {
            return Ok(false);
        };
        tables
            .table::<DynamicEntity>(table)?
            .delete_if_exists(
                (self.queue.as_str(), self.message_id.as_str()),
                IfMatch::Any,
            )
            .await
    }

    fn unreadable(&self, why: &str) -> Error {
        DecodeError::new(format!(
            "the poison entry of message {} of queue {} {why}",
            self.message_id, self.queue
        ))
        .into()
    }
}

/// The row that keeps `body`: its length and its parts.
fn row_of(queue: &str, message_id: &str, body: &[u8]) -> DynamicEntity {
    let mut row = DynamicEntity::new(queue, message_id).with(LENGTH, body.len() as i64);
    for (i, part) in body.chunks(PART_BYTES).enumerate() {
        row.set(format!("{PART}{i}"), EdmValue::Binary(part.to_vec()));
    }
    row
}

/// The body a row keeps: `None` unless its parts add up to its length.
fn read_row(row: &DynamicEntity) -> Option<Vec<u8>> {
    let length = match row.get(LENGTH)? {
        EdmValue::Int64(n) => usize::try_from(*n).ok()?,
        EdmValue::Int32(n) => usize::try_from(*n).ok()?,
        _ => return None,
    };
    let mut body = Vec::with_capacity(length);
    for i in 0.. {
        match row.get(&format!("{PART}{i}")) {
            Some(EdmValue::Binary(part)) => body.extend_from_slice(part),
            Some(_) => return None,
            None => break,
        }
    }
    (body.len() == length).then_some(body)
}

/// Writes the row keeping `body` of message `message_id` of `queue` to
/// `table` (insert or replace: a message poisoned again after a crash
/// writes the same row), creating the table if it is missing.
pub(super) async fn keep_body(
    tables: &TableServiceClient,
    table: &str,
    queue: &str,
    message_id: &str,
    body: &[u8],
) -> Result<()> {
    let client = tables.table::<DynamicEntity>(table)?;
    let row = row_of(queue, message_id, body);
    match client.upsert(&row, UpdateMode::Replace).await {
        Err(e) if e.code() == Some(&ErrorCode::TableNotFound) => {
            client.create_table_if_not_exists().await?;
            client.upsert(&row, UpdateMode::Replace).await.map(drop)
        }
        other => other.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_body_reads_back_from_its_parts_and_its_length() {
        for len in [0, 1, PART_BYTES - 1, PART_BYTES, PART_BYTES + 1, 64 * 1024] {
            let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let row = row_of("jobs", "m1", &body);
            assert_eq!(read_row(&row).as_deref(), Some(&body[..]), "{len}");
        }
        let mut short = row_of("jobs", "m1", &[1; PART_BYTES + 1]);
        short.properties.remove("Body1");
        assert_eq!(read_row(&short), None, "a part missing");
        let other = DynamicEntity::new("jobs", "m1").with("Name", "not a body");
        assert_eq!(read_row(&other), None);
    }
}
