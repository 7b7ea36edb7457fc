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
use crate::backend::{Backend, Continuation, Operation, Payload, Repeat, Response, Written};
use crate::entity::{ETag, UpdateMode};
use crate::error::{Error, ErrorKind, Result, TransportError, TransportKind};
use crate::options::full_jitter;
pub(crate) use crate::options::{HttpOptions, Metadata, RetryPolicy};

pub mod account;
pub(crate) mod auth;
pub(crate) mod batch;
pub(crate) mod blob;
pub(crate) mod queue;
pub(crate) mod storage_auth;
mod wire;

/// The REST API version tablekit speaks. 2019-02-02 is what the current official
/// SDKs send for tables and what Azurite 3.x serves.
pub const API_VERSION: &str = "2019-02-02";

impl RetryPolicy {
    /// The wait before retry `retry` (0-based): full jitter under the doubled
    /// ceiling.
    fn delay(&self, retry: u32) -> Duration {
        full_jitter(self.base_delay, self.max_delay, retry)
    }

    /// The wait before retrying after `error`: what a throttling answer asked
    /// for (capped by `max_delay`), or else [`RetryPolicy::delay`].
    fn delay_after(&self, error: &Error, retry: u32) -> Duration {
        match error.retry_after() {
            Some(asked) if error.is_throttled() => asked.min(self.max_delay),
            _ => self.delay(retry),
        }
    }
}

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("tablekit/", env!("CARGO_PKG_VERSION"), " (rust)");

impl Metadata {
    fn accept(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Metadata::None => "application/json;odata=nometadata",
            Metadata::Minimal => "application/json;odata=minimalmetadata",
            Metadata::Full => "application/json;odata=fullmetadata",
        })
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

/// The connection pool and its settings, shared by the table and queue transports.
pub(crate) fn http_client(options: &HttpOptions) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        // The storage services never redirect, and a signed request must not
        // be replayed elsewhere; it also spares a URL parse per request.
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(options.pool_max_idle_per_host)
        .tcp_nodelay(true)
        .timeout(options.timeout)
        .connect_timeout(options.connect_timeout)
        .user_agent(USER_AGENT)
        .build()
        .map_err(|e| Error::config(format!("cannot build the HTTP client: {}", e.without_url())))
}

/// A fresh `x-ms-client-request-id`: a random v4 UUID, from a fast
/// non-cryptographic source (it only has to be unique enough to find a
/// request in logs).
pub(crate) fn client_request_id() -> String {
    let bytes = fastrand::u128(..).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// Runs `attempt` until it succeeds, fails for good, or the policy's retries run
/// out. Every attempt sends the same `client_request_id` (one per logical
/// call, from [`client_request_id`]), which the error of a failed call carries.
///
/// When an attempt of a write fails in a way that leaves its outcome unknown
/// ([`Error::outcome_unknown`]), the call's final error, whatever it is, is
/// marked [`Error::is_ambiguous`]; a [`Repeat::Never`] request is not resent
/// after such an attempt.
pub(crate) async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    operation: &'static str,
    repeat: Repeat,
    client_request_id: &str,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    tracing::Span::current().record("client_request_id", client_request_id);
    let mut retry = 0;
    let mut unknown = false;
    loop {
        let e = match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let this_unknown = repeat != Repeat::Read && e.outcome_unknown();
        let resend = e.is_retryable()
            && retry < policy.max_retries
            && !(repeat == Repeat::Never && this_unknown);
        if resend {
            unknown |= this_unknown;
            let delay = policy.delay_after(&e, retry);
            tracing::debug!(
                operation,
                retry,
                delay_ms = delay.as_millis() as u64,
                outcome_unknown = this_unknown,
                error = %e,
                "retrying"
            );
            tokio::time::sleep(delay).await;
            retry += 1;
            continue;
        }
        let e = e.with_client_request_id(client_request_id);
        return Err(if unknown || this_unknown {
            e.into_ambiguous()
        } else {
            e
        });
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
        let client = http_client(options)?;
        let endpoint = account.table_endpoint().ok_or_else(|| {
            Error::config(
                "the connection string names no table endpoint (TableEndpoint, or AccountName with AccountKey)",
            )
        })?;
        let base = reqwest::Url::parse(endpoint)
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
                    q.push("$top", itoa::Buffer::new().format(*t));
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
                    q.push("$top", itoa::Buffer::new().format(*t));
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
                let encoded = batch::encode(
                    // `new` refused an account without one.
                    self.account.table_endpoint().unwrap_or_default(),
                    table,
                    ops,
                );
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
    async fn send_once(&self, req: &Request, client_request_id: &str) -> Result<reqwest::Response> {
        let mut url = req.url.clone();
        let date = auth::rfc1123(chrono::Utc::now());
        let mut headers = req.headers.clone();
        headers.insert("x-ms-date", header_value(&date)?);
        headers.insert("x-ms-client-request-id", header_value(client_request_id)?);
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
        let id = client_request_id();
        with_retries(&self.retry, op.name(), op.repeat(), &id, || async {
            let resp = self.send_once(&req, &id).await?;
            self.interpret(op, resp, span).await
        })
        .await
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
            let retry_after = header_str(resp.headers(), "retry-after")
                .and_then(|v| wire::parse_retry_after(&v, chrono::Utc::now()));
            return Err(error_answer(resp, status, request_id, retry_after).await);
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
            client_request_id = tracing::field::Empty,
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
    let kind = transport_kind(e);
    let what = match kind {
        TransportKind::Timeout => "timed out",
        TransportKind::ConnectTimeout => "timed out connecting",
        TransportKind::Tls => "the TLS handshake failed",
        TransportKind::Connect => "could not connect",
        TransportKind::Interrupted if e.is_body() || e.is_decode() => {
            "the response body was cut short"
        }
        TransportKind::Interrupted | TransportKind::Request => "the request failed",
    };
    let detail = {
        let mut msg = what.to_owned();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        msg
    };
    ErrorKind::Transport(TransportError::new(kind, detail, None)).into()
}

/// Sorts a reqwest failure into the rows of [`Error::is_retryable`]'s table.
fn transport_kind(e: &reqwest::Error) -> TransportKind {
    if e.is_timeout() && e.is_connect() {
        TransportKind::ConnectTimeout
    } else if e.is_timeout() {
        TransportKind::Timeout
    } else if is_tls_failure(e) {
        TransportKind::Tls
    } else if e.is_connect() {
        TransportKind::Connect
    } else if e.is_builder() || e.is_redirect() || e.is_status() {
        TransportKind::Request
    } else {
        // Sending or receiving broke off: reset, closed, cut short.
        TransportKind::Interrupted
    }
}

/// rustls reports a refused certificate or a peer that does not speak TLS as
/// an `InvalidData` I/O error while connecting (hyper-rustls wraps the
/// `rustls::Error` in it, and hyper-util wraps that in another I/O error,
/// whose `source()` skips the middle one: hence `get_ref`). A plain
/// connection fault (refused, reset, unreachable) is never `InvalidData`.
fn is_tls_failure(e: &reqwest::Error) -> bool {
    if !e.is_connect() {
        return false;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        let mut io = s.downcast_ref::<std::io::Error>();
        while let Some(err) = io {
            if err.kind() == std::io::ErrorKind::InvalidData {
                return true;
            }
            io = err
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<std::io::Error>());
        }
        src = s.source();
    }
    false
}

/// The error of an answer whose status says it failed. If the connection
/// breaks while its body is read, the status stands (it is the service's
/// answer); only the code and message of the body are lost.
pub(crate) async fn error_answer(
    resp: reqwest::Response,
    status: reqwest::StatusCode,
    request_id: Option<String>,
    retry_after: Option<Duration>,
) -> Error {
    match resp.bytes().await {
        Ok(body) => service_error(status, request_id, retry_after, &body),
        Err(e) => {
            tracing::debug!(status = status.as_u16(), error = %transport_error(&e), "an error answer's body was cut short");
            service_error(status, request_id, retry_after, b"")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_is_capped() {
        let p = RetryPolicy::default();
        for r in 0..40 {
            assert!(p.delay(r) <= p.max_delay);
        }
    }

    #[test]
    fn retry_delays_are_spread_over_the_whole_ceiling() {
        let p = RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
        };
        // Retry 2: ceiling 400 ms.
        let delays: Vec<Duration> = (0..200).map(|_| p.delay(2)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(400)));
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 100, "{} distinct delays", distinct.len());
        // Full jitter reaches both halves of the range.
        assert!(delays.iter().any(|d| *d < Duration::from_millis(200)));
        assert!(delays.iter().any(|d| *d > Duration::from_millis(200)));
    }

    fn answer(status: u16, retry_after: Option<Duration>) -> Error {
        let status = reqwest::StatusCode::from_u16(status).unwrap();
        wire::service_error(status, None, retry_after, b"")
    }

    #[test]
    fn retry_after_of_a_throttling_answer_replaces_the_backoff_up_to_the_cap() {
        let p = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_secs(2),
        };
        let one = Some(Duration::from_secs(1));
        assert_eq!(p.delay_after(&answer(503, one), 0), Duration::from_secs(1));
        assert_eq!(p.delay_after(&answer(429, one), 0), Duration::from_secs(1));
        let long = Some(Duration::from_secs(60));
        assert_eq!(p.delay_after(&answer(503, long), 0), Duration::from_secs(2));
        // Only throttling answers are taken at their word.
        assert!(p.delay_after(&answer(500, one), 0) <= Duration::from_millis(1));
        assert!(p.delay_after(&answer(503, None), 0) <= Duration::from_millis(1));
    }

    #[test]
    fn user_agent_names_the_crate_and_its_version() {
        assert_eq!(
            USER_AGENT,
            format!("tablekit/{} (rust)", env!("CARGO_PKG_VERSION"))
        );
    }
}
