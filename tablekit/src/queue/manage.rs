//! The management calls of queues: listing an account's queues
//! ([`ListQueues`]), and a queue's metadata ([`QueueProperties`],
//! [`QueueClient::set_metadata`]).
//!
//! Metadata names are case-insensitive in the service and travel as HTTP
//! header names, which HTTP/1.1 does not keep the case of: tablekit sends and
//! reports them in lower case, on every backend, sorted by name.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

use crate::backend::queue::{QueueBackend, QueueOp, QueueResponse};
use crate::error::{Error, Result, ValidationError};

use super::{unexpected, QueueClient, QueueServiceClient};

/// The most queues one listing request returns (the service's limit).
pub const MAX_QUEUES_PER_PAGE: usize = 5000;

/// A queue's metadata and about how many messages it holds; see
/// [`QueueClient::properties`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueProperties {
    approximate_message_count: u64,
    metadata: Vec<(String, String)>,
}

impl QueueProperties {
    /// About how many messages the queue holds, visible or not.
    pub fn approximate_message_count(&self) -> u64 {
        self.approximate_message_count
    }

    /// The metadata: names in lower case, sorted by name.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The value of one metadata entry; `name` in any case.
    pub fn metadata_value(&self, name: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One queue of a listing: its name, and its metadata when the listing asked
/// for it ([`ListQueues::include_metadata`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueItem {
    name: String,
    metadata: Vec<(String, String)>,
}

impl QueueItem {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its metadata (names in lower case, sorted); empty unless the listing
    /// asked for metadata.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }
}

fn invalid(reason: String) -> Error {
    Error::invalid(ValidationError::Message { reason })
}

/// Metadata checked and put as it is sent: names are identifiers (ASCII
/// letters, digits and `_`, not starting with a digit), in lower case, each
/// once; values printable ASCII without spaces at either end (they travel as
/// HTTP header values, which lose those).
fn check_metadata(
    metadata: impl IntoIterator<Item = (impl Into<String>, impl Into<String>)>,
) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in metadata {
        let (name, value): (String, String) = (name.into(), value.into());
        let identifier = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(invalid(format!(
                "metadata name {name:?} must be an identifier (ASCII letters, digits, _)"
            )));
        }
        if !value.chars().all(|c| c.is_ascii() && !c.is_ascii_control()) {
            return Err(invalid(format!(
                "metadata {name:?}: values travel as HTTP headers and must be printable ASCII"
            )));
        }
        if value.trim() != value {
            return Err(invalid(format!(
                "metadata {name:?}: a value cannot start or end with a space (HTTP drops them)"
            )));
        }
        let name = name.to_ascii_lowercase();
        if out.iter().any(|(n, _)| *n == name) {
            return Err(invalid(format!(
                "metadata name {name:?} is given twice (names are case-insensitive)"
            )));
        }
        out.push((name, value));
    }
    out.sort();
    Ok(out)
}

impl QueueClient {
    /// The queue's metadata and approximate message count.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// jobs.create_queue().await?;
    /// jobs.set_metadata([("Owner", "billing"), ("tier", "gold")]).await?;
    /// jobs.send("job 1").await?;
    /// let p = jobs.properties().await?;
    /// assert_eq!(p.metadata_value("owner"), Some("billing"));
    /// assert_eq!(p.metadata(), [("owner".to_owned(), "billing".to_owned()), ("tier".to_owned(), "gold".to_owned())]);
    /// assert_eq!(p.approximate_message_count(), 1);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn properties(&self) -> Result<QueueProperties> {
        match self.run(QueueOp::Properties { queue: &self.name }).await? {
            QueueResponse::Properties { count, metadata } => Ok(QueueProperties {
                approximate_message_count: count,
                metadata,
            }),
            _ => Err(unexpected("a queue properties read")),
        }
    }

    /// Replaces the queue's metadata with these entries (none clears it).
    /// Names are identifiers, case-insensitive, stored and reported in lower
    /// case; values printable ASCII. Checked before any request.
    ///
    /// A queue that has metadata is, to the service, a different queue from
    /// one created without: [`create_queue_if_not_exists`](QueueClient::create_queue_if_not_exists)
    /// on it fails with `QueueAlreadyExists` (409), while
    /// [`create_queue`](QueueClient::create_queue) accepts it as existing.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// let jobs = tablekit::QueueServiceClient::embedded().queue("jobs")?;
    /// jobs.create_queue().await?;
    /// jobs.set_metadata([("owner", "billing")]).await?;
    /// jobs.set_metadata(Vec::<(String, String)>::new()).await?; // cleared
    /// assert!(jobs.properties().await?.metadata().is_empty());
    /// assert!(jobs.set_metadata([("not-an-identifier", "x")]).await.unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn set_metadata(
        &self,
        metadata: impl IntoIterator<Item = (impl Into<String>, impl Into<String>)>,
    ) -> Result<()> {
        let metadata = check_metadata(metadata)?;
        self.run(QueueOp::SetMetadata {
            queue: &self.name,
            metadata: &metadata,
        })
        .await
        .map(drop)
    }
}

impl QueueServiceClient {
    /// Lists the account's queues by name, following continuation markers.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// let queues = tablekit::QueueServiceClient::embedded();
    /// for name in ["jobs-a", "jobs-b", "mail"] {
    ///     queues.queue(name)?.create_queue().await?;
    /// }
    /// queues.queue("jobs-b")?.set_metadata([("owner", "billing")]).await?;
    /// let jobs = queues.list_queues().prefix("jobs-").include_metadata().fetch_all().await?;
    /// let names: Vec<&str> = jobs.iter().map(|q| q.name()).collect();
    /// assert_eq!(names, ["jobs-a", "jobs-b"]);
    /// assert_eq!(jobs[1].metadata(), [("owner".to_owned(), "billing".to_owned())]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn list_queues(&self) -> ListQueues {
        ListQueues {
            backend: self.backend().clone(),
            prefix: None,
            page_size: None,
            metadata: false,
        }
    }
}

/// A listing of queues; see [`QueueServiceClient::list_queues`].
#[must_use = "a listing does nothing until streamed or collected"]
pub struct ListQueues {
    backend: Arc<dyn QueueBackend>,
    prefix: Option<String>,
    page_size: Option<usize>,
    metadata: bool,
}

impl fmt::Debug for ListQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListQueues")
            .field("prefix", &self.prefix)
            .field("page_size", &self.page_size)
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl ListQueues {
    /// Only queues whose name starts with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Each queue's metadata too ([`QueueItem::metadata`]).
    pub fn include_metadata(mut self) -> Self {
        self.metadata = true;
        self
    }

    /// At most `n` (1 to 5000) queues per request.
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// The queues, across as many requests as needed.
    pub fn stream(self) -> QueueItems {
        struct State {
            backend: Arc<dyn QueueBackend>,
            prefix: Option<String>,
            max: Option<usize>,
            metadata: bool,
            marker: Option<String>,
            done: bool,
        }
        if let Some(n) = self.page_size {
            if !(1..=MAX_QUEUES_PER_PAGE).contains(&n) {
                let err = Error::invalid(ValidationError::PageSize {
                    value: n,
                    max: MAX_QUEUES_PER_PAGE,
                });
                return QueueItems(stream::once(async move { Err(err) }).boxed());
            }
        }
        let state = State {
            backend: self.backend,
            prefix: self.prefix,
            max: self.page_size,
            metadata: self.metadata,
            marker: None,
            done: false,
        };
        QueueItems(
            stream::try_unfold(state, |mut s| async move {
                if s.done {
                    return Ok(None);
                }
                let resp = s
                    .backend
                    .queue(QueueOp::List {
                        prefix: s.prefix.as_deref(),
                        marker: s.marker.as_deref(),
                        max: s.max,
                        metadata: s.metadata,
                    })
                    .await?;
                let QueueResponse::Queues {
                    queues,
                    next_marker,
                } = resp
                else {
                    return Err(unexpected("a queue listing"));
                };
                if next_marker.is_some() && next_marker == s.marker {
                    return Err(Error::decode(
                        "the service answered a queue listing with the marker it was sent",
                    ));
                }
                s.done = next_marker.is_none();
                s.marker = next_marker;
                let items = queues
                    .into_iter()
                    .map(|(name, metadata)| Ok(QueueItem { name, metadata }));
                Ok(Some((stream::iter(items), s)))
            })
            .try_flatten()
            .boxed(),
        )
    }

    /// All the queues.
    pub async fn fetch_all(self) -> Result<Vec<QueueItem>> {
        self.stream().try_collect().await
    }
}

/// The queues of a listing; a [`Stream`] of `Result<QueueItem>`, from
/// [`ListQueues::stream`].
pub struct QueueItems(BoxStream<'static, Result<QueueItem>>);

impl fmt::Debug for QueueItems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QueueItems")
    }
}

impl Stream for QueueItems {
    type Item = Result<QueueItem>;
    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_checked_lower_cased_and_sorted() {
        let m = check_metadata([("Zone", "eu"), ("owner", "ops")]).unwrap();
        assert_eq!(
            m,
            [
                ("owner".to_owned(), "ops".to_owned()),
                ("zone".to_owned(), "eu".to_owned())
            ]
        );
        for (name, value) in [
            ("1st", "x"),
            ("a-b", "x"),
            ("", "x"),
            ("ok", "caf\u{e9}"),
            ("ok", "line\nbreak"),
            ("ok", " padded"),
        ] {
            let err = check_metadata([(name, value)]).unwrap_err();
            assert!(err.is_invalid_input(), "{name:?}={value:?}: {err}");
        }
        let err = check_metadata([("Owner", "a"), ("owner", "b")]).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
    }
}
