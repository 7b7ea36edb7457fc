//! Sending a message: the [`SendMessage`] builder and the [`SentMessage`]
//! the service answers with.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::backend::queue::{QueueOp, QueueResponse, RawMessage};
use crate::error::{Error, Result, ValidationError};

use super::{check_visibility, unexpected, QueueClient};

/// A message being sent; await it. See [`QueueClient::send`].
#[must_use = "a message is sent only when awaited"]
pub struct SendMessage {
    pub(super) queue: QueueClient,
    /// The encoded body, or why it cannot be sent: reported when awaited.
    pub(super) text: Result<String>,
    pub(super) visibility_delay: Duration,
    pub(super) time_to_live: Option<Option<Duration>>,
}

impl fmt::Debug for SendMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendMessage")
            .field("queue", &self.queue.name)
            .field("text_len", &self.text.as_ref().map(String::len).ok())
            .field("visibility_delay", &self.visibility_delay)
            .field("time_to_live", &self.time_to_live)
            .finish()
    }
}

impl SendMessage {
    /// Keeps the message invisible for this long after it is sent (at most 7 days).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use std::time::Duration;
    /// jobs.send("later").visibility_delay(Duration::from_secs(60)).await?;
    /// assert!(jobs.peek(1).await?.is_empty(), "not visible yet");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn visibility_delay(mut self, delay: Duration) -> Self {
        self.visibility_delay = delay;
        self
    }

    /// Deletes the message this long after it is sent, if nobody has (the
    /// service's default is 7 days).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// use std::time::Duration;
    /// let sent = jobs.send("soon stale").time_to_live(Duration::from_secs(60)).await?;
    /// assert_eq!(sent.expires_on(), Some(sent.inserted_on() + chrono::Duration::seconds(60)));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.time_to_live = Some(Some(ttl));
        self
    }

    /// Keeps the message until it is deleted.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// # jobs.create_queue().await?;
    /// let sent = jobs.send("keep").never_expire().await?;
    /// assert_eq!(sent.expires_on(), None);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn never_expire(mut self) -> Self {
        self.time_to_live = Some(None);
        self
    }

    /// Sends it.
    pub async fn send(self) -> Result<SentMessage> {
        let text = self.text?;
        check_visibility("a visibility delay", self.visibility_delay)?;
        if let Some(Some(ttl)) = self.time_to_live {
            if ttl < Duration::from_secs(1) {
                return Err(Error::invalid(ValidationError::Message {
                    reason: format!("a time to live of {ttl:?} is under the service's 1 second"),
                }));
            }
            if self.visibility_delay >= ttl {
                return Err(Error::invalid(ValidationError::Message {
                    reason: "the visibility delay must end before the time to live".into(),
                }));
            }
        }
        match self
            .queue
            .run(QueueOp::Send {
                queue: &self.queue.name,
                text: &text,
                visibility_delay: self.visibility_delay,
                time_to_live: self.time_to_live,
            })
            .await?
        {
            QueueResponse::Sent(raw) => Ok(SentMessage { raw }),
            _ => Err(unexpected("a message send")),
        }
    }
}

impl IntoFuture for SendMessage {
    type Output = Result<SentMessage>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// What the service says of a message it stored.
///
/// ```
/// # async fn run() -> tablekit::Result<()> {
/// use std::time::Duration;
/// let clock = tablekit::clock::ManualClock::new("2014-07-31T18:00:00Z".parse().unwrap());
/// let jobs = tablekit::QueueServiceClient::embedded_with_clock(clock).queue("jobs")?;
/// jobs.create_queue().await?;
/// let sent = jobs.send("job").visibility_delay(Duration::from_secs(5)).await?;
/// assert_eq!(sent.inserted_on().to_rfc3339(), "2014-07-31T18:00:00+00:00");
/// assert_eq!(sent.next_visible_on().unwrap().to_rfc3339(), "2014-07-31T18:00:05+00:00");
/// assert_eq!(sent.expires_on().unwrap().to_rfc3339(), "2014-08-07T18:00:00+00:00"); // 7 days
/// assert!(!sent.id().is_empty());
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct SentMessage {
    raw: RawMessage,
}

impl SentMessage {
    /// The message's id.
    pub fn id(&self) -> &str {
        &self.raw.id
    }

    /// When the message was stored.
    pub fn inserted_on(&self) -> DateTime<Utc> {
        self.raw.inserted_on
    }

    /// When it expires; `None` if never.
    pub fn expires_on(&self) -> Option<DateTime<Utc>> {
        self.raw.expires_on
    }

    /// When it becomes visible to receivers.
    pub fn next_visible_on(&self) -> Option<DateTime<Utc>> {
        self.raw.next_visible_on
    }
}
