//! What both transports share: the endpoint's origin, the `User-Agent` and
//! the shape of a transport error.

use bytes::{Bytes, BytesMut};
use futures::{Stream, TryStreamExt as _};

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
    /// The origin of `endpoint`, an absolute `http(s)` URI. The host is kept
    /// in lower case (an IPv6 literal in its canonical form) and the port
    /// only when it is not the scheme's default, as URL parsers normalise
    /// them.
    pub(crate) fn of(endpoint: &http::Uri) -> Result<Origin> {
        let https = match endpoint.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(Error::config("the endpoint must be an http(s) URL")),
        };
        let authority = endpoint
            .authority()
            .map(http::uri::Authority::as_str)
            .ok_or_else(|| Error::config("the endpoint has no host"))?;
        let host = endpoint
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Error::config("the endpoint has no host"))?;
        let (host, shown) = match host.strip_prefix('[') {
            Some(inner) => {
                let address: std::net::Ipv6Addr = inner
                    .trim_end_matches(']')
                    .parse()
                    .map_err(|_| Error::config("the endpoint's IPv6 address is not valid"))?;
                (address.to_string(), format!("[{address}]"))
            }
            None => {
                let name = host.to_ascii_lowercase();
                (name.clone(), name)
            }
        };
        // The text after the host's `:`, which `http::Uri` reads leniently
        // (a port out of range is no port, `+1` is 1).
        let after_userinfo = &authority[authority.rfind('@').map_or(0, |i| i + 1)..];
        let after_host = &after_userinfo[after_userinfo.rfind(']').map_or(0, |i| i + 1)..];
        let default = if https { 443 } else { 80 };
        let port = match after_host.rsplit_once(':').map(|(_, p)| p) {
            None | Some("") => default,
            Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u16>()
                .map_err(|_| Error::config("the endpoint's port is not valid"))?,
            Some(_) => return Err(Error::config("the endpoint's port is not valid")),
        };
        let authority = if port == default {
            shown
        } else {
            format!("{shown}:{port}")
        };
        let scheme = if https { "https" } else { "http" };
        Ok(Origin {
            https,
            host,
            port,
            prefix: format!("{scheme}://{authority}"),
            authority: http::HeaderValue::from_str(&authority)
                .map_err(|_| Error::config("the endpoint's host is not a valid header value"))?,
        })
    }
}

/// Room given ahead of a body while it is joined: never more than this,
/// whatever the answer declares (a lying Content-Length of a terabyte would
/// otherwise abort the process).
pub(crate) const MAX_RESERVE: u64 = 256 * 1024;

/// Joins a body's chunks into one buffer. A body of one chunk is returned as
/// it came, without a copy; for more, room for `hint` bytes (the declared or
/// expected length) is given ahead, capped by [`MAX_RESERVE`]. Limits are the
/// stream's business: it ends with an error where the caller stops reading.
pub(crate) async fn join_chunks(
    chunks: impl Stream<Item = Result<Bytes>>,
    hint: u64,
) -> Result<Bytes> {
    let mut chunks = std::pin::pin!(chunks);
    join_chunks_capped(&mut chunks, hint, u64::MAX, || {
        Error::decode("a body over u64::MAX bytes")
    })
    .await
}

/// As [`join_chunks`], reading `chunks` where they are (the stream is not
/// moved into the future), and failing with `over_limit()` as soon as more
/// than `limit` bytes have come.
pub(crate) async fn join_chunks_capped<S>(
    chunks: &mut S,
    hint: u64,
    limit: u64,
    over_limit: impl FnOnce() -> Error,
) -> Result<Bytes>
where
    S: Stream<Item = Result<Bytes>> + Unpin,
{
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut total: u64 = 0;
    while let Some(chunk) = chunks.try_next().await? {
        total = total.saturating_add(chunk.len() as u64);
        if total > limit {
            return Err(over_limit());
        }
        match &first {
            None => first = Some(chunk),
            Some(f) => {
                if rest.is_empty() {
                    let room = hint.clamp(total, MAX_RESERVE.max(total));
                    rest.reserve(room as usize);
                    rest.extend_from_slice(f);
                }
                rest.extend_from_slice(&chunk);
            }
        }
    }
    Ok(if rest.is_empty() {
        first.unwrap_or_default()
    } else {
        rest.freeze()
    })
}
