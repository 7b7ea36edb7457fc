//! How much of an answer tablekit reads: a cap per kind of answer, so that a
//! server (or anything between) that lies about a body's length, sends an
//! endless chunked body or a head of a megabyte costs bounded memory and ends
//! in a clear error ([`Error::is_answer_too_large`]).
//!
//! A body is never given room by the length it declares: it grows as its bytes
//! arrive, and a declared length over the cap is refused before a byte is read.

use bytes::Bytes;
use http::HeaderMap;

use super::transport::common::join_chunks_capped;
use super::transport::service::HttpResponse as Incoming;
use crate::error::{Error, ErrorKind, Result, TransportError, TransportKind};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The most tablekit reads of each kind of answer
/// ([`HttpOptions::limits`](crate::options::HttpOptions::limits)), in bytes.
///
/// An answer over its limit fails the call with an error for which
/// [`Error::is_answer_too_large`] holds (not retried: the same request would
/// bring the same answer). A body that declares a larger `Content-Length` is
/// refused before it is read; one without (chunked) is read up to the limit.
/// No legitimate answer of the services comes near the defaults; lower them
/// to bound a client's memory more tightly, raise them only for a server that
/// is known to send more (see [`AnswerLimits::query_page`]).
///
/// | kind | default | why |
/// |---|---|---|
/// | [`head`](AnswerLimits::head) | 64 KiB | the services' heads are a few KiB (blob metadata at most 8 KiB) |
/// | [`entity`](AnswerLimits::entity) | 8 MiB | one entity of at most 1 MiB as the service counts it; its JSON is at most about 4 times that (type annotations, escapes) |
/// | [`query_page`](AnswerLimits::query_page) | 64 MiB | a page holds at most 1,000 entities and, on Azure, at most 4 MB of data: under 20 MiB of JSON |
/// | [`batch`](AnswerLimits::batch) | 32 MiB | a transaction's request is at most 4 MiB and 100 operations; its answer is smaller |
/// | [`listing`](AnswerLimits::listing) | 64 MiB | a page of tables (1,000), queues or blobs (5,000 with their properties and metadata) |
/// | [`messages`](AnswerLimits::messages) | 16 MiB | at most 32 messages of 64 KiB |
/// | [`error`](AnswerLimits::error) | 1 MiB | an error answer's code and message; one over it keeps its status only |
///
/// A blob download is not held in memory by tablekit: its stream ends with an
/// error if the body runs past the length the answer declared (its
/// `Content-Length`, else the blob's size).
///
/// A body that arrives too slowly ends with a timeout:
/// [`HttpOptions::timeout`](crate::options::HttpOptions::timeout) covers the
/// whole answer, its body included.
///
/// ```
/// use tablekit::options::{AnswerLimits, ClientOptions};
///
/// let mut options = ClientOptions::default();
/// options.http.limits.query_page = 16 * 1024 * 1024;
/// assert_eq!(options.http.limits.entity, AnswerLimits::default().entity);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnswerLimits {
    /// The status line and headers of any answer, as the sum of each header's
    /// name and value plus four bytes (`: ` and the line end).
    pub head: u64,
    /// The answer to a point read ([`TableClient::get`](crate::TableClient::get)).
    pub entity: u64,
    /// One page of a query. Azurite ends pages at 1,000 entities only, not at
    /// 4 MB as Azure does: a page of many near-1 MiB entities from it can be
    /// larger than the default.
    pub query_page: u64,
    /// The answer to a transaction (`$batch`).
    pub batch: u64,
    /// One page of a table, queue or blob listing.
    pub listing: u64,
    /// The answer to a queue send, receive or peek.
    pub messages: u64,
    /// The body of an error answer (status 4xx or 5xx).
    pub error: u64,
}

impl Default for AnswerLimits {
    fn default() -> Self {
        AnswerLimits {
            head: 64 * KIB,
            entity: 8 * MIB,
            query_page: 64 * MIB,
            batch: 32 * MIB,
            listing: 64 * MIB,
            messages: 16 * MIB,
            error: MIB,
        }
    }
}

/// Which limit an answer is read under: the name in the error and the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Entity,
    QueryPage,
    Batch,
    Listing,
    #[cfg_attr(not(feature = "queue"), allow(dead_code))]
    Messages,
    Error,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Entity => "entity",
            Kind::QueryPage => "query_page",
            Kind::Batch => "batch",
            Kind::Listing => "listing",
            Kind::Messages => "messages",
            Kind::Error => "error",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Entity => "an entity",
            Kind::QueryPage => "a query page",
            Kind::Batch => "a transaction's answer",
            Kind::Listing => "a listing page",
            Kind::Messages => "a queue messages answer",
            Kind::Error => "an error answer",
        }
    }
}

impl AnswerLimits {
    pub(crate) fn of(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Entity => self.entity,
            Kind::QueryPage => self.query_page,
            Kind::Batch => self.batch,
            Kind::Listing => self.listing,
            Kind::Messages => self.messages,
            Kind::Error => self.error,
        }
    }

    /// Refuses a head over [`AnswerLimits::head`].
    pub(crate) fn check_head(&self, headers: &HeaderMap) -> Result<()> {
        let size: u64 = headers
            .iter()
            .map(|(n, v)| (n.as_str().len() + v.len() + 4) as u64)
            .sum();
        if size > self.head {
            return Err(too_large(format!(
                "the answer's headers take {size} bytes, over the limit of {} (AnswerLimits::head)",
                self.head
            )));
        }
        Ok(())
    }

    /// The whole body of `resp`, read under the limit of `kind`.
    pub(crate) fn read(
        &self,
        resp: Incoming,
        kind: Kind,
    ) -> impl std::future::Future<Output = Result<Bytes>> + Send + use<> {
        // The declared length is checked and the headers let go before the
        // future is made: it holds the body alone.
        let limit = self.of(kind);
        let declared = declared_length(resp.headers());
        let refused = declared
            .filter(|n| *n > limit)
            .map(|n| over(kind, limit, Some(n)));
        // Read where it is: the body is not moved into stream adaptors.
        let mut body = resp.into_body();
        async move {
            if let Some(e) = refused {
                return Err(e);
            }
            join_chunks_capped(&mut body, declared.unwrap_or(0), limit, || {
                over(kind, limit, None)
            })
            .await
        }
    }
}

/// The error of an answer over a limit.
pub(crate) fn too_large(message: String) -> Error {
    ErrorKind::Transport(TransportError::new(TransportKind::TooLarge, message, None)).into()
}

fn over(kind: Kind, limit: u64, declared: Option<u64>) -> Error {
    let said = match declared {
        Some(n) => format!(" declares {n} bytes,"),
        None => String::new(),
    };
    too_large(format!(
        "{}{said} over the limit of {limit} bytes (AnswerLimits::{})",
        kind.what(),
        kind.name()
    ))
}

/// The `Content-Length` an answer declares, if it declares one that parses.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A download's chunks, cut off with an error once they run past `declared`
/// bytes (the answer's own length).
#[cfg(feature = "blob")]
pub(crate) fn bounded_stream(
    chunks: futures::stream::BoxStream<'static, Result<Bytes>>,
    declared: u64,
) -> futures::stream::BoxStream<'static, Result<Bytes>> {
    use futures::StreamExt as _;
    chunks
        .scan((0u64, false), move |(seen, done), chunk| {
            let item = if *done {
                None
            } else {
                Some(chunk.and_then(|c| {
                    *seen = seen.saturating_add(c.len() as u64);
                    if *seen > declared {
                        Err(too_large(format!(
                            "a blob download ran past the {declared} bytes its answer declared"
                        )))
                    } else {
                        Ok(c)
                    }
                }))
            };
            *done |= matches!(item, Some(Err(_)));
            futures::future::ready(item)
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::http::transport::service::HttpResponse;

    fn answer(headers: &[(&str, &str)], chunks: Vec<&'static [u8]>) -> Incoming {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.insert(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        HttpResponse::new(
            http::StatusCode::OK,
            map,
            futures::stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from_static(c)))),
        )
    }

    #[tokio::test]
    async fn a_body_within_its_limit_is_read_whole() {
        let limits = AnswerLimits {
            entity: 6,
            ..Default::default()
        };
        let body = limits
            .read(answer(&[], vec![b"ab", b"cd", b"ef"]), Kind::Entity)
            .await
            .unwrap();
        assert_eq!(&body[..], b"abcdef");
        let one = limits
            .read(answer(&[], vec![b"abc"]), Kind::Entity)
            .await
            .unwrap();
        assert_eq!(&one[..], b"abc");
    }

    #[tokio::test]
    async fn a_body_over_its_limit_is_refused_as_it_arrives() {
        let limits = AnswerLimits {
            query_page: 5,
            ..Default::default()
        };
        let e = limits
            .read(answer(&[], vec![b"abc", b"def"]), Kind::QueryPage)
            .await
            .unwrap_err();
        assert!(e.is_answer_too_large(), "{e}");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("AnswerLimits::query_page"), "{e}");
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_refused_before_reading() {
        // A declared terabyte: refused at once, nothing reserved.
        let e = AnswerLimits::default()
            .read(
                answer(&[("content-length", "1099511627776")], vec![b"x"]),
                Kind::Entity,
            )
            .await
            .unwrap_err();
        assert!(e.is_answer_too_large(), "{e}");
        assert!(
            e.to_string().contains("declares 1099511627776 bytes"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_declared_length_under_the_limit_reserves_only_a_bounded_room() {
        // It declares the whole limit but sends little: read as it is.
        let limits = AnswerLimits {
            listing: u64::MAX,
            ..Default::default()
        };
        let body = limits
            .read(
                answer(
                    &[("content-length", "18446744073709551615")],
                    vec![b"a", b"b"],
                ),
                Kind::Listing,
            )
            .await
            .unwrap();
        assert_eq!(&body[..], b"ab");
    }

    #[test]
    fn a_head_over_its_limit_is_refused() {
        let limits = AnswerLimits {
            head: 40,
            ..Default::default()
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-a", http::HeaderValue::from_static("0123456789"));
        limits.check_head(&headers).unwrap();
        headers.insert(
            "x-b",
            http::HeaderValue::from_static("01234567890123456789"),
        );
        let e = limits.check_head(&headers).unwrap_err();
        assert!(e.is_answer_too_large() && e.to_string().contains("AnswerLimits::head"));
    }

    #[cfg(feature = "blob")]
    #[tokio::test]
    async fn a_download_past_its_declared_length_fails() {
        use futures::StreamExt as _;
        let chunks = futures::stream::iter(
            [&b"abc"[..], b"def", b"ghi"]
                .into_iter()
                .map(|c| Ok(Bytes::from_static(c))),
        )
        .boxed();
        let got: Vec<Result<Bytes>> = bounded_stream(chunks, 5).collect().await;
        assert_eq!(got.len(), 2, "nothing after the error");
        assert_eq!(&got[0].as_ref().unwrap()[..], b"abc");
        assert!(got[1].as_ref().unwrap_err().is_answer_too_large());
    }
}
