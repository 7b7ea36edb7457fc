//! The HTTP backend: builds, signs and sends REST requests to Azure Table Storage
//! or Azurite, retries transient failures, and turns answers into [`Response`]s.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue};
use http::Method;
use tracing::Instrument;

use self::account::{Account, Credential};
use self::auth::StringToSign;
use self::transport::{HttpTransport, Incoming};
use self::wire::{
    comp_of, entity_resource, header_str, header_string, header_value, names, prefix_bounds,
    service_error, QueryString,
};
use crate::backend::{Backend, Continuation, Operation, Payload, Repeat, Response, Written};
use crate::entity::{ETag, UpdateMode};
use crate::error::{Error, Result};
use crate::options::full_jitter;
pub(crate) use crate::options::{HttpOptions, Metadata, RetryPolicy};

pub mod account;
pub(crate) mod auth;
pub(crate) mod batch;
#[cfg(feature = "blob")]
pub(crate) mod blob;
#[cfg(feature = "queue")]
pub(crate) mod queue;
#[cfg(any(feature = "queue", feature = "blob"))]
pub(crate) mod storage_auth;
pub(crate) mod transport;
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

#[cfg(test)]
use self::transport::USER_AGENT;

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
    transport: HttpTransport,
    account: Account,
    /// The table endpoint's path (percent-encoded, no trailing `/`); request
    /// paths are this, `/` and the resource.
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

/// Parses a service endpoint once: an `http(s)` URL without a query. Returns
/// it with its path, percent-encoded and without a trailing `/`.
pub(crate) fn parse_endpoint(endpoint: &str, service: &str) -> Result<(url::Url, String)> {
    let base = url::Url::parse(endpoint)
        .map_err(|_| Error::config(format!("the {service} endpoint is not a valid URL")))?;
    if base.cannot_be_a_base() || base.query().is_some() {
        return Err(Error::config(format!(
            "the {service} endpoint must be an http(s) URL without a query"
        )));
    }
    let path = base.path().trim_end_matches('/').to_owned();
    Ok((base, path))
}

/// The request of one attempt: `path` as sent (percent-encoded), `query`
/// encoded (the SAS, if any, appended to it), headers and body.
pub(crate) fn http_request(
    method: &Method,
    path: &str,
    query: &str,
    sas: Option<&str>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<http::Request<Bytes>> {
    let extra = sas.map_or(0, |s| s.len() + 1);
    let mut target = String::with_capacity(path.len() + query.len() + extra + 1);
    target.push_str(path);
    if !query.is_empty() || sas.is_some() {
        target.push('?');
        target.push_str(query);
        if let Some(sas) = sas {
            if !query.is_empty() {
                target.push('&');
            }
            target.push_str(sas);
        }
    }
    let uri = http::Uri::try_from(target)
        .map_err(|_| Error::config("the request path holds characters a URI does not allow"))?;
    let mut req = http::Request::new(body);
    *req.method_mut() = method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    Ok(req)
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

/// A request ready to send (before signing). Its headers are kept as parts,
/// put into a fresh map by each attempt (no map is cloned).
struct Request {
    method: Method,
    /// The path as sent: the endpoint's path, `/`, the resource.
    path: String,
    /// The encoded query, without a SAS.
    query: String,
    accept: HeaderValue,
    prefer_no_content: bool,
    if_match: Option<HeaderValue>,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

impl HttpBackend {
    pub(crate) fn new(account: Account, options: &HttpOptions) -> Result<Self> {
        let endpoint = account.table_endpoint().ok_or_else(|| {
            Error::config(
                "the connection string names no table endpoint (TableEndpoint, or AccountName with AccountKey)",
            )
        })?;
        let (base, base_path) = parse_endpoint(endpoint, "table")?;
        Ok(HttpBackend {
            transport: HttpTransport::new(&base, options)?,
            account,
            base_path,
            retry: options.retry.clone(),
            metadata: options.metadata,
        })
    }

    /// The path and query of a resource below the endpoint.
    fn url(&self, resource: &str, query: &str) -> (String, String) {
        let mut path = String::with_capacity(self.base_path.len() + resource.len() + 1);
        path.push_str(&self.base_path);
        path.push('/');
        path.push_str(resource);
        (path, query.to_owned())
    }

    /// Builds the request of an operation. Bodies are already validated JSON.
    fn build(&self, op: &Operation<'_>) -> Result<Request> {
        let mut prefer_no_content = false;
        let mut if_match_header = None;
        let mut content_type: Option<HeaderValue> = None;
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
        let mut accept_header = accept(true);
        let (method, (path, query)) = match op {
            Operation::CreateTable { table } => {
                content_type = Some(HeaderValue::from_static("application/json"));
                prefer_no_content = true;
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
                content_type = Some(HeaderValue::from_static("application/json"));
                prefer_no_content = true;
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
                content_type = Some(HeaderValue::from_static("application/json"));
                if let Some(m) = if_match {
                    if_match_header = Some(header_value(m.header_value())?);
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
                if_match_header = Some(header_value(if_match.header_value())?);
                (Method::DELETE, self.url(&entity_resource(table, key), ""))
            }
            Operation::Get {
                table,
                key,
                select,
                annotations,
            } => {
                accept_header = accept(*annotations);
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
                accept_header = accept(*annotations);
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
                content_type = Some(header_value(&encoded.content_type)?);
                body = encoded.body.into();
                (Method::POST, self.url("$batch", ""))
            }
        };
        Ok(Request {
            method,
            path,
            query,
            accept: accept_header,
            prefer_no_content,
            if_match: if_match_header,
            content_type,
            body,
        })
    }

    /// Adds the common headers and the credential, then sends once.
    async fn send_once(&self, req: &Request, client_request_id: &str) -> Result<Incoming> {
        let date = auth::x_ms_date();
        let mut headers = HeaderMap::with_capacity(12);
        headers.insert(http::header::ACCEPT, req.accept.clone());
        if req.prefer_no_content {
            headers.insert(names::PREFER, HeaderValue::from_static("return-no-content"));
        }
        if let Some(m) = &req.if_match {
            headers.insert(http::header::IF_MATCH, m.clone());
        }
        if let Some(ct) = &req.content_type {
            headers.insert(http::header::CONTENT_TYPE, ct.clone());
        }
        headers.insert(names::X_MS_DATE, date.clone());
        headers.insert(
            names::X_MS_CLIENT_REQUEST_ID,
            header_value(client_request_id)?,
        );
        headers.insert(names::X_MS_VERSION, HeaderValue::from_static(API_VERSION));
        headers.insert(
            names::DATASERVICEVERSION,
            HeaderValue::from_static("3.0;NetFx"),
        );
        headers.insert(
            names::MAXDATASERVICEVERSION,
            HeaderValue::from_static("3.0;NetFx"),
        );
        let mut sas = None;
        match self.account.credential() {
            Credential::SharedKey(key) | Credential::SharedKeyLite(key) => {
                let comp = comp_of(&req.query);
                let input = StringToSign {
                    method: req.method.as_str(),
                    content_md5: "",
                    content_type: req
                        .content_type
                        .as_ref()
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or(""),
                    date: date.to_str().unwrap_or(""),
                    path: &req.path,
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
                headers.insert(http::header::AUTHORIZATION, v);
            }
            Credential::Sas(token) => sas = Some(token.as_query()),
            Credential::Bearer(tokens) => {
                let token = tokens.bearer_token().await?;
                let mut v = header_value(&format!("Bearer {token}"))?;
                v.set_sensitive(true);
                headers.insert(http::header::AUTHORIZATION, v);
            }
            _ => {}
        }
        let request = http_request(
            &req.method,
            &req.path,
            &req.query,
            sas,
            headers,
            req.body.clone(),
        )?;
        self.transport.send(request).await
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
        resp: Incoming,
        span: &tracing::Span,
    ) -> Result<Response> {
        let status = resp.status();
        let request_id = header_string(resp.headers(), &names::X_MS_REQUEST_ID);
        span.record("status", status.as_u16());
        if let Some(id) = &request_id {
            span.record("request_id", id.as_str());
        }
        if !status.is_success() {
            let retry_after = header_str(resp.headers(), &names::RETRY_AFTER)
                .and_then(|v| wire::parse_retry_after(v, chrono::Utc::now()));
            return Err(error_answer(resp, status, request_id, retry_after).await);
        }
        let etag = header_string(resp.headers(), &http::header::ETAG);
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
                let body = resp.bytes().await?;
                Response::Entity(Some(Payload::Json { body, etag }))
            }
            Operation::Query { .. } => {
                let continuation =
                    header_string(resp.headers(), &names::NEXT_PARTITION_KEY).map(|pk| {
                        Continuation {
                            next_partition_key: pk,
                            next_row_key: header_string(resp.headers(), &names::NEXT_ROW_KEY),
                        }
                    });
                let body = resp.bytes().await?;
                Response::Page {
                    payload: Payload::Json { body, etag: None },
                    continuation,
                }
            }
            Operation::ListTables { .. } => {
                let next_table_name = header_string(resp.headers(), &names::NEXT_TABLE_NAME);
                let body = resp.bytes().await?;
                Response::Tables {
                    names: crate::codec::read::decode_table_names(&body)?,
                    next_table_name,
                }
            }
            Operation::Transaction { ops, .. } => {
                let content_type =
                    header_string(resp.headers(), &http::header::CONTENT_TYPE).unwrap_or_default();
                let body = resp.bytes().await?;
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

/// The error of an answer whose status says it failed. If the connection
/// breaks while its body is read, the status stands (it is the service's
/// answer); only the code and message of the body are lost.
pub(crate) async fn error_answer(
    resp: Incoming,
    status: http::StatusCode,
    request_id: Option<String>,
    retry_after: Option<Duration>,
) -> Error {
    match resp.bytes().await {
        Ok(body) => service_error(status, request_id, retry_after, &body),
        Err(e) => {
            tracing::debug!(status = status.as_u16(), error = %e, "an error answer's body was cut short");
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
        let status = http::StatusCode::from_u16(status).unwrap();
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
