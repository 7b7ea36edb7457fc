//! Server-side copies: [`StartCopy`] (Copy Blob) and polling its status.
//!
//! The service copies within the account without the bytes passing through
//! the client. A copy may finish at once (`success`) or run on (`pending`):
//! then poll the destination's properties ([`BlobClient::wait_for_copy`]).
//! The embedded store always copies at once.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use crate::backend::blob::{BlobOp, BlobResponse, Conditions, CopyInfo, CopySource, CopyStatus};
use crate::entity::IfMatch;
use crate::error::{Error, Result};

use super::lease::LeaseId;
use super::{check_metadata, unexpected, BlobClient};

enum Source {
    Blob { container: String, blob: String },
    Url(String),
}

/// A copy being prepared; await it for the copy's id and status. See
/// [`BlobClient::start_copy_from`].
#[must_use = "nothing is copied until awaited"]
pub struct StartCopy {
    blob: BlobClient,
    source: Source,
    metadata: Vec<(String, String)>,
    conditions: Conditions,
}

impl fmt::Debug for StartCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Blob { container, blob } => format!("{container}/{blob}"),
            // A URL may carry a SAS: only its path is shown.
            Source::Url(url) => url.split('?').next().unwrap_or_default().to_owned(),
        };
        f.debug_struct("StartCopy")
            .field("blob", &self.blob.name)
            .field("source", &source)
            .finish_non_exhaustive()
    }
}

impl StartCopy {
    /// A metadata entry for the copy: with any, the copy gets these instead
    /// of the source's metadata.
    pub fn metadata(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((name.into(), value.into()));
        self
    }

    /// Replace the destination only if it is still this version.
    pub fn if_match(mut self, condition: impl Into<IfMatch>) -> Self {
        self.conditions.if_match = condition.into().into_etag();
        self
    }

    /// The destination has a lease held with this id.
    pub fn lease(mut self, lease: impl Into<LeaseId>) -> Self {
        self.conditions.lease_id = Some(lease.into().0);
        self
    }

    /// Starts the copy.
    pub async fn send(self) -> Result<CopyInfo> {
        check_metadata(&self.metadata)?;
        let source = match &self.source {
            Source::Blob { container, blob } => CopySource::Blob { container, blob },
            Source::Url(url) => CopySource::Url(url),
        };
        match self
            .blob
            .run(BlobOp::Copy {
                container: &self.blob.container.name,
                blob: &self.blob.name,
                source,
                metadata: &self.metadata,
                conditions: &self.conditions,
            })
            .await?
        {
            BlobResponse::Copied { id, status, .. } => Ok(CopyInfo {
                id,
                status,
                source: None,
                progress: None,
                completed_on: None,
                status_description: None,
            }),
            _ => Err(unexpected("a copy")),
        }
    }
}

impl IntoFuture for StartCopy {
    type Output = Result<CopyInfo>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

impl BlobClient {
    /// Copies `source` (a blob of the same account, or of the same embedded
    /// store) into this blob, on the service's side: bytes, HTTP headers and
    /// metadata. Await it for the copy's [`CopyInfo`]; a copy still
    /// [`Pending`](CopyStatus::Pending) is followed with
    /// [`wait_for_copy`](BlobClient::wait_for_copy).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use tablekit::blob::CopyStatus;
    /// let original = photos.blob("000456.jpg")?;
    /// original.upload(vec![0xff_u8; 5000]).content_type("image/jpeg").await?;
    /// let backup = photos.blob("backup/000456.jpg")?;
    /// let copy = backup.start_copy_from(&original).metadata("copied", "yes").await?;
    /// let done = match copy.status() {
    ///     CopyStatus::Pending => backup.wait_for_copy(std::time::Duration::from_secs(1)).await?,
    ///     _ => copy,
    /// };
    /// assert_eq!(done.status(), CopyStatus::Success);
    /// let p = backup.properties().await?;
    /// assert_eq!((p.size(), p.content_type()), (5000, Some("image/jpeg")));
    /// assert_eq!(p.copy().map(|c| c.id()), Some(done.id()));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn start_copy_from(&self, source: &BlobClient) -> StartCopy {
        self.start_copy(Source::Blob {
            container: source.container.name.to_string(),
            blob: source.name.to_string(),
        })
    }

    /// Copies the blob at `url` into this blob, on the service's side. Over
    /// HTTP the service reads the URL (a blob of another account needs a SAS
    /// in it). The embedded store takes blobs of its own only, named by the
    /// URL's path: `/container/blob`, or `/account/container/blob` as the
    /// emulator spells it; the host is not looked at.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// photos.blob("a b.txt")?.upload("hello").await?;
    /// let copy = photos.blob("copy.txt")?;
    /// copy.start_copy_from_url("http://127.0.0.1:10000/devstoreaccount1/photos/a%20b.txt").await?;
    /// assert_eq!(copy.download().bytes().await?.as_ref(), b"hello");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn start_copy_from_url(&self, url: impl Into<String>) -> StartCopy {
        self.start_copy(Source::Url(url.into()))
    }

    fn start_copy(&self, source: Source) -> StartCopy {
        StartCopy {
            blob: self.clone(),
            source,
            metadata: Vec::new(),
            conditions: Conditions::default(),
        }
    }

    /// Polls the blob's properties every `poll` until the copy into it is
    /// no longer pending, and answers where it ended (success, aborted or
    /// failed). An error if the blob was never the destination of a copy.
    pub async fn wait_for_copy(&self, poll: Duration) -> Result<CopyInfo> {
        loop {
            let props = self.properties().await?;
            match props.copy {
                None => {
                    return Err(Error::decode(format!(
                        "the blob {:?} reports no copy into it",
                        self.name()
                    )))
                }
                Some(c) if c.status != CopyStatus::Pending => return Ok(c),
                Some(_) => tokio::time::sleep(poll).await,
            }
        }
    }
}
