//! Receiving messages: the [`ReceiveMessages`] builder and the
//! [`QueueMessage`]s it returns.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::backend::queue::{QueueOp, QueueResponse, RawMessage};
use crate::error::{Error, Result, ValidationError};

use super::{check_count, check_visibility, read_text, unexpected, MessageEncoding, QueueClient};

/// A receive being prepared; await it for `Result<Vec<QueueMessage>>`.
#[derive(Debug)]
#[must_use = "messages are received only when awaited"]
pub struct ReceiveMessages {
    pub(super) queue: QueueClient,
    pub(super) max: usize,
    pub(super) visibility_timeout: Duration,
}

impl ReceiveMessages {
    /// Receives up to `n` messages (1 to 32; default 1).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// for i in 0..5 {
    ///     jobs.send(format!("m{i}")).await?;
    /// }
    /// assert_eq!(jobs.receive().max_messages(3).await?.len(), 3);
    /// assert!(jobs.receive().max_messages(33).await.unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn max_messages(mut self, n: usize) -> Self {
        self.max = n;
        self
    }

    /// Hides the received messages from other receivers for this long (1 second
    /// to 7 days; default 30 seconds). Size it to the work: a message not deleted
    /// in time is received again, by this worker or another.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let clock = tablekit::clock::ManualClock::starting_now();
    /// # let jobs = tablekit::QueueServiceClient::embedded_with_clock(clock).queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use std::time::Duration;
    /// jobs.send("long job").await?;
    /// let got = jobs.receive().visibility_timeout(Duration::from_secs(600)).await?;
    /// let m = &got[0];
    /// assert_eq!(m.next_visible_on(), Some(m.inserted_on() + chrono::Duration::seconds(600)));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// Receives them.
    pub async fn send(self) -> Result<Vec<QueueMessage>> {
        let max = check_count(self.max)?;
        if self.visibility_timeout < Duration::from_secs(1) {
            return Err(Error::invalid(ValidationError::Message {
                reason: "a receive's visibility timeout is at least 1 second".into(),
            }));
        }
        check_visibility("a visibility timeout", self.visibility_timeout)?;
        match self
            .queue
            .run(QueueOp::Receive {
                queue: &self.queue.name,
                max,
                visibility_timeout: self.visibility_timeout,
            })
            .await?
        {
            QueueResponse::Messages(m) => m.into_iter().map(|r| self.queue.decode(r)).collect(),
            _ => Err(unexpected("a receive")),
        }
    }

    /// Receives them and reads each body as JSON.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// jobs.send_json(&[1, 2]).await?;
    /// jobs.send_json(&[3, 4]).await?;
    /// let got = jobs.receive().max_messages(2).json::<Vec<u32>>().await?;
    /// let bodies: Vec<Vec<u32>> = got.into_iter().map(|(_, v)| v).collect();
    /// assert_eq!(bodies, [vec![1, 2], vec![3, 4]]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn json<T: serde::de::DeserializeOwned>(self) -> Result<Vec<(QueueMessage, T)>> {
        self.send()
            .await?
            .into_iter()
            .map(|m| {
                let v = m.json()?;
                Ok((m, v))
            })
            .collect()
    }
}

impl IntoFuture for ReceiveMessages {
    type Output = Result<Vec<QueueMessage>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// A received (or peeked) message.
///
/// ```
/// # async fn run() -> tablekit::Result<()> {
/// let clock = tablekit::clock::ManualClock::new("2014-07-31T18:00:00Z".parse().unwrap());
/// let jobs = tablekit::QueueServiceClient::embedded_with_clock(clock).queue("jobs")?;
/// jobs.create_queue().await?;
/// jobs.send_json(&("archive", 456)).await?;
/// let m = jobs.receive().await?.pop().expect("a message");
/// assert_eq!(m.text()?, r#"["archive",456]"#);
/// assert_eq!(m.json::<(String, u32)>()?, ("archive".to_owned(), 456));
/// assert_eq!(m.body(), br#"["archive",456]"#);
/// assert_eq!(m.dequeue_count(), 1);
/// assert!(m.pop_receipt().is_some());
/// assert_eq!(m.next_visible_on().unwrap().to_rfc3339(), "2014-07-31T18:00:30+00:00");
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Clone)]
pub struct QueueMessage {
    pub(super) raw: RawMessage,
    pub(super) body: Vec<u8>,
    /// How the text was read into `body`.
    pub(super) encoding: MessageEncoding,
}

impl fmt::Debug for QueueMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueMessage")
            .field("id", &self.raw.id)
            .field("dequeue_count", &self.raw.dequeue_count)
            .field("next_visible_on", &self.raw.next_visible_on)
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl QueueMessage {
    /// The message's id.
    pub fn id(&self) -> &str {
        &self.raw.id
    }

    /// The receipt of the latest receive or update: what a delete or an update
    /// must present. `None` for a peeked message.
    pub fn pop_receipt(&self) -> Option<&str> {
        self.raw.pop_receipt.as_deref()
    }

    pub(super) fn pop_receipt_or_err(&self) -> Result<&str> {
        self.pop_receipt().ok_or_else(|| {
            Error::invalid(ValidationError::Message {
                reason: format!(
                    "message {} was peeked, not received: it has no pop receipt",
                    self.raw.id
                ),
            })
        })
    }

    /// How many times it has been received, this time included.
    pub fn dequeue_count(&self) -> u32 {
        self.raw.dequeue_count
    }

    /// When it was sent.
    pub fn inserted_on(&self) -> DateTime<Utc> {
        self.raw.inserted_on
    }

    /// When it expires; `None` if never.
    pub fn expires_on(&self) -> Option<DateTime<Utc>> {
        self.raw.expires_on
    }

    /// When it becomes visible again unless deleted (received messages only).
    pub fn next_visible_on(&self) -> Option<DateTime<Utc>> {
        self.raw.next_visible_on
    }

    /// The body's bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<&str> {
        std::str::from_utf8(&self.body).map_err(|e| {
            Error::decode_caused_by(format!("message {} is not UTF-8 text", self.raw.id), e)
        })
    }

    /// How the message text was read into [`body`](QueueMessage::body): as
    /// Base64 (decoded), or as the text itself. A
    /// [`Base64`](MessageEncoding::Base64) receiver reports `Text` for a
    /// message whose text is not Base64, so could not have been encoded.
    pub fn encoding(&self) -> MessageEncoding {
        self.encoding
    }

    /// The body read as JSON. When the body is not JSON, the message text's
    /// other reading is tried before failing: its Base64 decoding for a
    /// message read as text, the text itself for one read as Base64. A
    /// message is read as JSON whichever encoding its sender used; where both
    /// readings are JSON (a text like `"1234"` is also Base64), the
    /// receiver's encoding decides.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// use tablekit::queue::MessageEncoding;
    /// let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// jobs.create_queue().await?;
    /// // An older sender that wrote Base64 (eyJvcmRlciI6NDU2fQ==).
    /// jobs.clone().with_encoding(MessageEncoding::Base64).send_json(&serde_json::json!({"order": 456})).await?;
    /// let m = jobs.receive().await?.pop().expect("a message");
    /// assert_eq!(m.text()?, "eyJvcmRlciI6NDU2fQ==", "a text receiver gets the text");
    /// assert_eq!(m.json::<serde_json::Value>()?["order"], 456, "and JSON finds the other reading");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).or_else(|e| {
            let other = match self.encoding {
                MessageEncoding::Text => MessageEncoding::Base64,
                MessageEncoding::Base64 => MessageEncoding::Text,
            };
            match read_text(&self.raw.text, other) {
                (bytes, read) if read == other => serde_json::from_slice(&bytes).ok(),
                _ => None,
            }
            .ok_or_else(|| {
                Error::decode_caused_by(
                    format!("message {} is not the expected JSON", self.raw.id),
                    e,
                )
            })
        })
    }
}
