//! The wire under the table, queue and blob backends: one endpoint's
//! connections, a request in (`http::Request` with an origin-form URI), status,
//! headers and a body out.
//!
//! Two implementations: [`hyper`](self::hyper), tablekit's own HTTP/1.1 client
//! on hyper's connection API (each request drives its connection in its own
//! task, no spawned connection task, so nothing crosses threads on the hot
//! path), and [`reqwest`](self::reqwest), kept for HTTP proxies and as a
//! fallback. [`Transport`] picks one. Everything above this module (signing,
//! retries, tracing, ambiguity) is the same on both.

mod common;
pub(crate) mod hyper;
mod pool;
pub(crate) mod reqwest;
mod tls;

use bytes::Bytes;
use futures::stream::BoxStream;
use http::{HeaderMap, StatusCode};

#[cfg(test)]
use self::common::Origin;
#[cfg(test)]
pub(crate) use self::common::USER_AGENT;
use crate::error::{Error, Result};
use crate::options::HttpOptions;
pub use crate::options::Transport;

/// The connections of one endpoint, on the transport the options chose.
pub(crate) enum HttpTransport {
    /// The inline HTTP/1.1 client.
    Hyper(self::hyper::HyperTransport),
    /// reqwest's pooled client.
    Reqwest(self::reqwest::ReqwestTransport),
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HttpTransport::Hyper(_) => "HttpTransport::Hyper",
            HttpTransport::Reqwest(_) => "HttpTransport::Reqwest",
        })
    }
}

/// The environment variables that make [`Transport::Auto`] pick reqwest for a
/// scheme: reqwest honours them (with `NO_PROXY`), the inline transport does not.
fn proxy_configured(https: bool) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let scheme_vars: &[&str] = if https {
        &["HTTPS_PROXY", "https_proxy"]
    } else {
        &["HTTP_PROXY", "http_proxy"]
    };
    scheme_vars
        .iter()
        .chain(&["ALL_PROXY", "all_proxy"])
        .any(|v| set(v))
}

/// `TABLEKIT_TRANSPORT=hyper|reqwest`: the operator's override of
/// [`Transport::Auto`], read when a client is built.
pub(crate) const TRANSPORT_VAR: &str = "TABLEKIT_TRANSPORT";

impl Transport {
    /// What `Auto` means for this endpoint and environment.
    fn resolve(self, env_choice: Option<&str>, proxy: bool) -> Result<Transport> {
        Ok(match self {
            Transport::Auto => match env_choice.map(str::trim) {
                Some(v) if v.eq_ignore_ascii_case("hyper") => Transport::Hyper,
                Some(v) if v.eq_ignore_ascii_case("reqwest") => Transport::Reqwest,
                Some("") | None => {
                    if proxy {
                        Transport::Reqwest
                    } else {
                        Transport::Hyper
                    }
                }
                Some(_) => {
                    return Err(Error::config(format!(
                        "{TRANSPORT_VAR} must be `hyper` or `reqwest`"
                    )))
                }
            },
            explicit => explicit,
        })
    }
}

impl HttpTransport {
    /// The connections to `endpoint` (an `http(s)` URL without a query).
    pub(crate) fn new(endpoint: &url::Url, options: &HttpOptions) -> Result<Self> {
        let https = endpoint.scheme() == "https";
        let env = std::env::var(TRANSPORT_VAR).ok();
        match options
            .transport
            .resolve(env.as_deref(), proxy_configured(https))?
        {
            Transport::Reqwest => Ok(HttpTransport::Reqwest(
                self::reqwest::ReqwestTransport::new(endpoint, options)?,
            )),
            _ => Ok(HttpTransport::Hyper(self::hyper::HyperTransport::new(
                endpoint, options,
            )?)),
        }
    }

    /// Sends one request. Its URI is origin-form (path and query); the
    /// transport adds `Host` (or the endpoint's origin) and `User-Agent`.
    pub(crate) async fn send(&self, req: http::Request<Bytes>) -> Result<Incoming> {
        Ok(match self {
            HttpTransport::Hyper(t) => {
                let (status, body) = t.send(req).await?;
                Incoming {
                    status,
                    body: Body::Hyper(body),
                }
            }
            HttpTransport::Reqwest(t) => {
                let resp = t.send(req).await?;
                Incoming {
                    status: resp.status(),
                    body: Body::Reqwest(resp),
                }
            }
        })
    }
}

/// An answer: status and headers at once, the body when asked.
pub(crate) struct Incoming {
    status: StatusCode,
    body: Body,
}

enum Body {
    Hyper(self::hyper::HyperBody),
    Reqwest(::reqwest::Response),
}

impl Incoming {
    /// The status code.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The response headers.
    pub(crate) fn headers(&self) -> &HeaderMap {
        match &self.body {
            Body::Hyper(b) => b.headers(),
            Body::Reqwest(r) => r.headers(),
        }
    }

    /// The whole body. The attempt's timeout covers reading it.
    pub(crate) async fn bytes(self) -> Result<Bytes> {
        match self.body {
            Body::Hyper(b) => b.collect().await,
            Body::Reqwest(r) => r
                .bytes()
                .await
                .map_err(|e| self::reqwest::transport_error(&e)),
        }
    }

    /// The body as it arrives, chunk by chunk.
    #[cfg_attr(not(feature = "blob"), allow(dead_code))]
    pub(crate) fn into_stream(self) -> BoxStream<'static, Result<Bytes>> {
        use futures::{StreamExt as _, TryStreamExt as _};
        match self.body {
            Body::Hyper(b) => b.into_stream().boxed(),
            Body::Reqwest(r) => r
                .bytes_stream()
                .map_err(|e| self::reqwest::transport_error(&e))
                .boxed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_hyper_unless_a_proxy_or_the_override_says_otherwise() {
        let auto = Transport::Auto;
        assert_eq!(auto.resolve(None, false).unwrap(), Transport::Hyper);
        assert_eq!(auto.resolve(None, true).unwrap(), Transport::Reqwest);
        assert_eq!(auto.resolve(Some(""), true).unwrap(), Transport::Reqwest);
        assert_eq!(
            auto.resolve(Some("Reqwest"), false).unwrap(),
            Transport::Reqwest
        );
        assert_eq!(auto.resolve(Some("hyper"), true).unwrap(), Transport::Hyper);
        let err = auto.resolve(Some("curl"), false).unwrap_err();
        assert!(err.to_string().contains(TRANSPORT_VAR), "{err}");
        // An explicit choice is never overridden.
        assert_eq!(
            Transport::Reqwest.resolve(Some("hyper"), false).unwrap(),
            Transport::Reqwest
        );
        assert_eq!(
            Transport::Hyper.resolve(None, true).unwrap(),
            Transport::Hyper
        );
    }

    #[test]
    fn origins_keep_explicit_ports_and_bracket_ipv6() {
        let o = Origin::of(&url::Url::parse("http://127.0.0.1:10002/devstoreaccount1").unwrap())
            .unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, o.https),
            ("127.0.0.1", 10002, false)
        );
        assert_eq!(o.authority, "127.0.0.1:10002");
        assert_eq!(o.prefix, "http://127.0.0.1:10002");
        let o =
            Origin::of(&url::Url::parse("https://acc.table.core.windows.net/").unwrap()).unwrap();
        assert_eq!((o.port, o.https), (443, true));
        assert_eq!(o.authority, "acc.table.core.windows.net");
        let o = Origin::of(&url::Url::parse("http://[::1]:8080/a").unwrap()).unwrap();
        assert_eq!(o.host, "::1");
        assert_eq!(o.authority, "[::1]:8080");
    }
}
