//! The one place the pattern tests get their Table service from. Each case
//! is an `async fn case(svc: TableServiceClient)` run twice by [`on_both!`]:
//! on Azurite (from `TABLEKIT_TEST_CONNECTION_STRING`) and on the embedded
//! store, each in its own freshly created, uniquely named table.

// Every test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use std::time::Duration;

use tablekit::{
    clock::ManualClock,
    options::{ClientOptions, RetryPolicy},
    Account, BlobServiceClient, DynamicEntity, QueueClient, QueueServiceClient, TableClient,
    TableEntity, TableServiceClient,
};

/// The environment variable holding the test account's connection string.
pub const CONNECTION_STRING_VAR: &str = "TABLEKIT_TEST_CONNECTION_STRING";

/// The well-known development key of Azurite and the storage emulator (public).
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

static SKIP_BANNER: std::sync::Once = std::sync::Once::new();

/// Says once per test binary that the Azurite half did not run, on stderr
/// itself: libtest captures `eprintln!` and shows it only for failing tests,
/// so a green run would otherwise hide that half the cases checked nothing.
fn azurite_skipped_banner() {
    use std::io::Write;
    SKIP_BANNER.call_once(|| {
        let line = "=".repeat(78);
        let _ = writeln!(
            std::io::stderr(),
            "\n{line}\n  AZURITE PATTERN CASES SKIPPED: {CONNECTION_STRING_VAR} is not set (and CI is \
             not true).\n  Every `::azurite` test of this binary passed without checking anything. \
             Run\n  scripts/test.sh, or eval \"$(bash scripts/azurite.sh start)\" first.\n{line}\n"
        );
    });
}

/// The service the tests run against: Azurite (or any loopback emulator) named
/// by `TABLEKIT_TEST_CONNECTION_STRING`. Without it: a panic when `CI=true`,
/// otherwise `None` after a note on stderr, and the test returns early.
pub fn service() -> Option<TableServiceClient> {
    let conn = match std::env::var(CONNECTION_STRING_VAR) {
        Ok(s) if !s.trim().is_empty() => s,
        _ => {
            if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
                panic!(
                    "{CONNECTION_STRING_VAR} is not set but CI=true: the pattern tests need \
                     Azurite (eval \"$(bash scripts/azurite.sh start)\")"
                );
            }
            azurite_skipped_banner();
            return None;
        }
    };
    assert!(
        conn.contains("127.0.0.1")
            || conn.contains("localhost")
            || conn.contains("[::1]")
            || conn.contains("UseDevelopmentStorage=true"),
        "{CONNECTION_STRING_VAR} must point at a loopback emulator"
    );
    Some(TableServiceClient::from_connection_string(&conn).expect("valid connection string"))
}

/// A second client of the same account: the "other writer" of the concurrency
/// tests. Over HTTP it is an independent client (its own connections); on the
/// embedded backend, a clone sharing the store, which is what another
/// process's client would see.
pub fn second_service(svc: &TableServiceClient) -> TableServiceClient {
    if svc.is_embedded() {
        return svc.clone();
    }
    let conn = std::env::var(CONNECTION_STRING_VAR).expect("service() succeeded before");
    TableServiceClient::from_connection_string(&conn).expect("valid connection string")
}

/// The conformance harness: turns each `async fn case(svc:
/// TableServiceClient)` into three tests, one per backend a user can pick:
/// `case::azurite` (skipped without an emulator, a failure with `CI=true`),
/// `case::embedded` (the in-memory store) and `case::embedded_file` (the durable
/// store in a scratch file). `case [flavor = "multi_thread"]` passes the
/// runtime flavour on to `#[tokio::test]`.
#[allow(unused_macros)] // request_counts counts HTTP requests: Azurite only.
macro_rules! on_both {
    ($($case:ident $([$($flavor:tt)*])?),* $(,)?) => {$(
        mod $case {
            #[tokio::test$(($($flavor)*))?]
            async fn azurite() {
                if let Some(svc) = crate::common::service() {
                    super::$case(svc).await
                }
            }

            #[tokio::test$(($($flavor)*))?]
            async fn embedded() {
                super::$case(::tablekit::TableServiceClient::embedded()).await
            }

            #[tokio::test$(($($flavor)*))?]
            async fn embedded_file() {
                let dir = crate::common::ScratchDir::new();
                super::$case(crate::common::file_service(&dir)).await
            }
        }
    )*};
}
#[allow(unused_imports)]
pub(crate) use on_both;

/// The table, queue and blob services of one backend, and how time passes
/// on it: the patterns that run through a queue worker take these.
#[derive(Clone)]
pub struct Services {
    pub tables: TableServiceClient,
    pub queues: QueueServiceClient,
    pub blobs: BlobServiceClient,
    /// The embedded store's clock (`None` on Azurite, where time is real).
    pub clock: Option<ManualClock>,
    /// The visibility timeout the cases use: short on Azurite, where the
    /// tests wait it out, longer on embedded, where they advance the clock.
    pub visibility: Duration,
}

/// The services of Azurite, or `None` (a failure with `CI=true`) without it.
pub fn azurite_services() -> Option<Services> {
    let tables = service()?;
    let conn = std::env::var(CONNECTION_STRING_VAR).expect("service() found it");
    Some(Services {
        tables,
        queues: QueueServiceClient::from_connection_string(&conn).expect("valid connection string"),
        blobs: BlobServiceClient::from_connection_string(&conn).expect("valid connection string"),
        clock: None,
        visibility: Duration::from_secs(2),
    })
}

/// A scratch folder for the durable store's files, removed when dropped
/// (after the clients using it, which the case owns and drops first).
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    pub fn new() -> Self {
        let dir = std::env::temp_dir().join(unique_name("tablekit-pattern-"));
        std::fs::create_dir_all(&dir).expect("create a scratch folder");
        ScratchDir(dir)
    }

    pub fn file(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Table service of the durable embedded store, in a file of `dir`.
pub fn file_service(dir: &ScratchDir) -> TableServiceClient {
    TableServiceClient::embedded_at(dir.file("tables.redb")).expect("open the store file")
}

/// The services of the durable embedded store, in files of `dir`, the
/// queues on a manual clock.
pub fn file_services(dir: &ScratchDir) -> Services {
    let clock = ManualClock::starting_now();
    Services {
        tables: file_service(dir),
        queues: QueueServiceClient::embedded_at_with_clock(dir.file("queues.redb"), clock.clone())
            .expect("open the queue file"),
        blobs: BlobServiceClient::embedded_at(dir.file("blobs.redb")).expect("open the blob file"),
        clock: Some(clock),
        visibility: Duration::from_secs(30),
    }
}

/// The services of the embedded store, on one manual clock.
pub fn embedded_services() -> Services {
    let clock = ManualClock::starting_now();
    Services {
        tables: TableServiceClient::embedded(),
        queues: QueueServiceClient::embedded_with_clock(clock.clone()),
        blobs: BlobServiceClient::embedded(),
        clock: Some(clock),
        visibility: Duration::from_secs(30),
    }
}

/// Turns each `async fn case(s: Services)` into `case::azurite`,
/// `case::embedded` and `case::embedded_file` (as [`on_both!`]), on a two-thread
/// runtime.
#[allow(unused_macros)]
macro_rules! on_both_services {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn azurite() {
                if let Some(s) = crate::common::azurite_services() {
                    super::$case(s).await
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$case(crate::common::embedded_services()).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded_file() {
                let dir = crate::common::ScratchDir::new();
                super::$case(crate::common::file_services(&dir)).await
            }
        }
    )*};
}
#[allow(unused_imports)]
pub(crate) use on_both_services;

/// A client for an account at a closed loopback port (the discard port 9), with
/// no retries: anything that reaches the network fails with a transport error,
/// so an `is_invalid_input()` error from it proves nothing was sent.
pub fn offline_service() -> TableServiceClient {
    let conn = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={EMULATOR_KEY};\
         TableEndpoint=http://127.0.0.1:9/devstoreaccount1"
    );
    let account = Account::from_connection_string(&conn).expect("valid connection string");
    let mut options = ClientOptions::default();
    options.http.retry = RetryPolicy::none();
    TableServiceClient::with_options(account, options).expect("client builds")
}

/// `prefix` followed by 12 hex characters of a v4 UUID.
pub fn unique_name(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &id[..12])
}

/// Creates a table with a unique name, so tests can run in parallel.
pub async fn fresh_table<T: TableEntity>(svc: &TableServiceClient, prefix: &str) -> TableClient<T> {
    let table = svc
        .table::<T>(&unique_name(prefix))
        .expect("valid table name");
    table.create_table().await.expect("create the test table");
    table
}

/// Creates a work queue with a unique name and its poison queue
/// (`<name>-poison`).
pub async fn fresh_queues(svc: &QueueServiceClient, prefix: &str) -> (QueueClient, QueueClient) {
    let jobs = svc
        .queue(&unique_name(prefix).to_lowercase())
        .expect("valid queue name");
    let poison = svc
        .queue(&format!("{}-poison", jobs.name()))
        .expect("valid queue name");
    jobs.create_queue().await.expect("create the test queue");
    poison
        .create_queue()
        .await
        .expect("create the poison queue");
    (jobs, poison)
}

/// Every stored row of a partition, read directly (no pattern code involved).
pub async fn rows<T: TableEntity>(
    table: &TableClient<T>,
    partition_key: &str,
) -> Vec<DynamicEntity> {
    table
        .with_type::<DynamicEntity>()
        .query()
        .filter(|e| e.partition_key.eq(partition_key))
        .fetch_all()
        .await
        .expect("read the partition")
}

/// Asserts that `err` was raised before any I/O and returns its message.
#[track_caller]
pub fn assert_invalid(err: &tablekit::Error) -> String {
    assert!(
        err.is_invalid_input(),
        "expected a client-side rejection, got {err:?} (transport: {})",
        err.is_transport()
    );
    err.to_string()
}

pub mod etag_stripper;
pub mod proxy;

/// A loopback HTTP server that answers every request with `status` and the
/// service error `code` (header `x-ms-error-code` and an XML body), for the
/// answers Azurite never gives (a container being deleted). Returns a Blob
/// service client of the emulator's account that talks to it, with no retries.
pub async fn answering_blob_service(status: u16, code: &str) -> tablekit::BlobServiceClient {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code>\
         <Message>answered by the test</Message></Error>"
    );
    let answer = format!(
        "HTTP/1.1 {status} Answer\r\nx-ms-error-code: {code}\r\nx-ms-request-id: test\r\n\
         Content-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request: its head, then as many body bytes as it says.
                    let head_end = loop {
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap_or(0));
                    while buf.len() < head_end + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + length);
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let conn = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={EMULATOR_KEY};\
         BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1"
    );
    let account = Account::from_connection_string(&conn).expect("valid connection string");
    let mut options = ClientOptions::default();
    options.http.retry = RetryPolicy::none();
    tablekit::BlobServiceClient::with_options(account, options).expect("client builds")
}

/// A step hook (the one async shape of `step_hook` and `Plan::before_send`)
/// made of a plain function run at the step: for the tests written when the
/// hooks were synchronous.
pub fn sync_hook<E>(
    f: impl Fn(E) + Send + Sync + 'static,
) -> impl Fn(E) -> std::future::Ready<tablekit::Result<()>> + Send + Sync + 'static {
    move |e| {
        f(e);
        std::future::ready(Ok(()))
    }
}

/// `before_write(f)`: `step_hook` with a plain function, on every
/// read–modify–write pattern.
pub trait BeforeWrite: Sized {
    fn before_write(self, f: impl Fn(usize) + Send + Sync + 'static) -> Self;
}

macro_rules! before_write_for {
    ($($t:ty),*) => {$(
        impl<T: tablekit::TableEntity> BeforeWrite for $t {
            fn before_write(self, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
                self.step_hook(sync_hook(f))
            }
        }
    )*};
}

before_write_for!(
    tablekit_patterns::summary::CountedPartition<T>,
    tablekit_patterns::denormalize::Denormalized<T>,
    tablekit_patterns::index::IndexedTable<T>,
    tablekit_patterns::index_entity::IndexEntities<T>,
    tablekit_patterns::index_entity::SeparateIndexEntities<T>
);

impl BeforeWrite for tablekit_patterns::series::DataSeries {
    fn before_write(self, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.step_hook(sync_hook(f))
    }
}

/// `on_step(f)`: `step_hook` with a plain function, on the large-entity tables.
pub trait OnStep: Sized {
    fn on_step(self, f: impl Fn(tablekit_patterns::large::Step) + Send + Sync + 'static) -> Self;
}

impl<T: tablekit::TableEntity> OnStep for tablekit_patterns::large::LargeTable<T> {
    fn on_step(self, f: impl Fn(tablekit_patterns::large::Step) + Send + Sync + 'static) -> Self {
        self.step_hook(sync_hook(f))
    }
}
