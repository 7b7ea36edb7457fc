//! The Blob service, answered from the embedded blob store: containers
//! (create, delete, properties, metadata, ACLs, leases, listings), block
//! blobs (put whole or in blocks, get with ranges, properties, metadata,
//! HTTP headers, leases, copies within the account, delete) and the
//! service's properties and stats.
//!
//! Every input is checked as the service checks it before the store sees it
//! (names, metadata, block ids, lease ids, ranges, MD5s, sizes, conditional
//! headers), with the service's status and code. What the store cannot carry
//! out (page and append blobs, snapshots, versions, tags, tiers, the root
//! container, committed blocks named again in a block list, public access
//! levels) is answered 501 `NotImplemented`.


use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures::TryStreamExt as _;
use http::header::{HeaderName, HeaderValue};
use http::Method;

use super::auth::{Need, Perm};
use super::reply::{self, Reply};
use super::{Ctx, Failure};
use crate::backend::admin::{AdminOp, AdminResponse};
use crate::backend::blob::{
    BlobHeaders, BlobHttpHeaders, BlobOp, BlobProperties, BlobResponse, Conditions,
    ContainerProperties, CopySource, LeaseAction,
};
use crate::backend::http::blob::properties_headers;
use crate::backend::http::blob_xml::{
    copy_status_word, encode_block_list_answer, encode_containers, encode_listing, http_date_text,
    lease_words, parse_block_list, BlockKind, ListingHead,
};
use crate::entity::ETag;

/// The most blocks a block list commits.
const MAX_BLOCKS: usize = 50_000;
/// The longest block id, in bytes before base64.
const MAX_BLOCK_ID: usize = 64;
/// The most bytes of metadata (names and values) a blob or container carries.
const MAX_METADATA: usize = 8 * 1024;
/// The most entries of a listing page.
const MAX_RESULTS: u32 = 5000;
/// The largest range whose MD5 the service computes (`x-ms-range-get-content-md5`).
const MAX_RANGE_MD5: u64 = 4 << 20;
/// The content type the service stores for a blob put without one.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// Answers one Blob service request.
pub(crate) async fn handle(ctx: Ctx<'_>) -> Result<Reply, Failure> {
    let (container, blob) = ctx.path.split_once('/').unwrap_or((ctx.path, ""));
    let method = ctx.parts.method.clone();
    let restype = ctx.param("restype");
    let comp = ctx.param("comp");
    if container.is_empty() {
        return service(&ctx, &method, restype, comp).await;
    }
    if container == "$root" || container == "$web" || container == "$logs" {
        return Err(not_implemented(&format!(
            "the special container `{container}`"
        )));
    }
    if blob.is_empty() {
        if restype == Some("container") {
            return container_op(&ctx, container, &method, comp).await;
        }
        // `/name` without `restype=container` is the blob `name` of the
        // root container, which this store does not have.
        crate::validate::blob_name(container).map_err(Failure::from)?;
        return Err(container_not_found());
    }
    blob_op(&ctx, container, blob, &method, comp).await
}

// ---------------------------------------------------------------------------
// Errors and answers.

fn not_implemented(what: &str) -> Failure {
    Failure::new(
        501,
        "NotImplemented",
        format!("The embedded store does not carry out {what}."),
    )
}

/// 501 for a request this service does not serve, named by its method,
/// path and `restype` / `comp` (never the rest of its query, which may carry
/// a SAS signature).
fn unsupported(ctx: &Ctx<'_>) -> Failure {
    let mut what = format!("{} /{}", ctx.parts.method, ctx.path);
    for name in ["restype", "comp"] {
        if let Some(v) = ctx.param(name) {
            what.push_str(&format!(" {name}={v}"));
        }
    }
    not_implemented(&what)
}

fn container_not_found() -> Failure {
    Failure::new(
        404,
        "ContainerNotFound",
        "The specified container does not exist.",
    )
}

fn condition_not_met() -> Failure {
    Failure::new(
        412,
        "ConditionNotMet",
        "The condition specified using HTTP conditional header(s) is not met.",
    )
}

fn header_value_invalid(name: &str) -> Failure {
    Failure::new(
        400,
        "InvalidHeaderValue",
        format!("The value for one of the HTTP headers is not in the correct format: `{name}`."),
    )
}

fn missing_header(name: &str) -> Failure {
    Failure::new(
        400,
        "MissingRequiredHeader",
        format!("An HTTP header that's mandatory for this request is not specified: `{name}`."),
    )
}

fn query_value_invalid(name: &str) -> Failure {
    Failure::new(
        400,
        "InvalidQueryParameterValue",
        format!("Value for one of the query parameters specified in the request URI is invalid: `{name}`."),
    )
}

fn internal(what: &BlobResponse) -> Failure {
    Failure::new(500, "InternalError", format!("the store answered {what:?}"))
}

/// Sets `name: value` on `reply` (a value that is not a header value is left out).
fn set(reply: &mut Reply, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        reply.headers_mut().insert(name, v);
    }
}

fn h(name: &'static str) -> HeaderName {
    HeaderName::from_static(name)
}

/// An answer with a version's `ETag` and `Last-Modified`.
fn versioned(status: u16, etag: &ETag, last_modified: DateTime<Utc>) -> Reply {
    let mut reply = reply::empty(status);
    set(&mut reply, http::header::ETAG, etag.as_str());
    set(
        &mut reply,
        http::header::LAST_MODIFIED,
        &http_date_text(last_modified),
    );
    reply
}

fn encrypted(reply: &mut Reply) {
    set(reply, h("x-ms-request-server-encrypted"), "true");
}

fn xml(status: u16, body: String) -> Reply {
    reply::with_body(status, "application/xml", Bytes::from(body))
}

/// The raw value of header `name`, which must be visible ASCII if present.
fn header<'c>(ctx: &'c Ctx<'_>, name: &str) -> Result<Option<&'c str>, Failure> {
    match ctx.parts.headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| header_value_invalid(name)),
    }
}

// ---------------------------------------------------------------------------
// Inputs.

/// The `x-ms-meta-*` headers: names C# identifiers, values ASCII, no name
/// twice, at most 8 KiB in all.
fn metadata(ctx: &Ctx<'_>) -> Result<Vec<(String, String)>, Failure> {
    let invalid = |why: &str| {
        Failure::new(
            400,
            "InvalidMetadata",
            format!("The metadata specified is invalid: {why}."),
        )
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let mut size = 0;
    for (name, value) in &ctx.parts.headers {
        let Some(n) = name.as_str().strip_prefix("x-ms-meta-") else {
            continue;
        };
        let identifier = n
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(invalid(&format!("`{n}` is not a C# identifier")));
        }
        let value = value
            .to_str()
            .map_err(|_| header_value_invalid(name.as_str()))?;
        if out.iter().any(|(k, _)| k == n) {
            return Err(invalid(&format!("`{n}` is given twice")));
        }
        size += n.len() + value.len();
        out.push((n.to_owned(), value.to_owned()));
    }
    if size > MAX_METADATA {
        return Err(Failure::new(
            400,
            "MetadataTooLarge",
            "The size of the specified metadata exceeds the maximum size permitted.",
        ));
    }
    Ok(out)
}

/// A base64 MD5 of 16 bytes in header `name`.
fn md5_header(ctx: &Ctx<'_>, name: &str) -> Result<Option<Vec<u8>>, Failure> {
    match header(ctx, name)? {
        None => Ok(None),
        Some(text) => match BASE64.decode(text.trim()) {
            Ok(bytes) if bytes.len() == 16 => Ok(Some(bytes)),
            _ => Err(Failure::new(
                400,
                "InvalidMd5",
                format!("The MD5 value specified in the request is invalid: `{name}`. The MD5 value must be 128 bits and Base64-encoded."),
            )),
        },
    }
}

/// Checks a request's `Content-MD5` against its body: what it hashes to.
fn checked_body_md5(ctx: &Ctx<'_>) -> Result<[u8; 16], Failure> {
    let actual = md5(&ctx.body);
    if let Some(given) = md5_header(ctx, "content-md5")? {
        if given != actual {
            return Err(Failure::new(
                400,
                "Md5Mismatch",
                "The MD5 value specified in the request did not match with the MD5 value calculated by the server.",
            ));
        }
    }
    Ok(actual)
}

/// The blob's HTTP headers from a request: the `x-ms-blob-*` forms, and
/// with `standard` (Put Blob) the standard headers where those are absent.
fn http_headers(ctx: &Ctx<'_>, standard: bool) -> Result<BlobHttpHeaders, Failure> {
    let pick = |ms: &str, plain: &str| -> Result<Option<String>, Failure> {
        if let Some(v) = header(ctx, ms)? {
            return Ok(Some(v.to_owned()));
        }
        if standard {
            return Ok(header(ctx, plain)?.map(str::to_owned));
        }
        Ok(None)
    };
    Ok(BlobHttpHeaders {
        content_type: pick("x-ms-blob-content-type", "content-type")?,
        content_encoding: pick("x-ms-blob-content-encoding", "content-encoding")?,
        content_language: pick("x-ms-blob-content-language", "content-language")?,
        content_disposition: pick("x-ms-blob-content-disposition", "content-disposition")?,
        cache_control: pick("x-ms-blob-cache-control", "cache-control")?,
        content_md5: md5_header(ctx, "x-ms-blob-content-md5")?,
    })
}

/// A lease id, which is a GUID.
fn lease_id_header<'c>(ctx: &'c Ctx<'_>, name: &str) -> Result<Option<&'c str>, Failure> {
    match header(ctx, name)? {
        Some(id) if uuid::Uuid::parse_str(id).is_err() => Err(header_value_invalid(name)),
        other => Ok(other),
    }
}

/// `prefix`, `marker`, `maxresults` of a listing.
fn max_results(ctx: &Ctx<'_>) -> Result<Option<u32>, Failure> {
    match ctx.param("maxresults") {
        None => Ok(None),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n > 0 => Ok(Some(n.min(i64::from(MAX_RESULTS)) as u32)),
            _ => Err(query_value_invalid("maxresults")),
        },
    }
}

/// `include=a,b,...` of a listing: each value one of `allowed`.
fn include(ctx: &Ctx<'_>, allowed: &[&str]) -> Result<Vec<String>, Failure> {
    let mut out = Vec::new();
    for (k, v) in ctx.query {
        if k != "include" {
            continue;
        }
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let item = item.to_ascii_lowercase();
            if !allowed.contains(&item.as_str()) {
                return Err(query_value_invalid("include"));
            }
            out.push(item);
        }
    }
    Ok(out)
}

/// The service's endpoint as the client reached it, for listings.
fn endpoint(ctx: &Ctx<'_>) -> String {
    let host = ctx
        .header("host")
        .map(str::to_owned)
        .or_else(|| ctx.parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_else(|| "127.0.0.1".to_owned());
    format!("http://{host}/{}/", ctx.account.name)
}

/// An HTTP date (RFC 1123), as conditional headers carry it; a date that
/// does not parse is ignored, as HTTP says.
fn date_header(ctx: &Ctx<'_>, name: &str) -> Option<DateTime<Utc>> {
    let text = ctx.header(name)?;
    DateTime::parse_from_rfc2822(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Whether `list` (an `If-Match` or `If-None-Match` value) names `etag`.
fn names_etag(list: &str, etag: &ETag) -> bool {
    let bare = |t: &str| {
        let t = t.trim();
        let t = t.strip_prefix("W/").unwrap_or(t);
        t.trim_matches('"').to_owned()
    };
    let want = bare(etag.as_str());
    list.split(',').any(|t| t.trim() == "*" || bare(t) == want)
}

/// The conditional headers of a request.
#[derive(Debug, Default)]
struct Preconditions {
    if_match: Option<String>,
    if_none_match: Option<String>,
    modified_since: Option<DateTime<Utc>>,
    unmodified_since: Option<DateTime<Utc>>,
}

impl Preconditions {
    fn of(ctx: &Ctx<'_>) -> Result<Self, Failure> {
        Ok(Preconditions {
            if_match: header(ctx, "if-match")?.map(|s| s.trim().to_owned()),
            if_none_match: header(ctx, "if-none-match")?.map(|s| s.trim().to_owned()),
            modified_since: date_header(ctx, "if-modified-since"),
            unmodified_since: date_header(ctx, "if-unmodified-since"),
        })
    }

    fn is_empty(&self) -> bool {
        self.if_match.is_none()
            && self.if_none_match.is_none()
            && self.modified_since.is_none()
            && self.unmodified_since.is_none()
    }

    /// The store's conditions, when it can check these itself (atomically
    /// with the write): one ETag to match, or `If-None-Match: *`, no dates.
    fn for_store(&self) -> Option<Conditions> {
        if self.modified_since.is_some() || self.unmodified_since.is_some() {
            return None;
        }
        let if_match = match self.if_match.as_deref() {
            None => None,
            Some(t) if t == "*" || t.contains(',') => return None,
            Some(t) => Some(ETag::new(quoted(t))),
        };
        let if_none_match_any = match self.if_none_match.as_deref() {
            None => false,
            Some("*") => true,
            Some(_) => return None,
        };
        Some(Conditions {
            if_match,
            if_none_match_any,
            lease_id: None,
        })
    }

    /// The conditions of a write against the blob as it is (`None`: none).
    /// `create`: a Put Blob, for which `If-None-Match: *` on an existing blob
    /// is a conflict rather than a failed condition.
    fn check_write(&self, current: Option<&BlobProperties>, create: bool) -> Result<(), Failure> {
        let Some(p) = current else {
            return match self.if_match {
                Some(_) => Err(condition_not_met()),
                None => Ok(()),
            };
        };
        if let Some(m) = &self.if_match {
            if !names_etag(m, &p.etag) {
                return Err(condition_not_met());
            }
        }
        if let Some(n) = &self.if_none_match {
            if names_etag(n, &p.etag) {
                return Err(if create && n == "*" {
                    Failure::new(
                        409,
                        "BlobAlreadyExists",
                        "The specified blob already exists.",
                    )
                } else {
                    condition_not_met()
                });
            }
        }
        if self.modified_since.is_some_and(|t| p.last_modified <= t)
            || self.unmodified_since.is_some_and(|t| p.last_modified > t)
        {
            return Err(condition_not_met());
        }
        Ok(())
    }

    /// The conditions of a read of `p`: `Ok(false)` if it is not modified
    /// (304), a 412 if a condition fails. `If-None-Match: *` cannot be met
    /// by a read of something that exists: 400 `UnsatisfiableCondition`.
    fn check_read(&self, p: &BlobProperties) -> Result<bool, Failure> {
        if self.if_none_match.as_deref() == Some("*") {
            return Err(Failure::new(
                400,
                "UnsatisfiableCondition",
                "The condition specified is unsatisfiable.",
            ));
        }
        if let Some(m) = &self.if_match {
            if !names_etag(m, &p.etag) {
                return Err(condition_not_met());
            }
        }
        if self.unmodified_since.is_some_and(|t| p.last_modified > t) {
            return Err(condition_not_met());
        }
        if let Some(n) = &self.if_none_match {
            if names_etag(n, &p.etag) {
                return Ok(false);
            }
        }
        if self.if_none_match.is_none() && self.modified_since.is_some_and(|t| p.last_modified <= t)
        {
            return Ok(false);
        }
        Ok(true)
    }

    /// A container's conditions (only the dates apply to containers).
    fn check_container(&self, p: &ContainerProperties) -> Result<(), Failure> {
        if self.if_match.is_some() || self.if_none_match.is_some() {
            return Err(Failure::new(
                400,
                "UnsupportedHeader",
                "One of the HTTP headers specified in the request is not supported: If-Match and If-None-Match do not apply to a container.",
            ));
        }
        if self.modified_since.is_some_and(|t| p.last_modified <= t)
            || self.unmodified_since.is_some_and(|t| p.last_modified > t)
        {
            return Err(condition_not_met());
        }
        Ok(())
    }
}

/// An ETag as the store keeps them: quoted.
fn quoted(t: &str) -> String {
    if t.starts_with('"') || t.starts_with("W/") {
        t.to_owned()
    } else {
        format!("\"{t}\"")
    }
}

/// The 304 of a read whose version the client has.
fn not_modified(p: &BlobProperties) -> Reply {
    let mut reply = versioned(304, &p.etag, p.last_modified);
    set(&mut reply, h("x-ms-error-code"), "ConditionNotMet");
    reply
}

// ---------------------------------------------------------------------------
// Reading the store.

async fn blob_properties(
    ctx: &Ctx<'_>,
    container: &str,
    blob: &str,
) -> Result<Option<BlobProperties>, Failure> {
    match ctx
        .account
        .blobs
        .blob(BlobOp::Properties { container, blob })
        .await
    {
        Ok(BlobResponse::Properties(p)) => Ok(Some(p)),
        Ok(other) => Err(internal(&other)),
        Err(e) => {
            let f = Failure::from(e);
            if f.code == "BlobNotFound" {
                Ok(None)
            } else {
                Err(f)
            }
        }
    }
}

async fn container_properties(
    ctx: &Ctx<'_>,
    container: &str,
) -> Result<ContainerProperties, Failure> {
    match ctx
        .account
        .blobs
        .blob(BlobOp::ContainerProperties { container })
        .await?
    {
        BlobResponse::ContainerProperties(p) => Ok(p),
        other => Err(internal(&other)),
    }
}

/// The store's conditions of a write to `blob`: the request's conditional
/// headers (checked here against the blob as it is when the store cannot,
/// then pinned to the version checked, so that a write in between fails
/// the condition) and its lease id.
async fn write_conditions(
    ctx: &Ctx<'_>,
    container: &str,
    blob: &str,
    create: bool,
) -> Result<Conditions, Failure> {
    let pre = Preconditions::of(ctx)?;
    let lease_id = lease_id_header(ctx, "x-ms-lease-id")?.map(str::to_owned);
    if pre.is_empty() {
        return Ok(Conditions {
            lease_id,
            ..Conditions::default()
        });
    }
    if let Some(c) = pre.for_store() {
        return Ok(Conditions { lease_id, ..c });
    }
    let current = blob_properties(ctx, container, blob).await?;
    pre.check_write(current.as_ref(), create)?;
    Ok(Conditions {
        if_match: current.map(|p| p.etag),
        if_none_match_any: false,
        lease_id,
    })
}

// ---------------------------------------------------------------------------
// The service.

async fn service(
    ctx: &Ctx<'_>,
    method: &Method,
    restype: Option<&str>,
    comp: Option<&str>,
) -> Result<Reply, Failure> {
    match (method, restype, comp) {
        (&Method::GET, None, Some("list")) => list_containers(ctx).await,
        (&Method::GET, Some("service"), Some("properties")) => {
            ctx.access.check(Need::Service(Perm::Read))?;
            match ctx.account.blobs.admin(AdminOp::GetProperties).await? {
                AdminResponse::Properties(p) => Ok(xml(200, crate::service_properties::encode(&p))),
                other => Err(Failure::new(
                    500,
                    "InternalError",
                    format!("the store answered {other:?}"),
                )),
            }
        }
        (&Method::PUT, Some("service"), Some("properties")) => {
            ctx.access.check(Need::Service(Perm::Write))?;
            let properties = crate::service_properties::decode(&ctx.body).map_err(|_| {
                Failure::new(
                    400,
                    "InvalidXmlDocument",
                    "XML specified is not syntactically valid.",
                )
            })?;
            crate::service_properties::check(&properties).map_err(|e| {
                Failure::new(
                    400,
                    "InvalidXmlNodeValue",
                    format!("The value for one of the XML nodes is not in the correct format: {e}"),
                )
            })?;
            ctx.account
                .blobs
                .admin(AdminOp::SetProperties {
                    properties: &properties,
                })
                .await?;
            Ok(reply::empty(202))
        }
        (&Method::GET, Some("service"), Some("stats")) => {
            ctx.access.check(Need::Service(Perm::Read))?;
            match ctx.account.blobs.admin(AdminOp::Stats).await? {
                AdminResponse::Stats(s) => {
                    Ok(xml(200, crate::backend::http::admin::encode_stats(&s)))
                }
                other => Err(Failure::new(
                    500,
                    "InternalError",
                    format!("the store answered {other:?}"),
                )),
            }
        }
        (&Method::GET | &Method::HEAD, Some("account"), Some("properties")) => {
            ctx.access.check(Need::Service(Perm::Read))?;
            let mut reply = reply::empty(200);
            set(&mut reply, h("x-ms-sku-name"), "Standard_LRS");
            set(&mut reply, h("x-ms-account-kind"), "StorageV2");
            set(&mut reply, h("x-ms-is-hns-enabled"), "false");
            Ok(reply)
        }
        _ => Err(unsupported(ctx)),
    }
}

async fn list_containers(ctx: &Ctx<'_>) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::List))?;
    let include = include(ctx, &["metadata", "deleted", "system"])?;
    let max = max_results(ctx)?;
    let (prefix, marker) = (ctx.param("prefix"), ctx.param("marker"));
    let include_metadata = include.iter().any(|i| i == "metadata");
    let BlobResponse::Containers {
        containers,
        next_marker,
    } = ctx
        .account
        .blobs
        .blob(BlobOp::ListContainers {
            prefix,
            marker,
            max,
            include_metadata,
        })
        .await?
    else {
        return Err(Failure::new(
            500,
            "InternalError",
            "not a container listing",
        ));
    };
    let endpoint = endpoint(ctx);
    let head = ListingHead {
        endpoint: &endpoint,
        prefix,
        marker,
        max,
        include_metadata,
        ..ListingHead::default()
    };
    Ok(xml(
        200,
        encode_containers(&head, &containers, next_marker.as_deref()),
    ))
}

// ---------------------------------------------------------------------------
// Containers.

async fn container_op(
    ctx: &Ctx<'_>,
    name: &str,
    method: &Method,
    comp: Option<&str>,
) -> Result<Reply, Failure> {
    crate::validate::container_name(name).map_err(Failure::from)?;
    match (method, comp) {
        (&Method::PUT, None) => create_container(ctx, name).await,
        (&Method::DELETE, None) => delete_container(ctx, name).await,
        (&Method::GET | &Method::HEAD, None | Some("metadata")) => {
            ctx.access.check(Need::Container {
                name,
                perm: Perm::Read,
            })?;
            let p = container_properties(ctx, name).await?;
            let mut reply = versioned(200, &p.etag, p.last_modified);
            for (k, v) in &p.metadata {
                if let Ok(n) = HeaderName::from_bytes(format!("x-ms-meta-{k}").as_bytes()) {
                    set(&mut reply, n, v);
                }
            }
            if comp.is_none() {
                let (status, state, duration) = lease_words(&p.lease);
                set(&mut reply, h("x-ms-lease-status"), status);
                set(&mut reply, h("x-ms-lease-state"), state);
                if let Some(d) = duration {
                    set(&mut reply, h("x-ms-lease-duration"), d);
                }
                set(&mut reply, h("x-ms-has-immutability-policy"), "false");
                set(&mut reply, h("x-ms-has-legal-hold"), "false");
                set(
                    &mut reply,
                    h("x-ms-default-encryption-scope"),
                    "$account-encryption-key",
                );
                set(
                    &mut reply,
                    h("x-ms-deny-encryption-scope-override"),
                    "false",
                );
            }
            Ok(reply)
        }
        (&Method::PUT, Some("metadata")) => {
            ctx.access.check(Need::Container {
                name,
                perm: Perm::Write,
            })?;
            let metadata = metadata(ctx)?;
            let lease_id = lease_id_header(ctx, "x-ms-lease-id")?;
            let pre = Preconditions::of(ctx)?;
            if pre.if_none_match.is_some()
                || pre.if_match.is_some()
                || pre.unmodified_since.is_some()
            {
                return Err(Failure::new(
                    400,
                    "UnsupportedHeader",
                    "One of the HTTP headers specified in the request is not supported: Set Container Metadata takes only If-Modified-Since.",
                ));
            }
            if !pre.is_empty() {
                pre.check_container(&container_properties(ctx, name).await?)?;
            }
            ctx.account
                .blobs
                .blob(BlobOp::SetContainerMetadata {
                    container: name,
                    metadata: &metadata,
                    lease_id,
                })
                .await?;
            let p = container_properties(ctx, name).await?;
            Ok(versioned(200, &p.etag, p.last_modified))
        }
        (&Method::GET | &Method::HEAD, Some("acl")) => {
            ctx.access.check(Need::Container {
                name,
                perm: Perm::Acl,
            })?;
            let policies = ctx
                .account
                .blobs
                .admin(AdminOp::GetAcl { resource: name })
                .await?
                .into_acl()
                .map_err(Failure::from)?;
            let p = container_properties(ctx, name).await?;
            let mut reply = xml(200, crate::acl::encode(&policies));
            set(&mut reply, http::header::ETAG, p.etag.as_str());
            set(
                &mut reply,
                http::header::LAST_MODIFIED,
                &http_date_text(p.last_modified),
            );
            Ok(reply)
        }
        (&Method::PUT, Some("acl")) => {
            ctx.access.check(Need::Container {
                name,
                perm: Perm::Acl,
            })?;
            match header(ctx, "x-ms-blob-public-access")? {
                None => {}
                Some("container" | "blob") => {
                    return Err(not_implemented("public access to a container"))
                }
                Some(_) => return Err(header_value_invalid("x-ms-blob-public-access")),
            }
            let pre = Preconditions::of(ctx)?;
            if !pre.is_empty() {
                pre.check_container(&container_properties(ctx, name).await?)?;
            }
            let policies = crate::acl::decode(&ctx.body).map_err(|_| {
                Failure::new(
                    400,
                    "InvalidXmlDocument",
                    "XML specified is not syntactically valid.",
                )
            })?;
            for p in &policies {
                if p.id.is_empty() || p.id.chars().count() > 64 {
                    return Err(Failure::new(
                        400,
                        "InvalidXmlDocument",
                        "XML specified is not syntactically valid: a signed identifier has 1 to 64 characters.",
                    ));
                }
            }
            ctx.account
                .blobs
                .admin(AdminOp::SetAcl {
                    resource: name,
                    policies: &policies,
                })
                .await?;
            let p = container_properties(ctx, name).await?;
            Ok(versioned(200, &p.etag, p.last_modified))
        }
        (&Method::GET, Some("list")) => list_blobs(ctx, name).await,
        (&Method::PUT, Some("lease")) => {
            ctx.access.check(Need::Container {
                name,
                perm: Perm::Write,
            })?;
            let pre = Preconditions::of(ctx)?;
            if !pre.is_empty() {
                pre.check_container(&container_properties(ctx, name).await?)?;
            }
            lease(ctx, name, None).await
        }
        _ => Err(unsupported(ctx)),
    }
}

async fn create_container(ctx: &Ctx<'_>, name: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::Create))?;
    if let Some(access) = header(ctx, "x-ms-blob-public-access")? {
        return Err(match access {
            "container" | "blob" => not_implemented("public access to a container"),
            _ => header_value_invalid("x-ms-blob-public-access"),
        });
    }
    let metadata = metadata(ctx)?;
    ctx.account
        .blobs
        .blob(BlobOp::CreateContainer { container: name })
        .await?;
    if !metadata.is_empty() {
        ctx.account
            .blobs
            .blob(BlobOp::SetContainerMetadata {
                container: name,
                metadata: &metadata,
                lease_id: None,
            })
            .await?;
    }
    let p = container_properties(ctx, name).await?;
    Ok(versioned(201, &p.etag, p.last_modified))
}

async fn delete_container(ctx: &Ctx<'_>, name: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::Delete))?;
    let lease_id = lease_id_header(ctx, "x-ms-lease-id")?;
    let pre = Preconditions::of(ctx)?;
    if !pre.is_empty() {
        pre.check_container(&container_properties(ctx, name).await?)?;
    }
    ctx.account
        .blobs
        .blob(BlobOp::DeleteContainer {
            container: name,
            lease_id,
        })
        .await?;
    Ok(reply::empty(202))
}

async fn list_blobs(ctx: &Ctx<'_>, container: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Container {
        name: container,
        perm: Perm::List,
    })?;
    // Snapshots, versions, deleted blobs, tags and holds: the store has
    // none, so asking for them adds nothing.
    let include = include(
        ctx,
        &[
            "metadata",
            "copy",
            "snapshots",
            "uncommittedblobs",
            "deleted",
            "tags",
            "versions",
            "deletedwithversions",
            "immutabilitypolicy",
            "legalhold",
            "permissions",
        ],
    )?;
    let max = max_results(ctx)?;
    let (prefix, marker) = (ctx.param("prefix"), ctx.param("marker"));
    let delimiter = ctx.param("delimiter").filter(|d| !d.is_empty());
    let BlobResponse::Listing {
        blobs,
        prefixes,
        next_marker,
    } = ctx
        .account
        .blobs
        .blob(BlobOp::List {
            container,
            prefix,
            delimiter,
            marker,
            max,
        })
        .await?
    else {
        return Err(Failure::new(500, "InternalError", "not a blob listing"));
    };
    let endpoint = endpoint(ctx);
    let head = ListingHead {
        endpoint: &endpoint,
        prefix,
        marker,
        max,
        delimiter,
        include_metadata: include.iter().any(|i| i == "metadata"),
        include_copy: include.iter().any(|i| i == "copy"),
    };
    Ok(xml(
        200,
        encode_listing(&head, container, &blobs, &prefixes, next_marker.as_deref()),
    ))
}

/// A lease call on a container (`blob: None`) or a blob.
async fn lease(ctx: &Ctx<'_>, container: &str, blob: Option<&str>) -> Result<Reply, Failure> {
    let action = header(ctx, "x-ms-lease-action")?
        .ok_or_else(|| missing_header("x-ms-lease-action"))?
        .to_ascii_lowercase();
    let id = lease_id_header(ctx, "x-ms-lease-id")?;
    let proposed = lease_id_header(ctx, "x-ms-proposed-lease-id")?;
    let need_id = || id.ok_or_else(|| missing_header("x-ms-lease-id"));
    let generated = uuid::Uuid::new_v4().to_string();
    let (action, status) = match action.as_str() {
        "acquire" => {
            let seconds = match header(ctx, "x-ms-lease-duration")? {
                None => return Err(missing_header("x-ms-lease-duration")),
                Some("-1") => None,
                Some(s) => match s.parse::<u32>() {
                    Ok(n) if (15..=60).contains(&n) => Some(n),
                    _ => return Err(header_value_invalid("x-ms-lease-duration")),
                },
            };
            (
                LeaseAction::Acquire {
                    seconds,
                    proposed: proposed.unwrap_or(&generated),
                },
                201,
            )
        }
        "renew" => (LeaseAction::Renew { id: need_id()? }, 200),
        "change" => (
            LeaseAction::Change {
                id: need_id()?,
                proposed: proposed.ok_or_else(|| missing_header("x-ms-proposed-lease-id"))?,
            },
            200,
        ),
        "release" => (LeaseAction::Release { id: need_id()? }, 200),
        "break" => {
            let period = match header(ctx, "x-ms-lease-break-period")? {
                None => None,
                Some(s) => match s.parse::<u32>() {
                    Ok(n) if n <= 60 => Some(n),
                    _ => return Err(header_value_invalid("x-ms-lease-break-period")),
                },
            };
            (LeaseAction::Break { period }, 202)
        }
        _ => return Err(header_value_invalid("x-ms-lease-action")),
    };
    let answer = ctx
        .account
        .blobs
        .blob(BlobOp::Lease {
            container,
            blob,
            action,
        })
        .await?;
    let BlobResponse::Lease { id, break_seconds } = answer else {
        return Err(internal(&answer));
    };
    let (etag, last_modified) = match blob {
        None => {
            let p = container_properties(ctx, container).await?;
            (p.etag, p.last_modified)
        }
        Some(b) => {
            let p = blob_properties(ctx, container, b)
                .await?
                .ok_or_else(blob_not_found)?;
            (p.etag, p.last_modified)
        }
    };
    let mut reply = versioned(status, &etag, last_modified);
    if let Some(id) = id {
        set(&mut reply, h("x-ms-lease-id"), &id);
    }
    if let Some(s) = break_seconds {
        set(&mut reply, h("x-ms-lease-time"), &s.to_string());
    }
    Ok(reply)
}

fn blob_not_found() -> Failure {
    Failure::new(404, "BlobNotFound", "The specified blob does not exist.")
}

// ---------------------------------------------------------------------------
// Blobs.

async fn blob_op(
    ctx: &Ctx<'_>,
    container: &str,
    blob: &str,
    method: &Method,
    comp: Option<&str>,
) -> Result<Reply, Failure> {
    crate::validate::container_name(container).map_err(Failure::from)?;
    crate::validate::blob_name(blob).map_err(Failure::from)?;
    for p in ["snapshot", "versionid"] {
        if ctx.param(p).is_some() {
            return Err(not_implemented("blob snapshots and versions"));
        }
    }
    match (method, comp) {
        (&Method::PUT, None) if ctx.parts.headers.contains_key("x-ms-copy-source") => {
            copy(ctx, container, blob).await
        }
        (&Method::PUT, None) => put_blob(ctx, container, blob).await,
        (&Method::PUT, Some("block")) => put_block(ctx, container, blob).await,
        (&Method::PUT, Some("blocklist")) => put_block_list(ctx, container, blob).await,
        (&Method::GET, None) => get_blob(ctx, container, blob).await,
        (&Method::HEAD, None) => head_blob(ctx, container, blob).await,
        (&Method::GET | &Method::HEAD, Some("metadata")) => {
            object(ctx, container, Perm::Read)?;
            let p = blob_properties(ctx, container, blob)
                .await?
                .ok_or_else(blob_not_found)?;
            if !Preconditions::of(ctx)?.check_read(&p)? {
                return Ok(not_modified(&p));
            }
            let mut reply = versioned(200, &p.etag, p.last_modified);
            for (k, v) in &p.metadata {
                if let Ok(n) = HeaderName::from_bytes(format!("x-ms-meta-{k}").as_bytes()) {
                    set(&mut reply, n, v);
                }
            }
            Ok(reply)
        }
        (&Method::DELETE, None) => delete_blob(ctx, container, blob).await,
        (&Method::PUT, Some("metadata")) => {
            object(ctx, container, Perm::Write)?;
            let metadata = metadata(ctx)?;
            let conditions = write_conditions(ctx, container, blob, false).await?;
            let answer = ctx
                .account
                .blobs
                .blob(BlobOp::SetMetadata {
                    container,
                    blob,
                    metadata: &metadata,
                    conditions: &conditions,
                })
                .await?;
            written(answer, 200)
        }
        (&Method::PUT, Some("properties")) => {
            object(ctx, container, Perm::Write)?;
            for unsupported in ["x-ms-blob-content-length", "x-ms-sequence-number-action"] {
                if ctx.parts.headers.contains_key(unsupported) {
                    return Err(not_implemented("page blob properties"));
                }
            }
            let headers = http_headers(ctx, false)?;
            let conditions = write_conditions(ctx, container, blob, false).await?;
            let answer = ctx
                .account
                .blobs
                .blob(BlobOp::SetHttpHeaders {
                    container,
                    blob,
                    headers: &headers,
                    conditions: &conditions,
                })
                .await?;
            written(answer, 200)
        }
        (&Method::PUT, Some("lease")) => {
            object(ctx, container, Perm::Write)?;
            let pre = Preconditions::of(ctx)?;
            if !pre.is_empty() {
                let current = blob_properties(ctx, container, blob)
                    .await?
                    .ok_or_else(blob_not_found)?;
                pre.check_write(Some(&current), false)?;
            }
            lease(ctx, container, Some(blob)).await
        }
        (&Method::PUT, Some("copy")) => {
            // Abort Copy Blob: copies within the store are done at once.
            object(ctx, container, Perm::Write)?;
            match header(ctx, "x-ms-copy-action")? {
                Some(a) if a.eq_ignore_ascii_case("abort") => {}
                Some(_) => return Err(header_value_invalid("x-ms-copy-action")),
                None => return Err(missing_header("x-ms-copy-action")),
            }
            if ctx.param("copyid").is_none() {
                return Err(Failure::new(
                    400,
                    "MissingRequiredQueryParameter",
                    "A query parameter that's mandatory for this request is not specified: `copyid`.",
                ));
            }
            blob_properties(ctx, container, blob)
                .await?
                .ok_or_else(blob_not_found)?;
            Err(Failure::new(
                409,
                "NoPendingCopyOperation",
                "There is currently no pending copy operation.",
            ))
        }
        (&Method::GET, Some("blocklist")) => get_block_list(ctx, container, blob).await,
        (
            _,
            Some(
                "tier"
                | "tags"
                | "snapshot"
                | "appendblock"
                | "page"
                | "pagelist"
                | "undelete"
                | "expiry"
                | "immutabilityPolicies"
                | "legalhold",
            ),
        ) => Err(not_implemented(&format!(
            "comp={}",
            comp.unwrap_or_default()
        ))),
        _ => Err(unsupported(ctx)),
    }
}

/// Checks permission `perm` on the blobs of `container`.
fn object(ctx: &Ctx<'_>, container: &str, perm: Perm) -> Result<(), Failure> {
    ctx.access.check(Need::Object {
        container,
        key: None,
        perm,
    })
}

/// Whether a write that creates or replaces a blob may go ahead: with
/// `Write`, any; with `Create` alone, only if no blob is there (`true`:
/// the store must then refuse an existing blob).
fn create_or_write(ctx: &Ctx<'_>, container: &str) -> Result<bool, Failure> {
    match object(ctx, container, Perm::Write) {
        Ok(()) => Ok(false),
        Err(refused) => match object(ctx, container, Perm::Create) {
            Ok(()) => Ok(true),
            Err(_) => Err(refused),
        },
    }
}

/// A write's answer: its ETag and Last-Modified.
fn written(answer: BlobResponse, status: u16) -> Result<Reply, Failure> {
    match answer {
        BlobResponse::Written {
            etag,
            last_modified,
        } => {
            let mut reply = versioned(status, &etag, last_modified);
            encrypted(&mut reply);
            Ok(reply)
        }
        other => Err(internal(&other)),
    }
}

/// A create-only write found a blob there: the permission it lacks.
fn create_only(e: Failure, create_only: bool) -> Failure {
    if create_only && e.code == "BlobAlreadyExists" {
        Failure::permission()
    } else {
        e
    }
}

async fn put_blob(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    let only_create = create_or_write(ctx, container)?;
    match header(ctx, "x-ms-blob-type")? {
        None => return Err(missing_header("x-ms-blob-type")),
        Some("BlockBlob") => {}
        Some("PageBlob" | "AppendBlob") => {
            return Err(not_implemented("page and append blobs"));
        }
        Some(_) => return Err(header_value_invalid("x-ms-blob-type")),
    }
    if ctx.parts.headers.contains_key("x-ms-access-tier") {
        return Err(not_implemented("access tiers"));
    }
    let body_md5 = checked_body_md5(ctx)?;
    let mut http = http_headers(ctx, true)?;
    if http.content_type.is_none() {
        http.content_type = Some(DEFAULT_CONTENT_TYPE.to_owned());
    }
    // A blob put whole keeps the MD5 of its bytes unless one is given.
    if http.content_md5.is_none() {
        http.content_md5 = Some(body_md5.to_vec());
    }
    let headers = BlobHeaders {
        http,
        metadata: metadata(ctx)?,
    };
    let mut conditions = write_conditions(ctx, container, blob, true).await?;
    conditions.if_none_match_any |= only_create;
    let answer = ctx
        .account
        .blobs
        .blob(BlobOp::Put {
            container,
            blob,
            body: ctx.body.clone(),
            headers: &headers,
            conditions: &conditions,
        })
        .await
        .map_err(|e| create_only(e.into(), only_create))?;
    let mut reply = written(answer, 201)?;
    set(&mut reply, h("content-md5"), &BASE64.encode(body_md5));
    Ok(reply)
}

/// A block id: base64 of at most 64 bytes.
fn block_id(id: &str) -> Option<usize> {
    let bytes = BASE64.decode(id).ok()?;
    (!bytes.is_empty() && bytes.len() <= MAX_BLOCK_ID).then_some(bytes.len())
}

async fn put_block(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    create_or_write(ctx, container)?;
    let id = ctx.param("blockid").ok_or_else(|| {
        Failure::new(
            400,
            "MissingRequiredQueryParameter",
            "A query parameter that's mandatory for this request is not specified: `blockid`.",
        )
    })?;
    let Some(length) = block_id(id) else {
        return Err(Failure::new(
            400,
            "InvalidBlockId",
            "The specified block ID is invalid. The block ID must be Base64-encoded, of at most 64 bytes.",
        ));
    };
    // Every block id of one blob has the same length.
    match ctx
        .account
        .blobs
        .blob(BlobOp::BlockList { container, blob })
        .await
    {
        Ok(BlobResponse::BlockList {
            committed,
            uncommitted,
            ..
        }) => {
            let other = committed
                .iter()
                .chain(&uncommitted)
                .any(|(other, _)| block_id(other).is_some_and(|n| n != length));
            if other {
                return Err(Failure::new(
                    400,
                    "InvalidBlobOrBlock",
                    "The specified blob or block content is invalid: the block ids of a blob all have the same length.",
                ));
            }
        }
        Ok(other) => return Err(internal(&other)),
        Err(e) => {
            let f = Failure::from(e);
            if f.code != "BlobNotFound" {
                return Err(f);
            }
        }
    }
    let body_md5 = checked_body_md5(ctx)?;
    let lease_id = lease_id_header(ctx, "x-ms-lease-id")?;
    ctx.account
        .blobs
        .blob(BlobOp::PutBlock {
            container,
            blob,
            block_id: id,
            body: ctx.body.clone(),
            lease_id,
        })
        .await?;
    let mut reply = reply::empty(201);
    set(&mut reply, h("content-md5"), &BASE64.encode(body_md5));
    encrypted(&mut reply);
    Ok(reply)
}

async fn put_block_list(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    let only_create = create_or_write(ctx, container)?;
    let body_md5 = checked_body_md5(ctx)?;
    let entries = parse_block_list(&ctx.body).ok_or_else(|| {
        Failure::new(
            400,
            "InvalidXmlDocument",
            "XML specified is not syntactically valid.",
        )
    })?;
    let invalid_list = |why: &str| {
        Failure::new(
            400,
            "InvalidBlockList",
            format!("The specified block list is invalid: {why}."),
        )
    };
    if entries.len() > MAX_BLOCKS {
        return Err(invalid_list(&format!(
            "a blob has at most {MAX_BLOCKS} blocks"
        )));
    }
    let mut length = None;
    let mut ids = Vec::with_capacity(entries.len());
    for (kind, id) in entries {
        if kind == BlockKind::Committed {
            return Err(not_implemented(
                "committed blocks in a block list (the store keeps a committed blob's bytes, not its blocks)",
            ));
        }
        let n = block_id(&id)
            .ok_or_else(|| invalid_list("a block id is not base64 of 1 to 64 bytes"))?;
        if length.is_some_and(|l| l != n) {
            return Err(invalid_list(
                "the block ids of a blob all have the same length",
            ));
        }
        length = Some(n);
        ids.push(id);
    }
    let mut http = http_headers(ctx, false)?;
    if http.content_type.is_none() {
        http.content_type = Some(DEFAULT_CONTENT_TYPE.to_owned());
    }
    let headers = BlobHeaders {
        http,
        metadata: metadata(ctx)?,
    };
    let mut conditions = write_conditions(ctx, container, blob, true).await?;
    conditions.if_none_match_any |= only_create;
    let answer = ctx
        .account
        .blobs
        .blob(BlobOp::PutBlockList {
            container,
            blob,
            block_ids: &ids,
            headers: &headers,
            conditions: &conditions,
        })
        .await
        .map_err(|e| create_only(e.into(), only_create))?;
    let mut reply = written(answer, 201)?;
    set(&mut reply, h("content-md5"), &BASE64.encode(body_md5));
    Ok(reply)
}

/// Get Block List: `blocklisttype` committed (the default), uncommitted or all.
async fn get_block_list(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    object(ctx, container, Perm::Read)?;
    let (committed, uncommitted) = match ctx.param("blocklisttype").map(str::to_ascii_lowercase) {
        None => (true, false),
        Some(t) if t == "committed" => (true, false),
        Some(t) if t == "uncommitted" => (false, true),
        Some(t) if t == "all" => (true, true),
        Some(_) => return Err(query_value_invalid("blocklisttype")),
    };
    let answer = ctx
        .account
        .blobs
        .blob(BlobOp::BlockList { container, blob })
        .await?;
    let BlobResponse::BlockList {
        committed: c,
        uncommitted: u,
        properties,
    } = answer
    else {
        return Err(internal(&answer));
    };
    let body = encode_block_list_answer(
        committed.then_some(c.as_slice()),
        uncommitted.then_some(u.as_slice()),
    );
    let mut reply = xml(200, body);
    if let Some(p) = properties {
        if !Preconditions::of(ctx)?.check_read(&p)? {
            return Ok(not_modified(&p));
        }
        set(&mut reply, http::header::ETAG, p.etag.as_str());
        set(
            &mut reply,
            http::header::LAST_MODIFIED,
            &http_date_text(p.last_modified),
        );
        set(
            &mut reply,
            h("x-ms-blob-content-length"),
            &p.size.to_string(),
        );
    }
    Ok(reply)
}

/// A range header's `bytes=first-` or `bytes=first-last`; `None` if it is
/// not one.
fn parse_range(text: &str) -> Option<(u64, Option<u64>)> {
    let spec = text.trim().strip_prefix("bytes=")?;
    let (first, last) = spec.split_once('-')?;
    let first: u64 = first.trim().parse().ok()?;
    let last = match last.trim() {
        "" => None,
        l => Some(l.parse::<u64>().ok()?),
    };
    match last {
        Some(l) if l < first => None,
        _ => Some((first, last)),
    }
}

/// The range a read asks for: `x-ms-range` (which must be well formed)
/// before `Range` (ignored if not, as HTTP says).
fn requested_range(ctx: &Ctx<'_>) -> Result<Option<(u64, Option<u64>)>, Failure> {
    if let Some(text) = header(ctx, "x-ms-range")? {
        return match parse_range(text) {
            Some(r) => Ok(Some(r)),
            None => Err(Failure::new(
                416,
                "InvalidRange",
                "The range specified is invalid for the current size of the resource.",
            )),
        };
    }
    Ok(ctx.header("range").and_then(parse_range))
}

async fn get_blob(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    object(ctx, container, Perm::Read)?;
    let pre = Preconditions::of(ctx)?;
    let range = requested_range(ctx)?;
    let want_md5 = match header(ctx, "x-ms-range-get-content-md5")? {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(_) => return Err(header_value_invalid("x-ms-range-get-content-md5")),
    };
    if want_md5 {
        match range {
            Some((first, Some(last))) if last - first < MAX_RANGE_MD5 => {}
            _ => {
                return Err(Failure::new(
                    400,
                    "OutOfRangeInput",
                    "x-ms-range-get-content-md5 takes a bounded range of at most 4 MiB.",
                ))
            }
        }
    }
    let answer = ctx
        .account
        .blobs
        .blob(BlobOp::Get {
            container,
            blob,
            range,
            conditions: &Conditions::default(),
        })
        .await?;
    let BlobResponse::Body { properties, chunks } = answer else {
        return Err(internal(&answer));
    };
    if !pre.check_read(&properties)? {
        return Ok(not_modified(&properties));
    }
    let mut body = BytesMut::new();
    let mut chunks = chunks;
    while let Some(chunk) = chunks.try_next().await.map_err(Failure::from)? {
        body.extend_from_slice(&chunk);
    }
    let body = body.freeze();
    let shown = range.map(|(first, _)| (first, first + body.len() as u64 - 1));
    let mut reply = Reply::new(http_body_util::Full::new(body.clone()));
    *reply.status_mut() = if shown.is_some() {
        http::StatusCode::PARTIAL_CONTENT
    } else {
        http::StatusCode::OK
    };
    for (name, value) in properties_headers(&properties, shown) {
        set(&mut reply, name, &value);
    }
    answer_overrides(ctx, &mut reply);
    if want_md5 {
        set(
            &mut reply,
            h("content-md5"),
            &BASE64.encode(md5(&body)),
        );
    }
    set(&mut reply, h("x-ms-server-encrypted"), "true");
    Ok(reply)
}

/// The headers a blob SAS asks a read to answer with (`rscc`, `rscd`,
/// `rsce`, `rscl`, `rsct`) in place of the blob's own.
fn answer_overrides(ctx: &Ctx<'_>, reply: &mut Reply) {
    for (name, value) in ctx.access.answer_overrides() {
        set(reply, HeaderName::from_static(name), value);
    }
}

async fn head_blob(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    object(ctx, container, Perm::Read)?;
    let pre = Preconditions::of(ctx)?;
    let p = blob_properties(ctx, container, blob)
        .await?
        .ok_or_else(blob_not_found)?;
    if !pre.check_read(&p)? {
        return Ok(not_modified(&p));
    }
    let mut reply = reply::empty(200);
    for (name, value) in properties_headers(&p, None) {
        set(&mut reply, name, &value);
    }
    answer_overrides(ctx, &mut reply);
    Ok(reply)
}

async fn delete_blob(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    object(ctx, container, Perm::Delete)?;
    match header(ctx, "x-ms-delete-snapshots")? {
        None | Some("include") => {}
        Some("only") => return Err(not_implemented("blob snapshots")),
        Some(_) => return Err(header_value_invalid("x-ms-delete-snapshots")),
    }
    let conditions = write_conditions(ctx, container, blob, false).await?;
    ctx.account
        .blobs
        .blob(BlobOp::Delete {
            container,
            blob,
            conditions: &conditions,
        })
        .await?;
    let mut reply = reply::empty(202);
    set(&mut reply, h("x-ms-delete-type-permanent"), "true");
    Ok(reply)
}

/// The container a copy source URL of this account names, for its
/// permission check: `/account/container/blob` or `/container/blob`.
fn source_container(url: &str, account: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let mut segments = uri.path().trim_start_matches('/').split('/');
    let first = segments.next()?;
    let container = if first == account {
        segments.next()?
    } else {
        first
    };
    Some(
        percent_encoding::percent_decode_str(container)
            .decode_utf8_lossy()
            .into_owned(),
    )
}

/// A copy source URL as the service keeps it (`x-ms-copy-source` of the
/// destination): a SAS signature in it redacted.
fn redacted_source(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("sig") => format!("{k}=REDACTED"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

async fn copy(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<Reply, Failure> {
    let only_create = create_or_write(ctx, container)?;
    let source = header(ctx, "x-ms-copy-source")?.unwrap_or_default();
    if let Some(src) = source_container(source, &ctx.account.name) {
        object(ctx, &src, Perm::Read)?;
    } else {
        return Err(header_value_invalid("x-ms-copy-source"));
    }
    for h in [
        "x-ms-source-if-match",
        "x-ms-source-if-none-match",
        "x-ms-source-if-modified-since",
        "x-ms-source-if-unmodified-since",
        "x-ms-source-lease-id",
    ] {
        if ctx.parts.headers.contains_key(h) {
            return Err(not_implemented("conditions on a copy's source"));
        }
    }
    let metadata = metadata(ctx)?;
    let mut conditions = write_conditions(ctx, container, blob, true).await?;
    conditions.if_none_match_any |= only_create;
    let answer = ctx
        .account
        .blobs
        .blob(BlobOp::Copy {
            container,
            blob,
            source: CopySource::Url(&redacted_source(source)),
            metadata: &metadata,
            conditions: &conditions,
        })
        .await
        .map_err(|e| create_only(e.into(), only_create))?;
    let BlobResponse::Copied { id, status } = answer else {
        return Err(internal(&answer));
    };
    let p = blob_properties(ctx, container, blob)
        .await?
        .ok_or_else(blob_not_found)?;
    let mut reply = versioned(202, &p.etag, p.last_modified);
    set(&mut reply, h("x-ms-copy-id"), &id);
    set(&mut reply, h("x-ms-copy-status"), copy_status_word(status));
    Ok(reply)
}

/// The MD5 of `data`, as `Content-MD5` carries it (RustCrypto's `md-5`).
fn md5(data: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(data).into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn content_md5_is_rfc_1321s() {
        let hex = |d: [u8; 16]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(super::md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(super::md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
    }

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blob_keeps_its_creation_time_when_written_over_and_in_listings() {
        let clock = crate::clock::ManualClock::starting_now();
        let server = super::super::Server::builder()
            .ports(0, 0, 0)
            .clock(clock.clone())
            .start()
            .await
            .unwrap();
        let blobs =
            crate::BlobServiceClient::from_connection_string(&server.connection_string()).unwrap();
        let c = blobs.container("created").unwrap();
        c.create_container().await.unwrap();
        let b = c.blob("a.txt").unwrap();
        let first = b.upload("one").await.unwrap();
        clock.advance(std::time::Duration::from_secs(90));
        let second = b.upload("two").await.unwrap();
        assert!(second.last_modified() > first.last_modified());
        let p = b.properties().await.unwrap();
        assert_eq!(
            p.created,
            Some(first.last_modified()),
            "over HTTP, from x-ms-creation-time"
        );
        assert_eq!(p.last_modified, second.last_modified());
        let listed = c.list_blobs().fetch_all().await.unwrap();
        assert_eq!(
            listed[0].created,
            Some(first.last_modified()),
            "from Creation-Time"
        );
        // Deleted and put again, it is a new blob.
        b.delete(crate::IfMatch::Any).await.unwrap();
        clock.advance(std::time::Duration::from_secs(90));
        let third = b.upload("three").await.unwrap();
        assert_eq!(
            b.properties().await.unwrap().created,
            Some(third.last_modified())
        );
        server.shutdown().await.unwrap();
    }

    #[test]
    fn ranges_are_bytes_from_first_to_an_optional_last() {
        assert_eq!(parse_range("bytes=0-"), Some((0, None)));
        assert_eq!(parse_range("bytes=5-9"), Some((5, Some(9))));
        assert_eq!(parse_range(" bytes=7-7 "), Some((7, Some(7))));
        for bad in [
            "bytes=9-5",
            "bytes=-5",
            "bytes=a-",
            "items=0-1",
            "bytes=0",
            "",
        ] {
            assert_eq!(parse_range(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn etag_lists_match_with_or_without_quotes_and_star() {
        let etag = ETag::new("\"0x8DC1\"");
        assert!(names_etag("\"0x8DC1\"", &etag));
        assert!(names_etag("0x8DC1", &etag));
        assert!(names_etag("\"0x8DC2\", \"0x8DC1\"", &etag));
        assert!(names_etag("*", &etag));
        assert!(!names_etag("\"0x8DC2\"", &etag));
    }

    #[test]
    fn block_ids_are_base64_of_at_most_64_bytes() {
        assert_eq!(block_id(&BASE64.encode("block-000001")), Some(12));
        assert_eq!(block_id(&BASE64.encode([7u8; 64])), Some(64));
        assert_eq!(block_id(&BASE64.encode([7u8; 65])), None);
        assert_eq!(block_id("not base64!"), None);
        assert_eq!(block_id(""), None);
    }

    #[test]
    fn a_copy_sources_signature_is_redacted() {
        assert_eq!(
            redacted_source("http://h/acc/c/b?sv=2021&sig=abc%2Bdef&sp=r"),
            "http://h/acc/c/b?sv=2021&sig=REDACTED&sp=r"
        );
        assert_eq!(redacted_source("http://h/acc/c/b"), "http://h/acc/c/b");
    }

    #[test]
    fn a_copy_source_names_its_container_with_or_without_the_account() {
        assert_eq!(
            source_container(
                "http://127.0.0.1:10000/devstoreaccount1/photos/a.jpg",
                "devstoreaccount1"
            )
            .as_deref(),
            Some("photos")
        );
        assert_eq!(
            source_container("https://acc.blob.core.windows.net/pho%74os/a.jpg", "acc").as_deref(),
            Some("photos")
        );
        assert_eq!(source_container("not a url", "acc"), None);
    }
}
