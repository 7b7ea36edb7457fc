//! The Azure Cosmos DB Table API as a target, against a scripted service
//! (`scripted`) that answers as the Cosmos DB REST reference and FAQ
//! document, for each case where Cosmos DB and Azure Table Storage differ
//! (guide chapter 6 lists them). Each case runs the same call on an account
//! whose target is Azure Storage, to show that the difference is the
//! target's: refused before any request on Cosmos DB, sent on Storage.

use std::sync::{Arc, Mutex};

use futures::TryStreamExt as _;
use tablekit::account::Target;
use tablekit::entity::UpdateMode;
use tablekit::options::{ClientOptions, RetryPolicy};
use tablekit::{Account, DynamicEntity, TableClient, TableServiceClient};

use crate::common;
use crate::scripted::{self, answer, Seen};

fn options() -> ClientOptions {
    let mut options = common::client_options();
    options.http.retry = RetryPolicy::none();
    options
}

fn account(endpoint: &str, target: Target) -> Account {
    Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;AccountKey={};TableEndpoint={endpoint}",
        common::EMULATOR_KEY
    ))
    .unwrap()
    .with_target(target)
}

fn table(endpoint: &str, target: Target) -> TableClient<DynamicEntity> {
    TableServiceClient::with_options(account(endpoint, target), options())
        .unwrap()
        .table("Cosmic")
        .unwrap()
}

/// A service that answers every write `204` with an ETag.
async fn accepting() -> (String, Arc<Mutex<Vec<Seen>>>) {
    scripted::serve(Arc::new(|_, _| {
        answer(
            "204 No Content",
            &[("ETag", "W/\"datetime'2026-11-26T10%3A00%3A00.1234567Z'\"")],
            "",
        )
    }))
    .await
}

#[test]
fn cosmos_endpoints_are_recognised_and_the_target_can_be_said() {
    let conn = |endpoint: &str| {
        format!(
            "DefaultEndpointsProtocol=https;AccountName=acc;AccountKey={};TableEndpoint={endpoint};",
            common::EMULATOR_KEY
        )
    };
    for endpoint in [
        "https://acc.table.cosmos.azure.com:443/",
        "https://acc.table.cosmosdb.azure.com:443/",
        "https://ACC.Table.Cosmos.Azure.CN/",
    ] {
        let account = Account::from_connection_string(&conn(endpoint)).unwrap();
        assert_eq!(account.target(), Target::CosmosDb, "{endpoint}");
        assert_eq!(account.account_name(), "acc");
    }
    for endpoint in [
        "https://acc.table.core.windows.net/",
        "http://127.0.0.1:10002/devstoreaccount1",
        "http://localhost:8902/",
    ] {
        let account = Account::from_connection_string(&conn(endpoint)).unwrap();
        assert_eq!(account.target(), Target::AzureStorage, "{endpoint}");
    }
    let emulator = Account::from_connection_string(&conn("http://localhost:8902/"))
        .unwrap()
        .with_target(Target::CosmosDb);
    assert_eq!(emulator.target(), Target::CosmosDb);
    assert_eq!(
        Target::CosmosDb.token_scope(),
        "https://cosmos.azure.com/.default"
    );
}

#[tokio::test]
async fn a_row_key_over_255_bytes_is_refused_before_any_request() {
    let (endpoint, seen) = accepting().await;
    let long = DynamicEntity::new("p", "\u{e9}".repeat(128)); // 256 UTF-8 bytes
    let e = table(&endpoint, Target::CosmosDb)
        .upsert(&long, UpdateMode::Replace)
        .await
        .unwrap_err();
    let text = common::assert_invalid(&e);
    assert!(text.contains("RowKey is 256 bytes"), "{text}");
    let e = table(&endpoint, Target::CosmosDb)
        .get(("p", "r".repeat(300)))
        .await
        .unwrap_err();
    common::assert_invalid(&e);
    assert_eq!(seen.lock().unwrap().len(), 0, "nothing was sent");

    table(&endpoint, Target::AzureStorage)
        .upsert(&long, UpdateMode::Replace)
        .await
        .unwrap();
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "Azure Storage takes 1 KiB keys"
    );
}

#[tokio::test]
async fn property_names_cosmos_reserves_are_refused_before_any_request() {
    let (endpoint, seen) = accepting().await;
    for name in ["id", "rid", "etag", "ResourceId", "ID"] {
        let entity = DynamicEntity::new("p", "r").with(name, "x");
        let e = table(&endpoint, Target::CosmosDb)
            .insert(&entity)
            .await
            .unwrap_err();
        let text = common::assert_invalid(&e);
        assert!(text.contains("reserved by Cosmos DB"), "{name}: {text}");
    }
    assert_eq!(seen.lock().unwrap().len(), 0);
    table(&endpoint, Target::AzureStorage)
        .insert(&DynamicEntity::new("p", "r").with("id", "x"))
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// Seven entities of about 330 KB: 2.3 MB, within Storage's 4 MiB.
fn big_batch(table: &TableClient<DynamicEntity>) -> tablekit::table::Transaction<DynamicEntity> {
    let mut tx = table.transaction();
    for i in 0..7 {
        let mut entity = DynamicEntity::new("p", format!("r{i}"));
        for j in 0..11 {
            entity = entity.with(format!("S{j}"), "x".repeat(30_000));
        }
        tx.upsert(&entity, UpdateMode::Replace).unwrap();
    }
    tx
}

#[tokio::test]
async fn a_batch_over_2_mb_is_refused_before_any_request() {
    let (endpoint, seen) = accepting().await;
    let e = big_batch(&table(&endpoint, Target::CosmosDb))
        .send()
        .await
        .unwrap_err();
    let text = common::assert_invalid(&e);
    assert!(text.contains("batches of at most 2097152"), "{text}");
    assert_eq!(seen.lock().unwrap().len(), 0);
    // Storage takes it (the scripted answer is no transaction answer: only
    // the request matters here).
    let _ = big_batch(&table(&endpoint, Target::AzureStorage))
        .send()
        .await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(seen.lock().unwrap()[0].body.len() > 2 * 1024 * 1024);
}

#[tokio::test]
async fn merges_travel_as_post_with_x_http_method_as_the_python_sdk_sends_them() {
    let (endpoint, seen) = accepting().await;
    let entity = DynamicEntity::new("p", "r").with("N", 1);
    table(&endpoint, Target::CosmosDb)
        .upsert(&entity, UpdateMode::Merge)
        .await
        .unwrap();
    table(&endpoint, Target::AzureStorage)
        .upsert(&entity, UpdateMode::Merge)
        .await
        .unwrap();
    let mut tx = table(&endpoint, Target::CosmosDb).transaction();
    tx.upsert(&entity, UpdateMode::Merge).unwrap();
    tx.upsert(
        &DynamicEntity::new("p", "r2").with("N", 2),
        UpdateMode::Replace,
    )
    .unwrap();
    let _ = tx.send().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].method(), "POST");
    assert_eq!(seen[0].header("x-http-method"), Some("MERGE"));
    assert!(seen[0].target().contains("(PartitionKey='p',RowKey='r')"));
    assert_eq!(seen[1].method(), "MERGE");
    assert_eq!(seen[1].header("x-http-method"), None);
    let batch = String::from_utf8_lossy(&seen[2].body);
    assert!(
        batch.contains("\r\nPOST ") && batch.contains(" HTTP/1.1\r\nX-HTTP-Method: MERGE\r\n"),
        "{batch}"
    );
    assert!(!batch.contains("MERGE http"), "{batch}");
    assert!(batch.contains("PUT http"), "a replace stays a PUT: {batch}");
}

#[tokio::test]
async fn query_pages_come_in_the_service_order_with_opaque_continuations() {
    // Cosmos DB returns results in no key order, may return an empty page
    // with a continuation, and its continuation tokens are opaque text.
    const TOKEN: &str = "+RID:~Wk9dANnEy4QBAAAAAAAAAA==#RT:1#TRC:2#ISV:2#IEO:65567";
    let (endpoint, seen) = scripted::serve(Arc::new(|n, _| match n {
        0 => answer(
            "200 OK",
            &[("x-ms-continuation-NextPartitionKey", TOKEN)],
            r#"{"value":[{"PartitionKey":"p","RowKey":"r2","Timestamp":"2026-11-26T10:00:00.12Z"},{"PartitionKey":"a","RowKey":"r1","Timestamp":"2026-11-26T10:00:00Z"}]}"#,
        ),
        1 => answer(
            "200 OK",
            &[
                ("x-ms-continuation-NextPartitionKey", TOKEN),
                ("x-ms-continuation-NextRowKey", "NA"),
            ],
            r#"{"value":[]}"#,
        ),
        _ => answer(
            "200 OK",
            &[],
            r#"{"value":[{"PartitionKey":"b","RowKey":"r3","Timestamp":"2026-11-26T10:00:00.1234567Z"}]}"#,
        ),
    }))
    .await;
    let rows: Vec<DynamicEntity> = table(&endpoint, Target::CosmosDb)
        .query()
        .stream()
        .try_collect()
        .await
        .unwrap();
    let keys: Vec<String> = rows
        .iter()
        .map(|e| tablekit::TableEntity::key(e).row_key)
        .collect();
    assert_eq!(
        keys,
        ["r2", "r1", "r3"],
        "the service's order, not re-sorted"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "the empty page did not end the query");
    for request in &seen[1..] {
        let query = request.target().split_once('?').map_or("", |(_, q)| q);
        let next: Vec<String> = url::form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == "NextPartitionKey")
            .map(|(_, v)| v.into_owned())
            .collect();
        assert_eq!(next, [TOKEN], "the token went back as it came");
    }
}

#[tokio::test]
async fn etags_are_opaque_and_go_back_as_they_came() {
    // A Cosmos-style ETag (not the datetime form Azure Storage uses).
    const ETAG: &str = "\"00000000-0000-0000-9b1a-5f3e2c1d0000\"";
    let (endpoint, seen) = scripted::serve(Arc::new(|_, s: &Seen| {
        if s.method() == "GET" {
            answer(
                "200 OK",
                &[("ETag", ETAG)],
                r#"{"PartitionKey":"p","RowKey":"r","Timestamp":"2026-11-26T10:00:00.1Z","N":1}"#,
            )
        } else {
            answer("204 No Content", &[("ETag", ETAG)], "")
        }
    }))
    .await;
    let cosmos = table(&endpoint, Target::CosmosDb);
    let read = cosmos.get(("p", "r")).await.unwrap().expect("found");
    let etag = tablekit::TableEntity::etag(&read)
        .cloned()
        .expect("an ETag");
    assert_eq!(etag.as_str(), ETAG);
    cosmos
        .update(&read.clone().with("N", 2), UpdateMode::Replace, &etag)
        .await
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[1].header("if-match"), Some(ETAG));
}

/// Stored access policies, service properties and stats are Azure Storage
/// calls the Cosmos DB Table API does not have: refused before any request
/// on a Cosmos DB target, each naming the call; sent on Azure Storage.
#[tokio::test]
async fn acls_service_properties_and_stats_are_refused_on_cosmos_before_any_request() {
    use tablekit::service_properties::ServiceProperties;
    let (endpoint, seen) = accepting().await;
    let service = |target| TableServiceClient::with_options(account(&endpoint, target), options());
    let cosmos = service(Target::CosmosDb).unwrap();
    let t = table(&endpoint, Target::CosmosDb);
    let refusals = [
        ("get_access_policies", t.access_policies().await.map(drop)),
        ("set_access_policies", t.set_access_policies(&[]).await),
        (
            "get_service_properties",
            cosmos.service_properties().await.map(drop),
        ),
        (
            "set_service_properties",
            cosmos
                .set_service_properties(&ServiceProperties::default())
                .await,
        ),
        ("get_service_stats", cosmos.service_stats().await.map(drop)),
    ];
    for (name, result) in refusals {
        let e = result.unwrap_err();
        let text = common::assert_invalid(&e);
        assert!(text.contains(name) && text.contains("Cosmos DB"), "{text}");
    }
    assert_eq!(seen.lock().unwrap().len(), 0, "nothing was sent");

    // The same calls on Azure Storage reach the service (whatever the
    // scripted answer makes of them).
    let _ = table(&endpoint, Target::AzureStorage)
        .access_policies()
        .await;
    let _ = service(Target::AzureStorage)
        .unwrap()
        .service_properties()
        .await;
    assert_eq!(seen.lock().unwrap().len(), 2);
}
