//! The one way a request of any service goes out: a service backend builds an
//! [`Outgoing`] request once; each attempt stamps it (date, client request id,
//! version), has the account's [`RequestSigner`] sign it, hands it to the
//! transport, and the backend reads the answer. Retries, ambiguity, request ids
//! and the `tablekit.request` span live here, once, for tables, queues and blobs.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Method;
use tracing::Instrument;

use super::limits::AnswerLimits;
use super::signer::{self, Attempt, RequestSigner, Service};
use super::transport::{HttpTransport, Incoming, Origin};
use super::wire::{header_value, names, QueryString};
use crate::account::Account;
use crate::backend::Repeat;
use crate::error::{Error, Result};
use crate::options::{full_jitter, HttpOptions, RetryPolicy};

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

/// Parses a service endpoint once: an `http(s)` URL without a query (an
/// [`Account`] has checked it further). Returns it normalised (its origin as
/// [`Origin::of`] gives it, then its path, `/` at least) with its path
/// without a trailing `/`.
pub(crate) fn parse_endpoint(endpoint: &str, service: &str) -> Result<(http::Uri, String)> {
    let raw: http::Uri = endpoint
        .parse()
        .map_err(|_| Error::config(format!("the {service} endpoint is not a valid URL")))?;
    if raw.scheme().is_none() || raw.authority().is_none() || raw.query().is_some() {
        return Err(Error::config(format!(
            "the {service} endpoint must be an http(s) URL without a query"
        )));
    }
    let origin = Origin::of(&raw)?;
    let base = http::Uri::try_from(format!("{}{}", origin.prefix, raw.path()))
        .map_err(|_| Error::config(format!("the {service} endpoint is not a valid URL")))?;
    let path = raw.path().trim_end_matches('/').to_owned();
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

/// A request as a service backend builds it, before an attempt stamps and
/// signs it. Built once per call; every attempt sends a copy.
#[derive(Debug)]
pub(crate) struct Outgoing {
    /// The verb.
    pub(crate) method: Method,
    /// The resource below the endpoint (percent-encoded, no leading `/`).
    pub(crate) resource: String,
    /// Query parameters, decoded, in the order they are sent.
    pub(crate) query: Vec<(&'static str, String)>,
    /// The service's own headers (content type, conditions, `x-ms-*`, ...).
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// The body.
    pub(crate) body: Bytes,
}

/// Build → sign → send with retries, for one service endpoint of one account.
pub(crate) struct Pipeline {
    transport: HttpTransport,
    signer: Arc<dyn RequestSigner>,
    /// The endpoint's path (percent-encoded, no trailing `/`).
    base_path: String,
    retry: RetryPolicy,
    limits: AnswerLimits,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("signer", &self.signer)
            .field("base_path", &self.base_path)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// The pipeline of `service` at `endpoint`, signing as `account`'s credential says.
    pub(crate) fn new(
        service: Service,
        account: &Account,
        endpoint: &str,
        options: &HttpOptions,
    ) -> Result<Self> {
        let (base, base_path) = parse_endpoint(endpoint, service.name())?;
        Ok(Pipeline {
            signer: signer::for_account(service, account)?,
            transport: HttpTransport::new(&base, options)?,
            base_path,
            retry: options.retry.clone(),
            limits: options.limits,
        })
    }

    /// The limits answers are read under.
    pub(crate) fn limits(&self) -> &AnswerLimits {
        &self.limits
    }

    /// The `tablekit.request` span of one call: its fields are filled as the
    /// call goes.
    pub(crate) fn span(operation: &'static str, table: Option<&str>) -> tracing::Span {
        tracing::debug_span!(
            "tablekit.request",
            operation,
            table = table.unwrap_or(""),
            method = tracing::field::Empty,
            status = tracing::field::Empty,
            request_id = tracing::field::Empty,
            client_request_id = tracing::field::Empty,
            duration_us = tracing::field::Empty,
        )
    }

    /// Sends `req` (with retries, by `repeat`'s rules) and reads each answer
    /// with `interpret` until one is final. The call runs in `span`.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        req: &Outgoing,
        operation: &'static str,
        repeat: Repeat,
        span: tracing::Span,
        interpret: F,
    ) -> Result<T>
    where
        F: Fn(Incoming) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        // A disabled span (no subscriber wants it) costs nothing: no clock
        // reads and no header lookups for its fields.
        let traced = !span.is_disabled();
        span.record("method", req.method.as_str());
        let start = traced.then(Instant::now);
        let id = client_request_id();
        let mut encoded_query = QueryString::default();
        for (name, value) in &req.query {
            encoded_query.push(name, value);
        }
        let encoded_query = encoded_query.0;
        let mut path = String::with_capacity(self.base_path.len() + req.resource.len() + 1);
        path.push_str(&self.base_path);
        path.push('/');
        path.push_str(&req.resource);
        let span_ref = &span;
        let result = with_retries(&self.retry, operation, repeat, &id, || async {
            let resp = self.send_once(req, &path, &encoded_query, &id).await?;
            if traced {
                span_ref.record("status", resp.status().as_u16());
                if let Some(rid) = resp
                    .headers()
                    .get(&names::X_MS_REQUEST_ID)
                    .and_then(|v| v.to_str().ok())
                {
                    span_ref.record("request_id", rid);
                }
            }
            interpret(resp).await
        })
        .instrument(span.clone())
        .await;
        if let Some(start) = start {
            span.record("duration_us", start.elapsed().as_micros() as u64);
        }
        let result = result.map_err(|e| self.signer.explain(e));
        if let Err(e) = &result {
            span.in_scope(|| tracing::debug!(error = %e, "request failed"));
        }
        result
    }

    /// One attempt: the common headers, the signature, the transport.
    async fn send_once(
        &self,
        req: &Outgoing,
        path: &str,
        encoded_query: &str,
        client_request_id: &str,
    ) -> Result<Incoming> {
        let mut headers = HeaderMap::with_capacity(req.headers.len() + 5);
        for (name, value) in &req.headers {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(names::X_MS_DATE, signer::x_ms_date());
        headers.insert(
            names::X_MS_CLIENT_REQUEST_ID,
            header_value(client_request_id)?,
        );
        headers.insert(names::X_MS_VERSION, HeaderValue::from_static(API_VERSION));
        let mut attempt = Attempt {
            method: &req.method,
            path,
            query: &req.query,
            encoded_query: encoded_query.to_owned(),
            headers,
            body: &req.body,
        };
        // A bearer signer may want the request once more after a 401 (a
        // challenge): keep what it needs to sign again.
        let again = self
            .signer
            .reads_challenges()
            .then(|| attempt.headers.clone());
        self.signer.sign(&mut attempt).await?;
        let sent = again
            .as_ref()
            .and(attempt.headers.get(http::header::AUTHORIZATION).cloned());
        let request = http_request(
            attempt.method,
            attempt.path,
            &attempt.encoded_query,
            None,
            attempt.headers,
            attempt.body.clone(),
        )?;
        let mut resp = self.transport.send(request).await?;
        if let Some(headers) = again {
            if resp.status() == http::StatusCode::UNAUTHORIZED
                && self.signer.unauthorized(sent.as_ref(), resp.headers())
            {
                let mut attempt = Attempt {
                    method: &req.method,
                    path,
                    query: &req.query,
                    encoded_query: encoded_query.to_owned(),
                    headers,
                    body: &req.body,
                };
                self.signer.sign(&mut attempt).await?;
                let request = http_request(
                    attempt.method,
                    attempt.path,
                    &attempt.encoded_query,
                    None,
                    attempt.headers,
                    attempt.body.clone(),
                )?;
                resp = self.transport.send(request).await?;
            }
        }
        self.limits.check_head(resp.headers())?;
        Ok(resp)
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
        crate::backend::http::wire::service_error(status, None, retry_after, b"")
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
}
