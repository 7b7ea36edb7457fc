//! Run one test on every backend: the in-memory store, the store kept in a
//! file, that store served over HTTP by [`tablekit::server`](crate::server),
//! and Azurite.
//!
//! Code built on tablekit runs against Azure Storage in production and, very
//! often, against the embedded store in tests. This module checks that the
//! two answer alike for *your* code: write a case once, as an `async fn`
//! taking a [`TestEnv`], and [`conformance!`] makes four tests of it.
//!
//! | test                 | backend              | services                                                      |
//! |----------------------|----------------------|---------------------------------------------------------------|
//! | `case::embedded`      | [`Backend::Memory`]  | fresh in-memory stores                                        |
//! | `case::embedded_file` | [`Backend::File`]    | fresh store files in a scratch folder, removed afterwards     |
//! | `case::served`        | [`Backend::Served`]  | a fresh in-memory store served over HTTP on loopback ports    |
//! | `case::azurite`       | [`Backend::Azurite`] | the emulator named by `TABLEKIT_TEST_CONNECTION_STRING`       |
//!
//! The `served` tests run tablekit's HTTP client (signing, retries, the
//! service's JSON, XML and multipart) against tablekit's own emulator,
//! which keeps the embedded store's strict rules: a case passes there and
//! on Azurite when the code is right for the wire and for the service's
//! rules, whatever Azurite lets through.
//!
//! Filters of `cargo test` and `cargo nextest` pick a backend by that name:
//! `cargo test ::embedded` runs no case on Azurite.
//!
//! # Azurite
//!
//! The `azurite` tests read the connection string in
//! [`CONNECTION_STRING_VAR`] (`TABLEKIT_TEST_CONNECTION_STRING`), for instance
//! `UseDevelopmentStorage=true` once Azurite runs on its default ports. Then:
//!
//! * Unset (or blank), a test passes without checking anything, after a
//!   banner on the process's stderr (once per test binary, past the test
//!   harness's capture of output) that says so. With `CI=true` it fails
//!   instead: a build server that forgot to start the emulator is a red build,
//!   not a green one that checked half of what it claims.
//! * Every endpoint it names must be on this machine (`127.0.0.1`,
//!   `localhost` or `::1`): the cases create and delete tables, queues and
//!   containers, and a connection string left over from other work must not
//!   point them at a real account. Anything else fails the test.
//! * The clients use the transport named by [`TRANSPORT_VAR`]
//!   (`TABLEKIT_TRANSPORT`: `hyper`, the default, or `reqwest`, which needs the
//!   `reqwest` feature), so one suite can be run on each transport. Only this
//!   module reads it: the clients themselves never read the environment.
//!
//! # What a case gets
//!
//! A [`TestEnv`] hands out the [`tables`](TestEnv::tables),
//! [`queues`](TestEnv::queues) and [`blobs`](TestEnv::blobs) of one backend
//! (each opened on first use), says which backend it is
//! ([`backend`](TestEnv::backend)), makes uniquely named tables, queues and
//! containers so that cases run in parallel ([`fresh_table`](TestEnv::fresh_table),
//! [`fresh_queue`](TestEnv::fresh_queue), [`fresh_container`](TestEnv::fresh_container)),
//! and lets time pass: on the embedded stores queues and blobs run on a
//! [`ManualClock`] that [`wait`](TestEnv::wait) moves, on Azurite `wait`
//! sleeps. Where Azurite differs from the real service, a case can branch on
//! [`Backend::is_azurite`].
//!
//! # Example
//!
//! In a crate with `tablekit` (feature `test-support`) as a dev-dependency,
//! nothing else needed (the harness builds the Tokio runtime itself):
//!
//! ```
//! use tablekit::DynamicEntity;
//!
//! /// The code under test: counts the entities of a partition.
//! async fn count(table: &tablekit::TableClient<DynamicEntity>, pk: &str) -> tablekit::Result<usize> {
//!     let rows = table.query().filter(|e| e.partition_key.eq(pk)).fetch_all().await?;
//!     Ok(rows.len())
//! }
//!
//! tablekit::testing::conformance! {
//!     /// Four tests: `counts_a_partition::{azurite, embedded, embedded_file, served}`.
//!     async fn counts_a_partition(env) -> tablekit::Result<()> {
//!         let table = env.fresh_table::<DynamicEntity>("Counted").await;
//!         for row in ["a", "b", "c"] {
//!             table.insert(&DynamicEntity::new("p1", row)).await?;
//!         }
//!         table.insert(&DynamicEntity::new("p2", "a")).await?;
//!         assert_eq!(count(&table, "p1").await?, 3);
//!         Ok(())
//!     }
//! }
//! # // rustdoc runs no #[test] functions: run the in-memory case by hand.
//! # fn main() {
//! #     tablekit::testing::run(Backend::Memory, |env| async move {
//! #         counts_a_partition::case(env).await.unwrap()
//! #     });
//! # }
//! # use tablekit::testing::Backend;
//! ```
//!
//! [`conformance!`] also takes a list of `async fn`s that each take a
//! [`TestEnv`] (ordinary functions, which rustfmt formats and an IDE
//! completes), and a `#[runtime(flavor = "multi_thread", worker_threads = 2)]`
//! attribute on a case for a multi-threaded runtime; see its documentation.
//! [`TestEnv::new`] and [`run`] are the same machinery without the macro.

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

#[cfg(feature = "blob")]
use crate::blob::{BlobServiceClient, ContainerClient};
use crate::clock::ManualClock;
use crate::options::{ClientOptions, Transport};
#[cfg(feature = "queue")]
use crate::queue::{QueueClient, QueueServiceClient};
use crate::{Account, TableClient, TableEntity, TableServiceClient};

/// The environment variable holding the connection string of the Azurite
/// account the `azurite` tests use: `TABLEKIT_TEST_CONNECTION_STRING`.
pub const CONNECTION_STRING_VAR: &str = "TABLEKIT_TEST_CONNECTION_STRING";

/// The environment variable that picks the HTTP transport of the Azurite
/// clients: `TABLEKIT_TRANSPORT`, `hyper` (the default) or `reqwest` (with the
/// `reqwest` feature). See [`client_options`].
pub const TRANSPORT_VAR: &str = "TABLEKIT_TRANSPORT";

/// Which backend a [`TestEnv`] runs on.
///
/// ```
/// use tablekit::testing::Backend;
///
/// assert!(Backend::Azurite.is_azurite());
/// assert!(Backend::File.is_embedded());
/// assert_eq!(Backend::File.test_name(), "embedded_file");
/// assert!(Backend::Served.is_http() && !Backend::Served.is_embedded());
/// assert_eq!(Backend::ALL.len(), 4);
/// ```
///
/// Exhaustive on purpose: a new backend would be a new test of every case,
/// and a case that decides per backend should hear of it from the compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The embedded store in memory, fresh for each test
    /// ([`TableServiceClient::embedded`] and its queue and blob counterparts).
    Memory,
    /// The embedded store kept in files of a fresh scratch folder, removed
    /// when the [`TestEnv`] is dropped ([`TableServiceClient::embedded_at`]).
    File,
    /// Azurite over HTTP, as [`CONNECTION_STRING_VAR`] names it.
    Azurite,
    /// A fresh in-memory embedded store served over HTTP by an in-process
    /// [`Server`](crate::server::Server) on free loopback ports, reached by
    /// tablekit's HTTP clients: the service's rules over the wire. Its
    /// queues and blobs run on the env's [`ManualClock`].
    Served,
}

impl Backend {
    /// Every backend, in the order [`conformance!`] declares their tests.
    pub const ALL: [Backend; 4] = [
        Backend::Azurite,
        Backend::Memory,
        Backend::File,
        Backend::Served,
    ];

    /// Whether this is Azurite, whose deviations from the service a case may
    /// have to accept.
    pub fn is_azurite(self) -> bool {
        self == Backend::Azurite
    }

    /// Whether this is the embedded store in this process, reached without
    /// HTTP (in memory or in a file).
    pub fn is_embedded(self) -> bool {
        matches!(self, Backend::Memory | Backend::File)
    }

    /// Whether the clients reach this backend over HTTP (Azurite, or the
    /// served store): requests are signed, answers carry request ids.
    pub fn is_http(self) -> bool {
        matches!(self, Backend::Azurite | Backend::Served)
    }

    /// The name of this backend's test in a module made by [`conformance!`]:
    /// `embedded`, `embedded_file`, `served` or `azurite`.
    pub fn test_name(self) -> &'static str {
        match self {
            Backend::Memory => "embedded",
            Backend::File => "embedded_file",
            Backend::Azurite => "azurite",
            Backend::Served => "served",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Memory => "the embedded store in memory",
            Backend::File => "the embedded store in a file",
            Backend::Azurite => "Azurite",
            Backend::Served => "the embedded store served over HTTP",
        })
    }
}

/// The services of one backend for one test case: what [`conformance!`]
/// passes to each case.
///
/// Each service is opened on first use (a case that only uses tables opens
/// no queue file). On the embedded backends queues and blobs run on one
/// [`ManualClock`] (visibility timeouts, message lifetimes, leases), which
/// [`wait`](TestEnv::wait) moves; tables keep the system clock. Dropping the
/// `TestEnv` removes the [`File`](Backend::File) backend's scratch folder.
///
/// ```
/// use std::time::Duration;
/// use tablekit::testing::{Backend, TestEnv};
///
/// # tablekit::testing::run(Backend::Memory, |_| async {
/// let env = TestEnv::new(Backend::File).expect("embedded backends always run");
/// let dir = env.scratch_dir().unwrap().to_path_buf();
/// let jobs = env.fresh_queue("jobs").await;
/// jobs.send("resize photo 17").await.unwrap();
/// let got = jobs.receive().visibility_timeout(env.visibility_timeout()).await.unwrap();
/// assert_eq!(got.len(), 1);
/// assert!(jobs.receive().await.unwrap().is_empty(), "hidden while it is worked on");
/// env.wait(env.visibility_timeout() + Duration::from_secs(1)).await;
/// assert_eq!(jobs.receive().await.unwrap().len(), 1, "visible again");
/// drop((jobs, env));
/// assert!(!dir.exists(), "the scratch folder went with the env");
/// # });
/// ```
pub struct TestEnv {
    backend: Backend,
    /// Azurite's account and the clients' options (the account's key stays
    /// in it, and out of `Debug`).
    account: Option<(Account, ClientOptions)>,
    clock: Option<ManualClock>,
    tables: OnceLock<TableServiceClient>,
    #[cfg(feature = "queue")]
    queues: OnceLock<QueueServiceClient>,
    #[cfg(feature = "blob")]
    blobs: OnceLock<BlobServiceClient>,
    /// The served backend's server, stopped with the env.
    #[cfg(feature = "server")]
    server: Option<Served>,
    // Last: removed after the clients above let go of its files.
    scratch: Option<ScratchDir>,
}

impl TestEnv {
    /// The services of `backend`, or `None` for [`Backend::Azurite`] when
    /// [`CONNECTION_STRING_VAR`] is not set (see [`azurite_connection_string`]).
    ///
    /// # Panics
    ///
    /// On Azurite: without a connection string when `CI=true`, with one
    /// that is malformed or names an endpoint off this machine. For
    /// [`Backend::File`]: when the scratch folder cannot be created.
    pub fn new(backend: Backend) -> Option<TestEnv> {
        let mut env = TestEnv {
            backend,
            account: None,
            clock: None,
            tables: OnceLock::new(),
            #[cfg(feature = "queue")]
            queues: OnceLock::new(),
            #[cfg(feature = "blob")]
            blobs: OnceLock::new(),
            #[cfg(feature = "server")]
            server: None,
            scratch: None,
        };
        match backend {
            Backend::Memory => env.clock = Some(ManualClock::starting_now()),
            Backend::File => {
                env.clock = Some(ManualClock::starting_now());
                env.scratch = Some(ScratchDir::new());
            }
            Backend::Azurite => {
                let conn = azurite_connection_string()?;
                let account = Account::from_connection_string(&conn).unwrap_or_else(|e| {
                    panic!("{CONNECTION_STRING_VAR} is not a valid connection string: {e}")
                });
                assert_loopback(&account);
                env.account = Some((account, client_options()));
            }
            Backend::Served => {
                let clock = ManualClock::starting_now();
                let served = Served::start(clock.clone());
                let account = Account::from_connection_string(&served.server.connection_string())
                    .expect("the server's connection string parses");
                env.account = Some((account, client_options()));
                env.clock = Some(clock);
                env.server = Some(served);
            }
        }
        Some(env)
    }

    /// The in-memory backend ([`Backend::Memory`]).
    pub fn memory() -> TestEnv {
        TestEnv::new(Backend::Memory).expect("the embedded store always runs")
    }

    /// The file backend ([`Backend::File`]), in a fresh scratch folder.
    pub fn file() -> TestEnv {
        TestEnv::new(Backend::File).expect("the embedded store always runs")
    }

    /// Azurite ([`Backend::Azurite`]), or `None` without a connection string.
    pub fn azurite() -> Option<TestEnv> {
        TestEnv::new(Backend::Azurite)
    }

    /// A fresh in-memory store served over HTTP ([`Backend::Served`]).
    /// Call it within a Tokio runtime, on which the server runs.
    pub fn served() -> TestEnv {
        TestEnv::new(Backend::Served).expect("the served store always runs")
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The connection string of an HTTP backend (Azurite's, or the served
    /// store's, with the emulator's well-known key), for a case that builds
    /// its own clients, in another runtime or process; `None` on the
    /// embedded store.
    pub fn connection_string(&self) -> Option<String> {
        match self.backend {
            Backend::Azurite => azurite_connection_string(),
            #[cfg(feature = "server")]
            Backend::Served => self.server.as_ref().map(|s| s.server.connection_string()),
            _ => None,
        }
    }

    /// The Table service of this backend.
    ///
    /// # Panics
    ///
    /// When the store file cannot be opened, or Azurite's account has no
    /// table endpoint.
    pub fn tables(&self) -> &TableServiceClient {
        self.tables.get_or_init(|| self.open_tables())
    }

    /// The Queue service of this backend, on [`clock`](TestEnv::clock) when embedded.
    ///
    /// # Panics
    ///
    /// When the store file cannot be opened, or Azurite's account has no
    /// queue endpoint.
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn queues(&self) -> &QueueServiceClient {
        self.queues.get_or_init(|| self.open_queues())
    }

    /// The Blob service of this backend, on [`clock`](TestEnv::clock) when embedded.
    ///
    /// # Panics
    ///
    /// When the store file cannot be opened, or Azurite's account has no
    /// blob endpoint.
    #[cfg(feature = "blob")]
    #[cfg_attr(docsrs, doc(cfg(feature = "blob")))]
    pub fn blobs(&self) -> &BlobServiceClient {
        self.blobs.get_or_init(|| self.open_blobs())
    }

    /// A second client of the same Table service, for "another writer"
    /// tests: on Azurite an independent client (its own connections), on
    /// the embedded store a clone sharing the store, which is what another
    /// client of the same store sees (a store file is open once per process).
    pub fn second_tables(&self) -> TableServiceClient {
        match &self.account {
            Some(_) => self.open_tables(),
            None => self.tables().clone(),
        }
    }

    /// A second client of the same Queue service (see [`second_tables`](TestEnv::second_tables)).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn second_queues(&self) -> QueueServiceClient {
        match &self.account {
            Some(_) => self.open_queues(),
            None => self.queues().clone(),
        }
    }

    /// A second client of the same Blob service (see [`second_tables`](TestEnv::second_tables)).
    #[cfg(feature = "blob")]
    #[cfg_attr(docsrs, doc(cfg(feature = "blob")))]
    pub fn second_blobs(&self) -> BlobServiceClient {
        match &self.account {
            Some(_) => self.open_blobs(),
            None => self.blobs().clone(),
        }
    }

    /// The clock of the embedded (or served) queues and blobs, starting at
    /// the time the env was made; `None` on Azurite, where time is real.
    pub fn clock(&self) -> Option<&ManualClock> {
        self.clock.as_ref()
    }

    /// The time now, as this backend's queues and blobs see it.
    pub fn now(&self) -> DateTime<Utc> {
        match &self.clock {
            Some(clock) => clock.now(),
            None => Utc::now(),
        }
    }

    /// Lets `d` pass for the queues and blobs: the embedded (or served)
    /// store's clock moves at once, on Azurite the case sleeps.
    pub async fn wait(&self, d: Duration) {
        match &self.clock {
            Some(clock) => clock.advance(d),
            None => tokio::time::sleep(d).await,
        }
    }

    /// A visibility timeout (or lease) suited to this backend: short on
    /// Azurite (2 s), where a case that lets it pass really waits, longer on
    /// the embedded store (30 s), where [`wait`](TestEnv::wait) is free and
    /// a slow machine never lets it pass by accident.
    pub fn visibility_timeout(&self) -> Duration {
        match self.backend {
            Backend::Azurite => Duration::from_secs(2),
            _ => Duration::from_secs(30),
        }
    }

    /// The scratch folder of the [`File`](Backend::File) backend (its
    /// `tables.redb`, `queues.redb` and `blobs.redb`, and room for a case's
    /// own files), removed when the env is dropped; `None` on the others.
    pub fn scratch_dir(&self) -> Option<&Path> {
        self.scratch.as_ref().map(|s| s.0.as_path())
    }

    /// A new, uniquely named table of this backend (see [`fresh_table`]).
    pub async fn fresh_table<T: TableEntity>(&self, prefix: &str) -> TableClient<T> {
        fresh_table(self.tables(), prefix).await
    }

    /// A new, uniquely named queue of this backend (see [`fresh_queue`]).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub async fn fresh_queue(&self, prefix: &str) -> QueueClient {
        fresh_queue(self.queues(), prefix).await
    }

    /// A new, uniquely named blob container of this backend (see [`fresh_container`]).
    #[cfg(feature = "blob")]
    #[cfg_attr(docsrs, doc(cfg(feature = "blob")))]
    pub async fn fresh_container(&self, prefix: &str) -> ContainerClient {
        fresh_container(self.blobs(), prefix).await
    }

    fn scratch_file(&self, name: &str) -> PathBuf {
        self.scratch
            .as_ref()
            .expect("the file backend has a scratch folder")
            .0
            .join(name)
    }

    fn open_tables(&self) -> TableServiceClient {
        match (self.backend, &self.account) {
            (_, Some((account, options))) => {
                TableServiceClient::with_options(account.clone(), options.clone())
                    .unwrap_or_else(|e| panic!("the Table service of {CONNECTION_STRING_VAR}: {e}"))
            }
            (Backend::File, None) => {
                TableServiceClient::embedded_at(self.scratch_file("tables.redb"))
                    .unwrap_or_else(|e| panic!("open the table store file: {e}"))
            }
            _ => TableServiceClient::embedded(),
        }
    }

    #[cfg(feature = "queue")]
    fn open_queues(&self) -> QueueServiceClient {
        let clock = self.clock.clone().unwrap_or_else(ManualClock::starting_now);
        match (self.backend, &self.account) {
            (_, Some((account, options))) => {
                QueueServiceClient::with_options(account.clone(), options.clone())
                    .unwrap_or_else(|e| panic!("the Queue service of {CONNECTION_STRING_VAR}: {e}"))
            }
            (Backend::File, None) => {
                QueueServiceClient::embedded_at_with_clock(self.scratch_file("queues.redb"), clock)
                    .unwrap_or_else(|e| panic!("open the queue store file: {e}"))
            }
            _ => QueueServiceClient::embedded_with_clock(clock),
        }
    }

    #[cfg(feature = "blob")]
    fn open_blobs(&self) -> BlobServiceClient {
        let clock = self.clock.clone().unwrap_or_else(ManualClock::starting_now);
        match (self.backend, &self.account) {
            (_, Some((account, options))) => {
                BlobServiceClient::with_options(account.clone(), options.clone())
                    .unwrap_or_else(|e| panic!("the Blob service of {CONNECTION_STRING_VAR}: {e}"))
            }
            (Backend::File, None) => {
                BlobServiceClient::embedded_at_with_clock(self.scratch_file("blobs.redb"), clock)
                    .unwrap_or_else(|e| panic!("open the blob store file: {e}"))
            }
            _ => BlobServiceClient::embedded_with_clock(clock),
        }
    }
}

/// The served backend's server, on a runtime of its own (one worker
/// thread): a case that blocks its own thread (joining a thread that talks
/// to the server) does not stop the server with it, as it would not stop a
/// server in another process.
#[cfg(feature = "server")]
struct Served {
    server: crate::server::Server,
    runtime: Option<tokio::runtime::Runtime>,
}

#[cfg(feature = "server")]
impl Served {
    fn start(clock: ManualClock) -> Served {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tablekit-served")
            .enable_all()
            .build()
            .expect("build the served backend's runtime");
        let server = {
            let _in = runtime.enter();
            crate::server::Server::builder()
                .ports(0, 0, 0)
                .clock(clock)
                .start_now()
                .unwrap_or_else(|e| panic!("start the served backend's server: {e}"))
        };
        Served {
            server,
            runtime: Some(runtime),
        }
    }
}

#[cfg(feature = "server")]
impl Drop for Served {
    fn drop(&mut self) {
        // Dropped inside the case's runtime, where a blocking drop panics.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestEnv")
            .field("backend", &self.backend)
            .field(
                "account",
                &self.account.as_ref().map(|(a, _)| a.account_name()),
            )
            .field("clock", &self.clock)
            .field("scratch_dir", &self.scratch_dir())
            .finish()
    }
}

/// A fresh folder in the temporary directory, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> ScratchDir {
        let dir = std::env::temp_dir().join(unique_name("tablekit-test-"));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("create the scratch folder {}: {e}", dir.display()));
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `prefix` followed by 12 hex digits of a random UUID: a different name on
/// every call, so that cases running in parallel (and earlier runs against
/// the same Azurite) never meet.
///
/// ```
/// let a = tablekit::testing::unique_name("Orders");
/// assert_eq!(a.len(), "Orders".len() + 12);
/// assert!(a.starts_with("Orders"));
/// assert_ne!(a, tablekit::testing::unique_name("Orders"));
/// ```
pub fn unique_name(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &id[..12])
}

/// Creates the table [`unique_name`]`(prefix)` on `svc` and returns its client.
///
/// # Panics
///
/// When the name is not a valid table name (the prefix must be letters and
/// digits, starting with a letter, at most 51 of them) or the table cannot
/// be created.
pub async fn fresh_table<T: TableEntity>(svc: &TableServiceClient, prefix: &str) -> TableClient<T> {
    let name = unique_name(prefix);
    let table = svc.table::<T>(&name).unwrap_or_else(|e| {
        panic!(
            "test table name {name:?} is invalid ({e}); pick a prefix of letters and digits \
             starting with a letter"
        )
    });
    table
        .create_table()
        .await
        .unwrap_or_else(|e| panic!("create the test table {name}: {e}"));
    table
}

/// Creates the queue [`unique_name`]`(prefix)`, lower-cased, on `svc` and
/// returns its client.
///
/// # Panics
///
/// When the name is not a valid queue name (the prefix must be letters,
/// digits and single hyphens, starting with a letter or digit, at most 51
/// of them) or the queue cannot be created.
#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub async fn fresh_queue(svc: &QueueServiceClient, prefix: &str) -> QueueClient {
    let name = unique_name(prefix).to_lowercase();
    let queue = svc
        .queue(&name)
        .unwrap_or_else(|e| panic!("test queue name {name:?} is invalid: {e}"));
    queue
        .create_queue()
        .await
        .unwrap_or_else(|e| panic!("create the test queue {name}: {e}"));
    queue
}

/// Creates the blob container [`unique_name`]`(prefix)`, lower-cased, on
/// `svc` and returns its client.
///
/// # Panics
///
/// When the name is not a valid container name (as for [`fresh_queue`]) or
/// the container cannot be created.
#[cfg(feature = "blob")]
#[cfg_attr(docsrs, doc(cfg(feature = "blob")))]
pub async fn fresh_container(svc: &BlobServiceClient, prefix: &str) -> ContainerClient {
    let name = unique_name(prefix).to_lowercase();
    let container = svc
        .container(&name)
        .unwrap_or_else(|e| panic!("test container name {name:?} is invalid: {e}"));
    container
        .create_container()
        .await
        .unwrap_or_else(|e| panic!("create the test container {name}: {e}"));
    container
}

/// The client options of the Azurite clients: the defaults, on the
/// transport [`TRANSPORT_VAR`] names (`hyper`, the default, or `reqwest`).
///
/// # Panics
///
/// When the variable names another transport, or `reqwest` without the
/// `reqwest` feature.
pub fn client_options() -> ClientOptions {
    let mut options = ClientOptions::default();
    options.http.transport = transport();
    options
}

fn transport() -> Transport {
    transport_of(std::env::var(TRANSPORT_VAR).ok().as_deref())
}

/// The transport a value of [`TRANSPORT_VAR`] names.
fn transport_of(name: Option<&str>) -> Transport {
    match name.map(str::trim).ok_or(()) {
        Err(_) | Ok("") => Transport::default(),
        Ok(v) if v.eq_ignore_ascii_case("hyper") => Transport::Hyper,
        #[cfg(feature = "reqwest")]
        Ok(v) if v.eq_ignore_ascii_case("reqwest") => Transport::Reqwest,
        #[cfg(not(feature = "reqwest"))]
        Ok(v) if v.eq_ignore_ascii_case("reqwest") => {
            panic!("{TRANSPORT_VAR}=reqwest needs tablekit's `reqwest` feature")
        }
        Ok(other) => panic!("{TRANSPORT_VAR} must be `hyper` or `reqwest`, not {other:?}"),
    }
}

/// The connection string in [`CONNECTION_STRING_VAR`], as the `azurite`
/// tests read it: `None` when it is unset or blank, after a banner on
/// stderr (once per process) saying that the Azurite tests check nothing.
///
/// # Panics
///
/// When it is unset and the environment variable `CI` is `true`: on a build
/// server a missing emulator is a failure.
pub fn azurite_connection_string() -> Option<String> {
    let conn = connection_string_of(
        std::env::var(CONNECTION_STRING_VAR).ok(),
        std::env::var("CI").ok(),
    );
    if conn.is_none() {
        skipped_banner();
    }
    conn
}

/// [`azurite_connection_string`] given the two variables, without the banner.
fn connection_string_of(conn: Option<String>, ci: Option<String>) -> Option<String> {
    match conn {
        Some(s) if !s.trim().is_empty() => Some(s),
        _ => {
            if ci.is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
                panic!(
                    "{CONNECTION_STRING_VAR} is not set but CI=true: the `azurite` tests need \
                     Azurite running and {CONNECTION_STRING_VAR} naming it \
                     (UseDevelopmentStorage=true for its default ports)"
                );
            }
            None
        }
    }
}

static SKIP_BANNER: Once = Once::new();

/// Says once per process that the Azurite tests did not run, on stderr
/// itself: the test harness captures `eprintln!` and shows it only for
/// failing tests, so a green run would otherwise hide that a third of the
/// tests checked nothing.
fn skipped_banner() {
    SKIP_BANNER.call_once(|| {
        let line = "=".repeat(78);
        let _ = writeln!(
            std::io::stderr(),
            "\n{line}\n  AZURITE CASES SKIPPED: {CONNECTION_STRING_VAR} is not set (and CI is not true).\n  \
             Every `::azurite` test of this binary passed without checking anything.\n  \
             Start Azurite and set {CONNECTION_STRING_VAR} (UseDevelopmentStorage=true for its\n  \
             default ports; in tablekit's repository: eval \"$(scripts/azurite.sh start)\").\n{line}\n"
        );
    });
}

/// The `azurite` tests only ever talk to an emulator on this machine.
fn assert_loopback(account: &Account) {
    let endpoints = [
        account.table_endpoint(),
        account.queue_endpoint(),
        account.blob_endpoint(),
    ];
    assert!(
        endpoints.iter().any(Option::is_some),
        "{CONNECTION_STRING_VAR} names no endpoint"
    );
    for endpoint in endpoints.into_iter().flatten() {
        let host = host_of(endpoint);
        assert!(
            matches!(host, "127.0.0.1" | "localhost" | "::1"),
            "{CONNECTION_STRING_VAR} points at {host:?}; the `azurite` tests only run against \
             an emulator on this machine (127.0.0.1, localhost or ::1)"
        );
    }
}

fn host_of(endpoint: &str) -> &str {
    let authority = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    }
}

/// Runs `case` on `backend` in a fresh current-thread Tokio runtime, as the
/// tests of [`conformance!`] do: builds the [`TestEnv`] (returning at once,
/// after the banner, when Azurite is not configured), awaits the case, and
/// fails if it returned an error. For the cases a macro does not fit.
///
/// ```
/// use tablekit::testing::{run, Backend};
///
/// run(Backend::Memory, |env| async move {
///     assert_eq!(env.backend(), Backend::Memory);
///     env.tables().table::<tablekit::DynamicEntity>("Notes")?.create_table().await?;
///     Ok::<(), tablekit::Error>(())
/// });
/// ```
///
/// # Panics
///
/// When the case panics or returns an `Err` (whose `Debug` form the panic
/// message shows), and as [`TestEnv::new`].
pub fn run<F, Fut>(backend: Backend, case: F)
where
    F: FnOnce(TestEnv) -> Fut,
    Fut: Future,
    Fut::Output: __private::Outcome,
{
    __private::run(__private::Runtime::CurrentThread, backend, case);
}

/// Makes each case four tests, one per [`Backend`]: a module named after
/// the case with the tests `azurite`, `embedded`, `embedded_file` and `served`.
///
/// Cases are written inline, `async fn name(env) { ... }` with `env` a
/// [`TestEnv`](crate::testing::TestEnv), optionally returning a `Result`
/// (an `Err` fails the test, showing its `Debug` form):
///
/// ```
/// use tablekit::DynamicEntity;
///
/// tablekit::testing::conformance! {
///     /// Doc comments and other attributes go on the case's module.
///     async fn an_insert_reads_back(env) -> tablekit::Result<()> {
///         let table = env.fresh_table::<DynamicEntity>("Notes").await;
///         table.insert(&DynamicEntity::new("p", "r")).await?;
///         assert!(table.get(("p", "r")).await?.is_some());
///         Ok(())
///     }
///
///     #[runtime(flavor = "multi_thread", worker_threads = 2)]
///     async fn on_two_threads(env) {
///         let svc = env.tables().clone();
///         let task = tokio::spawn(async move { svc.list_tables().fetch_all().await });
///         task.await.unwrap().unwrap();
///     }
/// }
/// # fn main() {
/// #     tablekit::testing::run(tablekit::testing::Backend::File, |env| async move {
/// #         an_insert_reads_back::case(env).await.unwrap()
/// #     });
/// # }
/// ```
///
/// or as a list of `async fn`s taking a [`TestEnv`](crate::testing::TestEnv)
/// (ordinary items, which rustfmt formats), each with optional attributes:
///
/// ```
/// use tablekit::testing::TestEnv;
///
/// async fn listing_starts_empty(env: TestEnv) {
///     assert!(env.fresh_queue("jobs").await.receive().await.unwrap().is_empty());
/// }
///
/// async fn time_passes_on_demand(env: TestEnv) {
///     let before = env.now();
///     env.wait(std::time::Duration::from_secs(60)).await;
///     assert!(env.now() >= before + chrono::Duration::seconds(60));
/// }
/// # use tablekit::chrono;
///
/// tablekit::testing::conformance!(
///     listing_starts_empty,
///     #[runtime(flavor = "multi_thread")]
///     time_passes_on_demand,
/// );
/// # fn main() {
/// #     tablekit::testing::run(tablekit::testing::Backend::Memory, listing_starts_empty);
/// #     tablekit::testing::run(tablekit::testing::Backend::Memory, time_passes_on_demand);
/// # }
/// ```
///
/// The runtime is a current-thread Tokio runtime unless a case says
/// `#[runtime(flavor = "multi_thread")]`, optionally with
/// `worker_threads = n` (as `#[tokio::test]` takes them); time and I/O are
/// enabled. The harness builds it itself: the crate needs no Tokio macros.
/// The tests' module has `use super::*`, so a case sees its file's items.
#[doc(hidden)] // shown where users find it: `tablekit::testing::conformance`
#[macro_export]
macro_rules! conformance {
    // Inline cases.
    ($($(#[$($attr:tt)*])* async fn $name:ident ($env:ident) $(-> $ret:ty)? $body:block)+) => {
        $(
            $crate::conformance!(@case [] [] $(#[$($attr)*])* {
                pub(super) async fn case($env: $crate::testing::TestEnv) $(-> $ret)? $body
            } $name);
        )+
    };
    // A list of `async fn(TestEnv)`.
    ($($(#[$($attr:tt)*])* $name:ident),+ $(,)?) => {
        $(
            $crate::conformance!(@case [] [] $(#[$($attr)*])* {
                use super::$name as case;
            } $name);
        )+
    };
    // One case: sort its attributes into the runtime's and the module's.
    (@case [$($attrs:tt)*] [$($rt:tt)*] #[runtime($($r:tt)*)] $($rest:tt)*) => {
        $crate::conformance!(@case [$($attrs)*] [$($r)*] $($rest)*);
    };
    (@case [$($attrs:tt)*] [$($rt:tt)*] #[$($a:tt)*] $($rest:tt)*) => {
        $crate::conformance!(@case [$($attrs)* #[$($a)*]] [$($rt)*] $($rest)*);
    };
    (@case [$($attrs:tt)*] [$($rt:tt)*] { $($case:tt)* } $name:ident) => {
        $($attrs)*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $($case)*

            // Outside the tests, so that a wrong `#[runtime(...)]` is an
            // error in every build, not only under `--test`.
            #[allow(dead_code)]
            const __RUNTIME: $crate::testing::__private::Runtime =
                $crate::conformance!(@runtime $($rt)*);

            #[test]
            fn azurite() {
                $crate::testing::__private::run(
                    __RUNTIME,
                    $crate::testing::Backend::Azurite,
                    case,
                )
            }

            #[test]
            fn embedded() {
                $crate::testing::__private::run(
                    __RUNTIME,
                    $crate::testing::Backend::Memory,
                    case,
                )
            }

            #[test]
            fn embedded_file() {
                $crate::testing::__private::run(
                    __RUNTIME,
                    $crate::testing::Backend::File,
                    case,
                )
            }

            #[test]
            #[ignore = "issue 40 in progress: the server does not serve every operation yet"]
            fn served() {
                $crate::testing::__private::run(
                    __RUNTIME,
                    $crate::testing::Backend::Served,
                    case,
                )
            }
        }
    };
    (@runtime) => { $crate::testing::__private::Runtime::CurrentThread };
    (@runtime flavor = "current_thread" $(,)?) => {
        $crate::testing::__private::Runtime::CurrentThread
    };
    (@runtime flavor = "multi_thread" $(,)?) => {
        $crate::testing::__private::Runtime::MultiThread(::core::option::Option::None)
    };
    (@runtime flavor = "multi_thread", worker_threads = $n:expr $(,)?) => {
        $crate::testing::__private::Runtime::MultiThread(::core::option::Option::Some($n))
    };
    (@runtime $($other:tt)*) => {
        ::core::compile_error!(concat!(
            "tablekit::testing::conformance!: expected #[runtime(flavor = \"current_thread\")] or ",
            "#[runtime(flavor = \"multi_thread\"[, worker_threads = n])], found #[runtime(",
            stringify!($($other)*),
            ")]"
        ))
    };
}

#[doc(inline)]
pub use crate::conformance;

/// The macro's machinery: not public API.
#[doc(hidden)]
pub mod __private {
    use std::fmt::Debug;
    use std::future::Future;

    use super::{Backend, TestEnv};

    /// The runtime of one test.
    #[derive(Debug, Clone, Copy)]
    pub enum Runtime {
        /// `flavor = "current_thread"`.
        CurrentThread,
        /// `flavor = "multi_thread"`, with this many workers (Tokio's default without).
        MultiThread(Option<usize>),
    }

    /// What a case may return: nothing, or a `Result` whose error fails the test.
    pub trait Outcome {
        /// Panics on an error.
        fn check(self);
    }

    impl Outcome for () {
        fn check(self) {}
    }

    impl<E: Debug> Outcome for Result<(), E> {
        fn check(self) {
            if let Err(e) = self {
                panic!("the case returned an error: {e:?}");
            }
        }
    }

    /// One test: `case` on `backend`, in a fresh `runtime`.
    pub fn run<F, Fut>(runtime: Runtime, backend: Backend, case: F)
    where
        F: FnOnce(TestEnv) -> Fut,
        Fut: Future,
        Fut::Output: Outcome,
    {
        let mut builder = match runtime {
            Runtime::CurrentThread => tokio::runtime::Builder::new_current_thread(),
            Runtime::MultiThread(workers) => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                if let Some(n) = workers {
                    b.worker_threads(n);
                }
                b
            }
        };
        let rt = builder
            .enable_all()
            .build()
            .expect("build the test's Tokio runtime");
        rt.block_on(async move {
            if let Some(env) = TestEnv::new(backend) {
                case(env).await.check();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_from_endpoints() {
        assert_eq!(
            host_of("http://127.0.0.1:10002/devstoreaccount1"),
            "127.0.0.1"
        );
        assert_eq!(host_of("http://localhost:10002"), "localhost");
        assert_eq!(host_of("http://[::1]:10002/a"), "::1");
        assert_eq!(
            host_of("https://acct.table.core.windows.net"),
            "acct.table.core.windows.net"
        );
        assert_eq!(host_of("http://user@127.0.0.2:1/x"), "127.0.0.2");
    }

    #[test]
    #[should_panic(expected = "only run against an emulator on this machine")]
    fn an_account_off_this_machine_is_refused() {
        let account = Account::from_connection_string(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
        )
        .unwrap();
        assert_loopback(&account);
    }

    #[test]
    fn the_development_account_is_on_this_machine() {
        assert_loopback(&Account::from_connection_string("UseDevelopmentStorage=true").unwrap());
    }

    #[test]
    fn the_transport_is_the_one_named() {
        assert!(matches!(transport_of(None), Transport::Auto));
        assert!(matches!(transport_of(Some(" ")), Transport::Auto));
        assert!(matches!(transport_of(Some("Hyper")), Transport::Hyper));
        #[cfg(feature = "reqwest")]
        assert!(matches!(transport_of(Some("reqwest")), Transport::Reqwest));
    }

    #[test]
    #[should_panic(expected = "must be `hyper` or `reqwest`, not \"curl\"")]
    fn another_transport_is_refused() {
        transport_of(Some("curl"));
    }

    #[test]
    fn a_connection_string_is_taken_as_it_is() {
        let conn = "UseDevelopmentStorage=true".to_owned();
        assert_eq!(
            connection_string_of(Some(conn.clone()), None),
            Some(conn.clone())
        );
        assert_eq!(
            connection_string_of(Some(conn.clone()), Some("true".into())),
            Some(conn)
        );
    }

    #[test]
    fn without_a_connection_string_the_azurite_tests_are_skipped_outside_ci() {
        assert_eq!(connection_string_of(None, None), None);
        assert_eq!(connection_string_of(Some("  ".into()), None), None);
        assert_eq!(connection_string_of(None, Some("false".into())), None);
    }

    #[test]
    #[should_panic(expected = "is not set but CI=true")]
    fn without_a_connection_string_ci_fails() {
        connection_string_of(None, Some("TRUE".into()));
    }

    #[test]
    #[should_panic(expected = "is not set but CI=true")]
    fn a_blank_connection_string_in_ci_fails() {
        connection_string_of(Some(String::new()), Some("true".into()));
    }

    #[test]
    fn a_file_env_removes_its_scratch_folder() {
        let env = TestEnv::file();
        let dir = env.scratch_dir().unwrap().to_path_buf();
        let _ = env.tables();
        assert!(dir.join("tables.redb").exists());
        drop(env);
        assert!(!dir.exists());
    }

    #[test]
    fn errors_returned_by_a_case_fail_it() {
        let failed = std::panic::catch_unwind(|| {
            run(Backend::Memory, |_| async { Err::<(), _>("no such row") })
        });
        let message = failed.unwrap_err();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(message.contains("\"no such row\""), "{message}");
    }

    #[test]
    fn debug_shows_no_key() {
        let account = Account::from_connection_string("UseDevelopmentStorage=true").unwrap();
        let env = TestEnv {
            backend: Backend::Azurite,
            account: Some((account, ClientOptions::default())),
            clock: None,
            tables: OnceLock::new(),
            #[cfg(feature = "queue")]
            queues: OnceLock::new(),
            #[cfg(feature = "blob")]
            blobs: OnceLock::new(),
            #[cfg(feature = "server")]
            server: None,
            scratch: None,
        };
        let _ = env.tables();
        let text = format!("{env:?}");
        assert!(
            text.contains("Azurite") && text.contains("devstoreaccount1"),
            "{text}"
        );
        assert!(!text.contains("Eby8vdM02"), "{text}");
    }
}
