//! Options of the clients: retries, timeouts, the connection pool and the
//! metadata level. Plain data, no I/O: the clients hand them to a backend.

use std::sync::Arc;
use std::time::Duration;

pub use crate::backend::http::limits::AnswerLimits;
use crate::backend::http::transport::proxy::Proxy;
use crate::backend::http::transport::service::{HttpConnector, RequestHook};

/// Options of a client ([`TableServiceClient`](crate::TableServiceClient),
/// [`QueueServiceClient`](crate::QueueServiceClient)).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ClientOptions {
    /// The HTTP transport's options: retries, timeouts, connection pool.
    pub http: HttpOptions,
}

/// How failed requests are retried: exponential backoff with full jitter.
///
/// Which failures are retried is the table on [`Error::is_retryable`](crate::Error::is_retryable)
/// (timeouts, connection faults, 408, 429, 500, 502, 503, 504; never TLS or
/// certificate failures, never invalid input). Before retry `n` (0-based) the
/// client waits a uniformly random time in `0 ..= min(base_delay * 2^n, max_delay)`
/// ("full jitter", so that many clients failing together do not retry
/// together), except when a 429 or 503 answer carries `Retry-After`: then it
/// waits what the service asked, capped by `max_delay`.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retries).
    pub max_retries: u32,
    /// The delay ceiling of the first retry; it doubles with each retry.
    pub base_delay: Duration,
    /// The largest delay ceiling, and the cap of a `Retry-After` wait.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..Default::default()
        }
    }
}

/// A uniformly random duration in `0 ..= min(base * 2^attempt, max)`.
pub(crate) fn full_jitter(base: Duration, max: Duration, attempt: u32) -> Duration {
    let ceiling = base.saturating_mul(1u32 << attempt.min(16)).min(max);
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(fastrand::u64(..=nanos))
}

/// How much OData metadata the service puts in JSON answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Metadata {
    /// No annotations at all (`odata=nometadata`): the smallest answers. Types
    /// are then known only from the reader's schema; ETags of query results
    /// come without it only where the service includes them.
    None,
    /// Type annotations for values whose JSON form is ambiguous, and ETags (`odata=minimalmetadata`).
    Minimal,
    /// Every annotation (`odata=fullmetadata`).
    Full,
}

/// Options of the HTTP transport.
///
/// ```
/// use std::time::Duration;
/// use tablekit::options::{ClientOptions, HttpOptions};
///
/// let mut http = HttpOptions::default();
/// http.timeout = Duration::from_secs(5);
/// http.connect_timeout = Duration::from_secs(2);
/// let mut options = ClientOptions::default();
/// options.http = http;
/// ```
///
/// Timeouts apply to each attempt, so a call with retries can take longer than
/// `timeout`. For a deadline on one call (retries and `Retry-After` waits
/// included), wrap its future in `tokio::time::timeout`: dropping a tablekit
/// future cancels its request, and a deadline there needs no option here.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The retry policy.
    pub retry: RetryPolicy,
    /// The time limit of one attempt, from sending the request to the end of
    /// the answer's body (connecting included). Default: 30 s.
    pub timeout: Duration,
    /// The time limit of opening a connection (TCP and TLS). Default: 10 s.
    pub connect_timeout: Duration,
    /// Idle connections kept per host (the .NET default of 2 starves concurrent clients).
    pub pool_max_idle_per_host: usize,
    /// The metadata level of reads; `None` picks per entity type: minimal metadata
    /// for types that need the service's type annotations (such as `DynamicEntity`),
    /// none for types that know their schema. A type that needs annotations always
    /// gets at least minimal metadata.
    pub metadata: Option<Metadata>,
    /// Which built-in HTTP client carries the requests. Default: [`Transport::Auto`].
    pub transport: Transport,
    /// Your own transport, instead of a built-in one: a client with your
    /// proxy and middleware, a recording or failing transport in tests. It
    /// is asked for the [`HttpService`](crate::transport::HttpService) of each
    /// endpoint when a client is built; signing, retries and the reading of
    /// answers stay with tablekit. Default: `None` ([`HttpOptions::transport`] decides).
    pub connector: Option<Arc<dyn HttpConnector>>,
    /// The HTTP proxy of tablekit's own transport: `None` (the default)
    /// connects directly, whatever the environment says; [`Proxy::from_env`]
    /// follows `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY`.
    pub proxy: Option<Proxy>,
    /// Per-request policies, run in order on every attempt of every request
    /// just before it goes to the transport (built-in or
    /// [`connector`](HttpOptions::connector)): add a header, record, fail on purpose.
    pub hooks: Vec<Arc<dyn RequestHook>>,
    /// How much of each kind of answer is read at most (its head, an entity,
    /// a query page, ...): see [`AnswerLimits`] for each default and why.
    pub limits: AnswerLimits,
    /// Certificate authorities trusted besides the webpki roots, by both
    /// built-in transports (a private CA, an emulator's self-signed
    /// certificate). Default: none.
    pub root_certificates: Vec<crate::transport::RootCertificate>,
}

/// The built-in HTTP client under a service client ([`HttpOptions::transport`]).
///
/// Both send the same signed requests through the same retry policy. The
/// inline transport drives each connection in the task of the request on it,
/// with its own keep-alive pool ([`HttpOptions::pool_max_idle_per_host`]), so
/// a request never hops between threads: on a multi-thread runtime it costs
/// about half the CPU of reqwest's. Both go through [`HttpOptions::proxy`].
/// No environment variable changes this choice.
///
/// ```
/// use tablekit::options::{ClientOptions, Transport};
///
/// let mut options = ClientOptions::default();
/// options.http.transport = Transport::Hyper;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// tablekit's choice: today the inline hyper transport.
    #[default]
    Auto,
    /// tablekit's own HTTP/1.1 client on hyper's connection API (plain TCP
    /// or TLS with rustls and the webpki roots).
    Hyper,
    /// reqwest's client (rustls). Needs the `reqwest` feature.
    #[cfg(feature = "reqwest")]
    Reqwest,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            pool_max_idle_per_host: 64,
            metadata: None,
            transport: Transport::Auto,
            connector: None,
            proxy: None,
            hooks: Vec::new(),
            limits: AnswerLimits::default(),
            root_certificates: Vec::new(),
        }
    }
}

/// How an embedded store file is opened ([`Storage::embedded_at_with`](crate::Storage::embedded_at_with)).
///
/// # Memory
///
/// The entities, messages' and blobs' data stay in the file; the store reads
/// them through a cache of the file's pages, which holds at most
/// [`cache_bytes`](FileOptions::cache_bytes) (64 MiB unless set). What else
/// the store holds is small and bounded: the names of the tables, queues and
/// containers, the page of a query being read (at most 1,000 entities), and
/// the writes being committed. (The queue and blob stores keep their
/// messages and blob metadata in memory too, as they always have.)
#[cfg(feature = "durable")]
#[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FileOptions {
    pub(crate) cache_bytes: usize,
    pub(crate) durability: Durability,
}

/// When a write to an embedded store file is on disk
/// ([`FileOptions::durability`]).
#[cfg(feature = "durable")]
#[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Every commit is synced (`fsync`) before its writes are acknowledged:
    /// what an `await` returned survives a crash of the process or the
    /// machine. Concurrent writers share commits (group commit), so they
    /// share the syncs too. The default.
    #[default]
    Immediate,
    /// Table writes are synced at most once per the given interval: a write
    /// is acknowledged once committed, and the commits of the interval are
    /// synced together by the first commit after it ends, or by a background
    /// sync at its end. The loss window: a crash of the process or the
    /// machine may lose the table writes acknowledged in the last interval
    /// (plus the time of one sync); the file is never left inconsistent, and
    /// a transaction is lost whole or kept whole. A clean close syncs
    /// everything. Queue and blob writes are always synced.
    Periodic(std::time::Duration),
}

#[cfg(feature = "durable")]
impl FileOptions {
    /// The default cache size, 64 MiB.
    pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

    /// The defaults: a cache of [`FileOptions::DEFAULT_CACHE_BYTES`].
    pub fn new() -> Self {
        FileOptions {
            cache_bytes: Self::DEFAULT_CACHE_BYTES,
            durability: Durability::Immediate,
        }
    }

    /// When table writes are on disk: [`Durability::Immediate`] (every
    /// commit synced, the default) or [`Durability::Periodic`].
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The most of the file kept in memory, in bytes. Reads of pages not
    /// cached go to the file (and the operating system's cache of it).
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }
}

#[cfg(feature = "durable")]
impl Default for FileOptions {
    fn default() -> Self {
        FileOptions::new()
    }
}
