//! Listings beyond a container's flat list of blobs: the account's containers
//! ([`ListContainers`]) and a container's blobs by "folder"
//! ([`ListBlobsByDelimiter`]: names rolled up at a delimiter into prefixes).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

use crate::backend::blob::{BlobOp, BlobProperties, BlobResponse, ContainerProperties};
use crate::error::{Error, Result};

use super::container::ListBlobs;
use super::service::BlobServiceClient;
use super::{invalid, unexpected};

fn check_page_size(n: Option<u32>) -> Result<()> {
    match n {
        Some(n) if !(1..=5000).contains(&n) => {
            Err(invalid(format!("page_size({n}) is outside 1..=5000")))
        }
        _ => Ok(()),
    }
}

/// A marker answered twice would page forever.
fn check_marker(sent: &Option<String>, next: &Option<String>, what: &str) -> Result<()> {
    if next.is_some() && next == sent {
        return Err(Error::decode(format!(
            "the service answered a {what} with the marker it was sent"
        )));
    }
    Ok(())
}

/// A listing of the account's containers; see [`BlobServiceClient::list_containers`].
#[derive(Debug)]
#[must_use = "a listing does nothing until streamed or collected"]
pub struct ListContainers {
    service: BlobServiceClient,
    prefix: Option<String>,
    include_metadata: bool,
    page_size: Option<u32>,
}

impl BlobServiceClient {
    /// Lists the account's containers in name order.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// let blobs = tablekit::BlobServiceClient::embedded();
    /// for name in ["photos-2014", "photos-2015", "logs"] {
    ///     blobs.container(name)?.create_container().await?;
    /// }
    /// blobs.container("photos-2015")?.set_metadata([("owner", "hr")]).await?;
    /// let photos = blobs.list_containers().prefix("photos-").include_metadata().fetch_all().await?;
    /// let names: Vec<&str> = photos.iter().map(|c| c.name()).collect();
    /// assert_eq!(names, ["photos-2014", "photos-2015"]);
    /// assert_eq!(photos[1].metadata(), [("owner".to_owned(), "hr".to_owned())]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn list_containers(&self) -> ListContainers {
        ListContainers {
            service: self.clone(),
            prefix: None,
            include_metadata: false,
            page_size: None,
        }
    }
}

impl ListContainers {
    /// Only containers whose name starts with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Each container's metadata too (without it, [`ContainerProperties::metadata`] is empty).
    pub fn include_metadata(mut self) -> Self {
        self.include_metadata = true;
        self
    }

    /// At most `n` (1 to 5,000) containers per request.
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n);
        self
    }

    /// The containers, in name order, across as many requests as needed.
    pub fn stream(self) -> ContainerListing {
        if let Err(e) = check_page_size(self.page_size) {
            return ContainerListing(stream::once(async move { Err(e) }).boxed());
        }
        let state = (self, None::<String>, false);
        ContainerListing(
            stream::try_unfold(state, |(list, marker, done)| async move {
                if done {
                    return Ok(None);
                }
                let resp = list
                    .service
                    .backend
                    .blob(BlobOp::ListContainers {
                        prefix: list.prefix.as_deref(),
                        marker: marker.as_deref(),
                        max: list.page_size,
                        include_metadata: list.include_metadata,
                    })
                    .await?;
                let BlobResponse::Containers {
                    containers,
                    next_marker,
                } = resp
                else {
                    return Err(unexpected("a container listing"));
                };
                check_marker(&marker, &next_marker, "container listing")?;
                let done = next_marker.is_none();
                Ok(Some((
                    stream::iter(containers.into_iter().map(Ok)),
                    (list, next_marker, done),
                )))
            })
            .try_flatten()
            .boxed(),
        )
    }

    /// All the containers.
    pub async fn fetch_all(self) -> Result<Vec<ContainerProperties>> {
        self.stream().try_collect().await
    }
}

/// The containers of a listing; a [`Stream`] of `Result<ContainerProperties>`.
pub struct ContainerListing(BoxStream<'static, Result<ContainerProperties>>);

impl fmt::Debug for ContainerListing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ContainerListing")
    }
}

impl Stream for ContainerListing {
    type Item = Result<ContainerProperties>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

/// One entry of a listing by delimiter: a blob directly under the prefix, or
/// a "folder" (a prefix ending with the delimiter) holding at least one blob.
#[derive(Debug, Clone, PartialEq, Eq)]
// Entries pass through a stream one at a time: a box each would cost more
// than the size of the prefix variant.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum BlobEntry {
    /// A blob whose name has no delimiter after the listing's prefix.
    Blob(BlobProperties),
    /// The names rolled up at the first delimiter after the prefix: list
    /// again with it as the prefix to go down a level.
    Prefix(String),
}

impl BlobEntry {
    /// The blob's name, or the prefix.
    pub fn name(&self) -> &str {
        match self {
            BlobEntry::Blob(p) => p.name(),
            BlobEntry::Prefix(p) => p,
        }
    }
}

/// A listing by delimiter; see [`ListBlobs::delimiter`].
#[derive(Debug)]
#[must_use = "a listing does nothing until streamed or collected"]
pub struct ListBlobsByDelimiter {
    list: ListBlobs,
    delimiter: String,
}

impl ListBlobs {
    /// Lists one level of a hierarchy: names are rolled up at the first
    /// `delimiter` after the prefix, so that "folders" come as
    /// [`BlobEntry::Prefix`] and only the blobs directly under the prefix as
    /// [`BlobEntry::Blob`], all in name order.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let logs = tablekit::BlobServiceClient::embedded().container("logs")?;
    /// # logs.create_container().await?;
    /// use tablekit::blob::BlobEntry;
    /// for name in ["2014/07/31/a.log", "2014/07/31/b.log", "2014/08/01/c.log", "2014/index.txt", "readme.txt"] {
    ///     logs.blob(name)?.upload("x").await?;
    /// }
    /// let top: Vec<String> = logs.list_blobs().delimiter("/").fetch_all().await?
    ///     .iter().map(|e| e.name().to_owned()).collect();
    /// assert_eq!(top, ["2014/", "readme.txt"]);
    /// let year = logs.list_blobs().prefix("2014/").delimiter("/").fetch_all().await?;
    /// assert_eq!(year[0], BlobEntry::Prefix("2014/07/".into()));
    /// assert_eq!(year[1], BlobEntry::Prefix("2014/08/".into()));
    /// assert!(matches!(&year[2], BlobEntry::Blob(p) if p.name() == "2014/index.txt"));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn delimiter(self, delimiter: impl Into<String>) -> ListBlobsByDelimiter {
        ListBlobsByDelimiter {
            list: self,
            delimiter: delimiter.into(),
        }
    }
}

impl ListBlobsByDelimiter {
    /// Only names starting with `prefix` (a "folder" to list: `2014/07/`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.list.prefix = Some(prefix.into());
        self
    }

    /// At most `n` (1 to 5,000) entries per request.
    pub fn page_size(mut self, n: u32) -> Self {
        self.list.page_size = Some(n);
        self
    }

    /// The entries in name order, across as many requests as needed.
    pub fn stream(self) -> HierarchicalListing {
        let fail = |e: Error| HierarchicalListing(stream::once(async move { Err(e) }).boxed());
        if let Err(e) = check_page_size(self.list.page_size) {
            return fail(e);
        }
        if self.delimiter.is_empty() {
            return fail(invalid("a delimiter is at least one character"));
        }
        let state = (self, None::<String>, false);
        HierarchicalListing(
            stream::try_unfold(state, |(list, marker, done)| async move {
                if done {
                    return Ok(None);
                }
                let c = &list.list.container;
                let resp = c
                    .backend
                    .blob(BlobOp::List {
                        container: &c.name,
                        prefix: list.list.prefix.as_deref(),
                        delimiter: Some(&list.delimiter),
                        marker: marker.as_deref(),
                        max: list.list.page_size,
                    })
                    .await?;
                let BlobResponse::Listing {
                    blobs,
                    prefixes,
                    next_marker,
                } = resp
                else {
                    return Err(unexpected("a blob listing"));
                };
                check_marker(&marker, &next_marker, "blob listing")?;
                let mut entries: Vec<BlobEntry> = blobs
                    .into_iter()
                    .map(BlobEntry::Blob)
                    .chain(prefixes.into_iter().map(BlobEntry::Prefix))
                    .collect();
                // The service answers blobs and prefixes each in name order.
                entries.sort_by(|a, b| a.name().cmp(b.name()));
                let done = next_marker.is_none();
                Ok(Some((
                    stream::iter(entries.into_iter().map(Ok)),
                    (list, next_marker, done),
                )))
            })
            .try_flatten()
            .boxed(),
        )
    }

    /// All the entries.
    pub async fn fetch_all(self) -> Result<Vec<BlobEntry>> {
        self.stream().try_collect().await
    }
}

/// The entries of a listing by delimiter; a [`Stream`] of `Result<BlobEntry>`.
pub struct HierarchicalListing(BoxStream<'static, Result<BlobEntry>>);

impl fmt::Debug for HierarchicalListing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HierarchicalListing")
    }
}

impl Stream for HierarchicalListing {
    type Item = Result<BlobEntry>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}
