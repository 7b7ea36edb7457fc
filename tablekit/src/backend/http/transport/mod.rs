//! The wire under the table, queue and blob backends: one endpoint's
//! connections, a request in (`http::Request` with an origin-form URI), status,
//! headers and a body out.
//!
//! The seam is [`HttpService`] (made per endpoint by an [`HttpConnector`]).
//! Built in: [`hyper`](self::hyper), tablekit's own HTTP/1.1 client on hyper's
//! connection API (each request drives its connection in its own task, no
//! spawned connection task, so nothing crosses threads on the hot path), with
//! [`Proxy`] support; and, with the `reqwest` feature, reqwest's client.
//! [`Transport`](crate::options::Transport) picks a built-in one, [`HttpOptions::connector`] puts in the
//! user's own. Everything above this module (signing, retries, tracing,
//! ambiguity) is the same on all.

mod body;
pub(crate) mod common;
pub(crate) mod hyper;
mod pool;
pub(crate) mod proxy;
#[cfg(feature = "reqwest")]
pub(crate) mod reqwest;
pub(crate) mod service;
mod tls;

use std::sync::Arc;

use bytes::Bytes;

pub(crate) use self::common::Origin;
#[cfg(test)]
pub(crate) use self::common::USER_AGENT;
pub use self::proxy::Proxy;
pub use self::service::{failure, Failure, HttpConnector, HttpResponse, HttpService, RequestHook};
pub use self::tls::RootCertificate;
use crate::error::{Error, Result};
use crate::options::HttpOptions;
#[cfg(feature = "reqwest")]
use crate::options::Transport;

/// The transport of one endpoint: the options' connector's service, or the
/// built-in one the options chose.
pub(crate) struct HttpTransport {
    service: Arc<dyn HttpService>,
    /// The built-in transport, called directly (no boxed future per request).
    inline: Option<Arc<self::hyper::HyperTransport>>,
    /// `scheme://authority` of the endpoint, for absolute URIs; `None` for the
    /// built-in hyper transport, which takes origin-form URIs as they are.
    prefix: Option<String>,
    /// The options' request hooks, run in order on every attempt.
    hooks: Vec<Arc<dyn RequestHook>>,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HttpTransport").field(&self.service).finish()
    }
}

impl HttpTransport {
    /// The connections to `endpoint` (an `http(s)` URL without a query).
    pub(crate) fn new(endpoint: &http::Uri, options: &HttpOptions) -> Result<Self> {
        let prefix = Origin::of(endpoint)?.prefix;
        if let Some(connector) = &options.connector {
            return Ok(HttpTransport {
                service: connector.connect(endpoint)?,
                inline: None,
                prefix: Some(prefix),
                hooks: options.hooks.clone(),
            });
        }
        #[cfg(feature = "reqwest")]
        if options.transport == Transport::Reqwest {
            return Ok(HttpTransport {
                service: Arc::new(self::reqwest::ReqwestTransport::new(endpoint, options)?),
                inline: None,
                prefix: Some(prefix),
                hooks: options.hooks.clone(),
            });
        }
        let hyper = Arc::new(self::hyper::HyperTransport::new(endpoint, options)?);
        Ok(HttpTransport {
            service: hyper.clone(),
            inline: Some(hyper),
            prefix: None,
            hooks: options.hooks.clone(),
        })
    }

    /// Sends one request. Its URI is origin-form (path and query); the
    /// transport adds `Host` (or the endpoint's origin) and `User-Agent`.
    /// The built-in transport's future is awaited in this one (no boxed
    /// future); any other is called behind its trait.
    pub(crate) async fn send(&self, req: http::Request<Bytes>) -> Result<Incoming> {
        let req = self.complete(req)?;
        match &self.inline {
            Some(hyper) => hyper.respond(req).await,
            None => self.service.call(req).await,
        }
    }

    /// `req` with the endpoint's origin (for a transport that wants it) and
    /// after the request hooks.
    fn complete(&self, mut req: http::Request<Bytes>) -> Result<http::Request<Bytes>> {
        if let Some(prefix) = &self.prefix {
            let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let mut absolute = String::with_capacity(prefix.len() + target.len());
            absolute.push_str(prefix);
            absolute.push_str(target);
            *req.uri_mut() = http::Uri::try_from(absolute)
                .map_err(|_| Error::config("the request URI is not valid"))?;
        }
        for hook in &self.hooks {
            hook.on_request(&mut req)?;
        }
        Ok(req)
    }
}

/// The built-in transport, tablekit's own HTTP/1.1 client on hyper, as a
/// connector: the default, and what a wrapping transport delegates to.
///
/// ```
/// use std::sync::Arc;
/// use tablekit::transport::{HttpConnector, HyperConnector};
/// use tablekit::options::HttpOptions;
///
/// let options = HttpOptions::default();
/// let connector = HyperConnector::new(&options);
/// let service = connector.connect(&"http://127.0.0.1:10002/devstoreaccount1".parse().unwrap())?;
/// # let _ = service;
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct HyperConnector {
    options: HttpOptions,
}

impl HyperConnector {
    /// The built-in transport with `options`' timeouts and pool size.
    pub fn new(options: &HttpOptions) -> Self {
        let mut options = options.clone();
        options.connector = None;
        HyperConnector { options }
    }
}

impl HttpConnector for HyperConnector {
    fn connect(&self, endpoint: &http::Uri) -> Result<Arc<dyn HttpService>> {
        Ok(Arc::new(self::hyper::HyperTransport::new(
            endpoint,
            &self.options,
        )?))
    }
}

/// What the transports hand back.
pub(crate) type Incoming = HttpResponse;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_keep_explicit_ports_and_bracket_ipv6() {
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        let o = Origin::of(&uri("http://127.0.0.1:10002/devstoreaccount1")).unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, o.https),
            ("127.0.0.1", 10002, false)
        );
        assert_eq!(o.authority, "127.0.0.1:10002");
        assert_eq!(o.prefix, "http://127.0.0.1:10002");
        let o = Origin::of(&uri("https://acc.table.core.windows.net/")).unwrap();
        assert_eq!((o.port, o.https), (443, true));
        assert_eq!(o.authority, "acc.table.core.windows.net");
        let o = Origin::of(&uri("http://[::1]:8080/a")).unwrap();
        assert_eq!(o.host, "::1");
        assert_eq!(o.authority, "[::1]:8080");
    }
}
