//! Shared harness of the integration tests: a client for the Azurite (or Azure)
//! account named by `TABLEKIT_TEST_CONNECTION_STRING`, one fresh table per test,
//! and a client pointed at a closed port to prove that a rejection happened
//! before any I/O.
//!
//! Each test starts with `let Some(svc) = common::service() else { return };`.

// Every test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use tablekit::{ClientOptions, RetryPolicy, TableClient, TableEntity, TableServiceClient};

/// The environment variable holding the test account's connection string.
pub const CONNECTION_STRING_VAR: &str = "TABLEKIT_TEST_CONNECTION_STRING";

/// The well-known development key of Azurite and the storage emulator (public).
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A piece of the emulator key that must never show up in any output.
pub const KEY_FRAGMENT: &str = "Eby8vdM02";

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
            eprintln!(
                "skipping: {CONNECTION_STRING_VAR} is not set \
                 (eval \"$(bash scripts/azurite.sh start)\" to run the integration tests)"
            );
            return None;
        }
    };
    assert_loopback(&conn);
    Some(
        TableServiceClient::from_connection_string(&conn)
            .expect("the test connection string is valid"),
    )
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
    let mut options = ClientOptions::default();
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
