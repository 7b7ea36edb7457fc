//! [`QueueServiceClient`]: the account's queues.

use std::fmt;
use std::sync::Arc;

use crate::account::Account;
use crate::backend::connect_queues;
#[cfg(feature = "embedded")]
use crate::backend::embedded_queues;
#[cfg(feature = "durable")]
use crate::backend::embedded_queues_at;
use crate::backend::queue::QueueBackend;
#[cfg(feature = "embedded")]
use crate::clock::{Clock, ManualClock};
use crate::error::Result;
use crate::options::ClientOptions;
use crate::validate;

use super::{MessageEncoding, QueueClient};

/// A client for the queues of one storage account (or of an embedded store).
/// Cheap to clone; clones share one connection pool or store.
#[derive(Clone)]
pub struct QueueServiceClient {
    pub(super) backend: Arc<dyn QueueBackend>,
}

impl fmt::Debug for QueueServiceClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueServiceClient")
            .field("backend", &self.backend)
            .finish()
    }
}

impl QueueServiceClient {
    /// A client for this account's Queue service over HTTP, with default options.
    /// The account needs a queue endpoint (`QueueEndpoint`, or an account name
    /// and key, or `UseDevelopmentStorage=true`).
    pub fn new(account: Account) -> Result<Self> {
        Self::with_options(account, ClientOptions::default())
    }

    /// A client for this account's Queue service over HTTP; retries, timeouts
    /// and the connection pool are set as for tables.
    pub fn with_options(account: Account, options: ClientOptions) -> Result<Self> {
        Ok(QueueServiceClient {
            backend: connect_queues(account, &options)?,
        })
    }

    /// A client from a connection string (see [`Account::from_connection_string`]).
    /// Nothing is sent until the first operation.
    ///
    /// ```
    /// let queues = tablekit::QueueServiceClient::from_connection_string(
    ///     "QueueEndpoint=https://myaccount.queue.core.windows.net;SharedAccessSignature=sv=2019-02-02&sp=a&sig=abc",
    /// )?;
    /// let jobs = queues.queue("archive-jobs")?;
    /// assert_eq!(jobs.name(), "archive-jobs");
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    ///
    /// `UseEmbeddedStorage=true;Path=<file>` is the embedded store kept in that
    /// file, as [`embedded_at`](QueueServiceClient::embedded_at).
    pub fn from_connection_string(s: &str) -> Result<Self> {
        match crate::backend::target(s)? {
            #[cfg(feature = "durable")]
            crate::backend::Target::File(path) => Self::embedded_at(path),
            crate::backend::Target::Account(account) => Self::new(account),
        }
    }

    /// The embedded queue store kept in the file at `path` (created if
    /// missing, with its folders), on the system clock: every acknowledged change is committed
    /// to the file first, and reopening the file gives back every queue and
    /// message, with its visibility time, dequeue count and pop receipt.
    ///
    /// One file holds one account: the same path given to
    /// [`TableServiceClient::embedded_at`](crate::TableServiceClient::embedded_at)
    /// and [`BlobServiceClient::embedded_at`](crate::BlobServiceClient::embedded_at)
    /// keeps the tables and blobs beside the queues, in one database opened
    /// once in this process. A second queue store on a file whose queues are
    /// open (here or in another process) is refused with a clear error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tablekit::Result<()> {
    /// let path = std::env::temp_dir().join(format!("doc-queues-{}.redb", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// {
    ///     let jobs = tablekit::QueueServiceClient::embedded_at(&path)?.queue("jobs")?;
    ///     jobs.create_queue().await?;
    ///     jobs.send("resize photo 17").await?;
    /// }
    /// let jobs = tablekit::QueueServiceClient::embedded_at(&path)?.queue("jobs")?;
    /// let got = jobs.receive().await?;
    /// assert_eq!(got[0].text()?, "resize photo 17");
    /// # drop(jobs);
    /// # tablekit::storage::remove_file(&path).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(QueueServiceClient {
            backend: embedded_queues_at(path.as_ref(), Clock::System)?,
        })
    }

    /// The embedded queue store kept in the file at `path`, whose time is
    /// `clock` (see [`embedded_at`](QueueServiceClient::embedded_at) and
    /// [`embedded_with_clock`](QueueServiceClient::embedded_with_clock)).
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at_with_clock(
        path: impl AsRef<std::path::Path>,
        clock: ManualClock,
    ) -> Result<Self> {
        Ok(QueueServiceClient {
            backend: embedded_queues_at(path.as_ref(), Clock::Manual(clock))?,
        })
    }

    /// A fresh, isolated, in-memory queue store with the Queue service's
    /// semantics, on the system clock.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded() -> Self {
        QueueServiceClient {
            backend: embedded_queues(Clock::System),
        }
    }

    /// A fresh in-memory queue store whose time is `clock`: visibility timeouts
    /// and lifetimes pass when the test calls [`ManualClock::advance`].
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded_with_clock(clock: ManualClock) -> Self {
        QueueServiceClient {
            backend: embedded_queues(Clock::Manual(clock)),
        }
    }

    /// A client for one queue. The name is checked here (see [`validate::queue_name`]).
    ///
    /// ```
    /// let queues = tablekit::QueueServiceClient::embedded();
    /// assert!(queues.queue("archive-jobs").is_ok());
    /// assert!(queues.queue("Archive_Jobs").unwrap_err().is_invalid_input());
    /// ```
    pub fn queue(&self, name: &str) -> Result<QueueClient> {
        validate::queue_name(name)?;
        Ok(QueueClient {
            backend: self.backend.clone(),
            name: Arc::from(name),
            encoding: MessageEncoding::default(),
        })
    }
}

impl QueueServiceClient {
    /// The backend, for the management calls of sibling modules.
    pub(super) fn backend(&self) -> &Arc<dyn QueueBackend> {
        &self.backend
    }
}
