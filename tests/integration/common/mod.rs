//! Shared helpers of the integration tests: clients for the Azurite (or
//! Azure) account named by `TABLEKIT_TEST_CONNECTION_STRING` on the suite's
//! transport, a client pointed at a closed port to prove that a rejection
//! happened before any I/O, and a store file for the durable tests.
//!
//! The behaviour suite is written once and run on every backend by the
//! library's own harness, [`tablekit::testing::conformance!`]: each case makes
//! the tests `name::azurite`, `name::embedded` and `name::embedded_file`, and
//! its `TestEnv` says which backend it runs on. Where Azurite differs from the
//! service (listed in `tablekit/src/backend/embedded/mod.rs`), a case branches
//! on [`Backend`] and asserts the service's answer on the embedded store.
//! Seeded read-only tables ([`seed_service`]) stay in memory.

// Every test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

pub mod fault_proxy;

use tablekit::testing::{Backend, TestEnv};
use tablekit::{
    options::{ClientOptions, RetryPolicy},
    TableClient, TableEntity, TableServiceClient,
};

pub use tablekit::testing::{fresh_table, unique_name, CONNECTION_STRING_VAR};

/// A file for an embedded store (`TableServiceClient::embedded_at`) in the
/// temporary directory, with a unique name; removed when dropped.
pub struct TempStore {
    path: std::path::PathBuf,
}

impl TempStore {
    /// A unique path that does not exist yet.
    pub fn new() -> Self {
        let name = format!("tablekit-test-{}.redb", uuid::Uuid::new_v4().simple());
        TempStore {
            path: std::env::temp_dir().join(name),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The store in the file (created on first open).
    pub fn open(&self) -> TableServiceClient {
        TableServiceClient::embedded_at(&self.path).expect("open the store file")
    }
}

impl Default for TempStore {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The client a seeded, read-only table of a case lives on: over HTTP the
/// case's own client (a client belongs to the runtime it runs on), for embedded
/// one store shared by the whole binary (it belongs to no runtime), so the seed
/// is written once per backend.
pub fn seed_service(svc: &TableServiceClient, backend: Backend) -> TableServiceClient {
    static SHARED: std::sync::OnceLock<TableServiceClient> = std::sync::OnceLock::new();
    match backend {
        Backend::Azurite | Backend::Served => svc.clone(),
        Backend::Memory | Backend::File => SHARED.get_or_init(TableServiceClient::embedded).clone(),
    }
}

/// The well-known development key of Azurite and the storage emulator (public).
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A piece of the emulator key that must never show up in any output.
pub const KEY_FRAGMENT: &str = "Eby8vdM02";

/// The client options of every client the suite builds: the default ones on
/// the transport `TABLEKIT_TRANSPORT` names (`hyper` or `reqwest`), which
/// `scripts/test.sh` sets to rerun the wire cases on reqwest. The library's
/// clients read no such variable: its test harness does,
/// [`tablekit::testing::client_options`].
pub fn client_options() -> ClientOptions {
    tablekit::testing::client_options()
}

/// A table service client of `conn` on the suite's transport.
pub fn tables(conn: &str) -> tablekit::Result<TableServiceClient> {
    TableServiceClient::with_options(
        tablekit::Account::from_connection_string(conn)?,
        client_options(),
    )
}

/// A queue service client of `conn` on the suite's transport.
pub fn queues(conn: &str) -> tablekit::Result<tablekit::QueueServiceClient> {
    tablekit::QueueServiceClient::with_options(
        tablekit::Account::from_connection_string(conn)?,
        client_options(),
    )
}

/// A blob service client of `conn` on the suite's transport.
pub fn blobs(conn: &str) -> tablekit::Result<tablekit::BlobServiceClient> {
    tablekit::BlobServiceClient::with_options(
        tablekit::Account::from_connection_string(conn)?,
        client_options(),
    )
}

/// The test account's connection string, or `None` when no emulator is
/// configured (after the harness's banner; a failure with `CI=true`), checked
/// to name this machine as the harness checks it.
pub fn connection_string() -> Option<String> {
    TestEnv::azurite()?;
    tablekit::testing::azurite_connection_string()
}

/// The Table service of the test account (see [`connection_string`]).
pub fn service() -> Option<TableServiceClient> {
    Some(TestEnv::azurite()?.tables().clone())
}

/// A client for an account at a closed loopback port (the discard port, 9), without
/// retries. Anything that reaches the network fails with a transport error, so an
/// `is_invalid_input()` error from it proves the input was rejected before any I/O.
pub fn offline_service() -> TableServiceClient {
    let conn = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={EMULATOR_KEY};\
         TableEndpoint=http://127.0.0.1:9/devstoreaccount1"
    );
    let account =
        tablekit::Account::from_connection_string(&conn).expect("valid connection string");
    let mut options = client_options();
    options.http.retry = RetryPolicy::none();
    TableServiceClient::with_options(account, options).expect("client builds")
}

/// A table client of the offline service (the name is valid; the table does not exist).
pub fn offline_table<T: TableEntity>() -> TableClient<T> {
    offline_service()
        .table("OfflineTable")
        .expect("valid table name")
}

/// Deletes a test's table, ignoring failures (Azurite is thrown away afterwards anyway).
pub async fn drop_table<T: TableEntity>(table: &TableClient<T>) {
    let _ = table.delete_table_if_exists().await;
}

/// Asserts that `err` was raised before any I/O (a transport error would mean a
/// request was attempted) and returns its message.
#[track_caller]
pub fn assert_invalid(err: &tablekit::Error) -> String {
    assert!(
        err.is_invalid_input(),
        "expected a client-side rejection, got {err:?} (transport: {})",
        err.is_transport()
    );
    err.to_string()
}

/// A SAS of the served account `server` that allows everything for an
/// hour, as the query string of raw requests to it (the `serve_*` tests).
pub fn full_access_sas(server: &tablekit::server::Server) -> String {
    use tablekit::account::{
        AccountSas, AccountSasPermissions, AccountSasResourceTypes, AccountSasServices, SasProtocol,
    };
    let account = tablekit::Account::from_connection_string(&server.connection_string()).unwrap();
    AccountSas::new()
        .services(AccountSasServices::ALL)
        .resource_types(AccountSasResourceTypes::ALL)
        .permissions(AccountSasPermissions::ALL)
        .expiry(chrono::Utc::now() + chrono::Duration::hours(1))
        .protocol(SasProtocol::HttpsAndHttp)
        .sign(&account)
        .unwrap()
        .as_query()
        .to_owned()
}
