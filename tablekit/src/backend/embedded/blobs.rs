//! The embedded store's blobs: containers of block blobs in memory, with the
//! Blob service's conditions, ranges, listings and block lists.
//!
//! Kept in a store file ([`BlobServiceClient::embedded_at`](crate::BlobServiceClient::embedded_at)),
//! every change is committed to the file (one durable redb write transaction)
//! after its checks pass and before it is applied and answered, as for tables
//! (see the `durable` module). The file holds:
//!
//! - `containers`: the container name → 0; `container_props`: the name →
//!   its ETag, Last-Modified, metadata and lease as JSON (absent in files
//!   written before containers had them).
//! - `blobs`: (container, blob) → the blob's ETag, Last-Modified, HTTP
//!   headers, metadata, lease and last copy as JSON; `blob_data`: (container, blob) → its bytes.
//! - `blob_blocks`: (container, blob, block id) → a block put but not yet
//!   committed by a block list.
//! - `meta`: `blob_etag` → the last ETag number handed out, so a reopened
//!   store never hands out an ETag again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use chrono::{DateTime, SubsecRound as _, Utc};
use futures::stream::{self, StreamExt};
#[cfg(feature = "durable")]
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
#[cfg(feature = "durable")]
use serde::{Deserialize, Serialize};

#[cfg(feature = "durable")]
use super::durable::{commit, open_error, write_error, Claim, Service, META};

use super::blob_lease::{Guarded, Lease};
use crate::backend::blob::{
    BlobBackend, BlobHeaders, BlobOp, BlobProperties, BlobResponse, Conditions, CopyInfo,
};
use crate::clock::Clock;
use crate::entity::ETag;
use crate::error::{Error, ErrorCode, Result};

/// Downloads are handed out in pieces of this size, as a network read would be.
const CHUNK: usize = 1 << 20;

/// The service's page size for blob listings.
const DEFAULT_LIST_MAX: usize = 5000;

#[derive(Debug, Clone)]
pub(super) struct Blob {
    pub(super) data: Bytes,
    pub(super) etag: ETag,
    pub(super) last_modified: DateTime<Utc>,
    /// When it was first created: a write over it keeps this.
    pub(super) created: DateTime<Utc>,
    /// Its committed blocks' ids and sizes, in order (none for a blob put
    /// whole).
    pub(super) blocks: Vec<(String, u64)>,
    pub(super) headers: BlobHeaders,
    pub(super) lease: Lease,
    /// The last copy into it, until a put or block list replaces it.
    pub(super) copy: Option<CopyInfo>,
}

/// A container's own properties.
#[derive(Debug, Clone)]
pub(super) struct ContainerMeta {
    pub(super) etag: ETag,
    pub(super) last_modified: DateTime<Utc>,
    pub(super) metadata: Vec<(String, String)>,
    pub(super) lease: Lease,
}

impl Default for ContainerMeta {
    /// A container from a file written before containers had properties.
    fn default() -> Self {
        ContainerMeta {
            etag: ETag::new("\"0x8DC0000000000000\""),
            last_modified: DateTime::UNIX_EPOCH,
            metadata: Vec::new(),
            lease: Lease::default(),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Container {
    pub(super) meta: ContainerMeta,
    pub(super) blobs: BTreeMap<String, Blob>,
    /// Blocks put but not yet committed, per blob name.
    pub(super) uncommitted: HashMap<String, HashMap<String, Bytes>>,
}

/// Every container of one embedded store.
#[derive(Debug, Default)]
pub(crate) struct Blobs {
    pub(super) clock: Clock,
    /// Container ACLs and the service's settings (kept in memory only).
    #[cfg(feature = "admin")]
    admin: super::admin::AdminState,
    next_etag: AtomicU64,
    pub(super) containers: Mutex<HashMap<String, Container>>,
    /// The file every change is committed to first, if any.
    #[cfg(feature = "durable")]
    file: Option<Claim>,
}

#[cfg(feature = "durable")]
const CONTAINERS: TableDefinition<&str, u64> = TableDefinition::new("containers");
#[cfg(feature = "durable")]
const BLOBS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("blobs");
#[cfg(feature = "durable")]
const DATA: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("blob_data");
#[cfg(feature = "durable")]
const BLOCKS: TableDefinition<(&str, &str, &str), &[u8]> = TableDefinition::new("blob_blocks");
#[cfg(feature = "durable")]
const CONTAINER_PROPS: TableDefinition<&str, &[u8]> = TableDefinition::new("container_props");

/// A blob's properties as the store file holds them. The fields after
/// `metadata` came with issue 24; older files lack them.
#[cfg(feature = "durable")]
#[derive(Serialize, Deserialize)]
struct Record {
    etag: String,
    /// Last-Modified, in whole seconds since the Unix epoch.
    modified: i64,
    content_type: Option<String>,
    metadata: Vec<(String, String)>,
    #[serde(default)]
    http: HttpRecord,
    #[serde(default)]
    lease: Lease,
    #[serde(default)]
    copy: Option<CopyRecord>,
    /// Its creation, in whole seconds since the Unix epoch (absent in files
    /// written before blobs had one: Last-Modified stands in).
    #[serde(default)]
    created: Option<i64>,
    /// Its committed blocks (absent in older files: none listed).
    #[serde(default)]
    blocks: Vec<(String, u64)>,
}

/// The HTTP headers besides the content type.
#[cfg(feature = "durable")]
#[derive(Serialize, Deserialize, Default)]
struct HttpRecord {
    encoding: Option<String>,
    language: Option<String>,
    disposition: Option<String>,
    cache_control: Option<String>,
    md5: Option<Vec<u8>>,
}

#[cfg(feature = "durable")]
#[derive(Serialize, Deserialize)]
struct CopyRecord {
    id: String,
    source: Option<String>,
    size: u64,
    /// Seconds since the Unix epoch.
    completed: i64,
}

/// A container's properties as the store file holds them.
#[cfg(feature = "durable")]
#[derive(Serialize, Deserialize)]
struct ContainerRecord {
    etag: String,
    modified: i64,
    metadata: Vec<(String, String)>,
    lease: Lease,
}

#[cfg(feature = "durable")]
impl Record {
    fn of(blob: &Blob) -> Record {
        let h = &blob.headers.http;
        Record {
            etag: blob.etag.as_str().to_owned(),
            modified: blob.last_modified.timestamp(),
            created: Some(blob.created.timestamp()),
            blocks: blob.blocks.clone(),
            content_type: h.content_type.clone(),
            metadata: blob.headers.metadata.clone(),
            http: HttpRecord {
                encoding: h.content_encoding.clone(),
                language: h.content_language.clone(),
                disposition: h.content_disposition.clone(),
                cache_control: h.cache_control.clone(),
                md5: h.content_md5.clone(),
            },
            lease: blob.lease.clone(),
            copy: blob.copy.as_ref().map(|c| CopyRecord {
                id: c.id.clone(),
                source: c.source.clone(),
                size: c.progress.map_or(0, |p| p.1),
                completed: c.completed_on.map_or(0, |t| t.timestamp()),
            }),
        }
    }

    /// The blob, with its bytes; `None` if a time is out of range.
    fn into_blob(self, data: Bytes) -> Option<Blob> {
        Some(Blob {
            data,
            etag: ETag::new(self.etag),
            last_modified: DateTime::from_timestamp(self.modified, 0)?,
            created: DateTime::from_timestamp(self.created.unwrap_or(self.modified), 0)?,
            blocks: self.blocks,
            headers: BlobHeaders {
                http: crate::backend::blob::BlobHttpHeaders {
                    content_type: self.content_type,
                    content_encoding: self.http.encoding,
                    content_language: self.http.language,
                    content_disposition: self.http.disposition,
                    cache_control: self.http.cache_control,
                    content_md5: self.http.md5,
                },
                metadata: self.metadata,
            },
            lease: self.lease,
            copy: match self.copy {
                Some(c) => Some(CopyInfo {
                    id: c.id,
                    status: crate::backend::blob::CopyStatus::Success,
                    source: c.source,
                    progress: Some((c.size, c.size)),
                    completed_on: Some(DateTime::from_timestamp(c.completed, 0)?),
                    status_description: None,
                }),
                None => None,
            },
        })
    }
}

/// One change to commit to the store file.
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(super) enum Change<'a> {
    /// A container created or changed (`Some`), or deleted, with the last
    /// ETag number handed out if this change took one.
    Container(&'a str, Option<&'a ContainerMeta>, Option<u64>),
    /// A blob written (`Some`) or deleted, with the uncommitted blocks it drops.
    Blob(&'a str, &'a str, Option<(&'a Blob, u64)>, Vec<&'a str>),
    Block(&'a str, &'a str, &'a str, &'a [u8]),
    /// A blob's properties changed, not its bytes (metadata, headers, a
    /// lease), with the ETag number if this change took one.
    Properties(&'a str, &'a str, &'a Blob, Option<u64>),
}

#[cfg(feature = "durable")]
fn commit_change(claim: &Claim, change: Change<'_>) -> Result<()> {
    let txn = claim.db().begin_write().map_err(write_error)?;
    {
        let mut containers = txn.open_table(CONTAINERS).map_err(write_error)?;
        let mut blobs = txn.open_table(BLOBS).map_err(write_error)?;
        let mut data = txn.open_table(DATA).map_err(write_error)?;
        let mut blocks = txn.open_table(BLOCKS).map_err(write_error)?;
        let mut props = txn.open_table(CONTAINER_PROPS).map_err(write_error)?;
        match change {
            Change::Container(name, Some(meta), etag_number) => {
                containers.insert(name, 0).map_err(write_error)?;
                let record = ContainerRecord {
                    etag: meta.etag.as_str().to_owned(),
                    modified: meta.last_modified.timestamp(),
                    metadata: meta.metadata.clone(),
                    lease: meta.lease.clone(),
                };
                props
                    .insert(name, to_json(&record)?.as_slice())
                    .map_err(write_error)?;
                if let Some(n) = etag_number {
                    let mut meta = txn.open_table(META).map_err(write_error)?;
                    meta.insert("blob_etag", n).map_err(write_error)?;
                }
            }
            Change::Container(name, None, _) => {
                containers.remove(name).map_err(write_error)?;
                props.remove(name).map_err(write_error)?;
            }
            Change::Properties(c, b, blob, etag_number) => {
                blobs
                    .insert((c, b), to_json(&Record::of(blob))?.as_slice())
                    .map_err(write_error)?;
                if let Some(n) = etag_number {
                    let mut meta = txn.open_table(META).map_err(write_error)?;
                    meta.insert("blob_etag", n).map_err(write_error)?;
                }
            }
            Change::Blob(c, b, written, dropped) => {
                for id in dropped {
                    blocks.remove((c, b, id)).map_err(write_error)?;
                }
                match written {
                    Some((blob, etag_number)) => {
                        let bytes = to_json(&Record::of(blob))?;
                        blobs
                            .insert((c, b), bytes.as_slice())
                            .map_err(write_error)?;
                        data.insert((c, b), blob.data.as_ref())
                            .map_err(write_error)?;
                        let mut meta = txn.open_table(META).map_err(write_error)?;
                        meta.insert("blob_etag", etag_number).map_err(write_error)?;
                    }
                    None => {
                        blobs.remove((c, b)).map_err(write_error)?;
                        data.remove((c, b)).map_err(write_error)?;
                    }
                }
            }
            Change::Block(c, b, id, body) => {
                blocks.insert((c, b, id), body).map_err(write_error)?;
            }
        }
    }
    commit(txn)
}

#[cfg(feature = "durable")]
fn to_json<T: Serialize>(record: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(record).map_err(|e| Error::decode(e.to_string()))
}

pub(super) fn container_not_found() -> Error {
    Error::service(
        404,
        ErrorCode::ContainerNotFound,
        "The specified container does not exist.",
    )
}

pub(super) fn blob_not_found() -> Error {
    Error::service(
        404,
        ErrorCode::BlobNotFound,
        "The specified blob does not exist.",
    )
}

fn condition_not_met() -> Error {
    Error::service(
        412,
        ErrorCode::ConditionNotMet,
        "The condition specified using HTTP conditional header(s) is not met.",
    )
}

/// As the service answers metadata: names in lower case, in name order.
pub(super) fn answered_metadata(metadata: &[(String, String)]) -> Vec<(String, String)> {
    let mut m: Vec<(String, String)> = metadata
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    m.sort();
    m
}

pub(super) fn properties(name: &str, blob: &Blob, now: DateTime<Utc>) -> BlobProperties {
    BlobProperties {
        name: name.to_owned(),
        size: blob.data.len() as u64,
        etag: blob.etag.clone(),
        last_modified: blob.last_modified,
        created: Some(blob.created),
        http: blob.headers.http.clone(),
        metadata: answered_metadata(&blob.headers.metadata),
        lease: blob.lease.info(now),
        copy: blob.copy.clone(),
    }
}

/// The service's order of checks: `If-None-Match: *` on an existing blob is a
/// conflict; an `If-Match` that names another version (or no blob) fails.
pub(super) fn check(conditions: &Conditions, current: Option<&Blob>) -> Result<()> {
    if conditions.if_none_match_any && current.is_some() {
        return Err(Error::service(
            409,
            ErrorCode::BlobAlreadyExists,
            "The specified blob already exists.",
        ));
    }
    if let Some(want) = &conditions.if_match {
        if current.map(|b| &b.etag) != Some(want) {
            return Err(condition_not_met());
        }
    }
    Ok(())
}

/// The uncommitted blocks of `blob`, which a write or delete of it drops.
pub(super) fn dropped_blocks<'a>(c: &'a Container, blob: &str) -> Vec<&'a str> {
    c.uncommitted
        .get(blob)
        .map(|b| b.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

impl Blobs {
    pub(crate) fn new(clock: Clock) -> Self {
        Blobs {
            clock,
            ..Default::default()
        }
    }

    /// The blobs kept in the store file at `path` (created if missing), with
    /// every container, blob and uncommitted block the file holds.
    #[cfg(feature = "durable")]
    pub(crate) fn open(path: &std::path::Path, clock: Clock) -> Result<Self> {
        Blobs::from_claim(Claim::open(path, Service::Blobs)?, clock)
    }

    /// The blobs of a claimed store file, read.
    #[cfg(feature = "durable")]
    pub(crate) fn from_claim(claim: Claim, clock: Clock) -> Result<Self> {
        let path = claim.path().to_owned();
        let fail = |e: &dyn std::fmt::Display| open_error(&path, e);
        let mut all: HashMap<String, Container> = HashMap::new();
        let mut next_etag = 0;
        {
            let txn = claim.db().begin_read().map_err(|e| fail(&e))?;
            macro_rules! rows {
                ($def:expr, |$k:ident, $v:ident| $body:block) => {
                    match txn.open_table($def) {
                        Ok(t) => {
                            for row in t.iter().map_err(|e| fail(&e))? {
                                let ($k, $v) = row.map_err(|e| fail(&e))?;
                                $body
                            }
                        }
                        Err(redb::TableError::TableDoesNotExist(_)) => {}
                        Err(e) => return Err(fail(&e)),
                    }
                };
            }
            rows!(META, |k, v| {
                if k.value() == "blob_etag" {
                    next_etag = v.value();
                }
            });
            rows!(CONTAINERS, |k, _v| {
                all.insert(k.value().to_owned(), Container::default());
            });
            rows!(CONTAINER_PROPS, |k, v| {
                let name = k.value();
                let unreadable = || fail(&format_args!("the container {name:?} is unreadable"));
                let r: ContainerRecord =
                    serde_json::from_slice(v.value()).map_err(|_| unreadable())?;
                if let Some(container) = all.get_mut(name) {
                    container.meta = ContainerMeta {
                        etag: ETag::new(r.etag),
                        last_modified: DateTime::from_timestamp(r.modified, 0)
                            .ok_or_else(unreadable)?,
                        metadata: r.metadata,
                        lease: r.lease,
                    };
                }
            });
            let data_table = match txn.open_table(DATA) {
                Ok(t) => Some(t),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(fail(&e)),
            };
            rows!(BLOBS, |k, v| {
                let (c, b) = k.value();
                let unreadable = || fail(&format_args!("the blob {c:?}/{b:?} is unreadable"));
                let record: Record = serde_json::from_slice(v.value()).map_err(|_| unreadable())?;
                let bytes = match &data_table {
                    Some(t) => t.get((c, b)).map_err(|e| fail(&e))?,
                    None => None,
                }
                .ok_or_else(unreadable)?;
                let blob = record
                    .into_blob(Bytes::copy_from_slice(bytes.value()))
                    .ok_or_else(unreadable)?;
                if let Some(container) = all.get_mut(c) {
                    container.blobs.insert(b.to_owned(), blob);
                }
            });
            rows!(BLOCKS, |k, v| {
                let (c, b, id) = k.value();
                if let Some(container) = all.get_mut(c) {
                    container
                        .uncommitted
                        .entry(b.to_owned())
                        .or_default()
                        .insert(id.to_owned(), Bytes::copy_from_slice(v.value()));
                }
            });
        }
        Ok(Blobs {
            clock,
            #[cfg(feature = "admin")]
            admin: Default::default(),
            next_etag: next_etag.into(),
            containers: Mutex::new(all),
            file: Some(claim),
        })
    }

    /// Commits `change` to the store file, if there is one.
    pub(super) fn persist(&self, change: Change<'_>) -> Result<()> {
        #[cfg(feature = "durable")]
        if let Some(claim) = &self.file {
            return commit_change(claim, change);
        }
        let _in_memory = change;
        Ok(())
    }

    /// Stores a whole blob (a Put Blob, a committed block list, a copy):
    /// the file first, then memory; its uncommitted blocks are dropped, its
    /// lease kept.
    pub(super) fn commit_blob(
        &self,
        c: &mut Container,
        container: &str,
        blob: &str,
        // The bytes, and the committed blocks they are made of (none for a
        // blob put whole).
        (data, blocks): (Bytes, Vec<(String, u64)>),
        headers: BlobHeaders,
        (etag, last_modified, n): (ETag, DateTime<Utc>, u64),
    ) -> Result<BlobResponse> {
        self.commit_new(
            c,
            container,
            blob,
            Blob {
                data,
                etag,
                last_modified,
                created: last_modified,
                blocks,
                headers,
                lease: Lease::default(),
                copy: None,
            },
            n,
        )
    }

    /// [`commit_blob`](Blobs::commit_blob) of a blob built by the caller.
    pub(super) fn commit_new(
        &self,
        c: &mut Container,
        container: &str,
        blob: &str,
        mut new: Blob,
        n: u64,
    ) -> Result<BlobResponse> {
        let (etag, last_modified) = (new.etag.clone(), new.last_modified);
        if let Some(old) = c.blobs.get(blob) {
            new.lease = old.lease.after_write(self.clock.now());
            new.created = old.created;
        }
        self.persist(Change::Blob(
            container,
            blob,
            Some((&new, n)),
            dropped_blocks(c, blob),
        ))?;
        c.uncommitted.remove(blob);
        c.blobs.insert(blob.to_owned(), new);
        Ok(BlobResponse::Written {
            etag,
            last_modified,
        })
    }

    pub(super) fn stamp(&self) -> (ETag, DateTime<Utc>, u64) {
        let n = self.next_etag.fetch_add(1, Ordering::Relaxed) + 1;
        // HTTP dates carry whole seconds; keep what a reader over HTTP would see.
        let now = self.clock.now().trunc_subsecs(0);
        (ETag::new(format!("\"0x8DC{n:013X}\"")), now, n)
    }

    fn apply(&self, op: BlobOp<'_>) -> Result<BlobResponse> {
        let mut all = self.containers.lock().unwrap_or_else(|e| e.into_inner());
        match op {
            BlobOp::CreateContainer { container } => {
                if all.contains_key(container) {
                    return Err(Error::service(
                        409,
                        ErrorCode::ContainerAlreadyExists,
                        "The specified container already exists.",
                    ));
                }
                let (etag, last_modified, n) = self.stamp();
                let meta = ContainerMeta {
                    etag,
                    last_modified,
                    ..ContainerMeta::default()
                };
                self.persist(Change::Container(container, Some(&meta), Some(n)))?;
                let c = Container {
                    meta,
                    ..Container::default()
                };
                all.insert(container.to_owned(), c);
                Ok(BlobResponse::Created(true))
            }
            BlobOp::DeleteContainer {
                container,
                lease_id,
            } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                c.meta
                    .lease
                    .check_write(self.clock.now(), lease_id, Guarded::Container)?;
                #[cfg(feature = "durable")]
                if let Some(claim) = &self.file {
                    // One transaction: the container, its blobs and blocks.
                    let txn = claim.db().begin_write().map_err(write_error)?;
                    {
                        let mut containers = txn.open_table(CONTAINERS).map_err(write_error)?;
                        let mut blobs = txn.open_table(BLOBS).map_err(write_error)?;
                        let mut data = txn.open_table(DATA).map_err(write_error)?;
                        let mut blocks = txn.open_table(BLOCKS).map_err(write_error)?;
                        let mut props = txn.open_table(CONTAINER_PROPS).map_err(write_error)?;
                        containers.remove(container).map_err(write_error)?;
                        props.remove(container).map_err(write_error)?;
                        for b in c.blobs.keys() {
                            blobs.remove((container, b.as_str())).map_err(write_error)?;
                            data.remove((container, b.as_str())).map_err(write_error)?;
                        }
                        for (b, ids) in &c.uncommitted {
                            for id in ids.keys() {
                                blocks
                                    .remove((container, b.as_str(), id.as_str()))
                                    .map_err(write_error)?;
                            }
                        }
                    }
                    commit(txn)?;
                }
                all.remove(container);
                Ok(BlobResponse::Done)
            }
            BlobOp::List {
                container,
                prefix,
                delimiter,
                marker,
                max,
            } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                let max = max.map_or(DEFAULT_LIST_MAX, |m| m as usize);
                Ok(self.list_page(
                    c,
                    prefix.unwrap_or(""),
                    delimiter.filter(|d| !d.is_empty()),
                    marker,
                    max,
                    self.clock.now(),
                ))
            }
            BlobOp::Put {
                container,
                blob,
                body,
                headers,
                conditions,
            } => {
                let stamp = self.stamp();
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                self.check_blob_lease(c, blob, conditions.lease_id.as_deref())?;
                check(conditions, c.blobs.get(blob))?;
                self.commit_blob(
                    c,
                    container,
                    blob,
                    (body, Vec::new()),
                    headers.clone(),
                    stamp,
                )
            }
            BlobOp::PutBlock {
                container,
                blob,
                block_id,
                body,
                lease_id,
            } => {
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                self.check_blob_lease(c, blob, lease_id)?;
                self.persist(Change::Block(container, blob, block_id, &body))?;
                c.uncommitted
                    .entry(blob.to_owned())
                    .or_default()
                    .insert(block_id.to_owned(), body);
                Ok(BlobResponse::Done)
            }
            BlobOp::PutBlockList {
                container,
                blob,
                block_ids,
                headers,
                conditions,
            } => {
                let stamp = self.stamp();
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                self.check_blob_lease(c, blob, conditions.lease_id.as_deref())?;
                check(conditions, c.blobs.get(blob))?;
                let blocks = c.uncommitted.get(blob);
                let mut size = 0;
                for id in block_ids {
                    size += blocks
                        .and_then(|b| b.get(id))
                        .ok_or_else(|| {
                            Error::service(
                                400,
                                ErrorCode::InvalidBlockList,
                                "The specified block list is invalid.",
                            )
                        })?
                        .len();
                }
                let mut data = Vec::with_capacity(size);
                let mut committed = Vec::with_capacity(block_ids.len());
                if let Some(blocks) = blocks {
                    for id in block_ids {
                        data.extend_from_slice(&blocks[id]);
                        committed.push((id.clone(), blocks[id].len() as u64));
                    }
                }
                self.commit_blob(
                    c,
                    container,
                    blob,
                    (Bytes::from(data), committed),
                    headers.clone(),
                    stamp,
                )
            }
            BlobOp::Get {
                container,
                blob,
                range,
                conditions,
            } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                let b = c.blobs.get(blob).ok_or_else(blob_not_found)?;
                check(conditions, Some(b))?;
                let len = b.data.len() as u64;
                let data = match range {
                    None => b.data.clone(),
                    Some((first, last)) => {
                        if first >= len {
                            return Err(Error::service(
                                416,
                                ErrorCode::InvalidRange,
                                "The range specified is invalid for the current size of the resource.",
                            ));
                        }
                        let end = last.map_or(len, |l| l.min(len - 1) + 1);
                        b.data.slice(first as usize..end as usize)
                    }
                };
                let chunks: Vec<Result<Bytes>> = (0..data.len())
                    .step_by(CHUNK)
                    .map(|i| Ok(data.slice(i..(i + CHUNK).min(data.len()))))
                    .collect();
                Ok(BlobResponse::Body {
                    properties: properties(blob, b, self.clock.now()),
                    chunks: stream::iter(chunks).boxed(),
                })
            }
            BlobOp::Properties { container, blob } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                let b = c.blobs.get(blob).ok_or_else(blob_not_found)?;
                Ok(BlobResponse::Properties(properties(
                    blob,
                    b,
                    self.clock.now(),
                )))
            }
            BlobOp::Delete {
                container,
                blob,
                conditions,
            } => {
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                // A write's If-Match naming no blob fails its condition (the
                // service's order: conditions before existence for writes).
                let b = match c.blobs.get(blob) {
                    Some(b) => b,
                    None if conditions.if_match.is_some() => return Err(condition_not_met()),
                    None => return Err(blob_not_found()),
                };
                b.lease.check_write(
                    self.clock.now(),
                    conditions.lease_id.as_deref(),
                    Guarded::Blob,
                )?;
                check(conditions, Some(b))?;
                self.persist(Change::Blob(container, blob, None, dropped_blocks(c, blob)))?;
                c.blobs.remove(blob);
                c.uncommitted.remove(blob);
                Ok(BlobResponse::Done)
            }
            BlobOp::BlockList { container, blob } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                let b = c.blobs.get(blob);
                let mut uncommitted: Vec<(String, u64)> = c
                    .uncommitted
                    .get(blob)
                    .map(|m| {
                        m.iter()
                            .map(|(id, d)| (id.clone(), d.len() as u64))
                            .collect()
                    })
                    .unwrap_or_default();
                uncommitted.sort();
                if b.is_none() && uncommitted.is_empty() {
                    return Err(blob_not_found());
                }
                Ok(BlobResponse::BlockList {
                    committed: b.map(|b| b.blocks.clone()).unwrap_or_default(),
                    uncommitted,
                    properties: b.map(|b| properties(blob, b, self.clock.now())),
                })
            }
            op => self.manage(&mut all, op),
        }
    }

    /// A write to `blob` names `given` as its lease: the blob's lease (none
    /// if there is no blob) must agree.
    pub(super) fn check_blob_lease(
        &self,
        c: &Container,
        blob: &str,
        given: Option<&str>,
    ) -> Result<()> {
        let none = Lease::default();
        let lease = c.blobs.get(blob).map_or(&none, |b| &b.lease);
        lease.check_write(self.clock.now(), given, Guarded::Blob)
    }
}

impl Blobs {
    /// The store's file, if it has one (for the name its errors carry).
    fn path(&self) -> Option<&std::path::Path> {
        #[cfg(feature = "durable")]
        if let Some(claim) = &self.file {
            return Some(claim.path());
        }
        None
    }
}

#[async_trait::async_trait]
impl BlobBackend for Blobs {
    async fn blob(&self, op: BlobOp<'_>) -> Result<BlobResponse> {
        // A container deleted or created anew has no policy.
        #[cfg(feature = "admin")]
        let renewed = match op {
            BlobOp::CreateContainer { container } | BlobOp::DeleteContainer { container, .. } => {
                Some(container.to_owned())
            }
            _ => None,
        };
        let answer = self
            .apply(op)
            .map_err(|e| e.answered_by(super::errors::store_name(self.path())))?;
        #[cfg(feature = "admin")]
        if let Some(container) = renewed {
            self.admin.forget(&container);
        }
        Ok(answer)
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        let container_key = |name: &str| {
            let all = self.containers.lock().unwrap_or_else(|e| e.into_inner());
            if all.contains_key(name) {
                Ok(name.to_owned())
            } else {
                Err(container_not_found())
            }
        };
        self.admin
            .run(op, container_key, self.clock.now())
            .map_err(|e| e.answered_by(super::errors::store_name(self.path())))
    }
}

#[cfg(all(test, feature = "durable"))]
mod full_disk {
    //! A full disk under a blob store file (ENOSPC injected through redb's
    //! storage backend API, as for tables in `durable.rs`).

    use std::sync::atomic::Ordering;

    use super::*;
    use crate::backend::embedded::durable::full_disk::{
        assert_not_applied, assert_refused_for_space, claim_on_full_disk, TempFile,
    };

    fn put(b: &Blobs, name: &str, body: &[u8]) -> Result<BlobResponse> {
        b.apply(BlobOp::Put {
            container: "photos",
            blob: name,
            body: Bytes::copy_from_slice(body),
            headers: &BlobHeaders::default(),
            conditions: &Conditions::default(),
        })
    }

    fn block(b: &Blobs, name: &str, id: &str, body: &[u8]) -> Result<BlobResponse> {
        b.apply(BlobOp::PutBlock {
            container: "photos",
            blob: name,
            block_id: id,
            body: Bytes::copy_from_slice(body),
            lease_id: None,
        })
    }

    fn block_list(b: &Blobs, name: &str, ids: &[&str]) -> Result<BlobResponse> {
        let ids: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
        b.apply(BlobOp::PutBlockList {
            container: "photos",
            blob: name,
            block_ids: &ids,
            headers: &BlobHeaders::default(),
            conditions: &Conditions::default(),
        })
    }

    /// Every blob's name and bytes, in name order.
    fn contents(b: &Blobs) -> Vec<(String, Vec<u8>)> {
        let all = b.containers.lock().unwrap();
        all.get("photos")
            .map(|c| {
                c.blobs
                    .iter()
                    .map(|(n, b)| (n.clone(), b.data.to_vec()))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_full_disk_refuses_uploads_clearly_and_loses_no_acknowledged_blob() {
        let path = TempFile::new();
        let (claim, full) = claim_on_full_disk(&path.0, Service::Blobs);
        let b = Blobs::from_claim(claim, Clock::default()).unwrap();
        b.apply(BlobOp::CreateContainer {
            container: "photos",
        })
        .unwrap();
        put(&b, "kept", b"whole").unwrap();
        let big = vec![7u8; 300_000];
        block(&b, "blocks", "AAAA", &big).unwrap();

        full.store(true, Ordering::SeqCst);
        assert_refused_for_space(&put(&b, "lost", b"x").unwrap_err());
        // Overwriting the kept blob is refused whole: its old bytes stay.
        assert_not_applied(&put(&b, "kept", b"changed").unwrap_err());
        assert_not_applied(&block(&b, "blocks", "BBBB", &big).unwrap_err());
        // A block list over blocks already in the file: the commit is refused,
        // so no blob appears and the blocks stay uncommitted.
        assert_not_applied(&block_list(&b, "blocks", &["AAAA"]).unwrap_err());
        assert_eq!(
            contents(&b),
            [("kept".to_owned(), b"whole".to_vec())],
            "nothing refused is visible"
        );

        // Space again: the database refuses writes until it is reopened.
        full.store(false, Ordering::SeqCst);
        let err = put(&b, "later", b"x").unwrap_err();
        assert_not_applied(&err);
        assert!(err.to_string().contains("re-open"), "{err}");
        drop(b);

        let b = Blobs::open(&path.0, Clock::default()).unwrap();
        assert_eq!(
            contents(&b),
            [("kept".to_owned(), b"whole".to_vec())],
            "every acknowledged blob, whole"
        );
        // The block put before the disk filled is there; the refused one is not.
        assert_eq!(
            block_list(&b, "blocks", &["BBBB"]).unwrap_err().status(),
            Some(400)
        );
        block_list(&b, "blocks", &["AAAA"]).unwrap();
        put(&b, "after", b"new").unwrap();
        assert_eq!(
            contents(&b),
            [
                ("after".to_owned(), b"new".to_vec()),
                ("blocks".to_owned(), big),
                ("kept".to_owned(), b"whole".to_vec()),
            ],
            "the reopened store is usable"
        );
    }
}

#[cfg(all(test, feature = "durable"))]
mod records {
    use super::*;

    #[test]
    fn a_blob_record_written_before_leases_and_headers_still_reads() {
        // The record of a blob as files written before issue 24 hold it.
        let old = r#"{"etag":"\"0x8DC0000000000001\"","modified":1406829600,"content_type":"image/jpeg","metadata":[["employee","456"]]}"#;
        let record: Record = serde_json::from_str(old).unwrap();
        let blob = record.into_blob(Bytes::from_static(b"jpeg")).unwrap();
        assert_eq!(
            blob.headers.http.content_type.as_deref(),
            Some("image/jpeg")
        );
        assert_eq!(blob.headers.http.cache_control, None);
        assert_eq!(blob.lease, Lease::default());
        assert_eq!(blob.copy, None);
        // And what is written now reads back whole.
        let again: Record = serde_json::from_slice(&to_json(&Record::of(&blob)).unwrap()).unwrap();
        let back = again.into_blob(blob.data.clone()).unwrap();
        assert_eq!(back.headers, blob.headers);
        assert_eq!(back.etag, blob.etag);
    }
}
