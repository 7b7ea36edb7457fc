//! The embedded store's blobs: containers of block blobs in memory, with the
//! Blob service's conditions, ranges, listings and block lists.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use chrono::{DateTime, SubsecRound as _, Utc};
use futures::stream::{self, StreamExt};

use crate::backend::blob::{
    BlobBackend, BlobHeaders, BlobOp, BlobProperties, BlobResponse, Conditions,
};
use crate::clock::Clock;
use crate::entity::ETag;
use crate::error::{Error, ErrorCode, Result};

/// Downloads are handed out in pieces of this size, as a network read would be.
const CHUNK: usize = 1 << 20;

/// The service's page size for blob listings.
const DEFAULT_LIST_MAX: usize = 5000;

#[derive(Debug, Clone)]
struct Blob {
    data: Bytes,
    etag: ETag,
    last_modified: DateTime<Utc>,
    headers: BlobHeaders,
}

#[derive(Debug, Default)]
struct Container {
    blobs: BTreeMap<String, Blob>,
    /// Blocks put but not yet committed, per blob name.
    uncommitted: HashMap<String, HashMap<String, Bytes>>,
}

/// Every container of one embedded store.
#[derive(Debug, Default)]
pub(crate) struct Blobs {
    clock: Clock,
    next_etag: AtomicU64,
    containers: Mutex<HashMap<String, Container>>,
}

fn container_not_found() -> Error {
    Error::service(
        404,
        ErrorCode::ContainerNotFound,
        "The specified container does not exist.",
    )
}

fn blob_not_found() -> Error {
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

fn properties(name: &str, blob: &Blob) -> BlobProperties {
    BlobProperties {
        name: name.to_owned(),
        size: blob.data.len() as u64,
        etag: blob.etag.clone(),
        last_modified: blob.last_modified,
        content_type: blob.headers.content_type.clone(),
        metadata: {
            // As the service answers: names in lower case, in name order.
            let mut m: Vec<(String, String)> = blob
                .headers
                .metadata
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect();
            m.sort();
            m
        },
    }
}

/// The service's order of checks: `If-None-Match: *` on an existing blob is a
/// conflict; an `If-Match` that names another version (or no blob) fails.
fn check(conditions: &Conditions, current: Option<&Blob>) -> Result<()> {
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

impl Blobs {
    pub(crate) fn new(clock: Clock) -> Self {
        Blobs {
            clock,
            ..Default::default()
        }
    }

    fn stamp(&self) -> (ETag, DateTime<Utc>) {
        let n = self.next_etag.fetch_add(1, Ordering::Relaxed) + 1;
        // HTTP dates carry whole seconds; keep what a reader over HTTP would see.
        let now = self.clock.now().trunc_subsecs(0);
        (ETag::new(format!("\"0x8DC{n:013X}\"")), now)
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
                all.insert(container.to_owned(), Container::default());
                Ok(BlobResponse::Created(true))
            }
            BlobOp::DeleteContainer { container } => match all.remove(container) {
                Some(_) => Ok(BlobResponse::Done),
                None => Err(container_not_found()),
            },
            BlobOp::List {
                container,
                prefix,
                marker,
                max,
            } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                let max = max.map_or(DEFAULT_LIST_MAX, |m| m as usize);
                let prefix = prefix.unwrap_or("");
                let start = marker.unwrap_or(prefix);
                let mut page = c
                    .blobs
                    .range(start.to_owned()..)
                    .take_while(|(name, _)| name.starts_with(prefix))
                    .map(|(name, b)| properties(name, b));
                let blobs: Vec<BlobProperties> = page.by_ref().take(max).collect();
                let next_marker = page.next().map(|p| p.name);
                Ok(BlobResponse::Listing { blobs, next_marker })
            }
            BlobOp::Put {
                container,
                blob,
                body,
                headers,
                conditions,
            } => {
                let (etag, last_modified) = self.stamp();
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                check(conditions, c.blobs.get(blob))?;
                c.uncommitted.remove(blob);
                c.blobs.insert(
                    blob.to_owned(),
                    Blob {
                        data: body,
                        etag: etag.clone(),
                        last_modified,
                        headers: headers.clone(),
                    },
                );
                Ok(BlobResponse::Written {
                    etag,
                    last_modified,
                })
            }
            BlobOp::PutBlock {
                container,
                blob,
                block_id,
                body,
            } => {
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
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
                let (etag, last_modified) = self.stamp();
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
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
                if let Some(blocks) = blocks {
                    for id in block_ids {
                        data.extend_from_slice(&blocks[id]);
                    }
                }
                c.uncommitted.remove(blob);
                c.blobs.insert(
                    blob.to_owned(),
                    Blob {
                        data: Bytes::from(data),
                        etag: etag.clone(),
                        last_modified,
                        headers: headers.clone(),
                    },
                );
                Ok(BlobResponse::Written {
                    etag,
                    last_modified,
                })
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
                    properties: properties(blob, b),
                    chunks: stream::iter(chunks).boxed(),
                })
            }
            BlobOp::Properties { container, blob } => {
                let c = all.get(container).ok_or_else(container_not_found)?;
                let b = c.blobs.get(blob).ok_or_else(blob_not_found)?;
                Ok(BlobResponse::Properties(properties(blob, b)))
            }
            BlobOp::Delete {
                container,
                blob,
                conditions,
            } => {
                let c = all.get_mut(container).ok_or_else(container_not_found)?;
                let b = c.blobs.get(blob).ok_or_else(blob_not_found)?;
                check(conditions, Some(b))?;
                c.blobs.remove(blob);
                c.uncommitted.remove(blob);
                Ok(BlobResponse::Done)
            }
        }
    }
}

#[async_trait::async_trait]
impl BlobBackend for Blobs {
    async fn blob(&self, op: BlobOp<'_>) -> Result<BlobResponse> {
        self.apply(op)
    }
}
