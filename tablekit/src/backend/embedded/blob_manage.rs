//! The embedded blob store's management calls: container listings and
//! properties, blob listings with a delimiter, metadata and HTTP headers set
//! after an upload, leases, and Copy Blob within the store (done at once, as
//! the service does within an account for a block blob it can copy quickly).

use std::collections::HashMap;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use percent_encoding::percent_decode_str;

use super::blob_lease::Guarded;
use super::blobs::{
    answered_metadata, blob_not_found, check, container_not_found, properties, Blob, Blobs, Change,
    Container,
};
use crate::backend::blob::{
    BlobHeaders, BlobOp, BlobResponse, ContainerProperties, CopyInfo, CopySource, CopyStatus,
};
use crate::error::{Error, ErrorCode, Result};

/// The service's page size for container listings.
const DEFAULT_LIST_MAX: usize = 5000;

/// One entry of a listing: a blob, or the prefix its name rolls up to.
enum Entry<'a> {
    Blob(&'a str, &'a Blob),
    Prefix(String),
}

impl Entry<'_> {
    fn key(&self) -> &str {
        match self {
            Entry::Blob(name, _) => name,
            Entry::Prefix(p) => p,
        }
    }
}

impl Blobs {
    /// A page of a blob listing: names starting with `prefix` from `marker` on,
    /// with a delimiter rolled up to the first delimiter after the prefix (one
    /// entry per prefix). The marker is the next entry's name or prefix.
    pub(super) fn list_page(
        &self,
        c: &Container,
        prefix: &str,
        delimiter: Option<&str>,
        marker: Option<&str>,
        max: usize,
        now: DateTime<Utc>,
    ) -> BlobResponse {
        let start = marker.map_or(prefix, |m| m.max(prefix));
        let mut last_prefix: Option<String> = None;
        let mut entries = c
            .blobs
            .range(start.to_owned()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .filter_map(|(name, b)| {
                let rolled = delimiter.and_then(|d| {
                    let rest = &name[prefix.len()..];
                    rest.find(d)
                        .map(|i| name[..prefix.len() + i + d.len()].to_owned())
                });
                match rolled {
                    None => Some(Entry::Blob(name, b)),
                    Some(p) if last_prefix.as_deref() == Some(p.as_str()) => None,
                    Some(p) => {
                        last_prefix = Some(p.clone());
                        Some(Entry::Prefix(p))
                    }
                }
            })
            // A prefix whose first blob sorts before the marker was answered on
            // an earlier page, unless the marker is that prefix.
            .filter(|e| marker.is_none_or(|m| e.key() >= m));
        let mut blobs = Vec::new();
        let mut prefixes = Vec::new();
        for e in entries.by_ref().take(max) {
            match e {
                Entry::Blob(name, b) => blobs.push(properties(name, b, now)),
                Entry::Prefix(p) => prefixes.push(p),
            }
        }
        let next_marker = entries.next().map(|e| e.key().to_owned());
        BlobResponse::Listing {
            blobs,
            prefixes,
            next_marker,
        }
    }
}

fn container_properties(name: &str, c: &Container, now: DateTime<Utc>) -> ContainerProperties {
    ContainerProperties {
        name: name.to_owned(),
        etag: c.meta.etag.clone(),
        last_modified: c.meta.last_modified,
        metadata: answered_metadata(&c.meta.metadata),
        lease: c.meta.lease.info(now),
    }
}

/// The container and blob a copy source URL names: its path is
/// `/container/blob` or, as the emulator spells it, `/account/container/blob`
/// (the host is not looked at: the store is one account).
fn source_of_url(url: &str, all: &HashMap<String, Container>) -> Result<(String, String)> {
    let bad = || {
        Error::service(
            400,
            ErrorCode::from("InvalidHeaderValue"),
            "The value for one of the HTTP headers is not in the correct format.",
        )
    };
    let uri: http::Uri = url.parse().map_err(|_| bad())?;
    let segments: Vec<String> = uri
        .path()
        .trim_start_matches('/')
        .split('/')
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let split = |at: usize| -> Option<(String, String)> {
        let blob = segments.get(at + 1..)?.join("/");
        (!blob.is_empty()).then(|| (segments[at].clone(), blob))
    };
    match (split(0), split(1)) {
        (Some((c, b)), _) if all.contains_key(&c) => Ok((c, b)),
        (_, Some((c, b))) if all.contains_key(&c) => Ok((c, b)),
        (Some(_), _) | (_, Some(_)) => Err(container_not_found()),
        (None, None) => Err(bad()),
    }
}

impl Blobs {
    /// The management calls; the store's lock is held.
    pub(super) fn manage(
        &self,
        all: &mut HashMap<String, Container>,
        op: BlobOp<'_>,
    ) -> Result<BlobResponse> {
        let now = self.clock.now();
        match op {
            BlobOp::ListContainers {
                prefix,
                marker,
                max,
                include_metadata,
            } => {
                let prefix = prefix.unwrap_or("");
                let start = marker.map_or(prefix, |m| m.max(prefix));
                let mut names: Vec<&String> = all
                    .keys()
                    .filter(|n| n.starts_with(prefix) && n.as_str() >= start)
                    .collect();
                names.sort();
                let max = max.map_or(DEFAULT_LIST_MAX, |m| m as usize);
                let containers = names
                    .iter()
                    .take(max)
                    .map(|n| {
                        let mut p = container_properties(n, &all[*n], now);
                        if !include_metadata {
                            p.metadata.clear();
                        }
                        p
                    })
                    .collect();
                Ok(BlobResponse::Containers {
                    containers,
                    next_marker: names.get(max).map(|n| (*n).clone()),
                })
            }
            BlobOp::ContainerProperties { container } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                Ok(BlobResponse::ContainerProperties(container_properties(
                    container, c, now,
                )))
            }
            BlobOp::SetContainerMetadata {
                container,
                metadata,
                lease_id,
            } => {
                let (etag, last_modified, n) = self.stamp();
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                // Only a lease id given is checked: a container's lease guards its deletion.
                if lease_id.is_some() {
                    c.meta
                        .lease
                        .check_write(now, lease_id, Guarded::Container)?;
                }
                let mut meta = c.meta.clone();
                meta.metadata = metadata.to_vec();
                meta.etag = etag;
                meta.last_modified = last_modified;
                self.persist(Change::Container(container, Some(&meta), Some(n)))?;
                c.meta = meta;
                Ok(BlobResponse::Done)
            }
            BlobOp::SetMetadata {
                container,
                blob,
                metadata,
                conditions,
            } => self.change_blob(all, container, blob, conditions, |b| {
                b.headers.metadata = metadata.to_vec();
            }),
            BlobOp::SetHttpHeaders {
                container,
                blob,
                headers,
                conditions,
            } => self.change_blob(all, container, blob, conditions, |b| {
                b.headers.http = headers.clone();
                // A concluded copy is no longer reported once the blob's properties are set.
                b.copy = None;
            }),
            BlobOp::Lease {
                container,
                blob,
                action,
            } => {
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                match blob {
                    None => {
                        let (lease, answer) = c.meta.lease.act(now, action)?;
                        let mut meta = c.meta.clone();
                        meta.lease = lease;
                        self.persist(Change::Container(container, Some(&meta), None))?;
                        c.meta = meta;
                        Ok(answer)
                    }
                    Some(name) => {
                        let b = c.blobs.get_mut(name).ok_or_else(blob_not_found)?;
                        let (lease, answer) = b.lease.act(now, action)?;
                        let mut changed = b.clone();
                        changed.lease = lease;
                        self.persist(Change::Properties(container, name, &changed, None))?;
                        *b = changed;
                        Ok(answer)
                    }
                }
            }
            BlobOp::Copy {
                container,
                blob,
                source,
                metadata,
                conditions,
            } => {
                let (src_container, src_blob, source_url) = match source {
                    CopySource::Blob { container, blob } => (
                        container.to_owned(),
                        blob.to_owned(),
                        format!("/{container}/{blob}"),
                    ),
                    CopySource::Url(url) => {
                        let (c, b) = source_of_url(url, all)?;
                        (c, b, url.to_owned())
                    }
                };
                let src = all
                    .get(&src_container)
                    .ok_or_else(container_not_found)?
                    .blobs
                    .get(&src_blob)
                    .ok_or_else(blob_not_found)?;
                let (data, mut headers): (Bytes, BlobHeaders) =
                    (src.data.clone(), src.headers.clone());
                let blocks = src.blocks.clone();
                if !metadata.is_empty() {
                    headers.metadata = metadata.to_vec();
                }
                let (etag, last_modified, n) = self.stamp();
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                self.check_blob_lease(c, blob, conditions.lease_id.as_deref())?;
                check(conditions, c.blobs.get(blob))?;
                let size = data.len() as u64;
                let id = uuid::Uuid::new_v4().to_string();
                let new = Blob {
                    data,
                    etag,
                    last_modified,
                    created: last_modified,
                    blocks,
                    headers,
                    lease: Default::default(),
                    copy: Some(CopyInfo {
                        id: id.clone(),
                        status: CopyStatus::Success,
                        source: Some(source_url),
                        progress: Some((size, size)),
                        completed_on: Some(last_modified),
                        status_description: None,
                    }),
                };
                self.commit_new(c, container, blob, new, n)?;
                Ok(BlobResponse::Copied {
                    id,
                    status: CopyStatus::Success,
                })
            }
            BlobOp::CreateContainer { .. }
            | BlobOp::DeleteContainer { .. }
            | BlobOp::List { .. }
            | BlobOp::Put { .. }
            | BlobOp::PutBlock { .. }
            | BlobOp::PutBlockList { .. }
            | BlobOp::Get { .. }
            | BlobOp::Properties { .. }
            | BlobOp::BlockList { .. }
            | BlobOp::Delete { .. } => Err(Error::decode(format!(
                "the embedded store's management calls do not carry out {}",
                op.name()
            ))),
        }
    }

    /// A change to an existing blob's properties (not its bytes): the lease
    /// and conditions checked, a new ETag and Last-Modified, the file first.
    fn change_blob(
        &self,
        all: &mut HashMap<String, Container>,
        container: &str,
        blob: &str,
        conditions: &crate::backend::blob::Conditions,
        change: impl FnOnce(&mut Blob),
    ) -> Result<BlobResponse> {
        let (etag, last_modified, n) = self.stamp();
        let now = self.clock.now();
        let c = all.get_mut(container).ok_or_else(container_not_found)?;
        let b = match c.blobs.get_mut(blob) {
            Some(b) => b,
            None if conditions.if_match.is_some() => {
                return Err(Error::service(
                    412,
                    ErrorCode::ConditionNotMet,
                    "The condition specified using HTTP conditional header(s) is not met.",
                ))
            }
            None => return Err(blob_not_found()),
        };
        b.lease
            .check_write(now, conditions.lease_id.as_deref(), Guarded::Blob)?;
        check(conditions, Some(b))?;
        let mut changed = b.clone();
        changed.lease = b.lease.after_write(now);
        change(&mut changed);
        changed.etag = etag.clone();
        changed.last_modified = last_modified;
        self.persist(Change::Properties(container, blob, &changed, Some(n)))?;
        *b = changed;
        Ok(BlobResponse::Written {
            etag,
            last_modified,
        })
    }
}
