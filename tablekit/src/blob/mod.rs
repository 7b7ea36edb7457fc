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
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

use crate::backend::blob::{BlobHeaders, BlobOp, BlobResponse, Conditions};
pub use crate::backend::blob::{
    BlobHttpHeaders, BlobProperties, ContainerProperties, CopyInfo, CopyStatus, LeaseInfo,
    LeaseState,
};
use crate::entity::IfMatch;
use crate::error::{Error, ErrorCode, Result, ValidationError};

#[cfg(feature = "admin")]
mod admin;
mod container;
mod copy;
mod download;
mod lease;
mod listing;
mod properties;
mod service;
mod upload;
pub use container::{BlobListing, ContainerClient, ListBlobs};
pub use copy::StartCopy;
pub use download::{Download, DownloadRequest};
pub use lease::{Lease, LeaseDuration, LeaseId};
pub use listing::{
    BlobEntry, ContainerListing, HierarchicalListing, ListBlobsByDelimiter, ListContainers,
};
pub use properties::{SetContainerMetadata, SetHttpHeaders, SetMetadata};
pub use service::BlobServiceClient;
pub use upload::{BlobWritten, Upload};

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

/// Metadata names travel in header names, values as header values.
fn check_metadata(metadata: &[(String, String)]) -> Result<()> {
    for (name, value) in metadata {
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

/// HTTP header values are printable ASCII; an MD5 is 16 bytes.
fn check_http_headers(h: &BlobHttpHeaders) -> Result<()> {
    for (name, value) in [
        ("content type", &h.content_type),
        ("content encoding", &h.content_encoding),
        ("content language", &h.content_language),
        ("content disposition", &h.content_disposition),
        ("cache control", &h.cache_control),
    ] {
        if let Some(v) = value {
            if !v
                .chars()
                .all(|c| c == '\t' || (c.is_ascii() && !c.is_ascii_control()))
            {
                return Err(invalid(format!(
                    "the {name} {v:?} travels as an HTTP header and must be printable ASCII"
                )));
            }
        }
    }
    if let Some(md5) = &h.content_md5 {
        if md5.len() != 16 {
            return Err(invalid(format!(
                "an MD5 hash is 16 bytes, not {}",
                md5.len()
            )));
        }
    }
    Ok(())
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
            ..Conditions::default()
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
