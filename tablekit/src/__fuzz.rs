//! Entry points for the fuzz targets (`fuzz/` at the workspace root) and their
//! stable replay in the test suite: the parsers that read what tablekit did
//! not write but that are not public API. Only with the non-default `fuzzing`
//! feature; hidden, unstable, not for use outside tablekit's own tests.

use crate::entity::{DynamicEntity, ETag, TableEntity};
use crate::error::Result;
use crate::filter::Filter;

/// Decodes a query page body (`{"value":[...]}`) into `T`s.
pub fn decode_page<T: TableEntity>(body: &[u8]) -> Result<Vec<T>> {
    let mut out = Vec::new();
    crate::codec::read::decode_page(body, &mut out)?;
    Ok(out)
}

/// Decodes a point-read body into a `T`, with `etag` as the response's ETag
/// header.
pub fn decode_entity<T: TableEntity>(body: &[u8], etag: Option<&str>) -> Result<T> {
    crate::codec::read::decode_entity(body, etag, None)
}

/// Decodes the table names of a `GET /Tables` answer.
pub fn decode_table_names(body: &[u8]) -> Result<Vec<String>> {
    crate::codec::read::decode_table_names(body)
}

/// Parses a transaction (multipart/mixed) answer to `operations` operations:
/// the ETag of each, or the failing operation's error.
pub fn batch_response(
    content_type: &str,
    body: &[u8],
    operations: usize,
) -> Result<Vec<Option<ETag>>> {
    crate::backend::http::batch::parse_response(content_type, body, operations, None)
}

/// Parses a `QueueMessagesList` answer; the number of messages read.
#[cfg(feature = "queue")]
pub fn queue_messages(body: &[u8]) -> Result<usize> {
    crate::backend::http::queue::parse_messages(body).map(|m| m.len())
}

/// Parses an `EnumerationResults` blob listing; the number of blobs read.
#[cfg(feature = "blob")]
pub fn blob_listing(body: &[u8]) -> Result<usize> {
    match crate::backend::http::blob::parse_listing(body)? {
        crate::backend::blob::BlobResponse::Listing { blobs, .. } => Ok(blobs.len()),
        _ => Err(crate::Error::decode(
            "a blob listing read as another answer",
        )),
    }
}

/// Whether `entity` matches `filter`, evaluated whatever its number of
/// comparisons (`Filter::matches`, with `test-support`, refuses more than 15
/// first); false for a filter that cannot be sent.
pub fn filter_matches(filter: &Filter<DynamicEntity>, entity: &DynamicEntity) -> bool {
    filter
        .unchecked_expr()
        .is_some_and(|e| crate::filter::matches(e, entity))
}
