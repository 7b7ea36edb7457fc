//! The one way a request of any service goes out: a service backend builds an
//! [`Outgoing`] request once; each attempt stamps it (date, client request id,
//! version), has the account's [`RequestSigner`] sign it, hands it to the
//! transport, and the backend reads the answer. Retries, ambiguity, request ids
//! and the attempts' spans (see [`crate::observe`]) live here, once, for
//! tables, queues and blobs.
//!
//! Every attempt, the first as any other, takes one way: the retry loop
//! ([`with_retries`]) around one attempt function ([`Pipeline::send_once`]),
//! whatever the signer (a key, a SAS, a bearer token) and the transport.
//!
//! # One path, measured (issue 37)
//!
//! Until this change the first attempt took one of three ways (a short way
//! made in the caller's future when no span was wanted, the signer signed at
//! once and the transport was the built-in one; the boxed retry loop; and in
//! it a sign-at-once way beside the signing way of a bearer token), and table
//! calls went around the [`Backend`](crate::backend::Backend) trait through an
//! enum (`TableBackend`) to keep the HTTP backend's future unboxed. Both were
//! kept for speed, so they were measured by latency and CPU, not cache misses:
//! `benches/benches/floor.rs` with `FLOOR_MODE=pair` against Azurite, which
//! alternates tablekit's point reads, inserts and upsert-merges (1,000 each)
//! with the same requests by a bare hyper loop in one process, so the ratio
//! tablekit / floor cancels the load of the machine. One run, five binaries
//! alternating, 3 × 4 rounds each, 2 shared cores under other builds (load
//! 9-15); the median of 36 per-round ratios (3 workloads × 12 rounds), their
//! quartiles in brackets:
//!
//! | build | CPU, tablekit / floor | wall, tablekit / floor |
//! |---|---|---|
//! | before: three ways, the enum | 1.114 [1.029-1.169] | 1.040 [0.822-1.303] |
//! | one path, the enum kept | 1.116 [1.088-1.233] | 1.088 [0.967-1.308] |
//! | one path, through the `Backend` trait (a boxed future per call) | 1.100 [1.058-1.184] | 1.020 [0.928-1.168] |
//!
//! After / before, CPU: 1.00 (one path), 0.99 (and the trait): within the
//! noise, which is ±5% here, while a boxed future costs one allocation
//! (tens of ns) against 56-70 µs of CPU and about 1 ms of latency per
//! request. So one path, and no enum: the table clients hold an
//! `Arc<dyn Backend>` whatever the backend. (Signing at once where the signer
//! can is kept inside the one attempt function, in `sign`: the unit test
//! `signing_at_once_signs_as_the_signers_future_does` checks it per signer
//! kind.)

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
#[cfg(feature = "opentelemetry")]
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Method;
use tracing::Instrument;

use super::limits::AnswerLimits;
use super::signer::{self, Attempt, RequestSigner, Service};
use super::transport::{HttpTransport, Incoming, Origin};
use super::wire::{names, push_query_pair};
use crate::account::Account;
use crate::backend::Repeat;
use crate::error::{Error, Result};
use crate::observe;
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
/// request in logs), formatted in place (no `fmt`, no allocation).
pub(crate) fn client_request_id() -> RequestId {
    let bytes = fastrand::u128(..).to_le_bytes();
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .encode_lower(&mut text);
    RequestId(text)
}

/// A client request id's text (lower-case hex and `-`).
pub(crate) struct RequestId([u8; uuid::fmt::Hyphenated::LENGTH]);

impl RequestId {
    /// The id as text.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("")
    }

    /// The id as a header value.
    fn header(&self) -> HeaderValue {
        HeaderValue::from_bytes(&self.0).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// Runs `attempt` until it succeeds, fails for good, or the policy's retries run
/// out; each is given how many were made before it. Every attempt sends the same `client_request_id` (one per logical
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
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut retry = 0;
    let mut unknown = false;
    loop {
        let e = match attempt(retry).await {
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
    /// The endpoint's origin: `server.address`, `server.port` and the
    /// prefix of `url.full` in the attempts' spans.
    origin: Origin,
    /// `az.namespace` of the service.
    namespace: &'static str,
    /// `server.address` of the metrics, shared (no copy per attempt).
    #[cfg(feature = "opentelemetry")]
    otel_host: opentelemetry::StringValue,
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
        let origin = Origin::of(&base)?;
        Ok(Pipeline {
            #[cfg(feature = "opentelemetry")]
            otel_host: Arc::<str>::from(origin.host.as_str()).into(),
            origin,
            namespace: service.namespace(),
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

    /// Sends `req` (with retries, by `repeat`'s rules) and reads each answer
    /// with `interpret` until one is final. The call runs in `span`, its
    /// public-call span (see [`crate::observe`]), unless that is
    /// [`tracing::Span::none`] (a table call, whose span the client made);
    /// each attempt in a span of its own, a child of the current one.
    ///
    /// Every attempt, the first as any other, goes one way: the retry loop
    /// ([`with_retries`]) around one attempt function
    /// ([`Pipeline::send_once`]), whatever the signer and the transport.
    // Not an `async fn`: its arguments would be kept twice in the future,
    // once as captured and once moved into locals.
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn call<'a, T, F, Fut>(
        &'a self,
        req: Outgoing,
        operation: &'static str,
        repeat: Repeat,
        span: tracing::Span,
        interpret: F,
    ) -> impl Future<Output = Result<T>> + Send + 'a
    where
        T: Send + 'a,
        F: Fn(Incoming) -> Fut + Send + Sync + 'a,
        Fut: Future<Output = Result<T>> + Send + 'a,
    {
        async move {
            let id = client_request_id();
            let call = Call {
                uri: self.target(&req)?,
                req: &req,
                id: &id,
            };
            self.attempts(&call, operation, repeat, span, interpret)
                .await
        }
    }

    /// The request target (path and encoded query) of `req` as a URI, once
    /// per call: every attempt sends a clone (a reference count), unless its
    /// signer changes the query (a SAS).
    fn target(&self, req: &Outgoing) -> Result<http::Uri> {
        let mut target = String::with_capacity(self.base_path.len() + req.resource.len() + 64);
        target.push_str(&self.base_path);
        target.push('/');
        target.push_str(&req.resource);
        for (i, (name, value)) in req.query.iter().enumerate() {
            target.push(if i == 0 { '?' } else { '&' });
            push_query_pair(&mut target, name, value);
        }
        // The URI takes the text over (no copy); its path and query are what
        // the signer reads.
        http::Uri::try_from(target)
            .map_err(|_| Error::config("the request path holds characters a URI does not allow"))
    }

    /// The attempts of a call, with retries, in `span`.
    async fn attempts<T, F, Fut>(
        &self,
        call: &Call<'_>,
        operation: &'static str,
        repeat: Repeat,
        span: tracing::Span,
        interpret: F,
    ) -> Result<T>
    where
        F: Fn(Incoming) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let id_text = call.id.as_str();
        let interpret = &interpret;
        let attempts = with_retries(&self.retry, operation, repeat, id_text, |resend| {
            let attempt_span = observe::attempt_span(
                &call.req.method,
                self.namespace,
                id_text,
                &self.origin.host,
                self.origin.port,
                resend,
            );
            #[cfg(feature = "opentelemetry")]
            let meters = observe::Meters::get();
            #[cfg(feature = "opentelemetry")]
            if resend > 0 {
                meters.retries.add(
                    1,
                    &[opentelemetry::KeyValue::new(
                        "tablekit.operation",
                        operation,
                    )],
                );
            }
            let inner = attempt_span.clone();
            async move {
                #[cfg(feature = "opentelemetry")]
                let start = Instant::now();
                #[cfg(feature = "opentelemetry")]
                let mut status = None;
                let result = match self.send_once(call, &inner).await {
                    Ok(resp) => {
                        #[cfg(feature = "opentelemetry")]
                        {
                            status = Some(resp.status().as_u16());
                        }
                        if !inner.is_disabled() {
                            let request_id = resp
                                .headers()
                                .get(&names::X_MS_REQUEST_ID)
                                .and_then(|v| v.to_str().ok());
                            observe::record_answer(&inner, resp.status().as_u16(), request_id);
                        }
                        interpret(resp).await
                    }
                    Err(e) => Err(e),
                };
                observe::end_attempt(&inner, &result);
                #[cfg(feature = "opentelemetry")]
                {
                    let outcome = match (status, &result) {
                        (Some(status), _) => Ok(status),
                        (None, Err(e)) => Err(observe::error_type(e)),
                        (None, Ok(_)) => Ok(0),
                    };
                    if matches!(status, Some(429 | 503)) {
                        meters.throttled.add(
                            1,
                            &[opentelemetry::KeyValue::new(
                                "tablekit.operation",
                                operation,
                            )],
                        );
                    }
                    meters.record_attempt(
                        start.elapsed().as_secs_f64(),
                        operation,
                        observe::method_name(&call.req.method),
                        &self.otel_host,
                        self.origin.port,
                        outcome,
                    );
                }
                result
            }
            .instrument(attempt_span)
        });
        let result = if span.is_none() {
            attempts.await
        } else {
            attempts.instrument(span.clone()).await
        };
        let result = result.map_err(|e| self.signer.explain(e));
        if let Err(e) = &result {
            #[cfg(feature = "opentelemetry")]
            if e.is_ambiguous() {
                observe::Meters::get().ambiguous.add(
                    1,
                    &[opentelemetry::KeyValue::new(
                        "tablekit.operation",
                        operation,
                    )],
                );
            }
            span.in_scope(|| tracing::debug!(error = %e, "request failed"));
        }
        observe::end_call(&span, &result);
        result
    }

    /// One attempt, whatever the signer: the common headers, the signature
    /// (at once for a key or a SAS, through the signer's future for a bearer
    /// token), the transport, and once more after a challenge if the signer
    /// reads challenges and asks for it.
    ///
    /// `span` is the attempt's: with the `opentelemetry` feature its trace
    /// context goes on the wire (`traceparent`), and `url.full` is recorded
    /// on it, redacted.
    async fn send_once(&self, call: &Call<'_>, span: &tracing::Span) -> Result<Incoming> {
        #[cfg_attr(not(feature = "opentelemetry"), allow(unused_mut))]
        let mut headers = self.headers(call);
        #[cfg(feature = "opentelemetry")]
        observe::inject(span, &mut headers);
        let mut attempt = call.attempt(headers);
        // A bearer signer may want the request once more after a 401 (a
        // challenge): keep what it needs to sign again.
        let again = self
            .signer
            .reads_challenges()
            .then(|| attempt.headers.clone());
        sign(&*self.signer, &mut attempt).await?;
        let sent = again
            .as_ref()
            .and(attempt.headers.get(http::header::AUTHORIZATION).cloned());
        let request = call.request(attempt)?;
        if !span.is_disabled() {
            let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
            span.record(
                "url.full",
                observe::redacted_url(&self.origin.prefix, target).as_str(),
            );
        }
        let mut resp = self.transport.send(request).await?;
        if let Some(headers) = again {
            if resp.status() == http::StatusCode::UNAUTHORIZED
                && self.signer.unauthorized(sent.as_ref(), resp.headers())?
            {
                let mut attempt = call.attempt(headers);
                sign(&*self.signer, &mut attempt).await?;
                let request = call.request(attempt)?;
                resp = self.transport.send(request).await?;
            }
        }
        self.checked(resp)
    }

    /// The headers every attempt sends: the request's own, then the date,
    /// the client request id and the version. Room is made for what the
    /// signer and the transport add (Authorization, Host, User-Agent,
    /// Accept): never regrown.
    fn headers(&self, call: &Call<'_>) -> HeaderMap {
        let req = call.req;
        let mut headers = HeaderMap::with_capacity(req.headers.len() + 8);
        for (name, value) in &req.headers {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(names::X_MS_DATE, signer::x_ms_date());
        headers.insert(names::X_MS_CLIENT_REQUEST_ID, call.id.header());
        headers.insert(names::X_MS_VERSION, HeaderValue::from_static(API_VERSION));
        headers
    }

    /// An answer whose head is within the limits.
    fn checked(&self, resp: Incoming) -> Result<Incoming> {
        self.limits.check_head(resp.headers())?;
        Ok(resp)
    }
}

/// Signs `attempt`: at once where the signer can, else through its future.
async fn sign(signer: &dyn RequestSigner, attempt: &mut Attempt<'_>) -> Result<()> {
    match signer.sign_now(attempt) {
        Some(signed) => signed,
        None => signer.sign(attempt).await,
    }
}

/// One call's request as every attempt sends it.
struct Call<'a> {
    req: &'a Outgoing,
    /// Path and query as a URI: the path as sent (percent-encoded) and the
    /// encoded query are what the signer reads.
    uri: http::Uri,
    /// `x-ms-client-request-id`.
    id: &'a RequestId,
}

impl Call<'_> {
    /// An attempt to sign, with `headers`.
    fn attempt(&self, headers: HeaderMap) -> Attempt<'_> {
        Attempt {
            method: &self.req.method,
            path: self.uri.path(),
            query: &self.req.query,
            encoded_query: Cow::Borrowed(self.uri.query().unwrap_or("")),
            headers,
            body: &self.req.body,
        }
    }

    /// The signed attempt as an `http::Request`: the call's URI, or a new one
    /// when the signer changed the query.
    fn request(&self, attempt: Attempt<'_>) -> Result<http::Request<Bytes>> {
        match attempt.encoded_query {
            Cow::Borrowed(_) => {
                let mut request = http::Request::new(attempt.body.clone());
                *request.method_mut() = attempt.method.clone();
                *request.uri_mut() = self.uri.clone();
                *request.headers_mut() = attempt.headers;
                Ok(request)
            }
            Cow::Owned(query) => http_request(
                attempt.method,
                attempt.path,
                &query,
                None,
                attempt.headers,
                attempt.body.clone(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn signing_at_once_signs_as_the_signers_future_does() {
        const KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
        let accounts = [
            format!("AccountName=devstoreaccount1;AccountKey={KEY};TableEndpoint=http://127.0.0.1:1/devstoreaccount1;QueueEndpoint=http://127.0.0.1:1/devstoreaccount1"),
            "TableEndpoint=http://127.0.0.1:1/devstoreaccount1;QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;SharedAccessSignature=sv=2019-02-02&sig=abc".to_owned(),
        ];
        let query = vec![("$filter", "a eq 'b'".to_owned())];
        let body = Bytes::from_static(b"{}");
        let mut signed = 0;
        for conn in &accounts {
            let account = Account::from_connection_string(conn).unwrap();
            for service in [
                Service::Table,
                #[cfg(feature = "queue")]
                Service::Queue,
            ] {
                let signer = signer::for_account(service, &account).unwrap();
                let attempt = || {
                    let mut headers = HeaderMap::new();
                    headers.insert(
                        names::X_MS_DATE,
                        HeaderValue::from_static("Thu, 26 Nov 2026 06:00:00 GMT"),
                    );
                    Attempt {
                        method: &Method::GET,
                        path: "/devstoreaccount1/T()",
                        query: &query,
                        encoded_query: Cow::Borrowed("%24filter=a"),
                        headers,
                        body: &body,
                    }
                };
                let (mut now, mut later) = (attempt(), attempt());
                let Some(result) = signer.sign_now(&mut now) else {
                    continue;
                };
                result.unwrap();
                signer.sign(&mut later).await.unwrap();
                assert_eq!(now.headers, later.headers, "{service:?}");
                assert_eq!(now.encoded_query, later.encoded_query, "{service:?}");
                assert!(
                    now.headers.contains_key(http::header::AUTHORIZATION)
                        || now.encoded_query.contains("sig=abc")
                );
                signed += 1;
            }
        }
        assert_eq!(signed, 4, "keys and SAS sign at once");
    }

    /// What `with_retries` resends and what its final error says.
    #[tokio::test]
    async fn retries_resend_what_may_be_resent_and_mark_unknown_outcomes() {
        /// `with_retries` (2 retries) whose first attempt fails with the
        /// status `first` and whose later ones answer as `next` says; its
        /// result and how many attempts it made.
        async fn from(
            repeat: Repeat,
            id: &str,
            first: u16,
            next: Option<u16>,
        ) -> (Result<u32>, u32) {
            let policy = RetryPolicy {
                max_retries: 2,
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(1),
            };
            let calls = std::cell::Cell::new(0);
            let attempt = |resend: u32| {
                assert_eq!(resend, calls.get(), "the resends before this attempt");
                calls.set(calls.get() + 1);
                std::future::ready(match (calls.get(), next) {
                    (1, _) => Err(answer(first, None)),
                    (n, None) => Ok(n - 1),
                    (_, Some(status)) => Err(answer(status, None)),
                })
            };
            let got = with_retries(&policy, "op", repeat, id, attempt);
            (got.await, calls.get())
        }

        // A transient first error: retried, and the retry's answer stands.
        let (got, calls) = from(Repeat::Read, "id-1", 503, None).await;
        assert_eq!((got.unwrap(), calls), (1, 2), "one attempt after the first");

        // A permanent first error: no second attempt, the error carries the id.
        let (got, calls) = from(Repeat::Read, "id-2", 404, None).await;
        let e = got.unwrap_err();
        assert_eq!(calls, 1);
        assert_eq!(
            (e.status(), e.client_request_id()),
            (Some(404), Some("id-2"))
        );
        assert!(!e.is_ambiguous());

        // The retries count after the first attempt: two more, then the last error.
        let (got, calls) = from(Repeat::Read, "id-3", 503, Some(503)).await;
        assert_eq!((calls, got.unwrap_err().status()), (3, Some(503)));

        // A first attempt of a write whose outcome is unknown: a write that
        // must not be repeated is not resent, and its error is ambiguous...
        let (got, calls) = from(Repeat::Never, "id-4", 500, None).await;
        let e = got.unwrap_err();
        assert_eq!(calls, 1);
        assert!(e.is_ambiguous() && e.status() == Some(500));
        // ... and one that may be is resent, and its final error, whatever it
        // is, stays ambiguous.
        let (got, calls) = from(Repeat::Detected, "id-5", 500, Some(409)).await;
        let e = got.unwrap_err();
        assert_eq!(calls, 2);
        assert!(e.is_ambiguous() && e.status() == Some(409));
    }

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
