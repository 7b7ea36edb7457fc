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

use super::limits::{bounded_stream, declared_length, AnswerLimits, Kind};
use super::pipeline::{Outgoing, Pipeline};
use super::signer::Service;
use super::transport::Incoming;
use super::wire::{header_str, header_string, header_value, names, parse_retry_after, COMPONENT};
use super::{error_answer, HttpOptions};
use crate::account::Account;
use crate::backend::blob::{
    BlobBackend, BlobHeaders, BlobOp, BlobProperties, BlobResponse, Conditions,
};
use crate::entity::ETag;
use crate::error::{Error, ErrorCode, ErrorKind, Result};

/// The HTTP transport of the blob client.
pub(crate) struct HttpBlobBackend {
    pipeline: Pipeline,
    account: Account,
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
    if let Some(etag) = &c.if_match {
        req.if_match = etag.as_str().to_owned();
    }
    if c.if_none_match_any {
        req.if_none_match = "*".to_owned();
    }
}

fn headers_into(req: &mut Request, h: &BlobHeaders, content_type_header: &str) {
    if let Some(ct) = &h.content_type {
        if content_type_header == "content-type" {
            req.content_type = ct.clone();
        } else {
            req.ms.push((content_type_header.to_owned(), ct.clone()));
        }
    }
    for (name, value) in &h.metadata {
        req.ms.push((
            format!("x-ms-meta-{}", name.to_ascii_lowercase()),
            value.clone(),
        ));
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
            BlobOp::DeleteContainer { container } => {
                req.method = Method::DELETE;
                req.path = encode_path(container, None);
                req.query = container_query();
            }
            BlobOp::List {
                container,
                prefix,
                marker,
                max,
            } => {
                req.path = encode_path(container, None);
                req.query = container_query();
                req.query.push(("comp", "list".to_owned()));
                // Listings carry each blob's user metadata, as properties() does.
                req.query.push(("include", "metadata".to_owned()));
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
            } => {
                req.method = Method::PUT;
                req.path = encode_path(container, Some(blob));
                req.query = vec![("comp", "block".into()), ("blockid", block_id.to_string())];
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
                let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
                for id in *block_ids {
                    xml.push_str("<Latest>");
                    xml.push_str(id);
                    xml.push_str("</Latest>");
                }
                xml.push_str("</BlockList>");
                req.content_type = "application/xml".into();
                req.body = Bytes::from(xml);
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
            BlobOp::Delete {
                container,
                blob,
                conditions,
            } => {
                req.method = Method::DELETE;
                req.path = encode_path(container, Some(blob));
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

fn http_date(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn last_modified(headers: &HeaderMap) -> Result<DateTime<Utc>> {
    header_str(headers, &http::header::LAST_MODIFIED)
        .and_then(http_date)
        .ok_or_else(|| Error::decode("a blob answer came back with no Last-Modified"))
}

/// A blob's properties from the headers of a GET or HEAD answer. For a range
/// (206), the size is the total after the `/` of `Content-Range`.
fn properties_of(name: &str, headers: &HeaderMap, status: StatusCode) -> Result<BlobProperties> {
    let size = if status == StatusCode::PARTIAL_CONTENT {
        header_str(headers, &http::header::CONTENT_RANGE)
            .and_then(|r| r.rsplit('/').next().and_then(|n| n.parse().ok()))
    } else {
        header_str(headers, &http::header::CONTENT_LENGTH).and_then(|n| n.parse().ok())
    }
    .ok_or_else(|| Error::decode("a blob answer came back with no size"))?;
    let mut metadata: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(n, v)| {
            let name = n.as_str().strip_prefix("x-ms-meta-")?;
            Some((name.to_owned(), v.to_str().ok()?.to_owned()))
        })
        .collect();
    metadata.sort();
    Ok(BlobProperties {
        name: name.to_owned(),
        size,
        etag: header_string(headers, &http::header::ETAG)
            .map(ETag::new)
            .ok_or_else(|| Error::decode("a blob answer came back with no ETag"))?,
        last_modified: last_modified(headers)?,
        content_type: header_string(headers, &http::header::CONTENT_TYPE),
        metadata,
    })
}

/// Reads an `EnumerationResults` answer of a blob listing.
pub(crate) fn parse_listing(body: &[u8]) -> Result<BlobResponse> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Results {
        #[serde(default)]
        blobs: Blobs,
        next_marker: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Blobs {
        #[serde(rename = "Blob", default)]
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Item {
        name: String,
        properties: Props,
        /// `<Metadata><name>value</name>...</Metadata>`: element names are the keys.
        #[serde(default)]
        metadata: std::collections::BTreeMap<String, String>,
    }
    #[derive(serde::Deserialize)]
    struct Props {
        #[serde(rename = "Last-Modified")]
        last_modified: String,
        #[serde(rename = "Etag")]
        etag: String,
        #[serde(rename = "Content-Length")]
        content_length: u64,
        #[serde(rename = "Content-Type")]
        content_type: Option<String>,
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| Error::decode_caused_by("a blob listing is not UTF-8", e))?;
    let results: Results = quick_xml::de::from_str(text)
        .map_err(|e| Error::decode_caused_by("a blob listing is not the expected XML", e))?;
    let blobs = results
        .blobs
        .items
        .into_iter()
        .map(|b| {
            Ok(BlobProperties {
                last_modified: http_date(&b.properties.last_modified).ok_or_else(|| {
                    Error::decode(format!("Last-Modified of {:?} is not an HTTP date", b.name))
                })?,
                name: b.name,
                size: b.properties.content_length,
                etag: ETag::new(b.properties.etag),
                content_type: b.properties.content_type.filter(|c| !c.is_empty()),
                metadata: {
                    let mut m: Vec<(String, String)> = b
                        .metadata
                        .into_iter()
                        .map(|(k, v)| (k.to_ascii_lowercase(), v))
                        .collect();
                    m.sort();
                    m
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(BlobResponse::Listing {
        blobs,
        next_marker: results.next_marker.filter(|m| !m.is_empty()),
    })
}

#[async_trait::async_trait]
impl BlobBackend for HttpBlobBackend {
    async fn blob(&self, op: BlobOp<'_>) -> Result<BlobResponse> {
        let req = Self::outgoing(self.build(&op))?;
        let span = Pipeline::span(op.name(), None);
        self.pipeline
            .call(&req, op.name(), op.repeat(), span, |resp| {
                self.interpret(&op, resp)
            })
            .await
    }

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
    fn listings_are_read_with_their_marker() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1" ContainerName="logs"><Prefix>queue/</Prefix><MaxResults>2</MaxResults><Blobs><Blob><Name>queue/2014/07/31/1800/000001.log</Name><Properties><Last-Modified>Thu, 31 Jul 2014 18:00:00 GMT</Last-Modified><Etag>0x8D1</Etag><Content-Length>12</Content-Length><Content-Type>text/plain</Content-Type><BlobType>BlockBlob</BlobType></Properties><Metadata><source>queue</source><Host>vm&amp;7</Host></Metadata></Blob><Blob><Name>queue/a&amp;b.log</Name><Properties><Last-Modified>Thu, 31 Jul 2014 18:01:00 GMT</Last-Modified><Etag>0x8D2</Etag><Content-Length>0</Content-Length><Content-Type /></Properties></Blob></Blobs><NextMarker>2!abc</NextMarker></EnumerationResults>"#;
        let BlobResponse::Listing { blobs, next_marker } = parse_listing(xml).unwrap() else {
            panic!("a listing")
        };
        assert_eq!(next_marker.as_deref(), Some("2!abc"));
        assert_eq!(blobs.len(), 2);
        assert_eq!(blobs[0].name, "queue/2014/07/31/1800/000001.log");
        assert_eq!(blobs[0].size, 12);
        assert_eq!(blobs[0].content_type.as_deref(), Some("text/plain"));
        assert_eq!(blobs[1].name, "queue/a&b.log");
        assert_eq!(blobs[1].content_type, None);
        assert_eq!(
            blobs[0].metadata,
            [
                ("host".to_owned(), "vm&7".to_owned()),
                ("source".to_owned(), "queue".to_owned())
            ]
        );
        assert!(blobs[1].metadata.is_empty());

        let empty = br#"<EnumerationResults><Blobs /><NextMarker /></EnumerationResults>"#;
        let BlobResponse::Listing { blobs, next_marker } = parse_listing(empty).unwrap() else {
            panic!("a listing")
        };
        assert!(blobs.is_empty());
        assert_eq!(next_marker, None);
    }

    #[test]
    fn blob_paths_keep_folders_and_escape_the_rest() {
        assert_eq!(
            encode_path("logs", Some("queue/2014/a b+c%.log")),
            "logs/queue/2014/a%20b%2Bc%25.log"
        );
    }
}
