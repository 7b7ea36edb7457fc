//! The body of an answer on the built-in transport: read chunk by chunk
//! while it drives the connection it arrives on, which goes back to the pool
//! when the body ends.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::Body as _;
use tokio::time::Instant;

use super::common::transport_failure;
use super::pool::{Connection, Pool};
use crate::error::{Result, TransportKind};

/// The body of an answer on the inline transport, with the connection it
/// arrives on (which this body drives while it is read).
pub(crate) struct HyperBody {
    headers: HeaderMap,
    body: hyper::body::Incoming,
    /// The connection, until the body ends (then pooled) or fails (then dropped).
    conn: Option<Box<Connection>>,
    pool: Arc<Pool>,
    /// When the request began (the connection's idle time counts from it).
    start: Instant,
    deadline: Instant,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl HyperBody {
    pub(super) fn new(
        headers: HeaderMap,
        body: hyper::body::Incoming,
        conn: Box<Connection>,
        pool: &Arc<Pool>,
        start: Instant,
        deadline: Instant,
    ) -> Self {
        let mut b = HyperBody {
            headers,
            body,
            conn: Some(conn),
            pool: pool.clone(),
            start,
            deadline,
            timer: None,
        };
        if b.body.is_end_stream() {
            // No body (204, HEAD, Content-Length: 0): the connection is free now,
            // whether or not anyone reads the empty body.
            b.finish(None);
        }
        b
    }

    /// The answer's headers, taken out (the body keeps none).
    pub(crate) fn take_headers(&mut self) -> HeaderMap {
        std::mem::take(&mut self.headers)
    }

    /// The body is complete: the connection goes back to the pool if it can
    /// take another request (a `Connection: close` answer makes hyper close it).
    fn finish(&mut self, cx: Option<&mut Context<'_>>) {
        if let Some(mut conn) = self.conn.take() {
            let noop = &mut Context::from_waker(futures::task::noop_waker_ref());
            let _ = conn.poll_drive(cx.unwrap_or(noop));
            self.pool.checkin(conn, self.start);
        }
    }

    /// The next chunk of the body, `None` at its end.
    pub(super) fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes>>> {
        loop {
            if let Some(conn) = &mut self.conn {
                if conn.poll_drive(cx).is_ready() {
                    // Closed: what it delivered is still in the body channel,
                    // and a cut-short body fails below. Never pooled.
                    self.conn = None;
                }
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        if self.body.is_end_stream() {
                            self.finish(Some(cx));
                        }
                        if data.is_empty() {
                            continue;
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                    // Trailers: nothing tablekit reads.
                }
                Poll::Ready(Some(Err(e))) => {
                    self.conn = None;
                    return Poll::Ready(Some(Err(transport_failure(
                        TransportKind::Interrupted,
                        "the response body was cut short",
                        Some(&e),
                    ))));
                }
                Poll::Ready(None) => {
                    self.finish(Some(cx));
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    let deadline = self.deadline;
                    let elapsed = match &mut self.conn {
                        Some(conn) => conn.poll_deadline(deadline, cx),
                        // Closed under the body: what remains is in hyper's
                        // channel; a timer of the body's own, just in case.
                        None => self
                            .timer
                            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)))
                            .as_mut()
                            .poll(cx),
                    };
                    if elapsed.is_ready() {
                        self.conn = None;
                        return Poll::Ready(Some(Err(transport_failure(
                            TransportKind::Timeout,
                            "timed out",
                            None,
                        ))));
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// The least the body's length can be (its declared length, if any).
    pub(super) fn length_hint(&self) -> u64 {
        self.body.size_hint().lower()
    }
}

impl futures::Stream for HyperBody {
    type Item = Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_chunk(cx)
    }
}

#[cfg(test)]
impl HyperBody {
    /// The whole body.
    pub(super) async fn collect(self) -> Result<Bytes> {
        let hint = self.length_hint();
        super::common::join_chunks(self, hint).await
    }
}
