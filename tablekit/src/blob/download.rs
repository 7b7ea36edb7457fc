//! Downloads: the [`DownloadRequest`] builder and the [`Download`] stream.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::{Bound, RangeBounds};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::stream::{BoxStream, Stream, TryStreamExt};

use crate::backend::blob::{BlobOp, BlobProperties, BlobResponse, Conditions};
use crate::entity::IfMatch;
use crate::error::Result;

use super::{invalid, unexpected, BlobClient};

/// A download being prepared; await it for a [`Download`].
#[derive(Debug)]
#[must_use = "nothing is downloaded until awaited"]
pub struct DownloadRequest {
    pub(super) blob: BlobClient,
    pub(super) range: Option<(u64, Option<u64>)>,
    pub(super) conditions: Conditions,
}

impl DownloadRequest {
    /// Only these bytes: `0..4`, `1024..`, `..=99`. A range starting past the end
    /// is an error ([`ErrorCode::InvalidRange`](crate::error::ErrorCode::InvalidRange)); one ending past it is cut at the end.
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
    /// [`Error::is_precondition_failed`](crate::Error::is_precondition_failed).
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
