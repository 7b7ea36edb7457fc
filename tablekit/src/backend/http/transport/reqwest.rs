//! The reqwest transport: reqwest's pooled client, which honours the
//! `HTTP(S)_PROXY`, `ALL_PROXY` and `NO_PROXY` environment variables. The
//! request's origin-form URI is joined to the endpoint's origin.

use bytes::Bytes;

use super::common::{transport_failure, Origin, USER_AGENT};
use super::service::{HttpResponse, HttpService};
use crate::error::{Error, Result, TransportKind};
use crate::options::HttpOptions;

/// reqwest's client for one endpoint.
pub(crate) struct ReqwestTransport {
    client: reqwest::Client,
    origin: Origin,
}

impl ReqwestTransport {
    pub(crate) fn new(endpoint: &http::Uri, options: &HttpOptions) -> Result<Self> {
        let mut builder = reqwest::Client::builder();
        for root in &options.root_certificates {
            let certificate = reqwest::Certificate::from_der(root.der()).map_err(|_| {
                Error::config("a root certificate of the HTTP options is not usable")
            })?;
            builder = builder.add_root_certificate(certificate);
        }
        builder = match options.proxy.clone() {
            // As on the built-in transport: no environment variable is read.
            None => builder.no_proxy(),
            Some(proxy) => builder.proxy(reqwest::Proxy::custom(move |url| {
                // reqwest hands its own `Url`; the route is found on an `http::Uri`.
                let uri: http::Uri = url.as_str().parse().ok()?;
                let route = proxy.route(&uri).ok().flatten()?;
                let host = if route.host.contains(':') {
                    format!("[{}]", route.host)
                } else {
                    route.host.clone()
                };
                let mut target = format!("http://{host}:{}", route.port);
                if let Some(auth) = route.auth.as_ref().and_then(|a| a.to_str().ok()) {
                    // reqwest takes the credentials from the URL: only Basic
                    // is carried, and only when it decodes.
                    use base64::Engine as _;
                    let decoded = auth
                        .strip_prefix("Basic ")
                        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                        .and_then(|b| String::from_utf8(b).ok());
                    if let Some((user, password)) =
                        decoded.as_deref().and_then(|d| d.split_once(':'))
                    {
                        let enc = |t: &str| {
                            percent_encoding::utf8_percent_encode(
                                t,
                                percent_encoding::NON_ALPHANUMERIC,
                            )
                            .to_string()
                        };
                        target = format!(
                            "http://{}:{}@{host}:{}",
                            enc(user),
                            enc(password),
                            route.port
                        );
                    }
                }
                Some(target)
            })),
        };
        let client = builder
            // The storage services never redirect, and a signed request must
            // not be replayed elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(options.pool_max_idle_per_host)
            .tcp_nodelay(true)
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| {
                Error::config(format!("cannot build the HTTP client: {}", e.without_url()))
            })?;
        Ok(ReqwestTransport {
            client,
            origin: Origin::of(endpoint)?,
        })
    }

    /// Sends `req`, whose URI is absolute or origin-form (then joined to the endpoint's origin).
    pub(crate) async fn send(&self, req: http::Request<Bytes>) -> Result<reqwest::Response> {
        let (parts, body) = req.into_parts();
        let url = if parts.uri.scheme().is_some() {
            parts.uri.to_string()
        } else {
            let mut url = String::with_capacity(self.origin.prefix.len() + 128);
            url.push_str(&self.origin.prefix);
            url.push_str(parts.uri.path_and_query().map_or("/", |p| p.as_str()));
            url
        };
        self.client
            .request(parts.method, url)
            .headers(parts.headers)
            .body(body)
            .send()
            .await
            .map_err(|e| transport_error(&e))
    }
}

/// The error of a failed reqwest call. Never keeps the URL: with a SAS
/// credential it holds the token.
pub(crate) fn transport_error(e: &reqwest::Error) -> Error {
    let kind = transport_kind(e);
    let what = match kind {
        TransportKind::Timeout => "timed out",
        TransportKind::ConnectTimeout => "timed out connecting",
        TransportKind::Tls => "the TLS handshake failed",
        TransportKind::Connect => "could not connect",
        TransportKind::Interrupted if e.is_body() || e.is_decode() => {
            "the response body was cut short"
        }
        TransportKind::TooLarge => "the answer's head is too large (AnswerLimits::head)",
        TransportKind::Interrupted | TransportKind::Request => "the request failed",
    };
    transport_failure(kind, what, std::error::Error::source(e))
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
    } else if head_too_large(e) {
        TransportKind::TooLarge
    } else {
        // Sending or receiving broke off: reset, closed, cut short.
        TransportKind::Interrupted
    }
}

/// hyper (under reqwest) refused an answer's head as too large: its read
/// buffer filled before the head ended (`is_parse_too_large` needs hyper's
/// server feature, hence the message).
fn head_too_large(e: &reqwest::Error) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_parse() && h.to_string().contains("too large");
        }
        src = s.source();
    }
    false
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

impl std::fmt::Debug for ReqwestTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReqwestTransport")
            .field("authority", &self.origin.authority)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl HttpService for ReqwestTransport {
    async fn call(&self, request: http::Request<Bytes>) -> Result<HttpResponse> {
        use futures::TryStreamExt as _;
        let mut resp = self.send(request).await?;
        let headers = std::mem::take(resp.headers_mut());
        let status = resp.status();
        let chunks = resp.bytes_stream().map_err(|e| transport_error(&e));
        Ok(HttpResponse::new(status, headers, chunks))
    }
}
