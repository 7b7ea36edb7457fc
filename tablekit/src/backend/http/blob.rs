//! The Blob service over HTTP: requests built from [`BlobOp`]s, signed with the
//! Blob/Queue form of Shared Key (or a SAS or bearer token), retried with the
//! table client's policy; downloads streamed as they arrive; listings read
//! with quick-xml.

use std::fmt;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use percent_encoding::utf8_percent_encode;

/// Re-exported for the fuzz entry points (`__fuzz::blob_listing`).
pub(crate) use super::blob_xml::parse_listing;
use super::blob_xml::{
    copy_progress, encode_block_list, http_date, lease_from, md5_from, parse_block_list_answer,
    parse_containers,
};
use super::limits::{bounded_stream, declared_length, AnswerLimits, Kind};
use super::pipeline::{Outgoing, Pipeline};
use super::signer::Service;
use super::transport::Incoming;
use super::wire::{header_str, header_string, header_value, names, parse_retry_after, COMPONENT};
use super::{error_answer, HttpOptions};
use crate::account::Account;
use crate::backend::blob::{
    BlobBackend, BlobHeaders, BlobHttpHeaders, BlobOp, BlobProperties, BlobResponse, Conditions,
    ContainerProperties, CopyInfo, CopySource, CopyStatus, LeaseAction, LeaseInfo,
};
use crate::entity::ETag;
use crate::error::{Error, ErrorCode, ErrorKind, Result};

/// The HTTP transport of the blob client.
pub(crate) struct HttpBlobBackend {
    pipeline: Pipeline,
    account: Account,
    /// The blob endpoint, for the source URL of a copy within the account.
    endpoint: String,
}

impl fmt::Debug for HttpBlobBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBlobBackend")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// A blob request before signing.
struct Request {
    method: Method,
    /// `container` or `container/blob`, each segment percent-encoded.
    path: String,
    query: Vec<(&'static str, String)>,
    /// Standard headers that are signed by position.
    content_type: String,
    if_match: String,
    if_none_match: String,
    /// `x-ms-*` headers besides date and version.
    ms: Vec<(String, String)>,
    body: Bytes,
}

fn encode_path(container: &str, blob: Option<&str>) -> String {
    let mut path = String::from(container);
    if let Some(blob) = blob {
        for segment in blob.split('/') {
            path.push('/');
            path.extend(utf8_percent_encode(segment, COMPONENT));
        }
    }
    path
}

fn conditions_into(req: &mut Request, c: &Conditions) {
    if let Some(id) = &c.lease_id {
        req.ms.push(("x-ms-lease-id".into(), id.clone()));
    }
    if let Some(etag) = &c.if_match {
        req.if_match = etag.as_str().to_owned();
    }
    if c.if_none_match_any {
        req.if_none_match = "*".to_owned();
    }
}

fn headers_into(req: &mut Request, h: &BlobHeaders, content_type_header: &str) {
    if let Some(ct) = &h.http.content_type {
        if content_type_header == "content-type" {
            req.content_type = ct.clone();
        } else {
            req.ms.push((content_type_header.to_owned(), ct.clone()));
        }
    }
    http_headers_into(req, &h.http, false);
    metadata_into(req, &h.metadata);
}

fn metadata_into(req: &mut Request, metadata: &[(String, String)]) {
    for (name, value) in metadata {
        req.ms.push((
            format!("x-ms-meta-{}", name.to_ascii_lowercase()),
            value.clone(),
        ));
    }
}

/// The `x-ms-blob-*` headers that store a blob's HTTP headers (on a put, a
/// block list commit, or Set Blob Properties, which also takes the content type).
fn http_headers_into(req: &mut Request, h: &BlobHttpHeaders, with_content_type: bool) {
    use base64::Engine as _;
    let md5 = h
        .content_md5
        .as_ref()
        .map(|m| base64::engine::general_purpose::STANDARD.encode(m));
    for (name, value) in [
        (
            "x-ms-blob-content-type",
            h.content_type.as_ref().filter(|_| with_content_type),
        ),
        ("x-ms-blob-content-encoding", h.content_encoding.as_ref()),
        ("x-ms-blob-content-language", h.content_language.as_ref()),
        (
            "x-ms-blob-content-disposition",
            h.content_disposition.as_ref(),
        ),
        ("x-ms-blob-cache-control", h.cache_control.as_ref()),
        ("x-ms-blob-content-md5", md5.as_ref()),
    ] {
        if let Some(v) = value {
            req.ms.push((name.to_owned(), v.clone()));
        }
    }
}

impl HttpBlobBackend {
    pub(crate) fn new(account: Account, options: &HttpOptions) -> Result<Self> {
        let endpoint = account.blob_endpoint().ok_or_else(|| {
            Error::config(
                "the connection string names no blob endpoint (BlobEndpoint, or AccountName with AccountKey)",
            )
        })?;
        Ok(HttpBlobBackend {
            pipeline: Pipeline::new(Service::Blob, &account, endpoint, options)?,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            account,
        })
    }

    fn build(&self, op: &BlobOp<'_>) -> Request {
        let mut req = Request {
            method: Method::GET,
            path: String::new(),
            query: Vec::new(),
            content_type: String::new(),
            if_match: String::new(),
            if_none_match: String::new(),
            ms: Vec::new(),
            body: Bytes::new(),
        };
        let container_query = || vec![("restype", "container".to_owned())];
        match op {
            BlobOp::CreateContainer { container } => {
                req.method = Method::PUT;
                req.path = encode_path(container, None);
                req.query = container_query();
            }
            BlobOp::DeleteContainer {
                container,
                lease_id,
            } => {
                req.method = Method::DELETE;
                req.path = encode_path(container, None);
                req.query = container_query();
                if let Some(id) = lease_id {
                    req.ms.push(("x-ms-lease-id".into(), id.to_string()));
                }
            }
            BlobOp::List {
                container,
                prefix,
                delimiter,
                marker,
                max,
            } => {
                req.path = encode_path(container, None);
                req.query = container_query();
                req.query.push(("comp", "list".to_owned()));
                // Listings carry each blob's user metadata and last copy, as
                // properties() does.
                req.query.push(("include", "copy,metadata".to_owned()));
                if let Some(p) = prefix {
                    req.query.push(("prefix", p.to_string()));
                }
                if let Some(d) = delimiter {
                    req.query.push(("delimiter", d.to_string()));
                }
                if let Some(m) = marker {
                    req.query.push(("marker", m.to_string()));
                }
                if let Some(n) = max {
                    req.query.push(("maxresults", n.to_string()));
                }
            }
            BlobOp::Put {
                container,
                blob,
                body,
                headers,
                conditions,
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, Some(blob));
                req.ms.push(("x-ms-blob-type".into(), "BlockBlob".into()));
                headers_into(&mut req, headers, "content-type");
                conditions_into(&mut req, conditions);
                req.body = body.clone();
            }
            BlobOp::PutBlock {
                container,
                blob,
                block_id,
                body,
                lease_id,
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, Some(blob));
                req.query = vec![("comp", "block".into()), ("blockid", block_id.to_string())];
                if let Some(id) = lease_id {
                    req.ms.push(("x-ms-lease-id".into(), id.to_string()));
                }
                req.body = body.clone();
            }
            BlobOp::PutBlockList {
                container,
                blob,
                block_ids,
                headers,
                conditions,
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, Some(blob));
                req.query = vec![("comp", "blocklist".into())];
                headers_into(&mut req, headers, "x-ms-blob-content-type");
                conditions_into(&mut req, conditions);
                req.content_type = "application/xml".into();
                req.body = Bytes::from(encode_block_list(block_ids));
            }
            BlobOp::Get {
                container,
                blob,
                range,
                conditions,
            } => {
                req.path = encode_path(container, Some(blob));
                if let Some((first, last)) = range {
                    let value = match last {
                        Some(l) => format!("bytes={first}-{l}"),
                        None => format!("bytes={first}-"),
                    };
                    req.ms.push(("x-ms-range".into(), value));
                }
                conditions_into(&mut req, conditions);
            }
            BlobOp::Properties { container, blob } => {
                req.method = Method::HEAD;
                req.path = encode_path(container, Some(blob));
            }
            BlobOp::BlockList { container, blob } => {
                req.path = encode_path(container, Some(blob));
                req.query = vec![
                    ("comp", "blocklist".to_owned()),
                    ("blocklisttype", "all".to_owned()),
                ];
            }
            BlobOp::Delete {
                container,
                blob,
                conditions,
            } => {
                req.method = Method::DELETE;
                req.path = encode_path(container, Some(blob));
                conditions_into(&mut req, conditions);
            }
            BlobOp::ListContainers {
                prefix,
                marker,
                max,
                include_metadata,
            } => {
                req.query.push(("comp", "list".to_owned()));
                if *include_metadata {
                    req.query.push(("include", "metadata".to_owned()));
                }
                if let Some(p) = prefix {
                    req.query.push(("prefix", p.to_string()));
                }
                if let Some(m) = marker {
                    req.query.push(("marker", m.to_string()));
                }
                if let Some(n) = max {
                    req.query.push(("maxresults", n.to_string()));
                }
            }
            BlobOp::ContainerProperties { container } => {
                req.method = Method::HEAD;
                req.path = encode_path(container, None);
                req.query = container_query();
            }
            BlobOp::SetContainerMetadata {
                container,
                metadata,
                lease_id,
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, None);
                req.query = container_query();
                req.query.push(("comp", "metadata".to_owned()));
                if let Some(id) = lease_id {
                    req.ms.push(("x-ms-lease-id".into(), id.to_string()));
                }
                metadata_into(&mut req, metadata);
            }
            BlobOp::SetMetadata {
                container,
                blob,
                metadata,
                conditions,
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, Some(blob));
                req.query = vec![("comp", "metadata".to_owned())];
                metadata_into(&mut req, metadata);
                conditions_into(&mut req, conditions);
            }
            BlobOp::SetHttpHeaders {
                container,
                blob,
                headers,
                conditions,
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, Some(blob));
                req.query = vec![("comp", "properties".to_owned())];
                http_headers_into(&mut req, headers, true);
                conditions_into(&mut req, conditions);
            }
            BlobOp::Lease {
                container,
                blob,
                action,
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, *blob);
                if blob.is_none() {
                    req.query = container_query();
                }
                req.query.push(("comp", "lease".to_owned()));
                let mut ms = |n: &str, v: String| req.ms.push((n.to_owned(), v));
                match action {
                    LeaseAction::Acquire { seconds, proposed } => {
                        ms("x-ms-lease-action", "acquire".into());
                        let d = seconds.map_or_else(|| "-1".to_owned(), |s| s.to_string());
                        ms("x-ms-lease-duration", d);
                        ms("x-ms-proposed-lease-id", proposed.to_string());
                    }
                    LeaseAction::Renew { id } => {
                        ms("x-ms-lease-action", "renew".into());
                        ms("x-ms-lease-id", id.to_string());
                    }
                    LeaseAction::Change { id, proposed } => {
                        ms("x-ms-lease-action", "change".into());
                        ms("x-ms-lease-id", id.to_string());
                        ms("x-ms-proposed-lease-id", proposed.to_string());
                    }
                    LeaseAction::Release { id } => {
                        ms("x-ms-lease-action", "release".into());
                        ms("x-ms-lease-id", id.to_string());
                    }
                    LeaseAction::Break { period } => {
                        ms("x-ms-lease-action", "break".into());
                        if let Some(p) = period {
                            ms("x-ms-lease-break-period", p.to_string());
                        }
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
                req.method = Method::PUT;
                req.path = encode_path(container, Some(blob));
                let url = match source {
                    CopySource::Blob { container, blob } => {
                        format!("{}/{}", self.endpoint, encode_path(container, Some(blob)))
                    }
                    CopySource::Url(url) => url.to_string(),
                };
                req.ms.push(("x-ms-copy-source".into(), url));
                metadata_into(&mut req, metadata);
                conditions_into(&mut req, conditions);
            }
        }
        req
    }

    /// The request's headers in the order they are sent, as the pipeline takes it.
    fn outgoing(req: Request) -> Result<Outgoing> {
        let mut headers = Vec::with_capacity(4 + req.ms.len());
        for (name, value) in &req.ms {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| Error::config(format!("{name:?} is not a valid header name")))?;
            headers.push((name, header_value(value)?));
        }
        if req.body.is_empty() && matches!(req.method, Method::PUT | Method::POST) {
            // Some servers (Azurite's Put Blob among them) require the header
            // even for an empty body, which the HTTP client would leave out.
            headers.push((http::header::CONTENT_LENGTH, HeaderValue::from_static("0")));
        }
        for (name, value) in [
            (http::header::CONTENT_TYPE, &req.content_type),
            (http::header::IF_MATCH, &req.if_match),
            (http::header::IF_NONE_MATCH, &req.if_none_match),
        ] {
            if !value.is_empty() {
                headers.push((name, header_value(value)?));
            }
        }
        Ok(Outgoing {
            method: req.method,
            resource: req.path,
            query: req.query,
            headers,
            body: req.body,
        })
    }

    async fn interpret(&self, op: &BlobOp<'_>, resp: Incoming) -> Result<BlobResponse> {
        let status = resp.status();
        if !status.is_success() {
            return Err(error_of(resp, self.pipeline.limits()).await);
        }
        Ok(match op {
            BlobOp::CreateContainer { .. } => BlobResponse::Created(true),
            BlobOp::DeleteContainer { .. } | BlobOp::Delete { .. } | BlobOp::PutBlock { .. } => {
                BlobResponse::Done
            }
            BlobOp::Put { .. } | BlobOp::PutBlockList { .. } => BlobResponse::Written {
                etag: header_string(resp.headers(), &http::header::ETAG)
                    .map(ETag::new)
                    .ok_or_else(|| Error::decode("a blob write came back with no ETag"))?,
                last_modified: last_modified(resp.headers())?,
            },
            BlobOp::Properties { blob, .. } => {
                BlobResponse::Properties(properties_of(blob, resp.headers(), status)?)
            }
            BlobOp::Get { blob, .. } => {
                let properties = properties_of(blob, resp.headers(), status)?;
                // Never more than the answer says it holds: its length, or
                // else the blob's size.
                let declared = declared_length(resp.headers()).unwrap_or(properties.size);
                let chunks = bounded_stream(resp.into_stream(), declared);
                BlobResponse::Body { properties, chunks }
            }
            BlobOp::List { .. } => {
                let body = self.pipeline.limits().read(resp, Kind::Listing).await?;
                parse_listing(&body)?
            }
            BlobOp::BlockList { blob, .. } => {
                // A blob of uncommitted blocks only has no version yet.
                let properties = header_str(resp.headers(), &http::header::ETAG)
                    .and(header_str(resp.headers(), &X_MS_BLOB_CONTENT_LENGTH))
                    .map(|_| -> Result<BlobProperties> {
                        let mut p = properties_of(blob, resp.headers(), StatusCode::OK)?;
                        p.size = header_str(resp.headers(), &X_MS_BLOB_CONTENT_LENGTH)
                            .and_then(|n| n.parse().ok())
                            .unwrap_or_default();
                        Ok(p)
                    })
                    .transpose()?;
                let body = self.pipeline.limits().read(resp, Kind::Listing).await?;
                let (committed, uncommitted) = parse_block_list_answer(&body)?;
                BlobResponse::BlockList {
                    committed,
                    uncommitted,
                    properties,
                }
            }
            BlobOp::ListContainers { .. } => {
                let body = self.pipeline.limits().read(resp, Kind::Listing).await?;
                parse_containers(&body)?
            }
            BlobOp::ContainerProperties { container } => {
                BlobResponse::ContainerProperties(ContainerProperties {
                    name: container.to_string(),
                    etag: etag_of(resp.headers())?,
                    last_modified: last_modified(resp.headers())?,
                    metadata: metadata_of(resp.headers()),
                    lease: lease_of(resp.headers()),
                })
            }
            BlobOp::SetContainerMetadata { .. } => BlobResponse::Done,
            BlobOp::SetMetadata { .. } | BlobOp::SetHttpHeaders { .. } => BlobResponse::Written {
                etag: etag_of(resp.headers())?,
                last_modified: last_modified(resp.headers())?,
            },
            BlobOp::Lease { .. } => BlobResponse::Lease {
                id: header_string(resp.headers(), &X_MS_LEASE_ID),
                break_seconds: header_str(resp.headers(), &X_MS_LEASE_TIME)
                    .and_then(|t| t.parse().ok()),
            },
            BlobOp::Copy { .. } => BlobResponse::Copied {
                id: header_string(resp.headers(), &X_MS_COPY_ID)
                    .ok_or_else(|| Error::decode("a copy came back with no x-ms-copy-id"))?,
                status: header_str(resp.headers(), &X_MS_COPY_STATUS)
                    .and_then(CopyStatus::parse)
                    .ok_or_else(|| Error::decode("a copy came back with no x-ms-copy-status"))?,
            },
        })
    }
}

/// The error of a failed answer. A HEAD answer has no body, so the code comes
/// from `x-ms-error-code`, which every Blob service error carries.
async fn error_of(resp: Incoming, limits: &AnswerLimits) -> Error {
    let status = resp.status();
    let request_id = header_string(resp.headers(), &names::X_MS_REQUEST_ID);
    let header_code = header_string(resp.headers(), &names::X_MS_ERROR_CODE);
    let retry_after = header_str(resp.headers(), &names::RETRY_AFTER)
        .and_then(|v| parse_retry_after(v, Utc::now()));
    // A body cut short loses only the code and message: the status stands.
    let err = error_answer(resp, status, request_id, retry_after, limits).await;
    match (err.kind(), header_code) {
        (ErrorKind::Service(s), Some(code)) if s.code.is_none() => {
            let mut s = s.clone();
            s.code = Some(ErrorCode::from(code));
            ErrorKind::Service(s).into()
        }
        _ => err,
    }
}

fn last_modified(headers: &HeaderMap) -> Result<DateTime<Utc>> {
    header_str(headers, &http::header::LAST_MODIFIED)
        .and_then(http_date)
        .ok_or_else(|| Error::decode("a blob answer came back with no Last-Modified"))
}

const X_MS_LEASE_ID: HeaderName = HeaderName::from_static("x-ms-lease-id");
const X_MS_LEASE_TIME: HeaderName = HeaderName::from_static("x-ms-lease-time");
const X_MS_LEASE_STATE: HeaderName = HeaderName::from_static("x-ms-lease-state");
const X_MS_LEASE_DURATION: HeaderName = HeaderName::from_static("x-ms-lease-duration");
const X_MS_COPY_ID: HeaderName = HeaderName::from_static("x-ms-copy-id");
const X_MS_COPY_STATUS: HeaderName = HeaderName::from_static("x-ms-copy-status");
const X_MS_COPY_SOURCE: HeaderName = HeaderName::from_static("x-ms-copy-source");
const X_MS_COPY_PROGRESS: HeaderName = HeaderName::from_static("x-ms-copy-progress");
const X_MS_COPY_COMPLETION_TIME: HeaderName = HeaderName::from_static("x-ms-copy-completion-time");
const X_MS_COPY_STATUS_DESCRIPTION: HeaderName =
    HeaderName::from_static("x-ms-copy-status-description");
const CONTENT_MD5: HeaderName = HeaderName::from_static("content-md5");
const X_MS_BLOB_CONTENT_LENGTH: HeaderName = HeaderName::from_static("x-ms-blob-content-length");
const X_MS_CREATION_TIME: HeaderName = HeaderName::from_static("x-ms-creation-time");
const X_MS_BLOB_CONTENT_MD5: HeaderName = HeaderName::from_static("x-ms-blob-content-md5");

fn etag_of(headers: &HeaderMap) -> Result<ETag> {
    header_string(headers, &http::header::ETAG)
        .map(ETag::new)
        .ok_or_else(|| Error::decode("a blob answer came back with no ETag"))
}

/// The `x-ms-meta-*` headers, names in lower case, in name order.
fn metadata_of(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut metadata: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(n, v)| {
            let name = n.as_str().strip_prefix("x-ms-meta-")?;
            Some((name.to_owned(), v.to_str().ok()?.to_owned()))
        })
        .collect();
    metadata.sort();
    metadata
}

fn lease_of(headers: &HeaderMap) -> LeaseInfo {
    lease_from(
        header_str(headers, &X_MS_LEASE_STATE),
        header_str(headers, &X_MS_LEASE_DURATION),
    )
}

fn copy_of(headers: &HeaderMap) -> Option<CopyInfo> {
    Some(CopyInfo {
        id: header_string(headers, &X_MS_COPY_ID)?,
        status: header_str(headers, &X_MS_COPY_STATUS).and_then(CopyStatus::parse)?,
        source: header_string(headers, &X_MS_COPY_SOURCE),
        progress: header_str(headers, &X_MS_COPY_PROGRESS).and_then(copy_progress),
        completed_on: header_str(headers, &X_MS_COPY_COMPLETION_TIME).and_then(http_date),
        status_description: header_string(headers, &X_MS_COPY_STATUS_DESCRIPTION),
    })
}

/// A blob's properties from the headers of a GET or HEAD answer. For a range
/// (206), the size is the total after the `/` of `Content-Range`, and the
/// blob's MD5 is `x-ms-blob-content-md5` (`Content-MD5` is the range's).
fn properties_of(name: &str, headers: &HeaderMap, status: StatusCode) -> Result<BlobProperties> {
    let partial = status == StatusCode::PARTIAL_CONTENT;
    let size = if partial {
        header_str(headers, &http::header::CONTENT_RANGE)
            .and_then(|r| r.rsplit('/').next().and_then(|n| n.parse().ok()))
    } else {
        header_str(headers, &http::header::CONTENT_LENGTH).and_then(|n| n.parse().ok())
    }
    .ok_or_else(|| Error::decode("a blob answer came back with no size"))?;
    let md5 = match header_str(headers, &X_MS_BLOB_CONTENT_MD5) {
        Some(m) => md5_from(Some(m)),
        None if !partial => md5_from(header_str(headers, &CONTENT_MD5)),
        None => None,
    };
    let text = |n: &HeaderName| header_string(headers, n);
    Ok(BlobProperties {
        name: name.to_owned(),
        size,
        etag: etag_of(headers)?,
        last_modified: last_modified(headers)?,
        created: header_str(headers, &X_MS_CREATION_TIME).and_then(http_date),
        http: BlobHttpHeaders {
            content_type: text(&http::header::CONTENT_TYPE),
            content_encoding: text(&http::header::CONTENT_ENCODING),
            content_language: text(&http::header::CONTENT_LANGUAGE),
            content_disposition: text(&http::header::CONTENT_DISPOSITION),
            cache_control: text(&http::header::CACHE_CONTROL),
            content_md5: md5,
        },
        metadata: metadata_of(headers),
        lease: lease_of(headers),
        copy: copy_of(headers),
    })
}

/// The headers of a Get Blob or Get Blob Properties answer (the server's
/// half of [`properties_of`]): for a range (`Some((first, last))`, within
/// the blob), its length and `Content-Range`, and the blob's MD5 in
/// `x-ms-blob-content-md5`; for the whole blob, its size and `Content-MD5`.
#[cfg(feature = "server")]
pub(crate) fn properties_headers(
    p: &BlobProperties,
    range: Option<(u64, u64)>,
) -> Vec<(HeaderName, String)> {
    use super::blob_xml::{copy_status_word, http_date_text, lease_words, md5_text};
    let mut out: Vec<(HeaderName, String)> = Vec::with_capacity(24);
    let md5 = md5_text(p.http.content_md5.as_deref());
    match range {
        Some((first, last)) => {
            out.push((http::header::CONTENT_LENGTH, (last - first + 1).to_string()));
            out.push((
                http::header::CONTENT_RANGE,
                format!("bytes {first}-{last}/{}", p.size),
            ));
            if let Some(m) = md5 {
                out.push((X_MS_BLOB_CONTENT_MD5, m));
            }
        }
        None => {
            out.push((http::header::CONTENT_LENGTH, p.size.to_string()));
            if let Some(m) = md5 {
                out.push((CONTENT_MD5, m));
            }
        }
    }
    out.push((http::header::ETAG, p.etag.as_str().to_owned()));
    out.push((http::header::LAST_MODIFIED, http_date_text(p.last_modified)));
    if let Some(t) = p.created {
        out.push((X_MS_CREATION_TIME, http_date_text(t)));
    }
    let h = &p.http;
    for (name, value) in [
        (http::header::CONTENT_TYPE, &h.content_type),
        (http::header::CONTENT_ENCODING, &h.content_encoding),
        (http::header::CONTENT_LANGUAGE, &h.content_language),
        (http::header::CONTENT_DISPOSITION, &h.content_disposition),
        (http::header::CACHE_CONTROL, &h.cache_control),
    ] {
        if let Some(v) = value {
            out.push((name, v.clone()));
        }
    }
    for (name, value) in &p.metadata {
        if let Ok(n) = HeaderName::from_bytes(format!("x-ms-meta-{name}").as_bytes()) {
            out.push((n, value.clone()));
        }
    }
    out.push((
        HeaderName::from_static("x-ms-blob-type"),
        "BlockBlob".into(),
    ));
    let (status, state, duration) = lease_words(&p.lease);
    out.push((HeaderName::from_static("x-ms-lease-status"), status.into()));
    out.push((X_MS_LEASE_STATE, state.into()));
    if let Some(d) = duration {
        out.push((X_MS_LEASE_DURATION, d.into()));
    }
    if let Some(c) = &p.copy {
        out.push((X_MS_COPY_ID, c.id.clone()));
        out.push((X_MS_COPY_STATUS, copy_status_word(c.status).into()));
        if let Some(s) = &c.source {
            out.push((X_MS_COPY_SOURCE, s.clone()));
        }
        if let Some((done, total)) = c.progress {
            out.push((X_MS_COPY_PROGRESS, format!("{done}/{total}")));
        }
        if let Some(t) = c.completed_on {
            out.push((X_MS_COPY_COMPLETION_TIME, http_date_text(t)));
        }
        if let Some(d) = &c.status_description {
            out.push((X_MS_COPY_STATUS_DESCRIPTION, d.clone()));
        }
    }
    out.push((http::header::ACCEPT_RANGES, "bytes".into()));
    out.push((
        HeaderName::from_static("x-ms-server-encrypted"),
        "true".into(),
    ));
    out.push((HeaderName::from_static("x-ms-access-tier"), "Hot".into()));
    out.push((
        HeaderName::from_static("x-ms-access-tier-inferred"),
        "true".into(),
    ));
    out
}

#[async_trait::async_trait]
impl BlobBackend for HttpBlobBackend {
    async fn blob(&self, op: BlobOp<'_>) -> Result<BlobResponse> {
        let req = Self::outgoing(self.build(&op))?;
        // The call's span is the client's (`backend::traced`), around this future.
        let span = tracing::Span::none();
        self.pipeline
            .call(req, op.name(), op.repeat(), span, |resp| {
                self.interpret(&op, resp)
            })
            .await
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        super::admin::call(&self.pipeline, super::signer::Service::Blob, op).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_paths_keep_folders_and_escape_the_rest() {
        assert_eq!(
            encode_path("logs", Some("queue/2014/a b+c%.log")),
            "logs/queue/2014/a%20b%2Bc%25.log"
        );
    }

    #[cfg(feature = "server")]
    #[test]
    fn properties_the_server_answers_read_back_whole_in_the_client() {
        use crate::backend::blob::LeaseState;
        let p = BlobProperties {
            name: "a.txt".into(),
            size: 10,
            etag: ETag::new("\"0x8DC1\""),
            last_modified: "2014-07-31T18:00:00Z".parse().unwrap(),
            created: Some("2014-07-30T18:00:00Z".parse().unwrap()),
            http: BlobHttpHeaders {
                content_type: Some("text/plain".into()),
                content_encoding: Some("gzip".into()),
                content_language: Some("en-GB".into()),
                content_disposition: Some("attachment".into()),
                cache_control: Some("max-age=60".into()),
                content_md5: Some(vec![9; 16]),
            },
            metadata: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
            lease: LeaseInfo {
                state: LeaseState::Leased,
                infinite: Some(true),
            },
            copy: Some(CopyInfo {
                id: "c".into(),
                status: CopyStatus::Success,
                source: Some("http://h/a/b".into()),
                progress: Some((10, 10)),
                completed_on: Some("2014-07-31T18:00:00Z".parse().unwrap()),
                status_description: None,
            }),
        };
        let to_map = |headers: Vec<(HeaderName, String)>| {
            let mut map = HeaderMap::new();
            for (n, v) in headers {
                map.append(n, HeaderValue::from_str(&v).unwrap());
            }
            map
        };
        let whole = to_map(properties_headers(&p, None));
        assert_eq!(properties_of("a.txt", &whole, StatusCode::OK).unwrap(), p);
        assert_eq!(whole["accept-ranges"], "bytes");
        assert_eq!(whole["x-ms-blob-type"], "BlockBlob");
        assert_eq!(whole["x-ms-lease-status"], "locked");
        // A range: its own length, the blob's size after the slash, and
        // the blob's MD5 in x-ms-blob-content-md5.
        let part = to_map(properties_headers(&p, Some((2, 4))));
        assert_eq!(part["content-length"], "3");
        assert_eq!(part["content-range"], "bytes 2-4/10");
        assert!(part.get("content-md5").is_none());
        assert_eq!(
            properties_of("a.txt", &part, StatusCode::PARTIAL_CONTENT).unwrap(),
            p
        );
    }
}
