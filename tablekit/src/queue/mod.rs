//! The queue client: [`QueueServiceClient`] for an account's queues,
//! [`QueueClient`] for the messages of one queue.
//!
//! The design guide's eventually consistent patterns move work through a queue:
//! a message is sent, a worker receives it (it turns invisible for a visibility
//! timeout), does the work, and deletes it with the pop receipt of that receive.
//! A worker that dies mid-way leaves the message to come back when the timeout
//! ends, with its dequeue count one higher: delivery is at least once.
//!
//! ```
//! # async fn run() -> tablekit::Result<()> {
//! use std::time::Duration;
//! use tablekit::{QueueServiceClient, clock::ManualClock};
//!
//! let clock = ManualClock::starting_now();
//! let queues = QueueServiceClient::embedded_with_clock(clock.clone());
//! let jobs = queues.queue("archive-jobs")?;
//! jobs.create_queue().await?;
//!
//! jobs.send_json(&("archive", 456)).await?;
//! let mut got = jobs.receive().visibility_timeout(Duration::from_secs(30)).await?;
//! let job = got.pop().expect("one message");
//! assert_eq!(job.json::<(String, u32)>()?, ("archive".to_owned(), 456));
//!
//! // Not deleted in time: it comes back, received a second time.
//! clock.advance(Duration::from_secs(31));
//! let again = jobs.receive().await?.pop().expect("visible again");
//! assert_eq!(again.dequeue_count(), 2);
//! jobs.delete_message(&again).await?;
//! assert_eq!(jobs.approximate_message_count().await?, 0);
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::backend::queue::{QueueBackend, QueueOp, QueueResponse, RawMessage};
use crate::error::{Error, ErrorCode, Result, ValidationError};

#[cfg(feature = "admin")]
mod admin;
mod manage;
mod receive;
mod send;
mod service;
pub use manage::{ListQueues, QueueItem, QueueItems, QueueProperties, MAX_QUEUES_PER_PAGE};
pub use receive::{QueueMessage, ReceiveMessages};
pub use send::{SendMessage, SentMessage};
pub use service::QueueServiceClient;

/// The largest message text the service stores: 64 KiB, counted on the text as
/// sent: its UTF-8 bytes, or its Base64 (which makes 48 KiB of bytes into 64 KiB).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The most messages one receive or peek returns.
pub const MAX_MESSAGES_PER_REQUEST: usize = 32;

/// The longest visibility timeout or delay: 7 days.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// How message bodies are written as the service's message text, and read back.
///
/// The default is [`Text`](MessageEncoding::Text), as in the official SDKs a
/// porting user comes from: Python's `azure-storage-queue` 12.x
/// (`NoEncodePolicy`), .NET's `Azure.Storage.Queues` 12.x
/// (`QueueMessageEncoding.None`) and JavaScript's `@azure/storage-queue` 12.x
/// write the text as is and hand the text back as is. Base64 was the default of
/// the older SDKs (.NET `WindowsAzure.Storage`, Python 2.x) and is what Azure
/// Functions' queue trigger expects by default.
///
/// Both readings are tried where the text leaves no doubt:
///
/// - A [`Base64`](MessageEncoding::Base64) receiver decodes a text that is
///   canonical, padded, standard Base64 (what every Base64 encoder writes); any
///   other text cannot come from a Base64 sender, so it is taken as is
///   ([`QueueMessage::encoding`](crate::queue::QueueMessage::encoding) says
///   `Text`). A plain text that happens to be valid Base64 (`"abcd"`, `"true"`)
///   is decoded: that case is ambiguous, and the receiver's choice decides.
/// - A [`Text`](MessageEncoding::Text) receiver never guesses: any Base64 text
///   is also a valid text, so it gets the text as sent.
/// - [`QueueMessage::json`](crate::queue::QueueMessage::json) reads the body
///   as the receiver's encoding gives it; only when that is not JSON does it
///   try the other reading (the text's Base64 decoding, or the text as is), so a
///   JSON message is read whichever way it was sent.
///
/// ```
/// # async fn run() -> tablekit::Result<()> {
/// use tablekit::queue::MessageEncoding;
/// let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
/// jobs.create_queue().await?;
/// let legacy = jobs.clone().with_encoding(MessageEncoding::Base64);
/// jobs.send("sent as text, as Python's default does").await?;
/// legacy.send("sent as Base64").await?;
/// let got = legacy.receive().max_messages(2).await?;
/// // Not Base64 (spaces, a comma): taken as the text it must be.
/// assert_eq!(got[0].text()?, "sent as text, as Python's default does");
/// assert_eq!(got[0].encoding(), MessageEncoding::Text);
/// assert_eq!(got[1].text()?, "sent as Base64");
/// assert_eq!(got[1].encoding(), MessageEncoding::Base64);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageEncoding {
    /// The text as is (the default): readable in other tools and by the
    /// official SDKs' defaults. The body must be UTF-8 with no control
    /// characters other than tab, CR and LF (the service stores XML text);
    /// bytes that are not need [`Base64`](MessageEncoding::Base64).
    #[default]
    Text,
    /// Base64 of the bytes, as the older SDKs wrote by default: any bytes travel
    /// safely, at 4/3 of the size.
    Base64,
}

/// A client for the messages of one queue. Cheap to clone.
#[derive(Clone)]
pub struct QueueClient {
    backend: Arc<dyn QueueBackend>,
    name: Arc<str>,
    encoding: MessageEncoding,
}

impl fmt::Debug for QueueClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueClient")
            .field("queue", &self.name)
            .field("encoding", &self.encoding)
            .finish()
    }
}

fn check_visibility(what: &str, d: Duration) -> Result<()> {
    if d > MAX_VISIBILITY {
        return Err(Error::invalid(ValidationError::Message {
            reason: format!("{what} of {d:?} is over the service's 7 days"),
        }));
    }
    Ok(())
}

fn unexpected(op: &str) -> Error {
    Error::decode(format!("unexpected answer to {op}"))
}

impl QueueClient {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same queue with bodies encoded another way (as text by default;
    /// see [`MessageEncoding`] for what a receiver of either kind accepts).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use tablekit::queue::MessageEncoding;
    /// let plain = jobs.clone().with_encoding(MessageEncoding::Text);
    /// plain.send("readable in Storage Explorer").await?;
    /// assert_eq!(plain.peek(1).await?[0].text()?, "readable in Storage Explorer");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn with_encoding(mut self, encoding: MessageEncoding) -> Self {
        self.encoding = encoding;
        self
    }

    async fn run(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        self.backend.queue(op).await
    }

    /// Creates the queue. Creating a queue that exists succeeds (the service
    /// treats it as a no-op), so this is safe to repeat, and a create retried
    /// after a lost answer succeeds too. A queue that exists with metadata set by
    /// another tool (the service answers 409 `QueueAlreadyExists`) also counts
    /// as created: what the caller needs, a queue by that name, is there.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// let jobs = tablekit::QueueServiceClient::embedded().queue("archive-jobs")?;
    /// jobs.create_queue().await?;
    /// jobs.create_queue().await?; // already there: still fine
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn create_queue(&self) -> Result<()> {
        match self.create_queue_if_not_exists().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(&ErrorCode::QueueAlreadyExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates the queue unless it exists; returns whether this call created it.
    ///
    /// `false` means the queue existed when the service answered. When the
    /// first attempt's answer was lost and the create was retried, that may be
    /// the queue this very call created: the answer cannot tell them apart.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// let jobs = tablekit::QueueServiceClient::embedded().queue("archive-jobs")?;
    /// assert!(jobs.create_queue_if_not_exists().await?);
    /// assert!(!jobs.create_queue_if_not_exists().await?);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn create_queue_if_not_exists(&self) -> Result<bool> {
        match self.run(QueueOp::Create { queue: &self.name }).await? {
            QueueResponse::Created(created) => Ok(created),
            _ => Err(unexpected("a queue create")),
        }
    }

    /// Deletes the queue and its messages; fails with not-found
    /// ([`ErrorCode::QueueNotFound`]) if there is none.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// jobs.delete_queue().await?;
    /// let err = jobs.delete_queue().await.unwrap_err();
    /// assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::QueueNotFound));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete_queue(&self) -> Result<()> {
        self.run(QueueOp::Delete { queue: &self.name })
            .await
            .map(drop)
    }

    /// Deletes the queue if it exists; returns whether it did (`true` when an
    /// attempt's answer was lost and the retry found no queue: the lost
    /// attempt most likely deleted it).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// assert!(jobs.delete_queue_if_exists().await?);
    /// assert!(!jobs.delete_queue_if_exists().await?);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete_queue_if_exists(&self) -> Result<bool> {
        match self.delete_queue().await {
            Ok(()) => Ok(true),
            // After a lost answer, the retry's 404 is most likely our own deletion.
            Err(e) if e.code() == Some(&ErrorCode::QueueNotFound) => Ok(e.is_ambiguous()),
            Err(e) => Err(e),
        }
    }

    fn encode(&self, body: &[u8]) -> Result<String> {
        let text = match self.encoding {
            MessageEncoding::Base64 => BASE64.encode(body),
            MessageEncoding::Text => {
                let text = std::str::from_utf8(body).map_err(|_| {
                    Error::invalid(ValidationError::Message {
                        reason: "a Text-encoded message must be UTF-8; use MessageEncoding::Base64 for bytes".into(),
                    })
                })?;
                if let Some(c) = text
                    .chars()
                    .find(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
                {
                    return Err(Error::invalid(ValidationError::Message {
                        reason: format!(
                            "a Text-encoded message cannot hold the control character {c:?}; use MessageEncoding::Base64"
                        ),
                    }));
                }
                text.to_owned()
            }
        };
        if text.len() > MAX_MESSAGE_BYTES {
            return Err(Error::invalid(ValidationError::Message {
                reason: format!(
                    "the message text is {} bytes{}; the service stores at most {MAX_MESSAGE_BYTES}",
                    text.len(),
                    if self.encoding == MessageEncoding::Base64 {
                        " after Base64 encoding"
                    } else {
                        ""
                    }
                ),
            }));
        }
        Ok(text)
    }

    fn decode(&self, raw: RawMessage) -> Result<QueueMessage> {
        let (body, encoding) = read_text(&raw.text, self.encoding);
        Ok(QueueMessage {
            raw,
            body,
            encoding,
        })
    }

    /// Sends a message; await the returned builder, after setting a delay or a
    /// time to live if needed. The body is checked (size, encoding) when the
    /// builder is awaited, before any request, like every other setting.
    ///
    /// A send whose answer is lost is not repeated blindly: the message may
    /// already be in the queue, so the error says the outcome is unknown
    /// ([`Error::is_ambiguous`]). Receivers should treat messages as
    /// at-least-once anyway.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use std::time::Duration;
    /// let sent = jobs.send("archive order 456").time_to_live(Duration::from_secs(3600)).await?;
    /// assert!(sent.expires_on().is_some());
    /// // Too large to store: refused before any request.
    /// assert!(jobs.send("x".repeat(64 * 1024 + 1)).await.unwrap_err().is_invalid_input());
    /// // Bytes that are not text need Base64.
    /// let err = jobs.send([0xff_u8, 0x00]).await.unwrap_err();
    /// assert!(err.to_string().contains("MessageEncoding::Base64"), "{err}");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn send(&self, body: impl AsRef<[u8]>) -> SendMessage {
        SendMessage {
            queue: self.clone(),
            text: self.encode(body.as_ref()),
            visibility_delay: Duration::ZERO,
            time_to_live: None,
        }
    }

    /// Sends `value` as JSON (see [`send`](QueueClient::send)).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// jobs.send_json(&serde_json::json!({"order": 456})).await?;
    /// let (_, order) = jobs.receive_json::<serde_json::Value>().await?.expect("a message");
    /// assert_eq!(order["order"], 456);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn send_json<T: serde::Serialize + ?Sized>(&self, value: &T) -> SendMessage {
        match serde_json::to_vec(value) {
            Ok(json) => self.send(json),
            Err(e) => SendMessage {
                queue: self.clone(),
                text: Err(Error::decode(format!(
                    "cannot write the message as JSON: {e}"
                ))),
                visibility_delay: Duration::ZERO,
                time_to_live: None,
            },
        }
    }

    /// Receives messages: await the returned builder. By default one message,
    /// invisible to others for 30 seconds.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use std::time::Duration;
    /// jobs.send("job 1").await?;
    /// let got = jobs.receive().max_messages(10).visibility_timeout(Duration::from_secs(60)).await?;
    /// assert_eq!(got.len(), 1);
    /// assert_eq!(got[0].dequeue_count(), 1);
    /// jobs.delete_message(&got[0]).await?;
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn receive(&self) -> ReceiveMessages {
        ReceiveMessages {
            queue: self.clone(),
            max: 1,
            visibility_timeout: Duration::from_secs(30),
        }
    }

    /// Receives one message, hidden for the default 30 seconds, and reads its
    /// body as JSON; `None` if no message is visible. For more messages or
    /// another timeout use [`receive`](QueueClient::receive) and
    /// [`ReceiveMessages::json`]. A body that is not the expected JSON is a
    /// decode error; the message stays received and comes back after the timeout.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    /// struct Archive { order: u32 }
    ///
    /// jobs.send_json(&Archive { order: 456 }).await?;
    /// let (message, job) = jobs.receive_json::<Archive>().await?.expect("one message");
    /// assert_eq!(job, Archive { order: 456 });
    /// jobs.delete_message(&message).await?;
    /// assert!(jobs.receive_json::<Archive>().await?.is_none());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn receive_json<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<Option<(QueueMessage, T)>> {
        Ok(self.receive().json::<T>().await?.pop())
    }

    /// Reads up to `max` (1 to 32) visible messages without hiding them or
    /// counting a dequeue; the messages carry no pop receipt.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// jobs.send("job 1").await?;
    /// let seen = jobs.peek(32).await?;
    /// assert_eq!(seen[0].text()?, "job 1");
    /// assert_eq!(seen[0].pop_receipt(), None);
    /// // Still there for a worker, never counted as received.
    /// assert_eq!(jobs.receive().await?[0].dequeue_count(), 1);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn peek(&self, max: usize) -> Result<Vec<QueueMessage>> {
        let max = check_count(max)?;
        match self
            .run(QueueOp::Peek {
                queue: &self.name,
                max,
            })
            .await?
        {
            QueueResponse::Messages(m) => m.into_iter().map(|r| self.decode(r)).collect(),
            _ => Err(unexpected("a peek")),
        }
    }

    /// Changes a received message: hides it for `visibility_timeout` from now
    /// (zero makes it visible at once), and replaces its body if `body` is given.
    /// The message gets a new pop receipt, written into `message`; the old one
    /// stops working.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use std::time::Duration;
    /// jobs.send("step 1").await?;
    /// let mut m = jobs.receive().await?.pop().expect("a message");
    /// // Record progress and keep it hidden for another minute.
    /// jobs.update_message(&mut m, Duration::from_secs(60), Some(b"step 2")).await?;
    /// assert_eq!(m.text()?, "step 2");
    /// jobs.delete_message(&m).await?; // with the new receipt
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn update_message(
        &self,
        message: &mut QueueMessage,
        visibility_timeout: Duration,
        body: Option<&[u8]>,
    ) -> Result<()> {
        check_visibility("a visibility timeout", visibility_timeout)?;
        let text = body.map(|b| self.encode(b)).transpose()?;
        let receipt = message.pop_receipt_or_err()?;
        match self
            .run(QueueOp::Update {
                queue: &self.name,
                id: &message.raw.id,
                pop_receipt: receipt,
                visibility_timeout,
                text: text.as_deref(),
            })
            .await?
        {
            QueueResponse::Updated {
                pop_receipt,
                next_visible_on,
            } => {
                message.raw.pop_receipt = Some(pop_receipt);
                message.raw.next_visible_on = Some(next_visible_on);
                if let (Some(b), Some(t)) = (body, text) {
                    message.body = b.to_vec();
                    message.raw.text = t;
                    message.encoding = self.encoding;
                }
                Ok(())
            }
            _ => Err(unexpected("a message update")),
        }
    }

    /// Deletes a received message, with the pop receipt of its latest receive or
    /// update. A stale receipt (the message was received again, or updated) is
    /// an error with [`ErrorCode::PopReceiptMismatch`]; a message already gone,
    /// [`ErrorCode::MessageNotFound`].
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use std::time::Duration;
    /// jobs.send("job").await?;
    /// let mut m = jobs.receive().await?.pop().expect("a message");
    /// let stale = m.clone();
    /// jobs.update_message(&mut m, Duration::from_secs(30), None).await?;
    /// let err = jobs.delete_message(&stale).await.unwrap_err();
    /// assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::PopReceiptMismatch));
    /// jobs.delete_message(&m).await?;
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete_message(&self, message: &QueueMessage) -> Result<()> {
        let receipt = message.pop_receipt_or_err()?;
        self.run(QueueOp::DeleteMessage {
            queue: &self.name,
            id: &message.raw.id,
            pop_receipt: receipt,
        })
        .await
        .map(drop)
    }

    /// Deletes every message of the queue.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// jobs.send("a").await?;
    /// jobs.send("b").await?;
    /// jobs.clear().await?;
    /// assert_eq!(jobs.approximate_message_count().await?, 0);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn clear(&self) -> Result<()> {
        self.run(QueueOp::Clear { queue: &self.name })
            .await
            .map(drop)
    }

    /// About how many messages the queue holds, visible or not (the service
    /// counts lazily: expired messages may still be counted for a while).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// jobs.send("a").await?;
    /// let _hidden = jobs.receive().await?;
    /// assert_eq!(jobs.approximate_message_count().await?, 1, "invisible ones count too");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn approximate_message_count(&self) -> Result<u64> {
        match self.run(QueueOp::Count { queue: &self.name }).await? {
            QueueResponse::Count(n) => Ok(n),
            _ => Err(unexpected("a queue properties read")),
        }
    }
}

/// The body of a message text read as `encoding` asks, and how it was read:
/// a Base64 reading falls back to the text as is when the text is not
/// canonical padded Base64 (no Base64 encoder writes such a text).
pub(super) fn read_text(text: &str, encoding: MessageEncoding) -> (Vec<u8>, MessageEncoding) {
    match encoding {
        MessageEncoding::Base64 => match BASE64.decode(text.as_bytes()) {
            Ok(bytes) => (bytes, MessageEncoding::Base64),
            Err(_) => (text.as_bytes().to_vec(), MessageEncoding::Text),
        },
        MessageEncoding::Text => (text.as_bytes().to_vec(), MessageEncoding::Text),
    }
}

fn check_count(n: usize) -> Result<u8> {
    if !(1..=MAX_MESSAGES_PER_REQUEST).contains(&n) {
        return Err(Error::invalid(ValidationError::Message {
            reason: format!(
                "{n} messages asked for; one request reads 1 to {MAX_MESSAGES_PER_REQUEST}"
            ),
        }));
    }
    Ok(n as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str, encoding: MessageEncoding) -> QueueMessage {
        let raw = RawMessage {
            id: "m1".into(),
            pop_receipt: None,
            dequeue_count: 0,
            inserted_on: chrono::DateTime::UNIX_EPOCH,
            expires_on: None,
            next_visible_on: None,
            text: text.into(),
        };
        let (body, encoding) = read_text(&raw.text, encoding);
        QueueMessage {
            raw,
            body,
            encoding,
        }
    }

    #[test]
    fn a_base64_reading_falls_back_only_for_texts_no_encoder_writes() {
        use MessageEncoding::{Base64, Text};
        // Canonical padded Base64: decoded, even a word that is also plain text.
        assert_eq!(read_text("aGk=", Base64), (b"hi".to_vec(), Base64));
        assert_eq!(read_text("abcd", Base64), (vec![0x69, 0xb7, 0x1d], Base64));
        assert_eq!(read_text("", Base64), (vec![], Base64));
        // No encoder writes these: missing padding, non-zero trailing bits,
        // the URL-safe alphabet, spaces or line breaks.
        for text in ["aGk", "aGl=", "a-_b", "aGk= ", "aGVs\nbG8=", "hello world"] {
            assert_eq!(
                read_text(text, Base64),
                (text.as_bytes().to_vec(), Text),
                "{text:?}"
            );
        }
        // A text receiver never decodes.
        assert_eq!(read_text("aGk=", Text), (b"aGk=".to_vec(), Text));
    }

    #[test]
    fn json_takes_the_receivers_reading_first_and_the_other_only_if_it_is_not_json() {
        use MessageEncoding::{Base64, Text};
        // "1234" is JSON and Base64: each receiver's own reading decides.
        assert_eq!(message("1234", Text).json::<u32>().unwrap(), 1234);
        let m = message("MTIzNA==", Text); // Base64 of "1234"
        assert_eq!(
            m.json::<u32>().unwrap(),
            1234,
            "the text is not JSON: its decoding is"
        );
        assert_eq!(message("MTIzNA==", Base64).json::<u32>().unwrap(), 1234);
        assert_eq!(message("[1]", Base64).json::<Vec<u8>>().unwrap(), [1]);
        // Neither reading is JSON: the error names the message.
        let err = message("aGk=", Text).json::<u32>().unwrap_err();
        assert!(err.to_string().contains("m1"), "{err}");
    }
}
