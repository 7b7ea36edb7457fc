//! The queue half of the seam: what a queue client asks of a backend and what it
//! gets back. Message text travels as the service stores it (already encoded by
//! the client), so every backend sees exactly what the wire would carry.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::backend::Repeat;
use crate::error::Result;

/// One request about a queue or its messages.
#[derive(Debug)]
pub(crate) enum QueueOp<'a> {
    Create {
        queue: &'a str,
    },
    Delete {
        queue: &'a str,
    },
    Send {
        queue: &'a str,
        text: &'a str,
        visibility_delay: Duration,
        /// `None`: the service's default of 7 days; `Some(None)`: never expires.
        time_to_live: Option<Option<Duration>>,
    },
    Receive {
        queue: &'a str,
        max: u8,
        visibility_timeout: Duration,
    },
    Peek {
        queue: &'a str,
        max: u8,
    },
    Update {
        queue: &'a str,
        id: &'a str,
        pop_receipt: &'a str,
        visibility_timeout: Duration,
        text: Option<&'a str>,
    },
    DeleteMessage {
        queue: &'a str,
        id: &'a str,
        pop_receipt: &'a str,
    },
    Clear {
        queue: &'a str,
    },
    Count {
        queue: &'a str,
    },
    /// The queue's metadata and message count (`GET ?comp=metadata`).
    Properties {
        queue: &'a str,
    },
    /// Replaces the queue's metadata; names are lower case and checked.
    SetMetadata {
        queue: &'a str,
        metadata: &'a [(String, String)],
    },
    /// One page of the account's queues, by name.
    List {
        prefix: Option<&'a str>,
        marker: Option<&'a str>,
        max: Option<usize>,
        metadata: bool,
    },
}

impl QueueOp<'_> {
    /// A short name for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            QueueOp::Create { .. } => "create_queue",
            QueueOp::Delete { .. } => "delete_queue",
            QueueOp::Send { .. } => "send_message",
            QueueOp::Receive { .. } => "receive_messages",
            QueueOp::Peek { .. } => "peek_messages",
            QueueOp::Update { .. } => "update_message",
            QueueOp::DeleteMessage { .. } => "delete_message",
            QueueOp::Clear { .. } => "clear_messages",
            QueueOp::Count { .. } => "queue_properties",
            QueueOp::Properties { .. } => "get_queue_metadata",
            QueueOp::SetMetadata { .. } => "set_queue_metadata",
            QueueOp::List { .. } => "list_queues",
        }
    }

    /// How the request may be repeated after a failed attempt.
    ///
    /// A send repeated after an attempt that may have been applied could store
    /// the message twice, and nothing would tell: it is never resent then
    /// (the call fails, [ambiguous](crate::Error::is_ambiguous)). A receive
    /// is repeated: the messages of a lost answer are not lost, they become
    /// visible again when their visibility timeout ends, one dequeue later.
    /// A create is idempotent: the service answers a repeated one (same, here
    /// empty, metadata) with 204 and leaves the queue as it was. An update or
    /// delete of a message, and a delete of a queue, are refused the second
    /// time (the pop receipt changed, or nothing is left).
    pub(crate) fn repeat(&self) -> Repeat {
        match self {
            QueueOp::Send { .. } => Repeat::Never,
            QueueOp::Peek { .. }
            | QueueOp::Count { .. }
            | QueueOp::Properties { .. }
            | QueueOp::List { .. } => Repeat::Read,
            // Setting the same metadata twice leaves the same metadata.
            QueueOp::Receive { .. }
            | QueueOp::Clear { .. }
            | QueueOp::Create { .. }
            | QueueOp::SetMetadata { .. } => Repeat::Idempotent,
            QueueOp::Update { .. } | QueueOp::DeleteMessage { .. } | QueueOp::Delete { .. } => {
                Repeat::Detected
            }
        }
    }
}

/// A message as a backend reports it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RawMessage {
    pub(crate) id: String,
    pub(crate) pop_receipt: Option<String>,
    pub(crate) dequeue_count: u32,
    pub(crate) inserted_on: DateTime<Utc>,
    pub(crate) expires_on: Option<DateTime<Utc>>,
    pub(crate) next_visible_on: Option<DateTime<Utc>>,
    pub(crate) text: String,
}

impl fmt::Debug for RawMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMessage")
            .field("id", &self.id)
            .field("dequeue_count", &self.dequeue_count)
            .field("text_len", &self.text.len())
            .finish()
    }
}

/// What a backend answers to a [`QueueOp`].
#[derive(Debug)]
pub(crate) enum QueueResponse {
    Done,
    /// A create: whether the queue is new (the service answers 201, or 204 when it existed).
    Created(bool),
    /// The stored message (no text) of a send.
    Sent(RawMessage),
    Messages(Vec<RawMessage>),
    /// The new pop receipt and visibility of an updated message.
    Updated {
        pop_receipt: String,
        next_visible_on: DateTime<Utc>,
    },
    Count(u64),
    /// The queue's metadata (names lower case, sorted) and message count.
    Properties {
        count: u64,
        metadata: Vec<(String, String)>,
    },
    /// A page of a queue listing: each queue's name and (when asked) metadata.
    Queues {
        queues: Vec<(String, Vec<(String, String)>)>,
        next_marker: Option<String>,
    },
}

/// Something that carries out queue requests: the HTTP client, or the embedded store.
#[async_trait::async_trait]
pub(crate) trait QueueBackend: Send + Sync + fmt::Debug {
    async fn queue(&self, op: QueueOp<'_>) -> Result<QueueResponse>;

    /// Queue ACLs and the Queue service's properties. A backend that does
    /// not carry them out refuses them by default.
    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        Err(crate::backend::admin::unsupported(&op))
    }
}
