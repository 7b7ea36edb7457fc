//! [`BlobServiceClient`]: the account's containers.

use std::fmt;
use std::sync::Arc;

use crate::account::Account;
use crate::backend::blob::BlobBackend;
use crate::backend::connect_blobs;
#[cfg(feature = "embedded")]
use crate::backend::embedded_blobs;
#[cfg(feature = "embedded")]
use crate::clock::{Clock, ManualClock};
use crate::error::Result;
use crate::options::ClientOptions;
use crate::validate;

use super::container::ContainerClient;

/// A client for the blob containers of one storage account (or of an embedded
/// store). Cheap to clone; clones share one connection pool or store.
#[derive(Clone)]
pub struct BlobServiceClient {
    pub(super) backend: Arc<dyn BlobBackend>,
}

impl fmt::Debug for BlobServiceClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobServiceClient")
            .field("backend", &self.backend)
            .finish()
    }
}

impl BlobServiceClient {
    /// A client for this account's Blob service over HTTP, with default options.
    pub fn new(account: Account) -> Result<Self> {
        Self::with_options(account, ClientOptions::default())
    }

    /// A client for this account's Blob service over HTTP.
    pub fn with_options(account: Account, options: ClientOptions) -> Result<Self> {
        Ok(BlobServiceClient {
            backend: connect_blobs(account, &options)?,
        })
    }

    /// A client from a connection string (see [`Account::from_connection_string`]).
    /// Nothing is sent until the first operation.
    ///
    /// ```
    /// let blobs = tablekit::BlobServiceClient::from_connection_string(
    ///     "BlobEndpoint=https://myaccount.blob.core.windows.net;SharedAccessSignature=sv=2019-02-02&sr=c&sp=r&sig=abc",
    /// )?;
    /// let photos = blobs.container("photos")?;
    /// assert_eq!(photos.name(), "photos");
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    ///
    /// `UseEmbeddedStorage=true;Path=<file>` is the embedded store kept in that
    /// file, as [`embedded_at`](BlobServiceClient::embedded_at).
    pub fn from_connection_string(s: &str) -> Result<Self> {
        match crate::backend::target(s)? {
            #[cfg(feature = "durable")]
            crate::backend::Target::File(path) => Self::embedded_at(path),
            crate::backend::Target::Account(account) => Self::new(account),
        }
    }

    /// The embedded blob store kept in the file at `path` (created if
    /// missing, with its folders): every acknowledged change (a blob put, a block put, a block
    /// list committed, a delete) is committed to the file first, and reopening
    /// the file gives back every container and blob with its ETag,
    /// Last-Modified, content type and metadata, and the blocks not yet
    /// committed. Blobs are held in memory too, as by
    /// [`embedded`](BlobServiceClient::embedded).
    ///
    /// One file holds one account: the same path given to
    /// [`TableServiceClient::embedded_at`](crate::TableServiceClient::embedded_at)
    /// and [`QueueServiceClient::embedded_at`](crate::QueueServiceClient::embedded_at)
    /// keeps the tables and queues beside the blobs, in one database opened
    /// once in this process. A second blob store on a file whose blobs are open
    /// (here or in another process) is refused with a clear error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tablekit::Result<()> {
    /// let path = std::env::temp_dir().join(format!("doc-blobs-{}.redb", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// {
    ///     let photos = tablekit::BlobServiceClient::embedded_at(&path)?.container("photos")?;
    ///     photos.create_container().await?;
    ///     photos.blob("a.txt")?.upload(b"hello".to_vec()).await?;
    /// }
    /// let photos = tablekit::BlobServiceClient::embedded_at(&path)?.container("photos")?;
    /// assert_eq!(photos.blob("a.txt")?.download().bytes().await?.as_ref(), b"hello");
    /// # drop(photos);
    /// # tablekit::storage::remove_file(&path).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(BlobServiceClient {
            backend: crate::backend::embedded_blobs_at(path.as_ref(), Clock::System)?,
        })
    }

    /// The embedded blob store kept in the file at `path`, whose time (for
    /// Last-Modified and leases) is `clock`; see
    /// [`embedded_at`](BlobServiceClient::embedded_at).
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at_with_clock(
        path: impl AsRef<std::path::Path>,
        clock: ManualClock,
    ) -> Result<Self> {
        Ok(BlobServiceClient {
            backend: crate::backend::embedded_blobs_at(path.as_ref(), Clock::Manual(clock))?,
        })
    }

    /// A fresh, isolated, in-memory blob store with the Blob service's semantics.
    /// It keeps every blob's bytes in memory.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded() -> Self {
        BlobServiceClient {
            backend: embedded_blobs(Clock::System),
        }
    }

    /// A fresh in-memory blob store whose time (Last-Modified, and when
    /// leases end) is `clock`.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded_with_clock(clock: ManualClock) -> Self {
        BlobServiceClient {
            backend: embedded_blobs(Clock::Manual(clock)),
        }
    }

    /// A client for one container. The name is checked here: 3 to 63 lower-case
    /// letters, digits and single hyphens, starting and ending with a letter or digit.
    ///
    /// ```
    /// let blobs = tablekit::BlobServiceClient::embedded();
    /// assert!(blobs.container("photos-2014").is_ok());
    /// assert!(blobs.container("Photos").unwrap_err().is_invalid_input());
    /// ```
    pub fn container(&self, name: &str) -> Result<ContainerClient> {
        validate::container_name(name)?;
        Ok(ContainerClient {
            backend: self.backend.clone(),
            name: Arc::from(name),
        })
    }
}
