//! The shared helpers of the pattern tests. Each case is an `async fn
//! case(env: TestEnv)` that the library's harness,
//! [`tablekit::testing::conformance!`], runs on every backend a user can pick:
//! Azurite (from `TABLEKIT_TEST_CONNECTION_STRING`), the embedded store in
//! memory and the embedded store in a scratch file, each case in its own
//! freshly created, uniquely named tables.

// Every test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use std::time::Duration;

use tablekit::{
    clock::ManualClock,
    options::{ClientOptions, RetryPolicy},
    testing::TestEnv,
    Account, BlobServiceClient, DynamicEntity, QueueClient, QueueServiceClient, TableClient,
    TableEntity, TableServiceClient,
};

pub use tablekit::testing::{fresh_table, unique_name, CONNECTION_STRING_VAR};

/// The well-known development key of Azurite and the storage emulator (public).
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The Table service of Azurite (or any loopback emulator) named by
/// `TABLEKIT_TEST_CONNECTION_STRING`. Without it: a panic when `CI=true`,
/// otherwise `None` after the harness's banner, and the test returns early.
pub fn service() -> Option<TableServiceClient> {
    Some(TestEnv::azurite()?.tables().clone())
}

/// A second client of the same account: the "other writer" of the concurrency
/// tests. Over HTTP it is an independent client of the same endpoint (its own
/// connections, as `TestEnv::second_tables`); on the embedded backend, a clone
/// sharing the store, which is what another process's client would see.
pub fn second_service(svc: &TableServiceClient) -> TableServiceClient {
    if svc.is_embedded() {
        return svc.clone();
    }
    // Over HTTP: Azurite's, or a served store's (the harness's `served`
    // backend, whose server has the emulator's account on its own port).
    let endpoint = svc.endpoint().expect("a client over HTTP has an endpoint");
    let conn = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={EMULATOR_KEY};\
         TableEndpoint={endpoint}"
    );
    let account = Account::from_connection_string(&conn).expect("valid connection string");
    TableServiceClient::with_options(account, tablekit::testing::client_options())
        .expect("client builds")
}

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

impl Services {
    /// The services of a case's backend (sharing its stores and clock).
    pub fn of(env: &TestEnv) -> Services {
        Services {
            tables: env.tables().clone(),
            queues: env.queues().clone(),
            blobs: env.blobs().clone(),
            clock: env.clock().cloned(),
            visibility: env.visibility_timeout(),
        }
    }
}

/// The services of Azurite, or `None` (a failure with `CI=true`) without it.
pub fn azurite_services() -> Option<Services> {
    Some(Services::of(&TestEnv::azurite()?))
}

/// The services of the embedded store in memory, on one manual clock.
pub fn embedded_services() -> Services {
    Services::of(&TestEnv::memory())
}

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
