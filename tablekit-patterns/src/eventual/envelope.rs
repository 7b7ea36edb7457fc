//! The message format: the versioned envelope an operation travels in, and
//! how a worker tells a malformed message from a newer client's.

use serde::{Deserialize, Serialize};
use tablekit::Result;

use super::FORMAT_VERSION;
use crate::error::refused;

// ---------------------------------------------------------------------------
// The message format.

/// The message as it travels: `{"v":1,"kind":"...","op":{...}}`, plus the
/// last error once an attempt failed.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Envelope {
    pub(super) v: u32,
    pub(super) kind: String,
    pub(super) op: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) last_error: Option<String>,
}

/// Why this worker cannot run a message.
#[derive(Debug)]
pub(super) enum Unreadable {
    /// No worker ever could (not JSON, no version, a malformed version 1
    /// envelope): it goes to the poison queue at once.
    Malformed(String),
    /// A newer client's format version: a newer worker may read it, so it
    /// is left on the queue for one (see [`WorkerBuilder::unknown_delay`]).
    Newer {
        why: String,
        /// Its `kind`, if the newer format still has one where this has.
        kind: Option<String>,
    },
}

impl Unreadable {
    pub(super) fn why(&self) -> &str {
        match self {
            Unreadable::Malformed(why) | Unreadable::Newer { why, .. } => why,
        }
    }
}

/// The envelope of a received message, whichever encoding its sender used:
/// its body as the queue client read it or, only when that is not JSON, the
/// message text's other reading (`QueueMessage::json`). An envelope enqueued
/// as Base64 (the queue client's default before the text as is) still runs.
pub(super) fn read_message(
    message: &tablekit::queue::QueueMessage,
) -> std::result::Result<Envelope, Unreadable> {
    match read_envelope(message.body()) {
        Err(Unreadable::Malformed(why))
            if serde_json::from_slice::<serde::de::IgnoredAny>(message.body()).is_err() =>
        {
            match message.json::<serde_json::Value>() {
                Ok(value) => read_envelope(value.to_string().as_bytes()),
                Err(_) => Err(Unreadable::Malformed(why)),
            }
        }
        other => other,
    }
}

pub(super) fn read_envelope(body: &[u8]) -> std::result::Result<Envelope, Unreadable> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        Unreadable::Malformed(format!(
            "the message is not JSON ({e}); expected {{\"v\":1,\"kind\":..,\"op\":..}}"
        ))
    })?;
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(FORMAT_VERSION) => {}
        Some(v) if v > u64::from(FORMAT_VERSION) => {
            return Err(Unreadable::Newer {
                why: format!(
                "message format version {v} is newer than this worker's version {FORMAT_VERSION}"
            ),
                kind: value
                    .get("kind")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned),
            })
        }
        _ => {
            return Err(Unreadable::Malformed(format!(
                "the message has no format version \"v\" (a number from 1; this worker \
                 reads {FORMAT_VERSION}): it was not written by Eventual::enqueue"
            )))
        }
    }
    serde_json::from_value(value)
        .map_err(|e| Unreadable::Malformed(format!("a malformed version 1 message: {e}")))
}

/// The message as written: the operation serialised in its own field order.
#[derive(Serialize)]
struct EnvelopeOut<'a, M: ?Sized> {
    v: u32,
    kind: &'a str,
    op: &'a M,
}

pub(super) fn envelope_bytes<M: Serialize + ?Sized>(kind: &str, op: &M) -> Result<Vec<u8>> {
    let env = EnvelopeOut {
        v: FORMAT_VERSION,
        kind,
        op,
    };
    serde_json::to_vec(&env).map_err(|e| {
        refused(
            "eventual",
            format!("cannot write the {kind} operation as JSON: {e}"),
        )
    })
}
