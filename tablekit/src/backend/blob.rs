//! The blob half of the seam: what a blob client asks of a backend and what it
//! gets back. Downloads come back as a stream of chunks, never buffered whole.

use std::fmt;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;

use crate::backend::Repeat;
use crate::entity::ETag;
use crate::error::Result;

/// The conditions a blob request can carry (`If-Match`, `If-None-Match`,
/// `x-ms-lease-id`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Conditions {
    /// Apply only if the blob's ETag is this one.
    pub(crate) if_match: Option<ETag>,
    /// Apply only if no blob exists (`If-None-Match: *`).
    pub(crate) if_none_match_any: bool,
    /// The lease the writer holds on the blob (or container).
    pub(crate) lease_id: Option<String>,
}

/// What a blob write stores besides the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BlobHeaders {
    pub(crate) http: BlobHttpHeaders,
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
        /// The container's lease, if it has one.
        lease_id: Option<&'a str>,
    },
    List {
        container: &'a str,
        prefix: Option<&'a str>,
        /// Roll names up to the first delimiter after the prefix into prefixes.
        delimiter: Option<&'a str>,
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
        /// The blob's lease, if it has one.
        lease_id: Option<&'a str>,
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
    /// Get Block List: the blob's committed blocks and those put but not
    /// yet committed (asked by the server; the clients have no call for it).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    BlockList {
        container: &'a str,
        blob: &'a str,
    },
    Delete {
        container: &'a str,
        blob: &'a str,
        conditions: &'a Conditions,
    },
    // The management calls (issue 24).
    ListContainers {
        prefix: Option<&'a str>,
        marker: Option<&'a str>,
        max: Option<u32>,
        include_metadata: bool,
    },
    ContainerProperties {
        container: &'a str,
    },
    SetContainerMetadata {
        container: &'a str,
        metadata: &'a [(String, String)],
        lease_id: Option<&'a str>,
    },
    SetMetadata {
        container: &'a str,
        blob: &'a str,
        metadata: &'a [(String, String)],
        conditions: &'a Conditions,
    },
    SetHttpHeaders {
        container: &'a str,
        blob: &'a str,
        headers: &'a BlobHttpHeaders,
        conditions: &'a Conditions,
    },
    /// A lease call on a container (`blob: None`) or a blob.
    Lease {
        container: &'a str,
        blob: Option<&'a str>,
        action: LeaseAction<'a>,
    },
    /// Copy Blob: `container/blob` becomes a copy of `source`.
    Copy {
        container: &'a str,
        blob: &'a str,
        source: CopySource<'a>,
        /// Replaces the source's metadata when not empty.
        metadata: &'a [(String, String)],
        conditions: &'a Conditions,
    },
}

/// What a lease call does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseAction<'a> {
    /// Seconds (15 to 60), or `None` for an infinite lease; the id the client proposes.
    Acquire {
        seconds: Option<u32>,
        proposed: &'a str,
    },
    Renew {
        id: &'a str,
    },
    Change {
        id: &'a str,
        proposed: &'a str,
    },
    Release {
        id: &'a str,
    },
    /// Seconds until the lease is broken; `None`: when its period ends.
    Break {
        period: Option<u32>,
    },
}

/// Where a copy reads from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CopySource<'a> {
    /// A blob of the same account.
    Blob { container: &'a str, blob: &'a str },
    /// A URL the service reads.
    Url(&'a str),
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
            BlobOp::BlockList { .. } => "get_block_list",
            BlobOp::Delete { .. } => "delete_blob",
            BlobOp::ListContainers { .. } => "list_containers",
            BlobOp::ContainerProperties { .. } => "container_properties",
            BlobOp::SetContainerMetadata { .. } => "set_container_metadata",
            BlobOp::SetMetadata { .. } => "set_blob_metadata",
            BlobOp::SetHttpHeaders { .. } => "set_blob_properties",
            BlobOp::Lease { blob: None, .. } => "lease_container",
            BlobOp::Lease { .. } => "lease_blob",
            BlobOp::Copy { .. } => "copy_blob",
        }
    }

    /// How the request may be repeated after a failed attempt. Unconditional
    /// puts replace with the same bytes; a conditional one, a create or a delete
    /// repeated after a lost answer fails its condition or finds nothing.
    pub(crate) fn repeat(&self) -> Repeat {
        match self {
            BlobOp::List { .. }
            | BlobOp::Get { .. }
            | BlobOp::Properties { .. }
            | BlobOp::BlockList { .. }
            | BlobOp::ListContainers { .. }
            | BlobOp::ContainerProperties { .. } => Repeat::Read,
            BlobOp::PutBlock { .. } | BlobOp::SetContainerMetadata { .. } => Repeat::Idempotent,
            // The client always proposes the lease id: acquiring again with it
            // renews; changing to an id already in place is a no-op.
            BlobOp::Lease {
                action:
                    LeaseAction::Acquire { .. } | LeaseAction::Renew { .. } | LeaseAction::Change { .. },
                ..
            } => Repeat::Idempotent,
            BlobOp::Lease { .. } => Repeat::Detected,
            BlobOp::Put { conditions, .. }
            | BlobOp::PutBlockList { conditions, .. }
            | BlobOp::SetMetadata { conditions, .. }
            | BlobOp::SetHttpHeaders { conditions, .. }
            | BlobOp::Copy { conditions, .. } => {
                // A lease id alone does not make a repeat fail.
                if conditions.if_match.is_none() && !conditions.if_none_match_any {
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
    /// When the blob was first created (`x-ms-creation-time`), when known.
    pub(crate) created: Option<DateTime<Utc>>,
    pub(crate) http: BlobHttpHeaders,
    pub(crate) metadata: Vec<(String, String)>,
    pub(crate) lease: LeaseInfo,
    pub(crate) copy: Option<CopyInfo>,
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
        self.http.content_type.as_deref()
    }

    /// The HTTP headers it is served with (content type, encoding, language,
    /// disposition, cache control, MD5).
    pub fn http_headers(&self) -> &BlobHttpHeaders {
        &self.http
    }

    /// Its user metadata (`x-ms-meta-*`), names in lower case, in name order.
    /// Listings carry it too (they ask for `include=metadata`).
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// Its lease: whether one is held, and for how long.
    pub fn lease(&self) -> &LeaseInfo {
        &self.lease
    }

    /// The last copy into it, if it was the destination of one.
    pub fn copy(&self) -> Option<&CopyInfo> {
        self.copy.as_ref()
    }
}

/// The standard HTTP headers a blob is stored and served with. Build one with
/// [`BlobHttpHeaders::new`] and its setters; pass it to
/// [`BlobClient::set_http_headers`](crate::BlobClient::set_http_headers).
///
/// ```
/// use tablekit::blob::BlobHttpHeaders;
/// let h = BlobHttpHeaders::new().content_type("text/csv").cache_control("max-age=3600");
/// assert_eq!(h.get_content_type(), Some("text/csv"));
/// assert_eq!(h.get_content_encoding(), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlobHttpHeaders {
    pub(crate) content_type: Option<String>,
    pub(crate) content_encoding: Option<String>,
    pub(crate) content_language: Option<String>,
    pub(crate) content_disposition: Option<String>,
    pub(crate) cache_control: Option<String>,
    pub(crate) content_md5: Option<Vec<u8>>,
}

impl BlobHttpHeaders {
    /// No headers: setting these on a blob clears the ones it had.
    pub fn new() -> Self {
        Self::default()
    }

    /// `Content-Type`.
    pub fn content_type(mut self, value: impl Into<String>) -> Self {
        self.content_type = Some(value.into());
        self
    }

    /// `Content-Encoding` (`gzip`, say).
    pub fn content_encoding(mut self, value: impl Into<String>) -> Self {
        self.content_encoding = Some(value.into());
        self
    }

    /// `Content-Language` (`en-GB`, say).
    pub fn content_language(mut self, value: impl Into<String>) -> Self {
        self.content_language = Some(value.into());
        self
    }

    /// `Content-Disposition` (`attachment; filename="report.csv"`, say).
    pub fn content_disposition(mut self, value: impl Into<String>) -> Self {
        self.content_disposition = Some(value.into());
        self
    }

    /// `Cache-Control` (`max-age=3600`, say).
    pub fn cache_control(mut self, value: impl Into<String>) -> Self {
        self.cache_control = Some(value.into());
        self
    }

    /// `Content-MD5`: the 16 bytes of the content's MD5 hash, stored as given
    /// (the service does not check it against the stored bytes here).
    pub fn content_md5(mut self, md5: impl Into<Vec<u8>>) -> Self {
        self.content_md5 = Some(md5.into());
        self
    }

    /// The `Content-Type`, if set.
    pub fn get_content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// The `Content-Encoding`, if set.
    pub fn get_content_encoding(&self) -> Option<&str> {
        self.content_encoding.as_deref()
    }

    /// The `Content-Language`, if set.
    pub fn get_content_language(&self) -> Option<&str> {
        self.content_language.as_deref()
    }

    /// The `Content-Disposition`, if set.
    pub fn get_content_disposition(&self) -> Option<&str> {
        self.content_disposition.as_deref()
    }

    /// The `Cache-Control`, if set.
    pub fn get_cache_control(&self) -> Option<&str> {
        self.cache_control.as_deref()
    }

    /// The `Content-MD5`'s 16 bytes, if set (Azure also sets it on a blob
    /// uploaded in one request; the embedded store keeps only what was set).
    pub fn get_content_md5(&self) -> Option<&[u8]> {
        self.content_md5.as_deref()
    }
}

/// Where a lease stands, as the service reports it (`x-ms-lease-state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LeaseState {
    /// No lease: anyone may acquire one.
    #[default]
    Available,
    /// A lease is held: writes need its id.
    Leased,
    /// A lease of fixed duration ran out; it may be renewed or acquired anew.
    Expired,
    /// A lease is being broken: it is held until the break period ends.
    Breaking,
    /// A lease was broken; a new one may be acquired.
    Broken,
}

impl LeaseState {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "available" => LeaseState::Available,
            "leased" => LeaseState::Leased,
            "expired" => LeaseState::Expired,
            "breaking" => LeaseState::Breaking,
            "broken" => LeaseState::Broken,
            _ => return None,
        })
    }
}

/// A blob's or container's lease, as read with its properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseInfo {
    pub(crate) state: LeaseState,
    /// For a held lease: `Some(true)` infinite, `Some(false)` fixed.
    pub(crate) infinite: Option<bool>,
}

impl LeaseInfo {
    /// Its state.
    pub fn state(&self) -> LeaseState {
        self.state
    }

    /// Whether it is locked: a lease is held (leased or breaking), so writes
    /// and deletes need its id.
    pub fn is_locked(&self) -> bool {
        matches!(self.state, LeaseState::Leased | LeaseState::Breaking)
    }

    /// For a held lease, whether it is infinite (`Some(true)`) or of fixed
    /// duration (`Some(false)`).
    pub fn is_infinite(&self) -> Option<bool> {
        self.infinite
    }
}

/// Where a copy stands (`x-ms-copy-status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CopyStatus {
    /// Still copying: poll the destination's properties.
    Pending,
    /// Done: the destination holds the source's bytes.
    Success,
    /// Stopped by an Abort Copy Blob.
    Aborted,
    /// The copy failed; see [`CopyInfo::status_description`].
    Failed,
}

impl CopyStatus {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => CopyStatus::Pending,
            "success" => CopyStatus::Success,
            "aborted" => CopyStatus::Aborted,
            "failed" => CopyStatus::Failed,
            _ => return None,
        })
    }
}

/// The last copy into a blob: from [`BlobProperties::copy`], or what
/// [`BlobClient::start_copy_from`](crate::BlobClient::start_copy_from) answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyInfo {
    pub(crate) id: String,
    pub(crate) status: CopyStatus,
    pub(crate) source: Option<String>,
    /// Bytes copied, and the source's size.
    pub(crate) progress: Option<(u64, u64)>,
    pub(crate) completed_on: Option<DateTime<Utc>>,
    pub(crate) status_description: Option<String>,
}

impl CopyInfo {
    /// The copy's id (`x-ms-copy-id`), which an abort names.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where it stands.
    pub fn status(&self) -> CopyStatus {
        self.status
    }

    /// The source's URL, when the service reports it.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// Bytes copied so far and the source's size, when reported.
    pub fn progress(&self) -> Option<(u64, u64)> {
        self.progress
    }

    /// When it finished, when reported.
    pub fn completed_on(&self) -> Option<DateTime<Utc>> {
        self.completed_on
    }

    /// Why it failed or was aborted, when reported.
    pub fn status_description(&self) -> Option<&str> {
        self.status_description.as_deref()
    }
}

/// A container's properties: from [`ContainerClient::properties`], or each
/// entry of [`BlobServiceClient::list_containers`].
///
/// [`ContainerClient::properties`]: crate::ContainerClient::properties
/// [`BlobServiceClient::list_containers`]: crate::BlobServiceClient::list_containers
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProperties {
    pub(crate) name: String,
    pub(crate) etag: ETag,
    pub(crate) last_modified: DateTime<Utc>,
    pub(crate) metadata: Vec<(String, String)>,
    pub(crate) lease: LeaseInfo,
}

impl ContainerProperties {
    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its ETag (it changes when its metadata does).
    pub fn etag(&self) -> &ETag {
        &self.etag
    }

    /// When it (not its blobs) was last changed.
    pub fn last_modified(&self) -> DateTime<Utc> {
        self.last_modified
    }

    /// Its user metadata, names in lower case, in name order; in a listing,
    /// only when it asked for it.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// Its lease.
    pub fn lease(&self) -> &LeaseInfo {
        &self.lease
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
        /// With a delimiter: the names rolled up, each ending with it.
        prefixes: Vec<String>,
        next_marker: Option<String>,
    },
    Containers {
        containers: Vec<ContainerProperties>,
        next_marker: Option<String>,
    },
    ContainerProperties(ContainerProperties),
    /// A lease call: the lease's id (acquire, renew, change) or, for a
    /// break, the seconds until it is broken.
    Lease {
        id: Option<String>,
        break_seconds: Option<u32>,
    },
    /// A copy started (or done).
    Copied {
        id: String,
        status: CopyStatus,
    },
    Properties(BlobProperties),
    /// Get Block List: each block's id and size, committed ones in the
    /// blob's order, and the blob's properties if it exists.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    BlockList {
        committed: Vec<(String, u64)>,
        uncommitted: Vec<(String, u64)>,
        properties: Option<BlobProperties>,
    },
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
            BlobResponse::BlockList {
                committed,
                uncommitted,
                ..
            } => write!(
                f,
                "BlockList({} committed, {} uncommitted)",
                committed.len(),
                uncommitted.len()
            ),
            BlobResponse::Body { properties, .. } => write!(f, "Body({})", properties.name),
            BlobResponse::Containers { containers, .. } => {
                write!(f, "Containers({} containers)", containers.len())
            }
            BlobResponse::ContainerProperties(p) => write!(f, "ContainerProperties({})", p.name),
            BlobResponse::Lease { .. } => f.write_str("Lease"),
            BlobResponse::Copied { status, .. } => write!(f, "Copied({status:?})"),
        }
    }
}

/// Something that carries out blob requests: the HTTP client, or the embedded store.
#[async_trait::async_trait]
pub(crate) trait BlobBackend: Send + Sync + fmt::Debug {
    async fn blob(&self, op: BlobOp<'_>) -> Result<BlobResponse>;

    /// Container ACLs and the Blob service's properties. A backend that does
    /// not carry them out refuses them by default.
    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        Err(crate::backend::admin::unsupported(&op))
    }
}
