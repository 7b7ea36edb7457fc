//! Shared harness of the integration tests: a client for the Azurite (or Azure)
//! account named by `TABLEKIT_TEST_CONNECTION_STRING`, one fresh table per test,
//! and a client pointed at a closed port to prove that a rejection happened
//! before any I/O.
//!
//! The behaviour suite is written once and run on both backends: a case is an
//! `async fn name(svc, backend)` inside [`both!`], which makes it three tests,
//! `name::azurite`, `name::embedded` and `name::embedded_file` (the same store
//! kept in a fresh file, [`TempStore`]: the file-backed store must answer
//! exactly as the in-memory one, so it runs as [`BackendKind::Embedded`];
//! seeded read-only tables, [`seed_service`], stay in memory). Where Azurite
//! differs from the service (listed in `tablekit/src/backend/embedded/mod.rs`),
//! a case branches on [`BackendKind`] and asserts the service's answer on embedded.

// Every test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

pub mod fault_proxy;

use std::io::Write as _;
use std::sync::Once;

use tablekit::{
    options::{ClientOptions, RetryPolicy},
    TableClient, TableEntity, TableServiceClient,
};

/// Which backend a case of the behaviour suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The emulator (or Azure) named by `TABLEKIT_TEST_CONNECTION_STRING`.
    Azurite,
    /// `TableServiceClient::embedded()`, or `embedded_at(path)` on a fresh file.
    Embedded,
}

impl BackendKind {
    /// Whether the case runs on Azurite, whose deviations from the service it must accept.
    pub fn is_azurite(self) -> bool {
        self == BackendKind::Azurite
    }
}

/// Turns `async fn name(svc, backend) { ... }` into a module `name` with three
/// tests: `azurite` (skipped with a banner when no emulator is configured and CI
/// is unset; a failure with CI=true), `embedded` and `embedded_file` (on a fresh
/// [`TempStore`], removed afterwards).
#[macro_export]
macro_rules! both {
    ($(#[$meta:meta])* async fn $name:ident($svc:ident, $backend:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[allow(unused_variables)]
            async fn case(
                $svc: ::tablekit::TableServiceClient,
                $backend: $crate::common::BackendKind,
            ) $body

            #[tokio::test]
            async fn azurite() {
                if let Some(svc) = $crate::common::service() {
                    case(svc, $crate::common::BackendKind::Azurite).await
                }
            }

            #[tokio::test]
            async fn embedded() {
                case(
                    ::tablekit::TableServiceClient::embedded(),
                    $crate::common::BackendKind::Embedded,
                )
                .await
            }

            #[tokio::test]
            async fn embedded_file() {
                let file = $crate::common::TempStore::new();
                case(file.open(), $crate::common::BackendKind::Embedded).await
            }
        }
    };
}

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

/// [`both!`] for a service other than tables: each `case` of the calling module,
/// an `async fn case(env: Env)`, becomes a module with the tests `embedded`,
/// `embedded_file` and `azurite`. `Env` is the calling module's own type, with
/// `fn embedded() -> Env`, `fn embedded_file() -> Env` (the embedded store kept
/// in a fresh file) and `fn azurite() -> Option<Env>` (`None` when no
/// emulator is configured, as [`connection_string`] decides).
///
/// `both!` cannot serve the queue and blob suites: its cases receive a
/// `TableServiceClient`, while the queue cases need the `ManualClock` that drives
/// the embedded queue (to let visibility timeouts pass without sleeping) and the
/// blob cases a `BlobServiceClient`.
#[macro_export]
macro_rules! on_both_with {
    ($env:ident; $($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test]
            async fn embedded() {
                super::$case(super::$env::embedded()).await;
            }

            #[tokio::test]
            async fn embedded_file() {
                super::$case(super::$env::embedded_file()).await;
            }

            #[tokio::test]
            async fn azurite() {
                if let Some(env) = super::$env::azurite() {
                    super::$case(env).await;
                }
            }
        }
    )*};
}

/// The client a seeded, read-only table of a case lives on: for Azurite the
/// case's own client (a client belongs to the runtime it runs on), for embedded
/// one store shared by the whole binary (it belongs to no runtime), so the seed
/// is written once per backend.
pub fn seed_service(svc: &TableServiceClient, backend: BackendKind) -> TableServiceClient {
    static SHARED: std::sync::OnceLock<TableServiceClient> = std::sync::OnceLock::new();
    match backend {
        BackendKind::Azurite => svc.clone(),
        BackendKind::Embedded => SHARED.get_or_init(TableServiceClient::embedded).clone(),
    }
}

static SKIP_BANNER: Once = Once::new();

/// Says once per test binary, loudly and past libtest's capture, that the
/// Azurite half of the suite did not run.
fn azurite_skipped_banner() {
    SKIP_BANNER.call_once(|| {
        let line = "=".repeat(78);
        let _ = writeln!(
            std::io::stderr(),
            "\n{line}\n  AZURITE CASES SKIPPED: {CONNECTION_STRING_VAR} is not set (and CI is not true).\n  \
             Only the embedded half of the behaviour suite ran; every `::azurite` test passed\n  \
             without checking anything. Run scripts/test.sh, or\n  \
             eval \"$(bash scripts/azurite.sh start)\" first, to compare with the emulator.\n{line}\n"
        );
    });
}

/// The environment variable holding the test account's connection string.
pub const CONNECTION_STRING_VAR: &str = "TABLEKIT_TEST_CONNECTION_STRING";

/// The well-known development key of Azurite and the storage emulator (public).
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A piece of the emulator key that must never show up in any output.
pub const KEY_FRAGMENT: &str = "Eby8vdM02";

/// The name of the variable that picks the transport of the whole suite:
/// `hyper` (the default) or `reqwest` (`scripts/test.sh` reruns the wire
/// cases with it). The library reads no such variable: the suite sets
/// [`tablekit::options::HttpOptions::transport`] from it.
pub const TRANSPORT_VAR: &str = "TABLEKIT_TRANSPORT";

/// The transport `TABLEKIT_TRANSPORT` names.
pub fn transport() -> tablekit::options::Transport {
    match std::env::var(TRANSPORT_VAR).as_deref().map(str::trim) {
        Ok(v) if v.eq_ignore_ascii_case("reqwest") => tablekit::options::Transport::Reqwest,
        Ok("") | Ok("hyper") | Ok("Hyper") | Err(_) => tablekit::options::Transport::Hyper,
        Ok(other) => panic!("{TRANSPORT_VAR} must be `hyper` or `reqwest`, not {other:?}"),
    }
}

/// The client options of every client the suite builds: the default ones on
/// the suite's transport.
pub fn client_options() -> ClientOptions {
    let mut options = ClientOptions::default();
    options.http.transport = transport();
    options
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

/// The test account's connection string, or `None` (after a note on stderr)
/// when no emulator is configured. In CI a missing emulator is a failure.
pub fn connection_string() -> Option<String> {
    service()?;
    std::env::var(CONNECTION_STRING_VAR).ok()
}

/// The service client of the test account, or `None` (after a note on stderr)
/// when no emulator is configured. In CI a missing emulator is a failure.
pub fn service() -> Option<TableServiceClient> {
    let conn = match std::env::var(CONNECTION_STRING_VAR) {
        Ok(s) if !s.trim().is_empty() => s,
        _ => {
            if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
                panic!(
                    "{CONNECTION_STRING_VAR} is not set but CI=true: the integration tests need \
                     Azurite (run scripts/test.sh, or eval \"$(bash scripts/azurite.sh start)\")"
                );
            }
            azurite_skipped_banner();
            return None;
        }
    };
    assert_loopback(&conn);
    Some(tables(&conn).expect("the test connection string is valid"))
}

/// The tests only ever talk to an emulator on this machine.
fn assert_loopback(conn: &str) {
    let endpoint = conn.split(';').find_map(|part| {
        let (k, v) = part.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("TableEndpoint")
            .then(|| v.trim().to_owned())
    });
    let Some(endpoint) = endpoint else {
        assert!(
            conn.to_ascii_lowercase().contains("usedevelopmentstorage=true"),
            "{CONNECTION_STRING_VAR} must name a loopback TableEndpoint (or be UseDevelopmentStorage=true)"
        );
        return;
    };
    let host = endpoint
        .split_once("://")
        .map_or(endpoint.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    assert!(
        matches!(host, "127.0.0.1" | "localhost" | "::1"),
        "{CONNECTION_STRING_VAR} points at {host:?}; the integration tests only run against a loopback emulator"
    );
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

/// `prefix` followed by 12 hex characters of a v4 UUID: unique per call.
pub fn unique_name(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{prefix}{}", &id[..12]);
    assert!(
        tablekit::validate::table_name(&name).is_ok(),
        "test table name {name:?} is invalid; pick a prefix of letters and digits starting with a letter"
    );
    name
}

/// Creates a table with a unique name (see [`unique_name`]), so tests can run in parallel.
pub async fn fresh_table<T: TableEntity>(svc: &TableServiceClient, prefix: &str) -> TableClient<T> {
    let name = unique_name(prefix);
    let table = svc.table::<T>(&name).expect("valid table name");
    table.create_table().await.expect("create the test table");
    table
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
