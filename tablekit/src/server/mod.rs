//! A storage emulator: the Table, Queue and Blob REST APIs served over HTTP
//! from the embedded store, in memory or in a store file, with the store's
//! strict rules (feature `server`).
//!
//! Any client that speaks the protocol reaches it as it reaches Azurite: the
//! official SDKs of every language, Storage Explorer, tablekit over HTTP, and
//! several processes at once (an application and its eventual-consistency
//! worker). The ports default to Azurite's (blob 10000, queue 10001, table
//! 10002) and the account to the emulator's well-known one, so
//! `UseDevelopmentStorage=true` reaches it unchanged. `tablekit-cli serve`
//! runs it.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> tablekit::Result<()> {
//! use tablekit::server::Server;
//! use tablekit::{DynamicEntity, Storage};
//!
//! // Port 0: free ports, so this example never meets a running emulator.
//! let server = Server::builder().ports(0, 0, 0).start().await?;
//! let storage = Storage::from_connection_string(&server.connection_string())?;
//! let table = storage.table::<DynamicEntity>("Served")?;
//! assert!(table.create_table_if_not_exists().await?); // created
//! assert!(!table.create_table_if_not_exists().await?); // there already
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```

mod auth;
mod bearer;
mod blob;
mod ctx;
mod queue;
mod reply;
mod state;
mod table;
mod table_admin;
mod table_batch;
mod table_entity;
mod table_wire;

use std::convert::Infallible;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::account::AccountKey;
use crate::clock::Clock;
use crate::error::{Error, Result};

pub use bearer::BearerConfig;
pub(crate) use ctx::Ctx;
pub(crate) use reply::{Failure, Reply, Service};
pub(crate) use state::{AccountState, State};

/// The emulator's well-known account name.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// The emulator's well-known account key (public, documented by Microsoft:
/// not a secret).
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The largest request body the server reads: a transaction's 4 MiB, a
/// block's 4000 MiB being out of reach of an emulator, it takes 256 MiB (a
/// larger body is answered 413 `RequestBodyTooLarge`).
pub const MAX_BODY: usize = 256 << 20;

/// How to build a [`Server`]: [`Server::builder`].
#[derive(Clone)]
pub struct ServerBuilder {
    file: Option<PathBuf>,
    host: IpAddr,
    blob_port: u16,
    queue_port: u16,
    table_port: u16,
    accounts: Vec<(String, AccountKey)>,
    bearer: Option<BearerConfig>,
    clock: Clock,
}

impl fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("file", &self.file)
            .field("host", &self.host)
            .field("blob_port", &self.blob_port)
            .field("queue_port", &self.queue_port)
            .field("table_port", &self.table_port)
            .field(
                "accounts",
                &self.accounts.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Keeps the store in `path` (created if missing): what the server
    /// acknowledged is there after a crash, and the next start finds it. The
    /// same file an application opens with `Storage::embedded_at`, but one
    /// process at a time. Without it, the store is in memory and gone when
    /// the server stops.
    pub fn file(mut self, path: impl AsRef<Path>) -> Self {
        self.file = Some(path.as_ref().to_path_buf());
        self
    }

    /// The address to listen on (default `127.0.0.1`).
    pub fn host(mut self, host: IpAddr) -> Self {
        self.host = host;
        self
    }

    /// The ports of the Blob, Queue and Table services (default Azurite's:
    /// 10000, 10001, 10002). Port 0 picks a free port; [`Server`] says which.
    pub fn ports(mut self, blob: u16, queue: u16, table: u16) -> Self {
        self.blob_port = blob;
        self.queue_port = queue;
        self.table_port = table;
        self
    }

    /// Serves one more account, `name` with the base64 key `key`. The
    /// emulator's account ([`DEV_ACCOUNT`], [`DEV_KEY`]) is always served.
    /// With a [file](ServerBuilder::file), an account other than the
    /// emulator's keeps its store in the file beside it named
    /// `<file>.<name>`.
    ///
    /// # Errors
    ///
    /// A configuration error for a name that is not 3 to 24 lower-case
    /// letters and digits, a key that is not base64, or a name given twice.
    pub fn account(mut self, name: &str, key: &str) -> Result<Self> {
        let valid = (3..=24).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !valid {
            return Err(Error::config(format!(
                "account name `{name}`: 3 to 24 lower-case letters and digits"
            )));
        }
        if self.accounts.iter().any(|(n, _)| n == name) {
            return Err(Error::config(format!("account `{name}` is given twice")));
        }
        self.accounts
            .push((name.to_owned(), AccountKey::from_base64(key)?));
        Ok(self)
    }

    /// Accepts bearer tokens (`Authorization: Bearer <JWT>`) checked as
    /// `config` says; without it, the server refuses them. A valid token
    /// gives full access to the account (roles are not modelled).
    pub fn bearer(mut self, config: BearerConfig) -> Self {
        self.bearer = Some(config);
        self
    }

    /// Starts serving: binds the three ports, opens the store, and answers
    /// until [`Server::shutdown`].
    ///
    /// # Errors
    ///
    /// A configuration error if the store file cannot be opened (in use by
    /// another process, damaged, of a newer format), and a transport error
    /// if a port cannot be bound.
    pub async fn start(self) -> Result<Server> {
        self.start_now()
    }

    /// The queues' and blobs' time from `clock` instead of the system's:
    /// what the test harness's served target uses, so that a test lets a
    /// visibility timeout pass without waiting.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn clock(mut self, clock: crate::clock::ManualClock) -> Self {
        self.clock = Clock::Manual(clock);
        self
    }

    /// [`start`](ServerBuilder::start) without awaiting: binds at once. Must
    /// be called within a Tokio runtime, on which the server's tasks run.
    pub(crate) fn start_now(self) -> Result<Server> {
        let mut accounts = Vec::with_capacity(self.accounts.len());
        for (name, key) in &self.accounts {
            let file = self.file.as_ref().map(|f| {
                if name == DEV_ACCOUNT {
                    f.clone()
                } else {
                    let mut other = f.clone().into_os_string();
                    other.push(format!(".{name}"));
                    PathBuf::from(other)
                }
            });
            accounts.push(AccountState::open(
                name,
                key.clone(),
                file.as_deref(),
                self.clock.clone(),
            )?);
        }
        let state = Arc::new(State {
            accounts,
            bearer: self.bearer.clone(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, done_rx) = mpsc::channel::<Infallible>(1);
        let mut addresses = Vec::with_capacity(3);
        for (service, port) in [
            (Service::Blob, self.blob_port),
            (Service::Queue, self.queue_port),
            (Service::Table, self.table_port),
        ] {
            let cannot = |e: std::io::Error| {
                Error::config(format!(
                    "cannot listen on {}:{port} for the {service:?} service: {e}",
                    self.host
                ))
            };
            let listener = std::net::TcpListener::bind((self.host, port)).map_err(cannot)?;
            listener.set_nonblocking(true).map_err(cannot)?;
            let listener = TcpListener::from_std(listener).map_err(cannot)?;
            let address = listener
                .local_addr()
                .map_err(|e| Error::config(format!("the bound address: {e}")))?;
            addresses.push(address);
            tokio::spawn(accept(
                listener,
                service,
                state.clone(),
                stop_rx.clone(),
                done_tx.clone(),
            ));
        }
        drop(done_tx);
        tracing::info!(
            target: "tablekit::server",
            blob = %addresses[0], queue = %addresses[1], table = %addresses[2],
            file = ?self.file,
            "serving"
        );
        Ok(Server {
            blob: addresses[0],
            queue: addresses[1],
            table: addresses[2],
            state,
            stop: stop_tx,
            done: done_rx,
        })
    }
}

/// A running emulator; see the [module docs](self).
///
/// [`shutdown`](Server::shutdown) stops it and waits. Dropping it stops it
/// too, without waiting: it stops accepting, and its connections close once
/// their requests in flight are answered.
pub struct Server {
    blob: SocketAddr,
    queue: SocketAddr,
    table: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    done: mpsc::Receiver<Infallible>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("blob", &self.blob)
            .field("queue", &self.queue)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A builder with the defaults: in memory, `127.0.0.1`, Azurite's ports,
    /// the emulator's account.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            file: None,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            blob_port: 10000,
            queue_port: 10001,
            table_port: 10002,
            accounts: vec![(
                DEV_ACCOUNT.to_owned(),
                AccountKey::from_base64(DEV_KEY).expect("the emulator's key is base64"),
            )],
            bearer: None,
            clock: Clock::System,
        }
    }

    /// The address the Blob service listens on.
    pub fn blob_address(&self) -> SocketAddr {
        self.blob
    }

    /// The address the Queue service listens on.
    pub fn queue_address(&self) -> SocketAddr {
        self.queue
    }

    /// The address the Table service listens on.
    pub fn table_address(&self) -> SocketAddr {
        self.table
    }

    /// The connection string of the emulator's account on this server, with
    /// its three endpoints (path-style, as Azurite's): what a client of any
    /// SDK is given.
    pub fn connection_string(&self) -> String {
        self.connection_string_for(DEV_ACCOUNT)
            .expect("the emulator's account is always served")
    }

    /// The connection string of the served account `name`, with its key;
    /// `None` if the server does not serve it.
    pub fn connection_string_for(&self, name: &str) -> Option<String> {
        let account = self.state.accounts.iter().find(|a| a.name == name)?;
        let endpoint = |a: SocketAddr| format!("http://{a}/{name}");
        Some(format!(
            "DefaultEndpointsProtocol=http;AccountName={name};AccountKey={key};\
             BlobEndpoint={};QueueEndpoint={};TableEndpoint={};",
            endpoint(self.blob),
            endpoint(self.queue),
            endpoint(self.table),
            key = account.key.to_base64(),
        ))
    }

    /// Stops accepting connections, lets the requests in flight finish and
    /// their connections close, and closes the store: everything
    /// acknowledged is in the file.
    ///
    /// # Errors
    ///
    /// None today; the `Result` leaves room for a store that reports its
    /// close.
    pub async fn shutdown(mut self) -> Result<()> {
        let _ = self.stop.send(true);
        // Every accept loop and connection holds a sender: `None` when all
        // are gone.
        while self.done.recv().await.is_some() {}
        tracing::info!(target: "tablekit::server", "stopped");
        Ok(())
    }
}

async fn accept(
    listener: TcpListener,
    service: Service,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
    done: mpsc::Sender<Infallible>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(target: "tablekit::server", error = %e, "accept failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let mut stop = stop.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let _done = done;
            let answer = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, service, peer.ip(), req).await) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), answer);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// Answers one request: reads its body, finds its account, authenticates
/// it, hands it to its service, and stamps the headers every answer has.
async fn answer(state: &State, service: Service, peer: IpAddr, req: Request<Incoming>) -> Reply {
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = req.into_parts();
    let result = async {
        let body = match Limited::new(body, MAX_BODY).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(Failure::new(
                    413,
                    "RequestBodyTooLarge",
                    "The request body is too large.",
                ));
            }
            Err(_) => {
                return Err(Failure::new(
                    400,
                    "InvalidInput",
                    "The request body could not be read.",
                ));
            }
        };
        let (account_name, path) = split_path(parts.uri.path())?;
        let account = state.account(&account_name).ok_or_else(|| {
            Failure::new(
                400,
                "InvalidUri",
                format!("The account `{account_name}` is not served here."),
            )
        })?;
        let query = parse_query(parts.uri.query().unwrap_or(""));
        let access =
            auth::authenticate(state, account, service, &parts, &query, &path, Some(peer)).await?;
        let ctx = Ctx {
            account,
            access: &access,
            parts: &parts,
            path: &path,
            query: &query,
            body,
            request_id: &request_id,
        };
        match service {
            Service::Table => table::handle(ctx).await,
            Service::Queue => queue::handle(ctx).await,
            Service::Blob => blob::handle(ctx).await,
        }
    }
    .await;
    let mut reply = result.unwrap_or_else(|failure| failure.into_reply(service, &request_id));
    let unauthorized = reply.status() == http::StatusCode::UNAUTHORIZED;
    let headers = reply.headers_mut();
    if unauthorized {
        if let Ok(v) = HeaderValue::from_str(&bearer::challenge(state.bearer.as_ref())) {
            headers.insert(http::header::WWW_AUTHENTICATE, v);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        headers.insert("x-ms-request-id", v);
    }
    if let Some(id) = parts.headers.get("x-ms-client-request-id") {
        headers.insert("x-ms-client-request-id", id.clone());
    }
    let version = parts
        .headers
        .get("x-ms-version")
        .cloned()
        .unwrap_or(HeaderValue::from_static(reply::VERSION));
    headers.insert("x-ms-version", version);
    if let Ok(date) = HeaderValue::from_str(&reply::http_date(chrono::Utc::now())) {
        headers.insert(http::header::DATE, date);
    }
    headers.insert(
        http::header::SERVER,
        HeaderValue::from_static(concat!("tablekit/", env!("CARGO_PKG_VERSION"))),
    );
    reply
}

/// `/<account>/<rest>` into the account and `<rest>`, percent-decoded.
fn split_path(path: &str) -> std::result::Result<(String, String), Failure> {
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| Failure::new(400, "InvalidUri", "The path is not UTF-8."))?;
    let trimmed = decoded.strip_prefix('/').unwrap_or(&decoded);
    let (account, rest) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if account.is_empty() {
        return Err(Failure::new(
            400,
            "InvalidUri",
            "The path names no account (path-style: /<account>/...).",
        ));
    }
    Ok((account.to_owned(), rest.to_owned()))
}

/// The query string's parameters, percent-decoded (`+` stays `+`, as the
/// service reads it).
fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_splits_into_its_account_and_the_rest_decoded() {
        assert_eq!(
            split_path("/devstoreaccount1/my%20container/a%2Fb").unwrap(),
            ("devstoreaccount1".to_owned(), "my container/a/b".to_owned())
        );
        assert_eq!(
            split_path("/devstoreaccount1").unwrap(),
            ("devstoreaccount1".to_owned(), String::new())
        );
        assert!(split_path("/").is_err());
    }

    #[tokio::test]
    async fn a_dropped_server_stops_listening() {
        let server = Server::builder().ports(0, 0, 0).start().await.unwrap();
        let addresses = [
            server.blob_address(),
            server.queue_address(),
            server.table_address(),
        ];
        for address in addresses {
            tokio::net::TcpStream::connect(address).await.unwrap();
        }
        drop(server);
        for address in addresses {
            // The accept loops see the drop when they next run.
            let mut refused = false;
            for _ in 0..1000 {
                if tokio::net::TcpStream::connect(address).await.is_err() {
                    refused = true;
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert!(refused, "{address} still accepts after the drop");
        }
    }

    #[test]
    fn query_parameters_are_decoded_in_order() {
        assert_eq!(
            parse_query("comp=list&prefix=a%20b&x"),
            vec![
                ("comp".to_owned(), "list".to_owned()),
                ("prefix".to_owned(), "a b".to_owned()),
                ("x".to_owned(), String::new()),
            ]
        );
    }
}
