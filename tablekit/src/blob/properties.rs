//! Properties set after an upload: a blob's metadata and HTTP headers
//! ([`SetMetadata`], [`SetHttpHeaders`]), a container's metadata
//! ([`SetContainerMetadata`]) and properties.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use crate::backend::blob::{
    BlobHttpHeaders, BlobOp, BlobResponse, Conditions, ContainerProperties,
};
use crate::entity::IfMatch;
use crate::error::Result;

use super::lease::LeaseId;
use super::upload::BlobWritten;
use super::{check_http_headers, check_metadata, unexpected, BlobClient, ContainerClient};

fn pairs<I, K, V>(metadata: I) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    metadata
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// A metadata set being prepared; await it. See [`BlobClient::set_metadata`].
#[must_use = "nothing is sent until awaited"]
pub struct SetMetadata {
    blob: BlobClient,
    metadata: Vec<(String, String)>,
    conditions: Conditions,
}

impl fmt::Debug for SetMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetMetadata")
            .field("blob", &self.blob.name)
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

impl SetMetadata {
    /// Only if the blob is still this version; otherwise
    /// [`Error::is_precondition_failed`](crate::Error::is_precondition_failed).
    pub fn if_match(mut self, condition: impl Into<IfMatch>) -> Self {
        self.conditions.if_match = condition.into().into_etag();
        self
    }

    /// Under this lease (see [`Upload::lease`](super::Upload::lease)).
    pub fn lease(mut self, lease: impl Into<LeaseId>) -> Self {
        self.conditions.lease_id = Some(lease.into().0);
        self
    }

    /// Sends it.
    pub async fn send(self) -> Result<BlobWritten> {
        check_metadata(&self.metadata)?;
        written(
            self.blob
                .run(BlobOp::SetMetadata {
                    container: &self.blob.container.name,
                    blob: &self.blob.name,
                    metadata: &self.metadata,
                    conditions: &self.conditions,
                })
                .await?,
            "a metadata set",
        )
    }
}

impl IntoFuture for SetMetadata {
    type Output = Result<BlobWritten>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

fn written(resp: BlobResponse, what: &str) -> Result<BlobWritten> {
    match resp {
        BlobResponse::Written {
            etag,
            last_modified,
        } => Ok(BlobWritten {
            etag,
            last_modified,
        }),
        _ => Err(unexpected(what)),
    }
}

/// An HTTP headers set being prepared; await it. See [`BlobClient::set_http_headers`].
#[must_use = "nothing is sent until awaited"]
pub struct SetHttpHeaders {
    blob: BlobClient,
    headers: BlobHttpHeaders,
    conditions: Conditions,
}

impl fmt::Debug for SetHttpHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetHttpHeaders")
            .field("blob", &self.blob.name)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl SetHttpHeaders {
    /// Only if the blob is still this version.
    pub fn if_match(mut self, condition: impl Into<IfMatch>) -> Self {
        self.conditions.if_match = condition.into().into_etag();
        self
    }

    /// Under this lease (see [`Upload::lease`](super::Upload::lease)).
    pub fn lease(mut self, lease: impl Into<LeaseId>) -> Self {
        self.conditions.lease_id = Some(lease.into().0);
        self
    }

    /// Sends it.
    pub async fn send(self) -> Result<BlobWritten> {
        check_http_headers(&self.headers)?;
        written(
            self.blob
                .run(BlobOp::SetHttpHeaders {
                    container: &self.blob.container.name,
                    blob: &self.blob.name,
                    headers: &self.headers,
                    conditions: &self.conditions,
                })
                .await?,
            "an HTTP headers set",
        )
    }
}

impl IntoFuture for SetHttpHeaders {
    type Output = Result<BlobWritten>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

impl BlobClient {
    /// Replaces the blob's metadata with these pairs (none: clears it),
    /// keeping its bytes and headers; the blob gets a new ETag. Names must
    /// be identifiers, values printable ASCII (checked before sending).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let photo = photos.blob("a.jpg")?;
    /// let v1 = photo.upload("jpeg").metadata("employee", "456").await?;
    /// let v2 = photo.set_metadata([("employee", "457"), ("reviewed", "yes")]).if_match(v1.etag()).await?;
    /// let p = photo.properties().await?;
    /// assert_eq!(p.etag(), v2.etag());
    /// assert_eq!(p.metadata(), [
    ///     ("employee".to_owned(), "457".to_owned()),
    ///     ("reviewed".to_owned(), "yes".to_owned()),
    /// ]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn set_metadata<I, K, V>(&self, metadata: I) -> SetMetadata
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        SetMetadata {
            blob: self.clone(),
            metadata: pairs(metadata),
            conditions: Conditions::default(),
        }
    }

    /// Replaces the blob's HTTP headers, all six at once as the service
    /// does: a header not set in `headers` is cleared. The bytes and metadata
    /// stay; the blob gets a new ETag.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use tablekit::blob::BlobHttpHeaders;
    /// let report = photos.blob("report.csv")?;
    /// report.upload("a,b\n1,2\n").content_type("text/plain").await?;
    /// report.set_http_headers(
    ///     BlobHttpHeaders::new()
    ///         .content_type("text/csv")
    ///         .content_disposition("attachment; filename=\"report.csv\"")
    ///         .cache_control("max-age=3600"),
    /// ).await?;
    /// let p = report.properties().await?;
    /// assert_eq!(p.content_type(), Some("text/csv"));
    /// assert_eq!(p.http_headers().get_cache_control(), Some("max-age=3600"));
    /// assert_eq!(report.download().bytes().await?.as_ref(), b"a,b\n1,2\n");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn set_http_headers(&self, headers: BlobHttpHeaders) -> SetHttpHeaders {
        SetHttpHeaders {
            blob: self.clone(),
            headers,
            conditions: Conditions::default(),
        }
    }
}

/// A container metadata set being prepared; await it. See
/// [`ContainerClient::set_metadata`].
#[must_use = "nothing is sent until awaited"]
pub struct SetContainerMetadata {
    container: ContainerClient,
    metadata: Vec<(String, String)>,
    lease_id: Option<LeaseId>,
}

impl fmt::Debug for SetContainerMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetContainerMetadata")
            .field("container", &self.container.name)
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

impl SetContainerMetadata {
    /// Only if the container's lease has this id (a container's lease does
    /// not otherwise guard its metadata).
    pub fn lease(mut self, lease: impl Into<LeaseId>) -> Self {
        self.lease_id = Some(lease.into());
        self
    }

    /// Sends it.
    pub async fn send(self) -> Result<()> {
        check_metadata(&self.metadata)?;
        self.container
            .backend
            .blob(BlobOp::SetContainerMetadata {
                container: &self.container.name,
                metadata: &self.metadata,
                lease_id: self.lease_id.as_ref().map(LeaseId::as_str),
            })
            .await
            .map(drop)
    }
}

impl IntoFuture for SetContainerMetadata {
    type Output = Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

impl ContainerClient {
    /// Replaces the container's metadata with these pairs (none: clears it).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// photos.set_metadata([("owner", "hr")]).await?;
    /// let p = photos.properties().await?;
    /// assert_eq!(p.metadata(), [("owner".to_owned(), "hr".to_owned())]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn set_metadata<I, K, V>(&self, metadata: I) -> SetContainerMetadata
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        SetContainerMetadata {
            container: self.clone(),
            metadata: pairs(metadata),
            lease_id: None,
        }
    }

    /// The container's properties (ETag, Last-Modified, metadata, lease);
    /// not-found ([`ErrorCode::ContainerNotFound`](crate::error::ErrorCode::ContainerNotFound)) if there is none.
    pub async fn properties(&self) -> Result<ContainerProperties> {
        match self
            .backend
            .blob(BlobOp::ContainerProperties {
                container: &self.name,
            })
            .await?
        {
            BlobResponse::ContainerProperties(p) => Ok(p),
            _ => Err(unexpected("a container properties read")),
        }
    }
}
