//! HTTP proxies for the built-in transport: which endpoints go through which
//! proxy (hyper-util's matcher, with curl's `NO_PROXY` rules), and the
//! `CONNECT` tunnel of an `https` endpoint.

use std::fmt;
use std::sync::Arc;

use http::HeaderValue;
use hyper_util::client::proxy::matcher::Matcher;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::common::transport_failure;
use crate::error::{Error, Result, TransportKind};

/// An HTTP proxy for tablekit's own transport ([`HttpOptions::proxy`](crate::options::HttpOptions::proxy)).
///
/// An `https` endpoint is reached through a `CONNECT` tunnel (TLS runs end to
/// end, the proxy sees only the host name); an `http` endpoint's requests are
/// sent to the proxy in absolute form. The environment is read only when you
/// ask for it, with [`Proxy::from_env`].
///
/// ```
/// use tablekit::{options::HttpOptions, transport::Proxy};
///
/// let mut http = HttpOptions::default();
/// http.proxy = Some(Proxy::all("http://proxy.corp.example:3128")?.no_proxy("localhost,127.0.0.1"));
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Clone)]
pub struct Proxy {
    all: Option<String>,
    http: Option<String>,
    https: Option<String>,
    no: String,
    /// Built from the environment by [`Proxy::from_env`].
    env: Option<Arc<Matcher>>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A proxy URL can hold a user and password: never shown.
        f.debug_struct("Proxy")
            .field("from_env", &self.env.is_some())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// The proxies of the environment, read now: `HTTPS_PROXY` for `https`
    /// endpoints, `HTTP_PROXY` for `http` ones, `ALL_PROXY` for both (upper
    /// or lower case), except the hosts of `NO_PROXY`.
    pub fn from_env() -> Self {
        Proxy {
            all: None,
            http: None,
            https: None,
            no: String::new(),
            env: Some(Arc::new(Matcher::from_env())),
        }
    }

    /// Every endpoint through the proxy at `url` (`http://host:port`, with an
    /// optional `user:password@`).
    pub fn all(url: &str) -> Result<Self> {
        check(url)?;
        Ok(Proxy {
            all: Some(url.to_owned()),
            http: None,
            https: None,
            no: String::new(),
            env: None,
        })
    }

    /// `http` endpoints through the proxy at `url`.
    pub fn http(url: &str) -> Result<Self> {
        check(url)?;
        Ok(Proxy {
            http: Some(url.to_owned()),
            ..Proxy::none()
        })
    }

    /// `https` endpoints through the proxy at `url`.
    pub fn https(url: &str) -> Result<Self> {
        check(url)?;
        Ok(Proxy {
            https: Some(url.to_owned()),
            ..Proxy::none()
        })
    }

    fn none() -> Self {
        Proxy {
            all: None,
            http: None,
            https: None,
            no: String::new(),
            env: None,
        }
    }

    /// Hosts reached directly: a comma-separated list in `NO_PROXY`'s form
    /// (`localhost,.corp.example,10.0.0.0/8`). Not used with [`Proxy::from_env`],
    /// which takes `NO_PROXY` itself.
    pub fn no_proxy(mut self, hosts: &str) -> Self {
        self.no = hosts.to_owned();
        self
    }

    /// The proxy of `endpoint`, if it goes through one.
    pub(crate) fn route(&self, uri: &http::Uri) -> Result<Option<Route>> {
        let intercept = match &self.env {
            Some(m) => m.intercept(uri),
            None => {
                let mut b = Matcher::builder();
                if let Some(a) = &self.all {
                    b = b.all(a.clone());
                }
                if let Some(h) = &self.http {
                    b = b.http(h.clone());
                }
                if let Some(h) = &self.https {
                    b = b.https(h.clone());
                }
                b.no(self.no.clone()).build().intercept(uri)
            }
        };
        let Some(intercept) = intercept else {
            return Ok(None);
        };
        let proxy = intercept.uri();
        if proxy.scheme_str() != Some("http") {
            return Err(Error::config(
                "only http:// proxies are supported (TLS to the endpoint runs through a CONNECT tunnel)",
            ));
        }
        let host = proxy
            .host()
            .ok_or_else(|| Error::config("the proxy URL has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        Ok(Some(Route {
            port: proxy.port_u16().unwrap_or(80),
            host,
            auth: intercept.basic_auth().cloned().map(|mut v| {
                v.set_sensitive(true);
                v
            }),
        }))
    }
}

/// A proxy URL is checked where it is given, without echoing it (it can
/// hold a password).
fn check(url: &str) -> Result<()> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| Error::config("the proxy URL is not a valid URL"))?;
    if uri.host().is_none() {
        return Err(Error::config("the proxy URL has no host"));
    }
    Ok(())
}

/// Where an endpoint's connections go instead: the proxy's address and its
/// `Proxy-Authorization`.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) auth: Option<HeaderValue>,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("host", &self.host)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Route {
    /// Opens a `CONNECT` tunnel to `authority` (`host:port`) over `tcp`, a
    /// connection to the proxy. Fails unless the proxy answers 2xx.
    pub(crate) async fn tunnel(&self, tcp: &mut TcpStream, authority: &str) -> Result<()> {
        let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
        if let Some(auth) = &self.auth {
            head.push_str("Proxy-Authorization: ");
            head.push_str(auth.to_str().unwrap_or(""));
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let failed = |what: &str, e: Option<&std::io::Error>| {
            transport_failure(
                TransportKind::Connect,
                what,
                e.map(|e| e as &(dyn std::error::Error + 'static)),
            )
        };
        tcp.write_all(head.as_bytes())
            .await
            .map_err(|e| failed("could not connect through the proxy", Some(&e)))?;
        // The proxy's answer head, read byte-exact: after it the tunnel carries TLS.
        let mut answer = Vec::with_capacity(128);
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") {
            if answer.len() > 8192 {
                return Err(failed("the proxy's answer to CONNECT is too long", None));
            }
            let n = tcp
                .read(&mut byte)
                .await
                .map_err(|e| failed("could not connect through the proxy", Some(&e)))?;
            if n == 0 {
                return Err(failed(
                    "the proxy closed the connection during CONNECT",
                    None,
                ));
            }
            answer.push(byte[0]);
        }
        let status = answer
            .split(|b| *b == b' ')
            .nth(1)
            .and_then(|s| std::str::from_utf8(s).ok())
            .and_then(|s| s.parse::<u16>().ok());
        match status {
            Some(200..=299) => Ok(()),
            Some(s) => Err(failed(
                &format!("the proxy refused the CONNECT tunnel with status {s}"),
                None,
            )),
            None => Err(failed("the proxy's answer to CONNECT is not HTTP", None)),
        }
    }
}
