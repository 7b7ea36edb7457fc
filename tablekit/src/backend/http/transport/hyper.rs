//! tablekit's own HTTP/1.1 client on `hyper::client::conn::http1`.
//!
//! A request checks out an idle connection of the [`Pool`] (or connects,
//! under the connect timeout), and polls the connection's future itself, in
//! its own task, while it waits for the answer and while its body is read:
//! no connection task is spawned, so on a multi-thread runtime no request
//! hops between threads. The connection goes back to the pool only when the
//! body was read to its end and hyper says it can take another request; a
//! body dropped half-read drops (closes) its connection.
//!
//! A pooled connection the server closed while it was idle is usually seen
//! at checkout. If not, and hyper hands the request back unsent (the
//! connection closed before a byte of it was written), it is sent again on a
//! fresh connection: that is safe because the server provably never saw it.
//! Any other failure after sending is an unknown outcome, as on reqwest.

use std::future::{poll_fn, Future as _};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use http::header::{ACCEPT, HOST, PROXY_AUTHORIZATION, USER_AGENT as USER_AGENT_HEADER};
use http::HeaderValue;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::body::HyperBody;
use super::common::{transport_failure, Origin, USER_AGENT};
use super::pool::{Connection, Pool, ReqBody};
use super::proxy::Route;
use super::service::{HttpResponse, HttpService};
use super::tls::{Stream, Tls};
use crate::error::{Result, TransportKind};
use crate::options::HttpOptions;

/// hyper's default read buffer limit (`8192 + 4096 * 100`).
const HYPER_MAX_BUF_SIZE: usize = 8192 + 4096 * 100;

/// The inline transport of one endpoint.
pub(crate) struct HyperTransport {
    origin: Origin,
    tls: Option<Tls>,
    pool: Arc<Pool>,
    timeout: Duration,
    connect_timeout: Duration,
    /// The proxy the endpoint is reached through, if any.
    proxy: Option<Route>,
    /// hyper's read buffer, which bounds an answer's head.
    max_buf_size: usize,
}

impl HyperTransport {
    pub(crate) fn new(endpoint: &http::Uri, options: &HttpOptions) -> Result<Self> {
        Self::with_roots(endpoint, options, &[])
    }

    /// As [`HyperTransport::new`], also trusting `extra_roots` (DER) for TLS:
    /// the hook of the tests' own certificate authority.
    pub(crate) fn with_roots(
        endpoint: &http::Uri,
        options: &HttpOptions,
        extra_roots: &[Vec<u8>],
    ) -> Result<Self> {
        let origin = Origin::of(endpoint)?;
        let tls = if origin.https {
            Some(Tls::new(
                &origin.host,
                &options.root_certificates,
                extra_roots,
            )?)
        } else {
            None
        };
        let proxy = match &options.proxy {
            Some(p) => p.route(endpoint)?,
            None => None,
        };
        Ok(HyperTransport {
            proxy,
            origin,
            tls,
            pool: Arc::new(Pool::new(options.pool_max_idle_per_host)),
            timeout: options.timeout,
            connect_timeout: options.connect_timeout,
            // hyper's default (which also bounds the head), or more when the
            // head limit asks for more: the limit itself is checked above.
            max_buf_size: usize::try_from(options.limits.head)
                .unwrap_or(usize::MAX)
                .saturating_add(8192)
                .max(HYPER_MAX_BUF_SIZE),
        })
    }

    /// The pool, for tests.
    #[cfg(test)]
    pub(super) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Sends `req` (origin-form URI) and returns the answer's status and its
    /// body (with the headers), which is read under the same deadline.
    ///
    /// Everything that needs no waiting is done before the future is made:
    /// the request is checked and completed, and, when the pool has a
    /// connection, handed to it. The future then holds the connection and
    /// hyper's answer future, not the request: a point read's whole future
    /// is awaited inside the caller's, so every byte here is carried (and
    /// moved) by every layer above.
    pub(crate) fn send(
        &self,
        req: http::Request<Bytes>,
    ) -> impl std::future::Future<Output = Result<(http::StatusCode, HyperBody)>> + Send + '_ {
        let start = Instant::now();
        let deadline = start + self.timeout;
        // Connects, then hands the request to the new connection. Boxed:
        // connecting (TCP, TLS, a proxy's tunnel) is rare on a kept-alive
        // pool, and its large future would otherwise sit in every request's.
        let connect_and_send = move |req: http::Request<ReqBody>| {
            Box::pin(async move {
                let mut conn = self.connect(deadline).await?;
                let answer = conn.sender.try_send_request(req);
                Ok::<_, crate::Error>((conn, answer))
            })
        };
        let first = self
            .prepare(req)
            .map(|req| match self.pool.checkout(start) {
                Some(mut conn) => {
                    let answer = conn.sender.try_send_request(req);
                    First::Sent(conn, answer)
                }
                None => First::Connect(connect_and_send(req)),
            });
        async move {
            let (mut conn, answer) = match first {
                Err(e) => return Err(e),
                Ok(First::Sent(conn, answer)) => (conn, answer),
                Ok(First::Connect(connecting)) => connecting.await?,
            };
            let mut answer = std::pin::pin!(answer);
            loop {
                let sent = poll_fn(|cx| {
                    // Whether or not the connection is done, the answer
                    // future resolves: hyper fails it when the connection
                    // closes.
                    let _ = conn.poll_drive(cx);
                    if let Poll::Ready(sent) = answer.as_mut().poll(cx) {
                        return Poll::Ready(Some(sent));
                    }
                    // On the connection's own timer: none is made per request.
                    conn.poll_deadline(deadline, cx).map(|()| None)
                })
                .await;
                // What is left here is only what the next wait needs: the
                // failed attempt's error is gone before the reconnection.
                let unsent = match sent {
                    None => {
                        return Err(transport_failure(TransportKind::Timeout, "timed out", None))
                    }
                    Some(Ok(resp)) => {
                        let (parts, body) = resp.into_parts();
                        let body =
                            HyperBody::new(parts.headers, body, conn, &self.pool, start, deadline);
                        return Ok((parts.status, body));
                    }
                    Some(Err(mut e)) => match e.take_message() {
                        // Never written: a stale pooled connection. Safe to resend.
                        Some(unsent) if conn.reused => {
                            tracing::debug!(error = %e.error(), "a pooled connection was closed; resending on a fresh one");
                            unsent
                        }
                        Some(_) => {
                            return Err(transport_failure(
                                TransportKind::Connect,
                                "the connection closed before the request was sent",
                                Some(e.error()),
                            ))
                        }
                        // hyper's `is_parse_too_large` needs its server feature.
                        None if e.error().is_parse()
                            && e.error().to_string().contains("too large") =>
                        {
                            return Err(transport_failure(
                                TransportKind::TooLarge,
                                "the answer's head is too large (AnswerLimits::head)",
                                Some(&e.into_error()),
                            ))
                        }
                        None => {
                            return Err(transport_failure(
                                TransportKind::Interrupted,
                                "the request failed",
                                Some(&e.into_error()),
                            ))
                        }
                    },
                };
                let (fresh, resent) = connect_and_send(unsent).await?;
                conn = fresh;
                answer.set(resent);
            }
        }
    }

    /// `req` as it goes on the wire: origin-form (or absolute through a plain
    /// HTTP proxy), with `Host`, `User-Agent` and `Accept`.
    fn prepare(&self, req: http::Request<Bytes>) -> Result<http::Request<ReqBody>> {
        let (mut parts, body) = req.into_parts();
        if parts.uri.scheme().is_some() {
            // An absolute URI (from a wrapping transport): hyper writes what
            // it is given, and a server wants origin-form.
            let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            parts.uri = http::Uri::try_from(target).map_err(|_| {
                transport_failure(TransportKind::Request, "the request URI is not valid", None)
            })?;
        }
        if let Some(route) = self.proxy.as_ref().filter(|_| self.tls.is_none()) {
            // Plain HTTP through a proxy: the request names its origin.
            let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            parts.uri =
                http::Uri::try_from(format!("{}{target}", self.origin.prefix)).map_err(|_| {
                    transport_failure(TransportKind::Request, "the request URI is not valid", None)
                })?;
            if let Some(auth) = &route.auth {
                parts.headers.insert(PROXY_AUTHORIZATION, auth.clone());
            }
        }
        parts.headers.insert(HOST, self.origin.authority.clone());
        parts
            .headers
            .insert(USER_AGENT_HEADER, HeaderValue::from_static(USER_AGENT));
        // What reqwest sends when a request names no Accept (queue and blob
        // requests): the two transports put the same headers on the wire.
        if !parts.headers.contains_key(ACCEPT) {
            parts
                .headers
                .insert(ACCEPT, HeaderValue::from_static("*/*"));
        }
        Ok(http::Request::from_parts(parts, Full::new(body)))
    }

    /// A new connection, under the connect timeout (and the attempt's deadline).
    async fn connect(&self, deadline: Instant) -> Result<Box<Connection>> {
        let limit = deadline.min(Instant::now() + self.connect_timeout);
        match tokio::time::timeout_at(limit, self.open()).await {
            Ok(result) => result,
            Err(_) => Err(transport_failure(
                TransportKind::ConnectTimeout,
                "timed out connecting",
                None,
            )),
        }
    }

    async fn open(&self) -> Result<Box<Connection>> {
        let (host, port) = match &self.proxy {
            Some(p) => (p.host.as_str(), p.port),
            None => (self.origin.host.as_str(), self.origin.port),
        };
        let mut tcp = TcpStream::connect((host, port)).await.map_err(|e| {
            transport_failure(TransportKind::Connect, "could not connect", Some(&e))
        })?;
        if let (Some(route), Some(_)) = (&self.proxy, &self.tls) {
            let host = &self.origin.host;
            let authority = if host.contains(':') {
                format!("[{host}]:{}", self.origin.port)
            } else {
                format!("{host}:{}", self.origin.port)
            };
            route.tunnel(&mut tcp, &authority).await?;
        }
        // Requests are written whole; waiting for more to coalesce only adds latency.
        tcp.set_nodelay(true).map_err(|e| {
            transport_failure(TransportKind::Connect, "could not connect", Some(&e))
        })?;
        let stream = match &self.tls {
            None => Stream::Plain(tcp),
            Some(tls) => tls.connect(tcp).await.map_err(|e| {
                transport_failure(TransportKind::Tls, "the TLS handshake failed", Some(&e))
            })?,
        };
        let (sender, conn) = http1::Builder::new()
            .max_buf_size(self.max_buf_size)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| {
                transport_failure(TransportKind::Connect, "could not connect", Some(&e))
            })?;
        Ok(Connection::new(sender, conn, Instant::now()))
    }
}

/// How a request starts: handed to a pooled connection (with hyper's answer
/// future), or waiting for a new connection.
enum First<A, C> {
    Sent(Box<Connection>, A),
    Connect(C),
}

impl HyperTransport {
    /// [`HttpService::call`] without its boxed future, for the pipeline.
    pub(crate) fn respond(
        &self,
        request: http::Request<Bytes>,
    ) -> impl std::future::Future<Output = Result<HttpResponse>> + Send + '_ {
        self.send(request).map(|sent| {
            let (status, mut body) = sent?;
            let headers = body.take_headers();
            Ok(HttpResponse::inline(status, headers, body))
        })
    }
}

#[async_trait::async_trait]
impl HttpService for HyperTransport {
    async fn call(&self, request: http::Request<Bytes>) -> Result<HttpResponse> {
        self.respond(request).await
    }
}

impl std::fmt::Debug for HyperTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HyperTransport")
            .field("authority", &self.origin.authority)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;
    use crate::error::Error;

    /// What the scripted server does with every request.
    #[derive(Clone, Copy)]
    enum Script {
        /// 200 with a body of this many bytes, keep-alive.
        Answer(usize),
        /// As `Answer`, then closes the connection (as an idle timeout would).
        AnswerThenClose(usize),
        /// 200 with `Connection: close`.
        AnswerClose,
        /// Never answers.
        Hang,
        /// Sends the head and half of a body of this size, then stalls.
        HalfBody(usize),
        /// Holds every answer until this many requests are in.
        Gather(usize),
        /// Declares a body of this many bytes, sends that many, then closes.
        Declares(u64, usize),
        /// The first request of a connection as `Answer`, the next ones as `Hang`.
        FirstThenHang(usize),
        /// The first request of a connection as `Answer`, the next ones as `HalfBody`.
        FirstThenHalfBody(usize),
    }

    struct Server {
        endpoint: http::Uri,
        accepted: Arc<AtomicUsize>,
        /// Connections the server has closed.
        closed: Arc<AtomicUsize>,
    }

    async fn read_head(sock: &mut TcpStream) -> bool {
        let mut buf = Vec::new();
        let mut byte = [0u8; 4096];
        loop {
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                return true;
            }
            match sock.read(&mut byte).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&byte[..n]),
            }
        }
    }

    async fn server(script: Script) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}/devstoreaccount1", listener.local_addr().unwrap())
            .parse::<http::Uri>()
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let gathered = Arc::new(tokio::sync::Notify::new());
        let (a, c) = (accepted.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let (c, requests, gathered) = (c.clone(), requests.clone(), gathered.clone());
                tokio::spawn(async move {
                    let mut served = 0;
                    while read_head(&mut sock).await {
                        let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
                        served += 1;
                        let script = match script {
                            Script::FirstThenHang(len) if served == 1 => Script::Answer(len),
                            Script::FirstThenHalfBody(len) if served == 1 => Script::Answer(len),
                            Script::FirstThenHang(_) => Script::Hang,
                            Script::FirstThenHalfBody(len) => Script::HalfBody(len),
                            other => other,
                        };
                        let head = |len: usize, extra: &str| {
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n{extra}\r\n")
                        };
                        let reply = match script {
                            Script::Answer(len) | Script::AnswerThenClose(len) => {
                                let mut r = head(len, "").into_bytes();
                                r.resize(r.len() + len, b'x');
                                r
                            }
                            Script::AnswerClose => head(2, "Connection: close\r\n").into_bytes(),
                            Script::Hang => {
                                std::future::pending::<()>().await;
                                unreachable!()
                            }
                            Script::Declares(declared, sent) => {
                                let mut r = format!(
                                    "HTTP/1.1 200 OK\r\nContent-Length: {declared}\r\n\r\n"
                                )
                                .into_bytes();
                                r.resize(r.len() + sent, b'x');
                                let _ = sock.write_all(&r).await;
                                break;
                            }
                            Script::HalfBody(len) => {
                                let mut r = head(len, "").into_bytes();
                                r.resize(r.len() + len / 2, b'x');
                                let _ = sock.write_all(&r).await;
                                std::future::pending::<()>().await;
                                unreachable!()
                            }
                            Script::FirstThenHang(_) | Script::FirstThenHalfBody(_) => {
                                unreachable!("resolved above")
                            }
                            Script::Gather(count) => {
                                if n >= count {
                                    gathered.notify_waiters();
                                } else {
                                    let wait = gathered.notified();
                                    if requests.load(Ordering::SeqCst) < count {
                                        wait.await;
                                    }
                                }
                                head(2, "").into_bytes()
                            }
                        };
                        let mut reply = reply;
                        if matches!(script, Script::AnswerClose | Script::Gather(_)) {
                            reply.extend_from_slice(b"ok");
                        }
                        if sock.write_all(&reply).await.is_err() {
                            break;
                        }
                        if matches!(script, Script::AnswerThenClose(_) | Script::AnswerClose) {
                            break;
                        }
                    }
                    drop(sock);
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Server {
            endpoint,
            accepted,
            closed,
        }
    }

    fn transport(endpoint: &http::Uri, f: impl FnOnce(&mut HttpOptions)) -> HyperTransport {
        let mut options = HttpOptions::default();
        f(&mut options);
        HyperTransport::new(endpoint, &options).unwrap()
    }

    fn get() -> http::Request<Bytes> {
        let mut r = http::Request::new(Bytes::new());
        *r.uri_mut() = http::Uri::from_static("/devstoreaccount1/Tables");
        r
    }

    async fn get_all(t: &HyperTransport) -> Result<Bytes> {
        let (status, body) = t.send(get()).await?;
        assert_eq!(status, 200);
        body.collect().await
    }

    fn transport_kind(e: &Error) -> TransportKind {
        match e.kind() {
            crate::ErrorKind::Transport(t) => t.kind,
            other => panic!("not a transport error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn sequential_requests_reuse_one_kept_alive_connection() {
        let s = server(Script::Answer(10)).await;
        let t = transport(&s.endpoint, |_| {});
        for _ in 0..3 {
            assert_eq!(get_all(&t).await.unwrap().len(), 10);
        }
        assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(t.pool().idle_count(), 1);
    }

    #[tokio::test]
    async fn an_empty_answer_frees_its_connection_unread() {
        let s = server(Script::Answer(0)).await;
        let t = transport(&s.endpoint, |_| {});
        for _ in 0..3 {
            let (status, _body) = t.send(get()).await.unwrap();
            assert_eq!(status, 200);
        }
        assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_half_read_or_dropped_body_never_returns_its_connection() {
        let s = server(Script::Answer(256 * 1024)).await;
        let t = transport(&s.endpoint, |_| {});
        // Read one chunk, then drop the rest.
        let (_, body) = t.send(get()).await.unwrap();
        let mut chunks = Box::pin(body);
        assert!(!chunks.next().await.unwrap().unwrap().is_empty());
        drop(chunks);
        assert_eq!(t.pool().idle_count(), 0);
        // Not read at all.
        let (_, body) = t.send(get()).await.unwrap();
        drop(body);
        assert_eq!(t.pool().idle_count(), 0);
        // The next request gets a clean connection and the whole answer.
        assert_eq!(get_all(&t).await.unwrap().len(), 256 * 1024);
        assert_eq!(s.accepted.load(Ordering::SeqCst), 3);
        assert_eq!(t.pool().idle_count(), 1);
    }

    #[tokio::test]
    async fn connection_close_answers_are_not_pooled() {
        let s = server(Script::AnswerClose).await;
        let t = transport(&s.endpoint, |_| {});
        assert_eq!(&get_all(&t).await.unwrap()[..], b"ok");
        assert_eq!(t.pool().idle_count(), 0);
        assert_eq!(&get_all(&t).await.unwrap()[..], b"ok");
        assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_replaced() {
        let s = server(Script::AnswerThenClose(3)).await;
        let t = transport(&s.endpoint, |_| {});
        assert_eq!(get_all(&t).await.unwrap().len(), 3);
        // Wait until the server has closed it (no timing: a flag).
        while s.closed.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(get_all(&t).await.unwrap().len(), 3);
        assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_each_get_a_connection_and_the_pool_stays_bounded() {
        let s = server(Script::Gather(8)).await;
        let t = Arc::new(transport(&s.endpoint, |o| o.pool_max_idle_per_host = 3));
        let all = (0..8).map(|_| {
            let t = t.clone();
            async move { get_all(&t).await }
        });
        for r in futures::future::join_all(all).await {
            assert_eq!(&r.unwrap()[..], b"ok");
        }
        assert_eq!(s.accepted.load(Ordering::SeqCst), 8);
        assert_eq!(t.pool().idle_count(), 3);
    }

    #[tokio::test]
    async fn the_request_timeout_covers_the_answer_and_its_body() {
        let s = server(Script::Hang).await;
        let t = transport(&s.endpoint, |o| o.timeout = Duration::from_millis(200));
        let Err(e) = t.send(get()).await else {
            panic!("a hanging server answered")
        };
        assert_eq!(transport_kind(&e), TransportKind::Timeout);
        assert!(e.is_timeout());

        let s = server(Script::HalfBody(1000)).await;
        let t = transport(&s.endpoint, |o| o.timeout = Duration::from_millis(300));
        let (_, body) = t.send(get()).await.unwrap();
        let e = body.collect().await.unwrap_err();
        assert_eq!(transport_kind(&e), TransportKind::Timeout);
        assert_eq!(t.pool().idle_count(), 0);
    }

    #[tokio::test]
    async fn a_kept_alive_connection_keeps_one_deadline_timer_for_all_its_requests() {
        // Each request moves the connection's timer to its own deadline: no
        // timer is registered (and cancelled) per request.
        let s = server(Script::Answer(16)).await;
        let t = transport(&s.endpoint, |_| {});
        for _ in 0..5 {
            assert_eq!(get_all(&t).await.unwrap().len(), 16);
        }
        assert_eq!(
            s.accepted.load(Ordering::SeqCst),
            1,
            "one kept-alive connection"
        );
        assert_eq!(t.pool().idle_timers_made(), [1]);
    }

    #[tokio::test]
    async fn a_kept_alive_connection_times_out_each_request_at_its_own_deadline() {
        // The connection's one timer is moved for every request: a request
        // that stalls after others on the same connection still times out,
        // before its head and while its body is read.
        for script in [Script::FirstThenHang(3), Script::FirstThenHalfBody(1000)] {
            let s = server(script).await;
            let t = transport(&s.endpoint, |o| o.timeout = Duration::from_millis(300));
            let first = match script {
                Script::FirstThenHang(len) | Script::FirstThenHalfBody(len) => len,
                _ => unreachable!(),
            };
            assert_eq!(get_all(&t).await.unwrap().len(), first);
            assert_eq!(t.pool().idle_count(), 1);
            // Past the first request's deadline, so a timer left at it would
            // have fired already.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let e = match t.send(get()).await {
                Err(e) => e,
                Ok((_, body)) => body.collect().await.unwrap_err(),
            };
            assert_eq!(transport_kind(&e), TransportKind::Timeout, "{e}");
            assert_eq!(s.accepted.load(Ordering::SeqCst), 1, "the kept-alive one");
            assert_eq!(t.pool().idle_count(), 0);
        }
    }

    #[test]
    fn a_transport_outlives_the_runtime_it_was_first_used_in() {
        // The pooled connection (and its timer) belong to the first runtime;
        // once it is gone, the next runtime's request gets a fresh connection,
        // not a panic from a timer of a runtime that was shut down.
        let server_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let s = server_rt.block_on(server(Script::Answer(3)));
        let t = transport(&s.endpoint, |_| {});
        for round in 1..=2 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                assert_eq!(get_all(&t).await.unwrap().len(), 3);
                assert_eq!(get_all(&t).await.unwrap().len(), 3);
            });
            drop(rt);
            assert_eq!(s.accepted.load(Ordering::SeqCst), round);
        }
    }

    #[tokio::test]
    async fn a_declared_terabyte_is_never_reserved() {
        // Several chunks arrive (the path that gives room for the rest), then
        // the connection closes: an error, not an allocation of a terabyte.
        let s = server(Script::Declares(1 << 40, 256 * 1024)).await;
        let t = transport(&s.endpoint, |_| {});
        let e = get_all(&t).await.unwrap_err();
        assert_eq!(transport_kind(&e), TransportKind::Interrupted, "{e}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let endpoint = format!("http://{addr}/a").parse::<http::Uri>().unwrap();
        let t = transport(&endpoint, |_| {});
        let Err(e) = t.send(get()).await else {
            panic!("a closed port answered")
        };
        assert_eq!(transport_kind(&e), TransportKind::Connect);
        assert!(!e.outcome_unknown());
    }

    #[tokio::test]
    async fn the_connect_timeout_fires_on_a_port_that_never_accepts() {
        // A listener with a one-place queue that nobody accepts from: once the
        // queue is full, the kernel drops further handshakes.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut held = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
                Ok(Ok(s)) => held.push(s),
                _ => break,
            }
            assert!(held.len() < 64, "the listen queue never filled");
        }
        let endpoint = format!("http://{addr}/a").parse::<http::Uri>().unwrap();
        let t = transport(&endpoint, |o| {
            o.connect_timeout = Duration::from_millis(200)
        });
        let Err(e) = t.send(get()).await else {
            panic!("a full listen queue answered")
        };
        assert_eq!(transport_kind(&e), TransportKind::ConnectTimeout);
        assert!(!e.outcome_unknown());
        drop(listener);
    }

    /// A TLS server with the test certificate for `localhost` and `127.0.0.1`
    /// that answers one 200 per request; it reports the SNI name and ALPN
    /// protocols each client offered.
    async fn tls_server(
        bind: &str,
    ) -> (
        u16,
        tokio::sync::mpsc::UnboundedReceiver<(Option<String>, Option<Vec<u8>>)>,
    ) {
        let cert =
            rustls::pki_types::CertificateDer::from(include_bytes!("testdata/server.der").to_vec());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            include_bytes!("testdata/server.key.der").to_vec().into(),
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(bind).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(sock).await else {
                        return;
                    };
                    let (_, session) = tls.get_ref();
                    let _ = tx.send((
                        session.server_name().map(str::to_owned),
                        session.alpn_protocol().map(<[u8]>::to_vec),
                    ));
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret";
                            if tls.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        (port, rx)
    }

    #[tokio::test]
    async fn https_checks_the_certificate_sends_sni_and_offers_only_http11() {
        let (port, mut seen) = tls_server("127.0.0.1:0").await;
        let endpoint = format!("https://localhost:{port}/acc")
            .parse::<http::Uri>()
            .unwrap();
        let ca = include_bytes!("testdata/ca.der").to_vec();
        let t = HyperTransport::with_roots(&endpoint, &HttpOptions::default(), &[ca]).unwrap();
        for _ in 0..2 {
            assert_eq!(&get_all(&t).await.unwrap()[..], b"secret");
        }
        let (sni, alpn) = seen.recv().await.unwrap();
        assert_eq!(sni.as_deref(), Some("localhost"));
        assert_eq!(
            alpn.as_deref(),
            Some(&b"http/1.1"[..]),
            "h2 is never offered"
        );
        // The second request reused the TLS connection.
        assert!(seen.try_recv().is_err());
        assert_eq!(t.pool().idle_count(), 1);
    }

    /// A loopback proxy: for `CONNECT host:port` it opens a tunnel, for an
    /// absolute-form request it forwards the connection to the named origin.
    /// Reports each connection's first line.
    async fn loopback_proxy() -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if client.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let first = text.lines().next().unwrap_or("").to_owned();
                    let _ = tx.send(first.clone());
                    let target = first.split(' ').nth(1).unwrap_or("").to_owned();
                    if first.starts_with("CONNECT ") {
                        let mut upstream = tokio::net::TcpStream::connect(target).await.unwrap();
                        client
                            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                            .await
                            .unwrap();
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    } else {
                        let authority = target
                            .trim_start_matches("http://")
                            .split('/')
                            .next()
                            .unwrap_or("")
                            .to_owned();
                        let mut upstream = tokio::net::TcpStream::connect(authority).await.unwrap();
                        upstream.write_all(&head).await.unwrap();
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        (port, rx)
    }

    #[tokio::test]
    async fn https_goes_through_a_connect_tunnel_of_the_proxy() {
        let (port, mut handshakes) = tls_server("127.0.0.1:0").await;
        let (proxy_port, mut lines) = loopback_proxy().await;
        let endpoint = format!("https://localhost:{port}/acc")
            .parse::<http::Uri>()
            .unwrap();
        let ca = include_bytes!("testdata/ca.der").to_vec();
        let options = HttpOptions {
            proxy: Some(
                super::super::proxy::Proxy::all(&format!("http://127.0.0.1:{proxy_port}")).unwrap(),
            ),
            ..Default::default()
        };
        let t = HyperTransport::with_roots(&endpoint, &options, &[ca]).unwrap();
        for _ in 0..2 {
            assert_eq!(&get_all(&t).await.unwrap()[..], b"secret");
        }
        assert_eq!(
            lines.recv().await.unwrap(),
            format!("CONNECT localhost:{port} HTTP/1.1")
        );
        // TLS ran end to end, with the endpoint's name; the tunnel was reused.
        let (sni, _) = handshakes.recv().await.unwrap();
        assert_eq!(sni.as_deref(), Some("localhost"));
        assert!(lines.try_recv().is_err());
    }

    #[tokio::test]
    async fn http_goes_to_the_proxy_in_absolute_form_and_no_proxy_hosts_do_not() {
        let server = server(Script::Answer(3)).await;
        let port = server.endpoint.port_u16().unwrap();
        let (proxy_port, mut lines) = loopback_proxy().await;
        let proxy = format!("http://127.0.0.1:{proxy_port}");
        let endpoint = server.endpoint.clone();
        let mut options = HttpOptions {
            proxy: Some(super::super::proxy::Proxy::http(&proxy).unwrap()),
            ..Default::default()
        };
        let t = HyperTransport::new(&endpoint, &options).unwrap();
        get_all(&t).await.unwrap();
        let line = lines.recv().await.unwrap();
        assert!(
            line.starts_with(&format!("GET http://127.0.0.1:{port}/")),
            "{line}"
        );

        options.proxy = Some(
            super::super::proxy::Proxy::all(&proxy)
                .unwrap()
                .no_proxy("127.0.0.1"),
        );
        let t = HyperTransport::new(&endpoint, &options).unwrap();
        get_all(&t).await.unwrap();
        assert!(
            lines.try_recv().is_err(),
            "NO_PROXY hosts are reached directly"
        );
    }

    #[tokio::test]
    async fn an_untrusted_certificate_is_a_tls_failure_not_an_unknown_outcome() {
        let (port, _seen) = tls_server("127.0.0.1:0").await;
        // The test CA is not among the webpki roots.
        let endpoint = format!("https://localhost:{port}/acc")
            .parse::<http::Uri>()
            .unwrap();
        let t = HyperTransport::new(&endpoint, &HttpOptions::default()).unwrap();
        let Err(e) = t.send(get()).await else {
            panic!("an untrusted certificate was accepted")
        };
        assert_eq!(transport_kind(&e), TransportKind::Tls);
        assert!(!e.is_retryable(), "{e}");
        assert!(!e.outcome_unknown(), "{e}");
        assert!(e.to_string().contains("TLS"), "{e}");

        // A certificate for another name is refused too, even from a trusted
        // CA: a server on 127.0.0.2 (loopback) shows the one for 127.0.0.1.
        let (port, _seen) = tls_server("127.0.0.2:0").await;
        let ca = include_bytes!("testdata/ca.der").to_vec();
        let endpoint = format!("https://127.0.0.2:{port}/acc")
            .parse::<http::Uri>()
            .unwrap();
        let t = HyperTransport::with_roots(&endpoint, &HttpOptions::default(), &[ca]).unwrap();
        let Err(e) = t.send(get()).await else {
            panic!("a certificate for another name was accepted")
        };
        assert_eq!(transport_kind(&e), TransportKind::Tls, "{e}");
    }
}
