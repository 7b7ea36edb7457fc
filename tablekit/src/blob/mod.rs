//! The blob client: [`BlobServiceClient`] for an account's containers,
//! [`ContainerClient`] for one container, [`BlobClient`] for one block blob.
//!
//! The design guide keeps what does not fit an entity in blobs: the large-entity
//! pattern (a photo beside the employee entity) and the log-data pattern (log
//! files named by time). Uploads of any size run in bounded memory: small bodies
//! go in one request, larger ones as blocks, a few in flight at a time, then one
//! commit; downloads come as a stream of chunks.
//!
//! ```
//! # async fn run() -> tablekit::Result<()> {
//! use futures::TryStreamExt;
//! use tablekit::BlobServiceClient;
//!
//! let blobs = BlobServiceClient::embedded();
//! let photos = blobs.container("photos")?;
//! photos.create_container().await?;
//!
//! let photo = photos.blob("employees/000456.jpg")?;
//! let written = photo.upload(vec![0xff_u8; 10_000]).content_type("image/jpeg").await?;
//!
//! // Read a range, and only if nobody replaced the photo meanwhile.
//! let head = photo.download().range(0..4).if_match(written.etag()).bytes().await?;
//! assert_eq!(&head[..], &[0xff; 4]);
//!
//! let names: Vec<String> = photos.list_blobs().prefix("employees/").stream()
//!     .map_ok(|p| p.name().to_owned()).try_collect().await?;
//! assert_eq!(names, ["employees/000456.jpg"]);
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
//! ```

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::{Bound, RangeBounds};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

use crate::account::Account;
pub use crate::backend::blob::BlobProperties;
use crate::backend::blob::{BlobBackend, BlobHeaders, BlobOp, BlobResponse, Conditions};
use crate::backend::connect_blobs;
#[cfg(feature = "embedded")]
use crate::backend::embedded_blobs;
#[cfg(feature = "embedded")]
use crate::clock::{Clock, ManualClock};
use crate::entity::{ETag, IfMatch, IfNoneMatch};
use crate::error::{Error, ErrorCode, Result, ValidationError};
use crate::options::ClientOptions;
use crate::validate;

/// The block size of large uploads: 4 MiB.
pub const DEFAULT_BLOCK_SIZE: usize = 4 * 1024 * 1024;

/// How many blocks of one upload are sent at once by default.
pub const DEFAULT_BLOCKS_IN_FLIGHT: usize = 4;

/// The largest block the service takes (4,000 MiB), and the most blocks a blob has.
pub const MAX_BLOCK_SIZE: usize = 4000 * 1024 * 1024;
const MAX_BLOCKS: usize = 50_000;

fn invalid(reason: impl Into<String>) -> Error {
    Error::invalid(ValidationError::Blob {
        reason: reason.into(),
    })
}

fn unexpected(op: &str) -> Error {
    Error::decode(format!("unexpected answer to {op}"))
}

/// A client for the blob containers of one storage account (or of an embedded
/// store). Cheap to clone; clones share one connection pool or store.
#[derive(Clone)]
pub struct BlobServiceClient {
    backend: Arc<dyn BlobBackend>,
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
        if let Some(path) = crate::backend::embedded_connection(s) {
            #[cfg(feature = "durable")]
            return Self::embedded_at(path?);
            #[cfg(not(feature = "durable"))]
            return Err(crate::backend::needs_durable(path));
        }
        Self::new(Account::from_connection_string(s)?)
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
    /// # std::fs::remove_file(&path).unwrap();
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

    /// A fresh, isolated, in-memory blob store with the Blob service's semantics.
    /// It keeps every blob's bytes in memory.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded() -> Self {
        BlobServiceClient {
            backend: embedded_blobs(Clock::System),
        }
    }

    /// A fresh in-memory blob store whose time (Last-Modified) is `clock`.
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

/// A client for one container. Cheap to clone.
#[derive(Clone)]
pub struct ContainerClient {
    backend: Arc<dyn BlobBackend>,
    name: Arc<str>,
}

impl fmt::Debug for ContainerClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContainerClient")
            .field("container", &self.name)
            .finish()
    }
}

impl ContainerClient {
    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the container; fails with a conflict
    /// ([`ErrorCode::ContainerAlreadyExists`]) if it exists.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let err = photos.create_container().await.unwrap_err();
    /// assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::ContainerAlreadyExists));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn create_container(&self) -> Result<()> {
        match self
            .backend
            .blob(BlobOp::CreateContainer {
                container: &self.name,
            })
            .await?
        {
            BlobResponse::Created(_) | BlobResponse::Done => Ok(()),
            _ => Err(unexpected("a container create")),
        }
    }

    /// Creates the container unless it exists; returns whether it was created.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// assert!(!photos.create_container_if_not_exists().await?, "created above");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn create_container_if_not_exists(&self) -> Result<bool> {
        match self.create_container().await {
            Ok(()) => Ok(true),
            // After a lost answer, the retry's 409 is most likely our own container.
            Err(e) if e.code() == Some(&ErrorCode::ContainerAlreadyExists) => Ok(e.is_ambiguous()),
            Err(e) => Err(e),
        }
    }

    /// Deletes the container and its blobs; not-found if there is none.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// photos.delete_container().await?;
    /// assert!(photos.delete_container().await.unwrap_err().is_not_found());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete_container(&self) -> Result<()> {
        self.backend
            .blob(BlobOp::DeleteContainer {
                container: &self.name,
            })
            .await
            .map(drop)
    }

    /// Deletes the container if it exists; returns whether it did.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// assert!(photos.delete_container_if_exists().await?);
    /// assert!(!photos.delete_container_if_exists().await?);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete_container_if_exists(&self) -> Result<bool> {
        match self.delete_container().await {
            Ok(()) => Ok(true),
            // After a lost answer, the retry's 404 is most likely our own deletion.
            Err(e) if e.code() == Some(&ErrorCode::ContainerNotFound) => Ok(e.is_ambiguous()),
            Err(e) => Err(e),
        }
    }

    /// Lists the container's blobs in name order; see [`ListBlobs`].
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// for name in ["2014/07/31/a.log", "2014/08/01/b.log"] {
    ///     photos.blob(name)?.upload(name.to_owned()).await?;
    /// }
    /// let july = photos.list_blobs().prefix("2014/07/").fetch_all().await?;
    /// assert_eq!(july.len(), 1);
    /// assert_eq!(july[0].name(), "2014/07/31/a.log");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn list_blobs(&self) -> ListBlobs {
        ListBlobs {
            container: self.clone(),
            prefix: None,
            page_size: None,
        }
    }

    /// A client for one blob of this container. The name is checked here
    /// (1 to 1,024 characters, no control characters).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("employees/000456.jpg")?;
    /// assert_eq!(photo.name(), "employees/000456.jpg");
    /// assert!(photos.blob("").unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn blob(&self, name: &str) -> Result<BlobClient> {
        validate::blob_name(name)?;
        Ok(BlobClient {
            container: self.clone(),
            name: Arc::from(name),
            block_size: DEFAULT_BLOCK_SIZE,
            blocks_in_flight: DEFAULT_BLOCKS_IN_FLIGHT,
        })
    }
}

/// A listing of blobs; see [`ContainerClient::list_blobs`].
#[derive(Debug)]
#[must_use = "a listing does nothing until streamed or collected"]
pub struct ListBlobs {
    container: ContainerClient,
    prefix: Option<String>,
    page_size: Option<u32>,
}

impl ListBlobs {
    /// Only blobs whose name starts with `prefix` (a "folder": `2014/07/31/`).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// photos.blob("employees/1.jpg")?.upload("1").await?;
    /// photos.blob("logos/a.png")?.upload("a").await?;
    /// let employees = photos.list_blobs().prefix("employees/").fetch_all().await?;
    /// assert_eq!(employees.len(), 1);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// At most `n` (1 to 5,000) blobs per request.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// for i in 0..5 {
    ///     photos.blob(&format!("{i}.jpg"))?.upload("x").await?;
    /// }
    /// // Two per request, three requests, one listing.
    /// assert_eq!(photos.list_blobs().page_size(2).fetch_all().await?.len(), 5);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n);
        self
    }

    /// The blobs' properties, in name order, across as many requests as needed.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use futures::TryStreamExt;
    /// photos.blob("a.jpg")?.upload(vec![0u8; 10]).await?;
    /// photos.blob("b.jpg")?.upload(vec![0u8; 20]).await?;
    /// let total: u64 = photos.list_blobs().stream().map_ok(|p| p.size()).try_fold(0, |a, b| async move { Ok(a + b) }).await?;
    /// assert_eq!(total, 30);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn stream(self) -> BlobListing {
        if let Some(n) = self.page_size {
            if !(1..=5000).contains(&n) {
                let err = invalid(format!("page_size({n}) is outside 1..=5000"));
                return BlobListing(stream::once(async move { Err(err) }).boxed());
            }
        }
        struct State {
            list: ListBlobs,
            marker: Option<String>,
            done: bool,
        }
        let state = State {
            list: self,
            marker: None,
            done: false,
        };
        BlobListing(
            stream::try_unfold(state, |mut s| async move {
                if s.done {
                    return Ok(None);
                }
                let resp = s
                    .list
                    .container
                    .backend
                    .blob(BlobOp::List {
                        container: &s.list.container.name,
                        prefix: s.list.prefix.as_deref(),
                        marker: s.marker.as_deref(),
                        max: s.list.page_size,
                    })
                    .await?;
                let BlobResponse::Listing { blobs, next_marker } = resp else {
                    return Err(unexpected("a blob listing"));
                };
                if next_marker.is_some() && next_marker == s.marker {
                    return Err(Error::decode(
                        "the service answered a blob listing with the marker it was sent",
                    ));
                }
                s.done = next_marker.is_none();
                s.marker = next_marker;
                Ok(Some((stream::iter(blobs.into_iter().map(Ok)), s)))
            })
            .try_flatten()
            .boxed(),
        )
    }

    /// All the blobs' properties.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// photos.blob("a.jpg")?.upload("x").metadata("employee", "456").await?;
    /// let all = photos.list_blobs().fetch_all().await?;
    /// assert_eq!(all[0].metadata(), [("employee".to_owned(), "456".to_owned())]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn fetch_all(self) -> Result<Vec<BlobProperties>> {
        self.stream().try_collect().await
    }
}

/// The blobs of a listing; a [`Stream`] of `Result<BlobProperties>`.
pub struct BlobListing(BoxStream<'static, Result<BlobProperties>>);

impl fmt::Debug for BlobListing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BlobListing")
    }
}

impl Stream for BlobListing {
    type Item = Result<BlobProperties>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

/// A client for one block blob. Cheap to clone.
#[derive(Clone)]
pub struct BlobClient {
    container: ContainerClient,
    name: Arc<str>,
    block_size: usize,
    blocks_in_flight: usize,
}

impl fmt::Debug for BlobClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobClient")
            .field("container", &self.container.name)
            .field("blob", &self.name)
            .field("block_size", &self.block_size)
            .field("blocks_in_flight", &self.blocks_in_flight)
            .finish()
    }
}

/// Where an upload's bytes come from.
enum Source {
    Bytes(Bytes),
    Stream(BoxStream<'static, Result<Bytes>>),
}

impl BlobClient {
    /// The blob's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Large uploads are cut into blocks of `bytes` (default 4 MiB), and at most
    /// `in_flight` blocks (default 4) are sent at once: an upload holds about
    /// `bytes × (in_flight + 1)` in memory whatever the blob's size.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// // 1 MiB blocks, two at a time: about 3 MiB of memory for an upload of any size.
    /// let video = photos.blob("intro.mp4")?.with_blocks(1 << 20, 2)?;
    /// video.upload(vec![7u8; 3 << 20]).await?;
    /// assert_eq!(video.properties().await?.size(), 3 << 20);
    /// assert!(photos.blob("x")?.with_blocks(0, 1).unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn with_blocks(mut self, bytes: usize, in_flight: usize) -> Result<Self> {
        if bytes == 0 || bytes > MAX_BLOCK_SIZE {
            return Err(invalid(format!(
                "a block of {bytes} bytes is outside 1..={MAX_BLOCK_SIZE}"
            )));
        }
        if in_flight == 0 {
            return Err(invalid("at least one block must be in flight"));
        }
        self.block_size = bytes;
        self.blocks_in_flight = in_flight;
        Ok(self)
    }

    async fn run(&self, op: BlobOp<'_>) -> Result<BlobResponse> {
        self.container.backend.blob(op).await
    }

    /// Uploads these bytes, replacing the blob; await the returned builder after
    /// setting a content type, metadata or a condition.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("000456.jpg")?;
    /// let written = photo.upload(vec![0xff_u8; 1000]).content_type("image/jpeg").await?;
    /// assert_eq!(photo.properties().await?.etag(), written.etag());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn upload(&self, body: impl Into<Bytes>) -> Upload {
        self.upload_from(Source::Bytes(body.into()))
    }

    /// Uploads what the stream yields (for example a file read in chunks), in
    /// bounded memory: see [`with_blocks`](BlobClient::with_blocks). The stream's
    /// first error stops the upload and leaves the blob as it was.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use bytes::Bytes;
    /// let chunks = futures::stream::iter((0..4).map(|i| Ok::<_, std::io::Error>(Bytes::from(vec![i; 1000]))));
    /// let log = photos.blob("log.bin")?.with_blocks(1500, 2)?;
    /// log.upload_stream(chunks).await?; // three blocks of 1500, 1500 and 1000 bytes
    /// assert_eq!(log.download().bytes().await?.len(), 4000);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn upload_stream<S, E>(&self, chunks: S) -> Upload
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let chunks = chunks
            .map_err(|e| {
                Error::from(crate::error::ErrorKind::Transport(
                    crate::error::TransportError::new(
                        crate::error::TransportKind::Request,
                        "the upload's source failed",
                        Some(Box::new(e)),
                    ),
                ))
            })
            .boxed();
        self.upload_from(Source::Stream(chunks))
    }

    /// Uploads everything `reader` yields (a `tokio::fs::File`, say) in bounded
    /// memory, as [`upload_stream`](BlobClient::upload_stream).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// // Any tokio AsyncRead: a file, a socket, or here bytes in memory.
    /// let reader = std::io::Cursor::new(b"line 1\nline 2\n".to_vec());
    /// photos.blob("notes.txt")?.upload_reader(reader).content_type("text/plain").await?;
    /// assert_eq!(photos.blob("notes.txt")?.properties().await?.size(), 14);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn upload_reader<R>(&self, reader: R) -> Upload
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
    {
        let chunk = self.block_size.min(1 << 20);
        let chunks = stream::try_unfold(reader, move |mut r| async move {
            use tokio::io::AsyncReadExt as _;
            let mut buf = BytesMut::with_capacity(chunk);
            while buf.len() < chunk {
                if r.read_buf(&mut buf).await? == 0 {
                    break;
                }
            }
            Ok::<_, std::io::Error>(if buf.is_empty() {
                None
            } else {
                Some((buf.freeze(), r))
            })
        });
        self.upload_stream(chunks)
    }

    fn upload_from(&self, source: Source) -> Upload {
        Upload {
            blob: self.clone(),
            source,
            headers: BlobHeaders::default(),
            conditions: Conditions::default(),
        }
    }

    /// Downloads the blob (or a range of it); await the builder for a
    /// [`Download`] stream, or call [`bytes`](DownloadRequest::bytes).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use futures::TryStreamExt;
    /// let photo = photos.blob("000456.jpg")?;
    /// photo.upload(vec![1u8; 100_000]).await?;
    /// // As a stream of chunks, never all in memory...
    /// let mut download = photo.download().await?;
    /// let mut seen = 0;
    /// while let Some(chunk) = download.try_next().await? {
    ///     seen += chunk.len();
    /// }
    /// assert_eq!(seen, 100_000);
    /// // ...or into memory at once.
    /// assert_eq!(photo.download().bytes().await?.len(), 100_000);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn download(&self) -> DownloadRequest {
        DownloadRequest {
            blob: self.clone(),
            range: None,
            conditions: Conditions::default(),
        }
    }

    /// The blob's properties; not-found ([`ErrorCode::BlobNotFound`]) if there is none.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("000456.jpg")?;
    /// photo.upload("jpeg").content_type("image/jpeg").metadata("employee", "456").await?;
    /// let p = photo.properties().await?;
    /// assert_eq!((p.size(), p.content_type()), (4, Some("image/jpeg")));
    /// assert_eq!(p.metadata(), [("employee".to_owned(), "456".to_owned())]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn properties(&self) -> Result<BlobProperties> {
        match self
            .run(BlobOp::Properties {
                container: &self.container.name,
                blob: &self.name,
            })
            .await?
        {
            BlobResponse::Properties(p) => Ok(p),
            _ => Err(unexpected("a blob properties read")),
        }
    }

    /// Whether the blob exists.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("000456.jpg")?;
    /// assert!(!photo.exists().await?);
    /// photo.upload("jpeg").await?;
    /// assert!(photo.exists().await?);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn exists(&self) -> Result<bool> {
        match self.properties().await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(&ErrorCode::BlobNotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the blob; with an ETag (or [`IfMatch::ETag`]), only if it is still
    /// that version (else [`Error::is_precondition_failed`]); with
    /// [`IfMatch::Any`], whatever version is stored. Not-found if there is none.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("000456.jpg")?;
    /// let old = photo.upload("v1").await?;
    /// photo.upload("v2").await?;
    /// // Somebody replaced it: the conditional delete leaves it alone.
    /// assert!(photo.delete(old.etag()).await.unwrap_err().is_precondition_failed());
    /// photo.delete(tablekit::IfMatch::Any).await?;
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete(&self, if_match: impl Into<IfMatch>) -> Result<()> {
        let conditions = Conditions {
            if_match: if_match.into().into_etag(),
            if_none_match_any: false,
        };
        self.run(BlobOp::Delete {
            container: &self.container.name,
            blob: &self.name,
            conditions: &conditions,
        })
        .await
        .map(drop)
    }

    /// Deletes the blob if it exists; returns whether it did (`true` when an
    /// attempt's answer was lost and the retry found none). Safe to repeat.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("000456.jpg")?;
    /// photo.upload("jpeg").await?;
    /// assert!(photo.delete_if_exists().await?);
    /// assert!(!photo.delete_if_exists().await?);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete_if_exists(&self) -> Result<bool> {
        match self.delete(IfMatch::Any).await {
            Ok(()) => Ok(true),
            // After a lost answer, the retry's 404 is most likely our own deletion.
            Err(e) if e.code() == Some(&ErrorCode::BlobNotFound) => Ok(e.is_ambiguous()),
            Err(e) => Err(e),
        }
    }
}

/// What a successful upload stored.
///
/// ```
/// # async fn run() -> tablekit::Result<()> {
/// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
/// # photos.create_container().await?;
/// let written = photos.blob("a.jpg")?.upload("jpeg").await?;
/// let props = photos.blob("a.jpg")?.properties().await?;
/// assert_eq!(written.etag(), props.etag());
/// assert_eq!(written.last_modified(), props.last_modified());
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobWritten {
    etag: ETag,
    last_modified: DateTime<Utc>,
}

impl BlobWritten {
    /// The blob's new ETag.
    pub fn etag(&self) -> &ETag {
        &self.etag
    }

    /// When it was written.
    pub fn last_modified(&self) -> DateTime<Utc> {
        self.last_modified
    }
}

/// An upload being prepared; await it. See [`BlobClient::upload`].
#[must_use = "nothing is uploaded until awaited"]
pub struct Upload {
    blob: BlobClient,
    source: Source,
    headers: BlobHeaders,
    conditions: Conditions,
}

impl fmt::Debug for Upload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upload")
            .field("blob", &self.blob.name)
            .field("headers", &self.headers)
            .field("conditions", &self.conditions)
            .finish_non_exhaustive()
    }
}

impl Upload {
    /// The blob's `Content-Type`.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// photos.blob("a.svg")?.upload("<svg/>").content_type("image/svg+xml").await?;
    /// let p = photos.blob("a.svg")?.properties().await?;
    /// assert_eq!(p.content_type(), Some("image/svg+xml"));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.headers.content_type = Some(content_type.into());
        self
    }

    /// A user metadata entry (`x-ms-meta-{name}`); the name must be an identifier.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("a.jpg")?;
    /// photo.upload("jpeg").metadata("employee", "456").await?;
    /// assert_eq!(photo.properties().await?.metadata(), [("employee".to_owned(), "456".to_owned())]);
    /// // Names travel as header names, values as header values: checked before sending.
    /// assert!(photo.upload("x").metadata("not-an-identifier", "1").await.unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn metadata(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.metadata.push((name.into(), value.into()));
        self
    }

    /// Replace the blob only if it is still this version (an ETag or
    /// [`IfMatch::ETag`]); otherwise fail with [`Error::is_precondition_failed`]
    /// and leave it alone. [`IfMatch::Any`] is the default: whatever is stored,
    /// or nothing.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let report = photos.blob("report.txt")?;
    /// let v1 = report.upload("v1").await?;
    /// let v2 = report.upload("v2").if_match(v1.etag()).await?;
    /// // A writer still holding v1 loses, and v2 stays.
    /// let err = report.upload("v1 edited").if_match(v1.etag()).await.unwrap_err();
    /// assert!(err.is_precondition_failed());
    /// assert_eq!(report.properties().await?.etag(), v2.etag());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn if_match(mut self, condition: impl Into<IfMatch>) -> Self {
        self.conditions.if_match = condition.into().into_etag();
        self
    }

    /// Create the blob only if there is none; otherwise fail with a conflict
    /// ([`ErrorCode::BlobAlreadyExists`]) and leave it alone.
    ///
    /// ```
    /// use tablekit::IfNoneMatch;
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let report = photos.blob("report.txt")?;
    /// report.upload("first").if_none_match(IfNoneMatch::Any).await?;
    /// let err = report.upload("second").if_none_match(IfNoneMatch::Any).await.unwrap_err();
    /// assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::BlobAlreadyExists));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn if_none_match(mut self, condition: IfNoneMatch) -> Self {
        self.conditions.if_none_match_any = matches!(condition, IfNoneMatch::Any);
        self
    }

    fn check(&self) -> Result<()> {
        for (name, value) in &self.headers.metadata {
            let ok = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(invalid(format!(
                    "metadata name {name:?} must be an identifier (ASCII letters, digits, _)"
                )));
            }
            if !value.chars().all(|c| c.is_ascii() && !c.is_ascii_control()) {
                return Err(invalid(format!(
                    "metadata {name:?}: values travel as HTTP headers and must be printable ASCII"
                )));
            }
        }
        Ok(())
    }

    /// Uploads.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let upload = photos.blob("a.jpg")?.upload("jpeg");
    /// let written = upload.send().await?; // the same as `upload.await`
    /// assert!(!written.etag().as_str().is_empty());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn send(self) -> Result<BlobWritten> {
        self.check()?;
        let Upload {
            blob,
            source,
            headers,
            conditions,
        } = self;
        let written = match source {
            Source::Bytes(body) if body.len() <= blob.block_size => {
                put_whole(&blob, body, &headers, &conditions).await?
            }
            Source::Bytes(body) => {
                let chunks = stream::iter(
                    (0..body.len())
                        .step_by(blob.block_size)
                        .map(|i| Ok(body.slice(i..(i + blob.block_size).min(body.len()))))
                        .collect::<Vec<_>>(),
                )
                .boxed();
                put_blocks(&blob, chunks, &headers, &conditions).await?
            }
            Source::Stream(chunks) => {
                let mut blocks = rechunk(chunks, blob.block_size);
                // Peek at the first two blocks: one block and the end is one request.
                let first = blocks.try_next().await?;
                let second = match first {
                    Some(_) => blocks.try_next().await?,
                    None => None,
                };
                match (first, second) {
                    (None, _) => put_whole(&blob, Bytes::new(), &headers, &conditions).await?,
                    (Some(only), None) => put_whole(&blob, only, &headers, &conditions).await?,
                    (Some(a), Some(b)) => {
                        let all = stream::iter([Ok(a), Ok(b)]).chain(blocks).boxed();
                        put_blocks(&blob, all, &headers, &conditions).await?
                    }
                }
            }
        };
        let BlobResponse::Written {
            etag,
            last_modified,
        } = written
        else {
            return Err(unexpected("an upload"));
        };
        Ok(BlobWritten {
            etag,
            last_modified,
        })
    }
}

impl IntoFuture for Upload {
    type Output = Result<BlobWritten>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

async fn put_whole(
    blob: &BlobClient,
    body: Bytes,
    headers: &BlobHeaders,
    conditions: &Conditions,
) -> Result<BlobResponse> {
    blob.run(BlobOp::Put {
        container: &blob.container.name,
        blob: &blob.name,
        body,
        headers,
        conditions,
    })
    .await
}

/// Block ids: all the same length, as the service requires.
fn block_id(index: usize) -> String {
    BASE64.encode(format!("block-{index:06}"))
}

/// Puts the blocks, a few at a time, then commits them in order. Nothing is
/// visible until the commit; blocks of a failed upload are discarded by the
/// service after a week.
async fn put_blocks(
    blob: &BlobClient,
    blocks: BoxStream<'static, Result<Bytes>>,
    headers: &BlobHeaders,
    conditions: &Conditions,
) -> Result<BlobResponse> {
    let container = blob.container.name.clone();
    let name = blob.name.clone();
    let backend = blob.container.backend.clone();
    let mut done: Vec<(usize, String)> = blocks
        .enumerate()
        .map(|(i, block)| {
            let (container, name, backend) = (container.clone(), name.clone(), backend.clone());
            async move {
                if i >= MAX_BLOCKS {
                    return Err(invalid(format!(
                        "a blob holds at most {MAX_BLOCKS} blocks; use larger blocks"
                    )));
                }
                let id = block_id(i);
                backend
                    .blob(BlobOp::PutBlock {
                        container: &container,
                        blob: &name,
                        block_id: &id,
                        body: block?,
                    })
                    .await?;
                Ok((i, id))
            }
        })
        .buffer_unordered(blob.blocks_in_flight)
        .try_collect()
        .await?;
    // They finish in any order; the blob is the blocks in the order they were cut.
    done.sort_unstable_by_key(|(i, _)| *i);
    let ids: Vec<String> = done.into_iter().map(|(_, id)| id).collect();
    blob.run(BlobOp::PutBlockList {
        container: &blob.container.name,
        blob: &blob.name,
        block_ids: &ids,
        headers,
        conditions,
    })
    .await
}

/// Cuts a stream of chunks of any size into blocks of `size` (the last one shorter).
fn rechunk(
    chunks: BoxStream<'static, Result<Bytes>>,
    size: usize,
) -> BoxStream<'static, Result<Bytes>> {
    stream::try_unfold(
        (chunks, BytesMut::new(), false),
        move |(mut chunks, mut buf, mut ended)| async move {
            while !ended && buf.len() < size {
                match chunks.try_next().await? {
                    Some(c) => buf.extend_from_slice(&c),
                    None => ended = true,
                }
            }
            if buf.is_empty() {
                return Ok(None);
            }
            let block = buf.split_to(size.min(buf.len())).freeze();
            Ok(Some((block, (chunks, buf, ended))))
        },
    )
    .boxed()
}

/// A download being prepared; await it for a [`Download`].
#[derive(Debug)]
#[must_use = "nothing is downloaded until awaited"]
pub struct DownloadRequest {
    blob: BlobClient,
    range: Option<(u64, Option<u64>)>,
    conditions: Conditions,
}

impl DownloadRequest {
    /// Only these bytes: `0..4`, `1024..`, `..=99`. A range starting past the end
    /// is an error ([`ErrorCode::InvalidRange`]); one ending past it is cut at the end.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let log = photos.blob("app.log")?;
    /// log.upload("0123456789").await?;
    /// assert_eq!(&log.download().range(2..5).bytes().await?[..], b"234");
    /// assert_eq!(&log.download().range(8..).bytes().await?[..], b"89");
    /// assert_eq!(&log.download().range(..=1).bytes().await?[..], b"01");
    /// assert_eq!(&log.download().range(9..100).bytes().await?[..], b"9", "cut at the end");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn range(mut self, range: impl RangeBounds<u64>) -> Self {
        let first = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let last = match range.end_bound() {
            Bound::Included(&e) => Some(e),
            Bound::Excluded(&e) => Some(e.saturating_sub(1)),
            Bound::Unbounded => None,
        };
        self.range = Some((first, last));
        self
    }

    /// Only if the blob is still this version; otherwise
    /// [`Error::is_precondition_failed`].
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("a.jpg")?;
    /// let v1 = photo.upload("v1").await?;
    /// assert_eq!(&photo.download().if_match(v1.etag()).bytes().await?[..], b"v1");
    /// photo.upload("v2").await?;
    /// let err = photo.download().if_match(v1.etag()).bytes().await.unwrap_err();
    /// assert!(err.is_precondition_failed());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn if_match(mut self, condition: impl Into<IfMatch>) -> Self {
        self.conditions.if_match = condition.into().into_etag();
        self
    }

    /// Starts the download: the properties are known, the bytes come as read.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("a.jpg")?;
    /// photo.upload(vec![0u8; 5000]).content_type("image/jpeg").await?;
    /// let download = photo.download().range(0..10).send().await?;
    /// assert_eq!(download.properties().size(), 5000);
    /// assert_eq!(download.properties().content_type(), Some("image/jpeg"));
    /// assert_eq!(download.bytes().await?.len(), 10);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn send(self) -> Result<Download> {
        if let Some((first, Some(last))) = self.range {
            if last < first {
                return Err(invalid(format!("the range {first}..={last} is empty")));
            }
        }
        match self
            .blob
            .run(BlobOp::Get {
                container: &self.blob.container.name,
                blob: &self.blob.name,
                range: self.range,
                conditions: &self.conditions,
            })
            .await?
        {
            BlobResponse::Body { properties, chunks } => Ok(Download { properties, chunks }),
            _ => Err(unexpected("a download")),
        }
    }

    /// Downloads into memory.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// photos.blob("a.txt")?.upload("hello").await?;
    /// assert_eq!(&photos.blob("a.txt")?.download().bytes().await?[..], b"hello");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn bytes(self) -> Result<Bytes> {
        self.send().await?.bytes().await
    }
}

impl IntoFuture for DownloadRequest {
    type Output = Result<Download>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// A download under way: the blob's properties, and a [`Stream`] of its bytes
/// in chunks as they arrive.
///
/// ```
/// # async fn run() -> tablekit::Result<()> {
/// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
/// # photos.create_container().await?;
/// use futures::TryStreamExt;
/// let log = photos.blob("app.log")?;
/// log.upload("line 1\nline 2\n").await?;
/// let download = log.download().await?;
/// assert_eq!(download.properties().size(), 14);
/// let chunks: Vec<bytes::Bytes> = download.try_collect().await?;
/// assert_eq!(chunks.concat(), b"line 1\nline 2\n");
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
pub struct Download {
    properties: BlobProperties,
    chunks: BoxStream<'static, Result<Bytes>>,
}

impl fmt::Debug for Download {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Download")
            .field("properties", &self.properties)
            .finish_non_exhaustive()
    }
}

impl Download {
    /// The blob's properties (its whole size, not the range's).
    pub fn properties(&self) -> &BlobProperties {
        &self.properties
    }

    /// Reads the rest into memory.
    pub async fn bytes(self) -> Result<Bytes> {
        let mut out = BytesMut::new();
        let mut chunks = self.chunks;
        while let Some(c) = chunks.try_next().await? {
            out.extend_from_slice(&c);
        }
        Ok(out.freeze())
    }
}

impl Stream for Download {
    type Item = Result<Bytes>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.chunks.as_mut().poll_next(cx)
    }
}
