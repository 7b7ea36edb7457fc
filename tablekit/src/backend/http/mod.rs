//! The HTTP backend: builds, signs and sends REST requests to Azure Table Storage
//! or Azurite, retries transient failures, and turns answers into [`Response`]s.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::Method;
use tracing::Instrument;

use self::account::{Account, Credential};
use self::auth::StringToSign;
use self::wire::{
    entity_resource, header_str, header_value, prefix_bounds, service_error, QueryString,
};
use crate::backend::{Backend, Continuation, Operation, Payload, Response, Written};
use crate::entity::{ETag, UpdateMode};
use crate::error::{Error, ErrorKind, Result, TransportError};

pub mod account;
pub(crate) mod auth;
pub(crate) mod batch;
mod wire;

/// The REST API version tablekit speaks. 2019-02-02 is what the current official
/// SDKs send for tables and what Azurite 3.x serves.
pub const API_VERSION: &str = "2019-02-02";

/// How failed requests are retried: exponential backoff with full jitter on
/// timeouts, connection faults, 408, 429, 500, 502, 503 and 504.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retries).
    pub max_retries: u32,
    /// The delay ceiling of the first retry; it doubles with each retry.
    pub base_delay: Duration,
    /// The largest delay ceiling.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..Default::default()
        }
    }

    fn delay(&self, retry: u32) -> Duration {
        let ceiling = self
            .base_delay
            .saturating_mul(1u32 << retry.min(16))
            .min(self.max_delay);
        // Full jitter; the clock's low bits are random enough to spread clients apart.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        ceiling.mul_f64(f64::from(nanos % 1000) / 1000.0)
    }
}

/// How much OData metadata the service puts in JSON answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Metadata {
    /// No annotations at all (`odata=nometadata`): the smallest answers. Types
    /// are then known only from the reader's schema; ETags of query results
    /// come without it only where the service includes them.
    None,
    /// Type annotations for values whose JSON form is ambiguous, and ETags (`odata=minimalmetadata`).
    Minimal,
    /// Every annotation (`odata=fullmetadata`).
    Full,
}

impl Metadata {
    fn accept(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Metadata::None => "application/json;odata=nometadata",
            Metadata::Minimal => "application/json;odata=minimalmetadata",
            Metadata::Full => "application/json;odata=fullmetadata",
        })
    }
}

/// Options of the HTTP transport.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The retry policy.
    pub retry: RetryPolicy,
    /// The time limit of one attempt.
    pub timeout: Duration,
    /// Idle connections kept per host (the .NET default of 2 starves concurrent clients).
    pub pool_max_idle_per_host: usize,
    /// The metadata level of reads; `None` picks per entity type: minimal metadata
    /// for types that need the service's type annotations (such as `DynamicEntity`),
    /// none for types that know their schema. A type that needs annotations always
    /// gets at least minimal metadata.
    pub metadata: Option<Metadata>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            pool_max_idle_per_host: 64,
            metadata: None,
        }
    }
}

/// Sends operations to the Table service over HTTP.
pub(crate) struct HttpBackend {
    client: reqwest::Client,
    account: Account,
    /// The table endpoint, parsed once; request URLs only replace its path and query.
    base: reqwest::Url,
    base_path: String,
    retry: RetryPolicy,
    metadata: Option<Metadata>,
}

impl fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBackend")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// A request ready to send (before signing).
struct Request {
    method: Method,
    url: reqwest::Url,
    content_type: Option<&'static str>,
    headers: HeaderMap,
    body: Bytes,
}

impl HttpBackend {
    pub(crate) fn new(account: Account, options: &HttpOptions) -> Result<Self> {
        let client = reqwest::Client::builder()
            // The Table service never redirects, and a signed request must not
            // be replayed elsewhere; it also spares a URL parse per request.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(options.pool_max_idle_per_host)
            .tcp_nodelay(true)
            .timeout(options.timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| {
                Error::config(format!("cannot build the HTTP client: {}", e.without_url()))
            })?;
        let base = reqwest::Url::parse(account.table_endpoint())
            .map_err(|_| Error::config("the table endpoint is not a valid URL"))?;
        if base.cannot_be_a_base() || base.query().is_some() {
            return Err(Error::config(
                "the table endpoint must be an http(s) URL without a query",
            ));
        }
        let base_path = base.path().trim_end_matches('/').to_owned();
        Ok(HttpBackend {
            client,
            account,
            base,
            base_path,
            retry: options.retry.clone(),
            metadata: options.metadata,
        })
    }

    fn url(&self, resource: &str, query: &str) -> reqwest::Url {
        let mut path = String::with_capacity(self.base_path.len() + resource.len() + 1);
        path.push_str(&self.base_path);
        path.push('/');
        path.push_str(resource);
        let mut url = self.base.clone();
        url.set_path(&path);
        if !query.is_empty() {
            url.set_query(Some(query));
        }
        url
    }

    /// Builds the request of an operation. Bodies are already validated JSON.
    fn build(&self, op: &Operation<'_>) -> Result<Request> {
        let mut headers = HeaderMap::new();
        let mut content_type = None;
        let mut body = Bytes::new();
        // A reader that needs annotations never gets fewer than minimal metadata:
        // without them Int64, Guid and DateTime values would read as strings.
        let accept = |annotations: bool| {
            match (self.metadata, annotations) {
                (Some(Metadata::None) | None, true) => Metadata::Minimal,
                (Some(m), _) => m,
                (None, false) => Metadata::None,
            }
            .accept()
        };
        headers.insert(reqwest::header::ACCEPT, accept(true));
        let (method, url) = match op {
            Operation::CreateTable { table } => {
                content_type = Some("application/json");
                headers.insert("prefer", HeaderValue::from_static("return-no-content"));
                let mut b = Vec::with_capacity(table.len() + 16);
                b.extend_from_slice(b"{\"TableName\":");
                crate::codec::write::write_json_str(&mut b, table);
                b.push(b'}');
                body = b.into();
                (Method::POST, self.url("Tables", ""))
            }
            Operation::DeleteTable { table } => {
                (Method::DELETE, self.url(&format!("Tables('{table}')"), ""))
            }
            Operation::ListTables {
                prefix,
                next_table_name,
                top,
            } => {
                let mut q = QueryString::default();
                if let Some(p) = prefix {
                    // The prefix range: names >= p and < p with its last character bumped.
                    let (lo, hi) = prefix_bounds(p);
                    let filter = match hi {
                        Some(hi) => format!(
                            "TableName ge '{}' and TableName lt '{}'",
                            lo.replace('\'', "''"),
                            hi.replace('\'', "''")
                        ),
                        None => format!("TableName ge '{}'", lo.replace('\'', "''")),
                    };
                    q.push("$filter", &filter);
                }
                if let Some(t) = top {
                    q.push("$top", &t.to_string());
                }
                if let Some(n) = next_table_name {
                    q.push("NextTableName", n);
                }
                (Method::GET, self.url("Tables", &q.0))
            }
            Operation::Insert { table, body: b, .. } => {
                content_type = Some("application/json");
                headers.insert("prefer", HeaderValue::from_static("return-no-content"));
                body = b.json()?;
                (Method::POST, self.url(table, ""))
            }
            Operation::Write {
                table,
                key,
                body: b,
                mode,
                if_match,
            } => {
                content_type = Some("application/json");
                if let Some(m) = if_match {
                    headers.insert(reqwest::header::IF_MATCH, header_value(m.header_value())?);
                }
                body = b.json()?;
                let method = match mode {
                    UpdateMode::Replace => Method::PUT,
                    UpdateMode::Merge => {
                        Method::from_bytes(b"MERGE").map_err(|_| Error::config("MERGE"))?
                    }
                };
                (method, self.url(&entity_resource(table, key), ""))
            }
            Operation::Delete {
                table,
                key,
                if_match,
            } => {
                headers.insert(
                    reqwest::header::IF_MATCH,
                    header_value(if_match.header_value())?,
                );
                (Method::DELETE, self.url(&entity_resource(table, key), ""))
            }
            Operation::Get {
                table,
                key,
                select,
                annotations,
            } => {
                headers.insert(reqwest::header::ACCEPT, accept(*annotations));
                let mut q = QueryString::default();
                if let Some(s) = select {
                    q.push("$select", s);
                }
                (Method::GET, self.url(&entity_resource(table, key), &q.0))
            }
            Operation::Query {
                table,
                filter,
                select,
                top,
                continuation,
                annotations,
            } => {
                headers.insert(reqwest::header::ACCEPT, accept(*annotations));
                let mut q = QueryString::default();
                if let Some(f) = filter {
                    q.push("$filter", f);
                }
                if let Some(s) = select {
                    q.push("$select", s);
                }
                if let Some(t) = top {
                    q.push("$top", &t.to_string());
                }
                if let Some(c) = continuation {
                    q.push("NextPartitionKey", &c.next_partition_key);
                    if let Some(rk) = &c.next_row_key {
                        q.push("NextRowKey", rk);
                    }
                }
                let mut resource = String::with_capacity(table.len() + 2);
                resource.push_str(table);
                resource.push_str("()");
                (Method::GET, self.url(&resource, &q.0))
            }
            Operation::Transaction { table, ops } => {
                let encoded = batch::encode(self.account.table_endpoint(), table, ops);
                headers.insert(
                    reqwest::header::CONTENT_TYPE,
                    header_value(&encoded.content_type)?,
                );
                body = encoded.body.into();
                (Method::POST, self.url("$batch", ""))
            }
        };
        if let Some(ct) = content_type {
            headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        Ok(Request {
            method,
            url,
            content_type,
            headers,
            body,
        })
    }

    /// Adds the common headers and the credential, then sends once.
    async fn send_once(&self, req: &Request) -> Result<reqwest::Response> {
        let mut url = req.url.clone();
        let date = auth::rfc1123(chrono::Utc::now());
        let mut headers = req.headers.clone();
        headers.insert("x-ms-date", header_value(&date)?);
        headers.insert("x-ms-version", HeaderValue::from_static(API_VERSION));
        headers.insert("dataserviceversion", HeaderValue::from_static("3.0;NetFx"));
        headers.insert(
            "maxdataserviceversion",
            HeaderValue::from_static("3.0;NetFx"),
        );
        let content_type = match req.content_type {
            Some(ct) => ct.to_owned(),
            None => headers
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned(),
        };
        match self.account.credential() {
            Credential::SharedKey(key) | Credential::SharedKeyLite(key) => {
                let comp = url
                    .query_pairs()
                    .find(|(k, _)| k == "comp")
                    .map(|(_, v)| v.into_owned());
                let input = StringToSign {
                    method: req.method.as_str(),
                    content_md5: "",
                    content_type: &content_type,
                    date: &date,
                    path: url.path(),
                    comp: comp.as_deref(),
                };
                let value = match self.account.credential() {
                    Credential::SharedKeyLite(_) => {
                        auth::shared_key_lite(self.account.account_name(), key, &input)
                    }
                    _ => auth::shared_key(self.account.account_name(), key, &input),
                };
                let mut v = header_value(&value)?;
                v.set_sensitive(true);
                headers.insert(reqwest::header::AUTHORIZATION, v);
            }
            Credential::Sas(sas) => {
                let query = match url.query() {
                    Some(q) if !q.is_empty() => format!("{q}&{}", sas.as_query()),
                    _ => sas.as_query().to_owned(),
                };
                url.set_query(Some(&query));
            }
            Credential::Bearer(tokens) => {
                let token = tokens.bearer_token().await?;
                let mut v = header_value(&format!("Bearer {token}"))?;
                v.set_sensitive(true);
                headers.insert(reqwest::header::AUTHORIZATION, v);
            }
            _ => {}
        }
        self.client
            .request(req.method.clone(), url)
            .headers(headers)
            .body(req.body.clone())
            .send()
            .await
            .map_err(|e| transport_error(&e))
    }

    async fn execute_inner(&self, op: &Operation<'_>, span: &tracing::Span) -> Result<Response> {
        let req = self.build(op)?;
        span.record("method", req.method.as_str());
        let mut retry = 0;
        loop {
            let outcome = match self.send_once(&req).await {
                Ok(resp) => self.interpret(op, resp, span).await,
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) if e.is_retryable() && retry < self.retry.max_retries => {
                    tracing::debug!(operation = op.name(), retry, error = %e, "retrying");
                    tokio::time::sleep(self.retry.delay(retry)).await;
                    retry += 1;
                }
                Err(e) if retry > 0 && !op.is_idempotent() => return Err(mark_ambiguous(e)),
                other => return other,
            }
        }
    }

    /// Turns a response into the operation's answer or its error.
    async fn interpret(
        &self,
        op: &Operation<'_>,
        resp: reqwest::Response,
        span: &tracing::Span,
    ) -> Result<Response> {
        let status = resp.status();
        let request_id = header_str(resp.headers(), "x-ms-request-id");
        span.record("status", status.as_u16());
        if let Some(id) = &request_id {
            span.record("request_id", id.as_str());
        }
        if !status.is_success() {
            let body = resp.bytes().await.map_err(|e| transport_error(&e))?;
            return Err(service_error(status, request_id, &body));
        }
        let etag = header_str(resp.headers(), "etag");
        Ok(match op {
            Operation::CreateTable { .. }
            | Operation::DeleteTable { .. }
            | Operation::Delete { .. } => Response::Done,
            Operation::Insert { .. } | Operation::Write { .. } => {
                let etag =
                    etag.ok_or_else(|| Error::decode("the service returned no ETag for a write"))?;
                Response::Written(Written::from_etag(ETag::new(etag)))
            }
            Operation::Get { .. } => {
                let body = resp.bytes().await.map_err(|e| transport_error(&e))?;
                Response::Entity(Some(Payload::Json { body, etag }))
            }
            Operation::Query { .. } => {
                let continuation = header_str(resp.headers(), "x-ms-continuation-nextpartitionkey")
                    .map(|pk| Continuation {
                        next_partition_key: pk,
                        next_row_key: header_str(resp.headers(), "x-ms-continuation-nextrowkey"),
                    });
                let body = resp.bytes().await.map_err(|e| transport_error(&e))?;
                Response::Page {
                    payload: Payload::Json { body, etag: None },
                    continuation,
                }
            }
            Operation::ListTables { .. } => {
                let next_table_name = header_str(resp.headers(), "x-ms-continuation-nexttablename");
                let body = resp.bytes().await.map_err(|e| transport_error(&e))?;
                Response::Tables {
                    names: crate::codec::read::decode_table_names(&body)?,
                    next_table_name,
                }
            }
            Operation::Transaction { ops, .. } => {
                let content_type = header_str(resp.headers(), "content-type").unwrap_or_default();
                let body = resp.bytes().await.map_err(|e| transport_error(&e))?;
                Response::Transaction(batch::parse_response(
                    &content_type,
                    &body,
                    ops.len(),
                    request_id,
                )?)
            }
        })
    }
}

#[async_trait::async_trait]
impl Backend for HttpBackend {
    async fn execute(&self, op: Operation<'_>) -> Result<Response> {
        let span = tracing::debug_span!(
            "tablekit.request",
            operation = op.name(),
            table = op.table().unwrap_or(""),
            method = tracing::field::Empty,
            status = tracing::field::Empty,
            request_id = tracing::field::Empty,
            duration_us = tracing::field::Empty,
        );
        let start = Instant::now();
        let result = self
            .execute_inner(&op, &span)
            .instrument(span.clone())
            .await;
        span.record("duration_us", start.elapsed().as_micros() as u64);
        if let Err(e) = &result {
            span.in_scope(|| tracing::debug!(error = %e, "request failed"));
        }
        result
    }
}

fn transport_error(e: &reqwest::Error) -> Error {
    // Never keep the URL: with a SAS credential it holds the token.
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "the response body was cut short"
    } else {
        "the request failed"
    };
    let detail = {
        let mut msg = kind.to_owned();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        msg
    };
    ErrorKind::Transport(TransportError::new(detail, None)).into()
}

fn mark_ambiguous(e: Error) -> Error {
    if let ErrorKind::Service(s) = e.kind() {
        if matches!(s.status, 404 | 409 | 412) {
            let mut s = s.clone();
            s.ambiguous = true;
            return ErrorKind::Service(s).into();
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_is_capped() {
        let p = RetryPolicy::default();
        for r in 0..20 {
            assert!(p.delay(r) <= p.max_delay);
        }
    }
}
