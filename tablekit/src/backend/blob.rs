//! The blob half of the seam: what a blob client asks of a backend and what it
//! gets back. Downloads come back as a stream of chunks, never buffered whole.

use std::fmt;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;

use crate::backend::Repeat;
use crate::entity::ETag;
use crate::error::Result;

/// The conditions a blob request can carry (`If-Match`, `If-None-Match`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Conditions {
    /// Apply only if the blob's ETag is this one.
    pub(crate) if_match: Option<ETag>,
    /// Apply only if no blob exists (`If-None-Match: *`).
    pub(crate) if_none_match_any: bool,
}

/// What a blob write stores besides the bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlobHeaders {
    pub(crate) content_type: Option<String>,
    pub(crate) metadata: Vec<(String, String)>,
}

/// One request about a container or its blobs.
#[derive(Debug)]
pub(crate) enum BlobOp<'a> {
    CreateContainer {
        container: &'a str,
    },
    DeleteContainer {
        container: &'a str,
    },
    List {
        container: &'a str,
        prefix: Option<&'a str>,
        marker: Option<&'a str>,
        max: Option<u32>,
    },
    Put {
        container: &'a str,
        blob: &'a str,
        body: Bytes,
        headers: &'a BlobHeaders,
        conditions: &'a Conditions,
    },
    PutBlock {
        container: &'a str,
        blob: &'a str,
        block_id: &'a str,
        body: Bytes,
    },
    PutBlockList {
        container: &'a str,
        blob: &'a str,
        block_ids: &'a [String],
        headers: &'a BlobHeaders,
        conditions: &'a Conditions,
    },
    Get {
        container: &'a str,
        blob: &'a str,
        /// First byte and, if bounded, the last byte (inclusive).
        range: Option<(u64, Option<u64>)>,
        conditions: &'a Conditions,
    },
    Properties {
        container: &'a str,
        blob: &'a str,
    },
    Delete {
        container: &'a str,
        blob: &'a str,
        conditions: &'a Conditions,
    },
}

impl BlobOp<'_> {
    /// A short name for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            BlobOp::CreateContainer { .. } => "create_container",
            BlobOp::DeleteContainer { .. } => "delete_container",
            BlobOp::List { .. } => "list_blobs",
            BlobOp::Put { .. } => "put_blob",
            BlobOp::PutBlock { .. } => "put_block",
            BlobOp::PutBlockList { .. } => "put_block_list",
            BlobOp::Get { .. } => "get_blob",
            BlobOp::Properties { .. } => "blob_properties",
            BlobOp::Delete { .. } => "delete_blob",
        }
    }

    /// How the request may be repeated after a failed attempt. Unconditional
    /// puts replace with the same bytes; a conditional one, a create or a delete
    /// repeated after a lost answer fails its condition or finds nothing.
    pub(crate) fn repeat(&self) -> Repeat {
        match self {
            BlobOp::List { .. } | BlobOp::Get { .. } | BlobOp::Properties { .. } => Repeat::Read,
            BlobOp::PutBlock { .. } => Repeat::Idempotent,
            BlobOp::Put { conditions, .. } | BlobOp::PutBlockList { conditions, .. } => {
                if **conditions == Conditions::default() {
                    Repeat::Idempotent
                } else {
                    Repeat::Detected
                }
            }
            BlobOp::CreateContainer { .. }
            | BlobOp::DeleteContainer { .. }
            | BlobOp::Delete { .. } => Repeat::Detected,
        }
    }
}

/// A blob's properties, as stored: from [`BlobClient::properties`], a
/// [`Download`], or each entry of a listing (which carries the metadata too).
///
/// [`BlobClient::properties`]: crate::BlobClient::properties
/// [`Download`]: crate::blob::Download
///
/// ```
/// # async fn run() -> tablekit::Result<()> {
/// let clock = tablekit::clock::ManualClock::new("2014-07-31T18:00:00Z".parse().unwrap());
/// let photos = tablekit::BlobServiceClient::embedded_with_clock(clock).container("photos")?;
/// photos.create_container().await?;
/// let written = photos
///     .blob("employees/000456.jpg")?
///     .upload(vec![0xff_u8; 2048])
///     .content_type("image/jpeg")
///     .metadata("Employee", "456")
///     .await?;
///
/// let p = photos.blob("employees/000456.jpg")?.properties().await?;
/// assert_eq!(p.name(), "employees/000456.jpg");
/// assert_eq!(p.size(), 2048);
/// assert_eq!(p.etag(), written.etag());
/// assert_eq!(p.last_modified().to_rfc3339(), "2014-07-31T18:00:00+00:00");
/// assert_eq!(p.content_type(), Some("image/jpeg"));
/// assert_eq!(p.metadata(), [("employee".to_owned(), "456".to_owned())]);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobProperties {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) etag: ETag,
    pub(crate) last_modified: DateTime<Utc>,
    pub(crate) content_type: Option<String>,
    pub(crate) metadata: Vec<(String, String)>,
}

impl BlobProperties {
    /// The blob's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its ETag: pass it to a conditional write or read.
    pub fn etag(&self) -> &ETag {
        &self.etag
    }

    /// When it was last written.
    pub fn last_modified(&self) -> DateTime<Utc> {
        self.last_modified
    }

    /// Its `Content-Type`, if one was set.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// Its user metadata (`x-ms-meta-*`), names in lower case, in name order.
    /// Listings carry it too (they ask for `include=metadata`).
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }
}

/// What a backend answers to a [`BlobOp`].
pub(crate) enum BlobResponse {
    Done,
    /// A container create: whether it is new.
    Created(bool),
    Written {
        etag: ETag,
        last_modified: DateTime<Utc>,
    },
    Listing {
        blobs: Vec<BlobProperties>,
        next_marker: Option<String>,
    },
    Properties(BlobProperties),
    Body {
        properties: BlobProperties,
        /// The bytes of the range asked for, in chunks.
        chunks: BoxStream<'static, Result<Bytes>>,
    },
}

impl fmt::Debug for BlobResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobResponse::Done => f.write_str("Done"),
            BlobResponse::Created(c) => write!(f, "Created({c})"),
            BlobResponse::Written { etag, .. } => write!(f, "Written({etag:?})"),
            BlobResponse::Listing { blobs, .. } => write!(f, "Listing({} blobs)", blobs.len()),
            BlobResponse::Properties(p) => write!(f, "Properties({})", p.name),
            BlobResponse::Body { properties, .. } => write!(f, "Body({})", properties.name),
        }
    }
}

/// Something that carries out blob requests: the HTTP client, or the embedded store.
#[async_trait::async_trait]
pub(crate) trait BlobBackend: Send + Sync + fmt::Debug {
    async fn blob(&self, op: BlobOp<'_>) -> Result<BlobResponse>;

    /// Container ACLs and the Blob service's properties.
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse>;
}
