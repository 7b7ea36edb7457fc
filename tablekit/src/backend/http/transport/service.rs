//! The transport seam: what carries a signed request to the service and
//! brings its answer back. tablekit's own hyper transport is one
//! implementation; a user can pass another ([`HttpOptions::connector`](crate::options::HttpOptions::connector)).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt as _;
use http::{HeaderMap, StatusCode};

use super::body::HyperBody;
use super::common::join_chunks;

use crate::error::{Error, ErrorKind, Result, TransportError, TransportKind};

/// Sends one HTTP request and returns its answer: the transport under every
/// service client.
///
/// The request is signed and complete: its URI is absolute
/// (`https://account.table.core.windows.net/orders()?$filter=…`; with a SAS
/// credential the token is in the query, so never log the URI), and it carries
/// every header the service needs except `Host` and `User-Agent`, which the
/// transport adds. Retries, timeouts between attempts and the reading of
/// answers stay with tablekit: a transport sends once.
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use tablekit::transport::{HttpResponse, HttpService};
///
/// /// Answers every request with 404, without any network.
/// #[derive(Debug)]
/// struct NotFound;
///
/// #[async_trait::async_trait]
/// impl HttpService for NotFound {
///     async fn call(&self, _request: http::Request<Bytes>) -> tablekit::Result<HttpResponse> {
///         Ok(HttpResponse::from_bytes(http::StatusCode::NOT_FOUND, Default::default(), Bytes::new()))
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait HttpService: Send + Sync + fmt::Debug + 'static {
    /// Sends `request` once. A failure to send or to receive the head of the
    /// answer is an error made with [`failure`]; any answer, whatever its
    /// status, is an `Ok`.
    async fn call(&self, request: http::Request<Bytes>) -> Result<HttpResponse>;
}

/// Makes the [`HttpService`] of one service endpoint (a client's table, queue
/// or blob endpoint), once, when the client is built.
///
/// Pass one in [`HttpOptions::connector`](crate::options::HttpOptions::connector) to put
/// your own HTTP client (a company client with its proxy and middleware, a
/// recording transport in tests) under tablekit.
pub trait HttpConnector: Send + Sync + fmt::Debug + 'static {
    /// The transport for `endpoint` (`scheme://host[:port][/path]`).
    fn connect(&self, endpoint: &http::Uri) -> Result<Arc<dyn HttpService>>;
}

/// A per-request policy, run on every attempt of every request just before
/// it goes to the transport ([`HttpOptions::hooks`](crate::options::HttpOptions::hooks)):
/// add a header, record the request, or fail it on purpose.
///
/// The request is already signed. A header added here is not covered by the
/// signature, so it must not be one the service signs (`x-ms-*` on the Blob
/// and Queue services, `Content-Type`, `Date`). An error returned here is the
/// attempt's error: retried if it is retryable ([`failure`] with
/// [`Failure::Connect`]), final otherwise ([`Failure::Request`]).
///
/// ```
/// use bytes::Bytes;
/// use tablekit::transport::RequestHook;
///
/// /// Tags every request with the calling service's name.
/// #[derive(Debug)]
/// struct Tag;
///
/// impl RequestHook for Tag {
///     fn on_request(&self, request: &mut http::Request<Bytes>) -> tablekit::Result<()> {
///         request.headers_mut().insert("x-caller", http::HeaderValue::from_static("billing"));
///         Ok(())
///     }
/// }
/// ```
pub trait RequestHook: Send + Sync + fmt::Debug + 'static {
    /// Sees (and may change) one attempt's request, or fails it.
    fn on_request(&self, request: &mut http::Request<Bytes>) -> Result<()>;
}

/// What kind of failure a transport met: it decides whether tablekit retries
/// and whether a write's outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// No connection could be made: nothing was sent; retried.
    Connect,
    /// The connection broke after the request may have been sent; retried,
    /// and a write's outcome is unknown.
    Interrupted,
    /// The time limit ran out after the request may have been sent.
    Timeout,
    /// The request cannot be sent, and a retry would not help.
    Request,
}

/// The error of a transport failure of `kind`, saying `message` (never put the
/// URI or a header value in it: they can hold a secret).
pub fn failure(
    kind: Failure,
    message: impl Into<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    let kind = match kind {
        Failure::Connect => TransportKind::Connect,
        Failure::Interrupted => TransportKind::Interrupted,
        Failure::Timeout => TransportKind::Timeout,
        Failure::Request => TransportKind::Request,
    };
    ErrorKind::Transport(TransportError::new(kind, message, source)).into()
}

/// A body as a transport delivers it: the built-in transport's, read
/// without a boxed stream, or any stream of chunks.
pub(crate) enum ResponseBody {
    /// The built-in transport's.
    Inline(HyperBody),
    /// Any other transport's.
    Stream(BoxStream<'static, Result<Bytes>>),
}

impl ResponseBody {
    /// The least the body's length can be, where the transport knows it.
    fn length_hint(&self) -> u64 {
        match self {
            ResponseBody::Inline(body) => body.length_hint(),
            ResponseBody::Stream(_) => 0,
        }
    }
}

impl futures::Stream for ResponseBody {
    type Item = Result<Bytes>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.get_mut() {
            ResponseBody::Inline(body) => body.poll_chunk(cx),
            ResponseBody::Stream(chunks) => chunks.poll_next_unpin(cx),
        }
    }
}

/// An answer: status and headers at once, the body when asked.
pub struct HttpResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: ResponseBody,
}

impl fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponse")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl HttpResponse {
    /// An answer whose body arrives as `body`'s chunks.
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        body: impl futures::Stream<Item = Result<Bytes>> + Send + 'static,
    ) -> Self {
        HttpResponse {
            status,
            headers,
            body: ResponseBody::Stream(body.boxed()),
        }
    }

    /// An answer with its whole body.
    pub fn from_bytes(status: StatusCode, headers: HeaderMap, body: Bytes) -> Self {
        Self::new(status, headers, futures::stream::once(async { Ok(body) }))
    }

    /// The built-in transport's answer.
    pub(crate) fn inline(status: StatusCode, headers: HeaderMap, body: HyperBody) -> Self {
        HttpResponse {
            status,
            headers,
            body: ResponseBody::Inline(body),
        }
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The whole body, however long: tablekit itself reads answers under
    /// [`HttpOptions::limits`](crate::options::HttpOptions::limits).
    pub async fn bytes(self) -> Result<Bytes> {
        let hint = self.body.length_hint();
        join_chunks(self.body, hint).await
    }

    /// The body as it arrives, chunk by chunk.
    pub fn into_stream(self) -> BoxStream<'static, Result<Bytes>> {
        match self.body {
            ResponseBody::Stream(chunks) => chunks,
            inline => inline.boxed(),
        }
    }

    /// The body as it arrives, without a boxed stream for the built-in
    /// transport's.
    pub(crate) fn into_body(self) -> ResponseBody {
        self.body
    }
}
