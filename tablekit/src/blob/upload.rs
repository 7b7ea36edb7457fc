//! Uploads: the [`Upload`] builder, whole or in blocks, and the
//! [`BlobWritten`] it answers with.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};

use crate::backend::blob::{BlobHeaders, BlobOp, BlobResponse, Conditions};
use crate::entity::{ETag, IfMatch, IfNoneMatch};
use crate::error::Result;

use super::lease::LeaseId;
use super::{
    check_http_headers, check_metadata, invalid, unexpected, BlobClient, Source, MAX_BLOCKS,
};
use crate::backend::blob::BlobHttpHeaders;

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
    pub(super) etag: ETag,
    pub(super) last_modified: DateTime<Utc>,
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
    pub(super) blob: BlobClient,
    pub(super) source: Source,
    pub(super) headers: BlobHeaders,
    pub(super) conditions: Conditions,
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
        self.headers.http.content_type = Some(content_type.into());
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
    /// [`IfMatch::ETag`]); otherwise fail with [`Error::is_precondition_failed`](crate::Error::is_precondition_failed)
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
    /// ([`ErrorCode::BlobAlreadyExists`](crate::error::ErrorCode::BlobAlreadyExists)) and leave it alone.
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

    /// The blob's other HTTP headers (encoding, language, disposition, cache
    /// control, MD5), and its content type if `headers` has one.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use tablekit::blob::BlobHttpHeaders;
    /// let report = photos.blob("report.csv.gz")?;
    /// let headers = BlobHttpHeaders::new().content_type("text/csv").content_encoding("gzip");
    /// report.upload(vec![0x1f, 0x8b]).http_headers(headers).await?;
    /// let p = report.properties().await?;
    /// assert_eq!(p.http_headers().get_content_encoding(), Some("gzip"));
    /// assert_eq!(p.content_type(), Some("text/csv"));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn http_headers(mut self, headers: BlobHttpHeaders) -> Self {
        let content_type = headers
            .content_type
            .clone()
            .or(self.headers.http.content_type.take());
        self.headers.http = headers;
        self.headers.http.content_type = content_type;
        self
    }

    /// Write under this lease: a blob with a lease held takes writes only
    /// with its id ([`Error::is_lease_held`](crate::Error::is_lease_held)
    /// otherwise), and a lease id given for a blob with none fails
    /// ([`Error::is_lease_lost`](crate::Error::is_lease_lost)).
    /// See [`BlobClient::acquire_lease`].
    pub fn lease(mut self, lease: impl Into<LeaseId>) -> Self {
        self.conditions.lease_id = Some(lease.into().0);
        self
    }

    fn check(&self) -> Result<()> {
        check_metadata(&self.headers.metadata)?;
        check_http_headers(&self.headers.http)
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
    let lease_id: Option<std::sync::Arc<str>> = conditions.lease_id.as_deref().map(Into::into);
    let mut done: Vec<(usize, String)> = blocks
        .enumerate()
        .map(|(i, block)| {
            let (container, name, backend) = (container.clone(), name.clone(), backend.clone());
            let lease_id = lease_id.clone();
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
                        lease_id: lease_id.as_deref(),
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
