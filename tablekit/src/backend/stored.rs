//! Entities as an in-process backend holds them: property bags behind `Arc`s,
//! handed to readers as [`RawEntity`] views without any JSON in between.

use std::borrow::Cow;
use std::sync::Arc;

use crate::entity::{DynamicEntity, TableEntity};
use crate::entity::{RawEntity, Slot};
use crate::error::Result;

/// One stored version of an entity. It never changes once stored: a write
/// stores a new one, so readers keep a consistent version for as long as they hold it.
#[derive(Debug)]
pub(crate) struct StoredEntity {
    /// Keys, properties, and the Timestamp and ETag of this version (both always set).
    pub(crate) entity: DynamicEntity,
    /// The Timestamp in the service's text form, formatted once at write time.
    pub(crate) timestamp_text: Box<str>,
}

impl StoredEntity {
    pub(crate) fn etag(&self) -> Option<&str> {
        self.entity.etag.as_ref().map(|e| e.as_str())
    }
}

/// The properties a `$select` names: the service returns only those (the keys
/// always), and a named property the entity lacks is simply absent.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    names: Vec<String>,
    timestamp: bool,
}

impl Selection {
    /// From the comma-separated `$select` text.
    #[cfg(feature = "embedded")]
    pub(crate) fn parse(select: &str) -> Self {
        let mut names = Vec::new();
        let mut timestamp = false;
        for n in select.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match n {
                "PartitionKey" | "RowKey" => {}
                "Timestamp" => timestamp = true,
                other => names.push(other.to_owned()),
            }
        }
        Selection { names, timestamp }
    }

    fn keeps(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

/// Fills `raw` with a borrowed view of `stored`, reusing its property buffer.
fn fill<'a>(raw: &mut RawEntity<'a>, stored: &'a StoredEntity, select: Option<&Selection>) {
    let e = &stored.entity;
    raw.partition_key = Cow::Borrowed(&e.partition_key);
    raw.row_key = Cow::Borrowed(&e.row_key);
    raw.timestamp = match select {
        Some(s) if !s.timestamp => None,
        _ => Some(Cow::Borrowed(&stored.timestamp_text)),
    };
    raw.etag = stored.etag().map(Cow::Borrowed);
    raw.props.clear();
    let props = e
        .properties
        .iter()
        .filter(|(n, _)| select.is_none_or(|s| s.keeps(n)));
    raw.props
        .extend(props.map(|(n, v)| (Cow::Borrowed(n), Slot::Value(Cow::Borrowed(v)))));
}

/// Decodes one stored entity as `T`.
pub(crate) fn decode_one<T: TableEntity>(
    stored: &StoredEntity,
    select: Option<&Selection>,
) -> Result<T> {
    let mut raw = RawEntity::default();
    fill(&mut raw, stored, select);
    T::decode(&raw)
}

/// Decodes a page read from a store file as `T`, with one property buffer
/// for all: each string is copied once, into `T`.
#[cfg(feature = "durable")]
pub(crate) fn decode_rows<T: TableEntity>(
    rows: &crate::backend::embedded::durable::rows::Rows,
    select: Option<&Selection>,
    out: &mut Vec<T>,
) -> Result<()> {
    out.reserve(rows.len());
    let mut raw = RawEntity::default();
    let keep = |n: &str| select.is_none_or(|s| s.keeps(n));
    let timestamp = select.is_none_or(|s| s.timestamp);
    for (i, (key, record)) in rows.iter().enumerate() {
        if !crate::backend::embedded::durable::rows::fill(&mut raw, key, record, keep, timestamp) {
            return Err(unreadable_row(rows, i));
        }
        out.push(T::decode(&raw)?);
    }
    Ok(())
}

/// The error of row `i` of a page read from a store file that `fill` refused.
#[cfg(feature = "durable")]
fn unreadable_row(
    rows: &crate::backend::embedded::durable::rows::Rows,
    i: usize,
) -> crate::error::Error {
    crate::error::Error::service(
        500,
        crate::error::ErrorCode::InternalError,
        format!("the file could not be read: {}", rows.unreadable(i)),
    )
}

/// The strings one row's decode leaves for the next (see [`decode_row_at`]).
#[cfg(feature = "durable")]
#[derive(Debug, Default)]
pub(crate) struct Spare {
    timestamp: Option<String>,
    etag: Option<String>,
}

/// Decodes row `i` of a page read from a store file as `T`, as
/// [`decode_rows`] does, one entity at a time (an entity stream decodes
/// each as it is read, so its allocations are reused by the next one).
#[cfg(feature = "durable")]
pub(crate) fn decode_row_at<T: TableEntity>(
    rows: &crate::backend::embedded::durable::rows::Rows,
    i: usize,
    select: Option<&Selection>,
    spare: &mut Spare,
) -> Result<T> {
    let (key, record) = rows.get(i).ok_or_else(|| unreadable_row(rows, i))?;
    let mut raw = RawEntity {
        timestamp: spare.timestamp.take().map(Cow::Owned),
        etag: spare.etag.take().map(Cow::Owned),
        ..RawEntity::default()
    };
    let keep = |n: &str| select.is_none_or(|s| s.keeps(n));
    let timestamp = select.is_none_or(|s| s.timestamp);
    if !crate::backend::embedded::durable::rows::fill(&mut raw, key, record, keep, timestamp) {
        return Err(unreadable_row(rows, i));
    }
    let decoded = T::decode(&raw);
    if let Some(Cow::Owned(s)) = raw.timestamp.take() {
        spare.timestamp = Some(s);
    }
    if let Some(Cow::Owned(s)) = raw.etag.take() {
        spare.etag = Some(s);
    }
    decoded
}

/// Decodes a page of stored entities as `T`, with one property buffer for all.
pub(crate) fn decode_page<T: TableEntity>(
    entities: &[Arc<StoredEntity>],
    select: Option<&Selection>,
    out: &mut Vec<T>,
) -> Result<()> {
    out.reserve(entities.len());
    let mut raw = RawEntity::default();
    for stored in entities {
        fill(&mut raw, stored, select);
        out.push(T::decode(&raw)?);
    }
    Ok(())
}
