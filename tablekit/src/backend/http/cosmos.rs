//! The Azure Cosmos DB Table API's own rules, checked before a request to an
//! account whose [`Target`](crate::account::Target) is Cosmos DB is sent,
//! where they are stricter than Azure Storage's (which the clients check for
//! every target). From "Azure Cosmos DB for Table: frequently asked
//! questions", *Where is API for Table not identical with Azure Table storage
//! behavior?*:
//!
//! - RowKeys are at most 255 bytes;
//! - a batch (entity group transaction) is at most 2 MB;
//! - the property names `id`, `rid`, `etag` and `ResourceId` are reserved,
//!   and so are the system properties of every Cosmos DB item (`_rid`,
//!   `_self`, `_etag`, `_attachments`, `_ts`);
//! - table names are case-sensitive (one table on Azure Storage, two on
//!   Cosmos DB): [`TableNames`] refuses a second spelling of a name.
//!
//! A SAS naming a stored access policy is refused when the client is made
//! (`Account::check_credential_for_target`) or the SAS signed (`TableSas::sign`):
//! Cosmos DB has no stored access policies.
//!
//! One wire difference is special-cased as the Python SDK does for Cosmos DB
//! endpoints ([`tunnel_merge`]): a merge (`MERGE`, single or inside a batch)
//! goes as `POST` with `X-HTTP-Method: MERGE`.
//!
//! Where Cosmos DB is more permissive (entities up to 2 MB, `$top` above
//! 1,000), tablekit keeps Azure Storage's limits, so a table's data and code
//! move between the two unchanged; guide chapter 6 lists every difference and
//! what tablekit does about it.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::Method;
use serde_json::Value;

use super::pipeline::Outgoing;
use crate::backend::{BatchOp, Operation};
use crate::error::{Error, Result, ValidationError};

/// The longest RowKey the Cosmos DB Table API stores, in UTF-8 bytes.
pub(crate) const MAX_ROW_KEY_BYTES: usize = 255;
/// The largest batch request the Cosmos DB Table API takes, in bytes.
pub(crate) const MAX_BATCH_BYTES: usize = 2 * 1024 * 1024;
/// Property names the Cosmos DB Table API reserves (compared without regard to
/// case): the FAQ's four, and the system properties Cosmos DB adds to every item.
pub(crate) const RESERVED_PROPERTIES: [&str; 9] = [
    "id",
    "rid",
    "etag",
    "ResourceId",
    "_rid",
    "_self",
    "_etag",
    "_attachments",
    "_ts",
];

/// How many table names [`TableNames`] remembers per client; names beyond
/// are not checked (a client of that many tables is not mixing spellings by
/// mistake).
const MAX_REMEMBERED_NAMES: usize = 4096;

/// The spelling of each table name a client used successfully, on Cosmos DB,
/// where table names are case-sensitive: `Orders` and `orders` are two tables
/// there and one on Azure Storage, so code that mixes spellings does different
/// things on each. A second spelling of a name is refused before the request,
/// naming both; deleting a table forgets its spelling. A name is remembered
/// once the service answered a call on it (a mistyped name that the service
/// did not find is not).
#[derive(Debug, Default)]
pub(crate) struct TableNames(Mutex<HashMap<Box<str>, Box<str>>>);

impl TableNames {
    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Box<str>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses `op` if it names a table used before in another spelling.
    pub(crate) fn check(&self, op: &Operation<'_>) -> Result<()> {
        let Some(table) = op.table() else {
            return Ok(());
        };
        match self.names().get(table.to_ascii_lowercase().as_str()) {
            Some(seen) if **seen != *table => Err(refuse(format!(
                "the table name {table:?} differs from {seen:?}, used before through this client, \
                 only in letter case: table names are case-sensitive on Cosmos DB (two tables \
                 there, one on Azure Storage); use one spelling"
            ))),
            _ => Ok(()),
        }
    }

    /// The service answered `op`: remember its table's spelling (forget it
    /// after a delete).
    pub(crate) fn record(&self, op: &Operation<'_>) {
        let Some(table) = op.table() else {
            return;
        };
        let key = table.to_ascii_lowercase();
        let mut names = self.names();
        if matches!(op, Operation::DeleteTable { .. }) {
            names.remove(key.as_str());
        } else if names.len() < MAX_REMEMBERED_NAMES || names.contains_key(key.as_str()) {
            names.insert(key.into(), table.into());
        }
    }
}

fn refuse(reason: String) -> Error {
    Error::invalid(ValidationError::CosmosDb { reason })
}

fn check_row_key(row_key: &str) -> Result<()> {
    if row_key.len() > MAX_ROW_KEY_BYTES {
        return Err(refuse(format!(
            "the RowKey is {} bytes (UTF-8); Cosmos DB takes at most {MAX_ROW_KEY_BYTES}",
            row_key.len()
        )));
    }
    Ok(())
}

/// The RowKey and the property names of an entity's JSON.
fn check_entity_json(body: &[u8]) -> Result<()> {
    // The client wrote this JSON; what does not parse is not ours to judge.
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    for name in map.keys() {
        let property = name.split('@').next().unwrap_or(name);
        if let Some(reserved) = RESERVED_PROPERTIES
            .iter()
            .find(|r| r.eq_ignore_ascii_case(property))
        {
            return Err(refuse(format!(
                "the property name {property:?} is reserved by Cosmos DB ({reserved:?}; reserved: {})",
                RESERVED_PROPERTIES.join(", ")
            )));
        }
    }
    if let Some(Value::String(row_key)) = map.get("RowKey") {
        check_row_key(row_key)?;
    }
    Ok(())
}

fn check_batch_op(op: &BatchOp) -> Result<()> {
    check_row_key(&op.key.row_key)?;
    if let Some(body) = &op.body {
        check_entity_json(body)?;
    }
    Ok(())
}

/// Refuses every ACL, service-properties and stats call: the Cosmos DB Table
/// API has no stored access policies, no service properties (no logging,
/// metrics or CORS settings: "CORS isn't currently supported") and no
/// secondary stats endpoint. The official SDKs' own suites skip these calls
/// on Cosmos DB; tablekit says so before sending rather than let the account
/// answer with an error that does not name the reason.
#[cfg(feature = "admin")]
pub(crate) fn check_admin(op: &crate::backend::admin::AdminOp<'_>) -> Result<()> {
    Err(refuse(format!(
        "{} is an Azure Table Storage call the Cosmos DB Table API does not have \
         (no stored access policies, service properties or stats there; \
         Cosmos DB accounts are configured through Azure Resource Manager)",
        op.name()
    )))
}

/// Refuses `op` (built as `req`) if the Cosmos DB Table API would.
pub(crate) fn check(op: &Operation<'_>, req: &Outgoing) -> Result<()> {
    match op {
        Operation::Insert { .. } => check_entity_json(&req.body),
        Operation::Write { key, .. } => {
            check_row_key(&key.row_key)?;
            check_entity_json(&req.body)
        }
        Operation::Delete { key, .. } | Operation::Get { key, .. } => check_row_key(&key.row_key),
        Operation::Transaction { ops, .. } => {
            for (index, op) in ops.iter().enumerate() {
                check_batch_op(op).map_err(|e| match e.validation() {
                    Some(ValidationError::CosmosDb { reason }) => {
                        refuse(format!("transaction operation {index}: {reason}"))
                    }
                    _ => e,
                })?;
            }
            if req.body.len() > MAX_BATCH_BYTES {
                return Err(refuse(format!(
                    "the transaction's request is {} bytes; Cosmos DB takes batches of at most {MAX_BATCH_BYTES}",
                    req.body.len()
                )));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `X-HTTP-Method`, the header that names the verb a `POST` stands for.
const X_HTTP_METHOD: HeaderName = HeaderName::from_static("x-http-method");

/// Sends merges as `POST` + `X-HTTP-Method: MERGE`, the form the Python SDK
/// rewrites every merge into for Cosmos DB endpoints: the request itself,
/// and each merge inside a batch body.
pub(crate) fn tunnel_merge(req: &mut Outgoing) {
    if req.method.as_str() == "MERGE" {
        req.method = Method::POST;
        req.headers
            .push((X_HTTP_METHOD, HeaderValue::from_static("MERGE")));
        return;
    }
    if req.resource != "$batch" {
        return;
    }
    // A part's request line follows `Content-Transfer-Encoding: binary` and a
    // blank line; entity JSON never holds a raw CR LF, so the pattern cannot
    // occur inside a body.
    const PART: &[u8] = b"binary\r\n\r\nMERGE ";
    let body = &req.body;
    if memchr::memmem::find(body, PART).is_none() {
        return;
    }
    let mut out = Vec::with_capacity(body.len() + 64);
    let mut rest: &[u8] = body;
    while let Some(at) = memchr::memmem::find(rest, PART) {
        let line_start = at + PART.len() - b"MERGE ".len();
        out.extend_from_slice(&rest[..line_start]);
        out.extend_from_slice(b"POST ");
        let after_verb = &rest[at + PART.len()..];
        let line_end = memchr::memmem::find(after_verb, b"\r\n").unwrap_or(after_verb.len());
        out.extend_from_slice(&after_verb[..line_end]);
        out.extend_from_slice(b"\r\nX-HTTP-Method: MERGE");
        rest = &after_verb[line_end..];
    }
    out.extend_from_slice(rest);
    req.body = Bytes::from(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_are_found_whatever_their_case_and_annotation() {
        for body in [
            r#"{"PartitionKey":"p","RowKey":"r","id":"x"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","ETag":"x"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","resourceid@odata.type":"Edm.String","resourceid":"x"}"#,
        ] {
            let e = check_entity_json(body.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("reserved by Cosmos DB"), "{e}");
        }
        assert!(check_entity_json(br#"{"PartitionKey":"p","RowKey":"r","Identity":"x"}"#).is_ok());
    }

    #[test]
    fn row_keys_are_measured_in_utf8_bytes() {
        assert!(check_row_key(&"a".repeat(255)).is_ok());
        assert!(check_row_key(&"a".repeat(256)).is_err());
        // 128 two-byte characters: 256 bytes.
        let e = check_row_key(&"\u{e9}".repeat(128)).unwrap_err();
        assert!(e.to_string().contains("256 bytes"), "{e}");
    }
}
