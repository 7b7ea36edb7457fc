//! [`ContainerClient`]: one container, and the listing of its blobs.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

use crate::backend::blob::{BlobBackend, BlobOp, BlobProperties, BlobResponse};
use crate::error::{ErrorCode, Result};
use crate::validate;

use super::{invalid, unexpected, BlobClient, DEFAULT_BLOCKS_IN_FLIGHT, DEFAULT_BLOCK_SIZE};

/// A client for one container. Cheap to clone.
#[derive(Clone)]
pub struct ContainerClient {
    pub(super) backend: Arc<dyn BlobBackend>,
    pub(super) name: Arc<str>,
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
                lease_id: None,
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
    pub(super) container: ContainerClient,
    pub(super) prefix: Option<String>,
    pub(super) page_size: Option<u32>,
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
                        delimiter: None,
                        marker: s.marker.as_deref(),
                        max: s.list.page_size,
                    })
                    .await?;
                let BlobResponse::Listing {
                    blobs, next_marker, ..
                } = resp
                else {
                    return Err(unexpected("a blob listing"));
                };
                if next_marker.is_some() && next_marker == s.marker {
                    return Err(crate::error::Error::decode(
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
