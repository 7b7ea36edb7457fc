//! The inline transport's keep-alive pool: idle HTTP/1.1 connections of one
//! endpoint, newest first, at most `max_idle` of them.
//!
//! A connection is a hyper `SendRequest` with its `Connection` future. Nobody
//! polls an idle connection, so a server's close of it is only seen when it
//! is checked out: the checkout polls the connection once and drops it when
//! it has finished or cannot take a request.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use super::tls::Stream;

/// A request body of the inline transport: the whole body, in memory.
pub(super) type ReqBody = Full<Bytes>;

/// Idle connections older than this are closed rather than reused: servers
/// (Azure's front ends among them) drop idle connections after a few minutes,
/// and a request on one they are about to drop may be lost mid-flight.
const IDLE_LIFETIME: Duration = Duration::from_secs(90);

/// One HTTP/1.1 connection: its request handle and the future that drives it.
/// Boxed once when it is opened (hyper's state is large), then only moved as
/// a pointer between the pool and the requests.
pub(super) struct Connection {
    pub(super) sender: http1::SendRequest<ReqBody>,
    conn: http1::Connection<TokioIo<Stream>, ReqBody>,
    /// The connection future has finished: the connection is closed.
    closed: bool,
    /// Whether it came out of the pool (a request on it may meet a stale close).
    pub(super) reused: bool,
    idle_since: Instant,
    /// The deadline of the request on it, one timer for the connection's
    /// whole life: each request moves it later, which tokio does in place
    /// (no new timer, no wheel lock, no wake-up of the driver's thread).
    /// Made on the first request (in the runtime the connection belongs to).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Timers made for this connection's deadlines (for tests: one, however
    /// many requests it carries).
    #[cfg(test)]
    timers_made: usize,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.closed)
            .field("reused", &self.reused)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(super) fn new(
        sender: http1::SendRequest<ReqBody>,
        conn: http1::Connection<TokioIo<Stream>, ReqBody>,
        now: Instant,
    ) -> Box<Self> {
        Box::new(Connection {
            sender,
            conn,
            closed: false,
            reused: false,
            idle_since: now,
            timer: None,
            #[cfg(test)]
            timers_made: 0,
        })
    }

    /// Whether `deadline` has passed; if not, this task is woken when it
    /// does (or when a later call moves it).
    pub(super) fn poll_deadline(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        let timer = match &mut self.timer {
            Some(t) => {
                if t.deadline() != deadline {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => {
                #[cfg(test)]
                {
                    self.timers_made += 1;
                }
                self.timer
                    .insert(Box::pin(tokio::time::sleep_until(deadline)))
            }
        };
        timer.as_mut().poll(cx)
    }

    /// Drives the connection (reads, writes, keep-alive bookkeeping) until it
    /// has nothing to do; `Ready` once it has closed, for good.
    pub(super) fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.closed {
            return Poll::Ready(());
        }
        match Pin::new(&mut self.conn).poll(cx) {
            Poll::Ready(result) => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "connection closed");
                }
                self.closed = true;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Whether the connection can carry another request now.
    pub(super) fn reusable(&self) -> bool {
        !self.closed && self.sender.is_ready()
    }

    /// Polls once without a waker of interest, to learn whether the server
    /// closed the connection while it sat idle (and to let it finish reading
    /// the end of a previous answer).
    fn still_open(&mut self) -> bool {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        let _ = self.poll_drive(&mut cx);
        self.reusable()
    }
}

/// The idle connections of one endpoint. They stay boxed in the list: a
/// connection moves between the pool and the requests as a pointer.
#[derive(Debug)]
#[allow(clippy::vec_box)]
pub(super) struct Pool {
    idle: Mutex<Vec<Box<Connection>>>,
    max_idle: usize,
}

impl Pool {
    pub(super) fn new(max_idle: usize) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }

    /// The newest idle connection that is still open, if any; closed and
    /// expired ones met on the way are dropped. `now` is the request's start
    /// (read once per request, for its deadline too).
    pub(super) fn checkout(&self, now: Instant) -> Option<Box<Connection>> {
        loop {
            let mut c = self.lock().pop()?;
            if now.saturating_duration_since(c.idle_since) < IDLE_LIFETIME && c.still_open() {
                c.reused = true;
                return Some(c);
            }
        }
    }

    /// Returns a connection whose last answer was read to the end. It is
    /// dropped (closed) if it cannot take another request or the pool is full.
    /// It counts as idle since `since`, the start of its last request (no
    /// clock read: an idle connection retires at most a request's length early).
    pub(super) fn checkin(&self, mut c: Box<Connection>, since: Instant) {
        if !c.reusable() {
            return;
        }
        c.idle_since = since;
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push(c);
        }
    }

    /// How many connections are idle (for tests).
    #[cfg(test)]
    pub(super) fn idle_count(&self) -> usize {
        self.lock().len()
    }

    /// How many deadline timers each idle connection made (for tests).
    #[cfg(test)]
    pub(super) fn idle_timers_made(&self) -> Vec<usize> {
        self.lock().iter().map(|c| c.timers_made).collect()
    }

    #[allow(clippy::vec_box)]
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Box<Connection>>> {
        // A panic while holding the lock leaves a plain Vec: still usable.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}
