//! What both transports share: the endpoint's origin, the `User-Agent`, the
//! attempt's deadline and the shape of a transport error.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result, TransportError, TransportKind};

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("tablekit/", env!("CARGO_PKG_VERSION"), " (rust)");

/// A transport error of `kind` whose message is `what` followed by the chain
/// of `source`'s causes (which never hold the URL: it is not given to them).
pub(crate) fn transport_failure(
    kind: TransportKind,
    what: &str,
    source: Option<&(dyn std::error::Error + 'static)>,
) -> Error {
    let mut msg = what.to_owned();
    let mut src = source;
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    ErrorKind::Transport(TransportError::new(kind, msg, None)).into()
}

/// The endpoint's origin as the transports need it: scheme, host, port, the
/// `Host` header and the `scheme://authority` prefix of absolute URLs.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) https: bool,
    /// The host as a name or address literal, IPv6 without brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `host[:port]`, the port only when it is not the scheme's default.
    pub(crate) authority: http::HeaderValue,
    /// `scheme://authority`.
    pub(crate) prefix: String,
}

impl Origin {
    pub(crate) fn of(endpoint: &url::Url) -> Result<Origin> {
        let https = match endpoint.scheme() {
            "https" => true,
            "http" => false,
            _ => return Err(Error::config("the endpoint must be an http(s) URL")),
        };
        let (host, shown) = match endpoint.host() {
            Some(url::Host::Ipv6(a)) => (a.to_string(), format!("[{a}]")),
            Some(url::Host::Ipv4(a)) => (a.to_string(), a.to_string()),
            Some(url::Host::Domain(d)) => (d.to_owned(), d.to_owned()),
            None => return Err(Error::config("the endpoint has no host")),
        };
        let authority = match endpoint.port() {
            Some(p) => format!("{shown}:{p}"),
            None => shown,
        };
        let port = endpoint
            .port_or_known_default()
            .unwrap_or(if https { 443 } else { 80 });
        Ok(Origin {
            https,
            host,
            port,
            prefix: format!("{}://{authority}", endpoint.scheme()),
            authority: http::HeaderValue::from_str(&authority)
                .map_err(|_| Error::config("the endpoint's host is not a valid header value"))?,
        })
    }
}

/// The deadline of an attempt begun now.
pub(super) fn deadline_after(timeout: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + timeout
}
