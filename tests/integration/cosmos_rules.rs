//! More of the Azure Cosmos DB Table API's own rules, refused before any
//! request to an account whose target is Cosmos DB (and sent on Azure
//! Storage), against a scripted service (`scripted`) as in `cosmos`: the
//! system property names of Cosmos DB items (`_ts`, `_self`, ...), a SAS that
//! names a stored access policy (Cosmos DB has none), and table names that
//! differ only in letter case (case-sensitive there, the same table on
//! Storage).

use std::sync::{Arc, Mutex};

use chrono::{TimeZone as _, Utc};
use tablekit::account::{SasToken, TableSas, TableSasPermissions, Target};
use tablekit::error::ValidationError;
use tablekit::options::{ClientOptions, RetryPolicy};
use tablekit::{Account, Credential, DynamicEntity, TableServiceClient};

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

fn service(endpoint: &str, target: Target) -> TableServiceClient {
    TableServiceClient::with_options(account(endpoint, target), options()).unwrap()
}

/// Answers every request `204` with an ETag, except the table
/// `Missing`, which it does not know (`404 TableNotFound`).
async fn accepting() -> (String, Arc<Mutex<Vec<Seen>>>) {
    scripted::serve(Arc::new(|_, seen: &Seen| {
        if seen.target().contains("/Missing") {
            return answer(
                "404 Not Found",
                &[],
                r#"{"odata.error":{"code":"TableNotFound","message":{"lang":"en-US","value":"The table specified does not exist."}}}"#,
            );
        }
        answer(
            "204 No Content",
            &[("ETag", "W/\"datetime'2026-11-26T10%3A00%3A00.1234567Z'\"")],
            "",
        )
    }))
    .await
}

fn cosmos_reason(e: &tablekit::Error) -> String {
    match e.validation() {
        Some(ValidationError::CosmosDb { reason, .. }) => reason.clone(),
        _ => panic!("not a Cosmos DB refusal: {e}"),
    }
}

#[tokio::test]
async fn the_system_property_names_of_cosmos_items_are_refused_before_any_request() {
    let (endpoint, seen) = accepting().await;
    let cosmos = service(&endpoint, Target::CosmosDb)
        .table::<DynamicEntity>("Cosmic")
        .unwrap();
    for name in ["_ts", "_self", "_rid", "_etag", "_attachments", "_TS"] {
        let entity = DynamicEntity::new("p", "r").with(name, "x");
        let e = cosmos.insert(&entity).await.unwrap_err();
        let reason = cosmos_reason(&e);
        assert!(reason.contains("reserved by Cosmos DB"), "{name}: {reason}");
        // In a transaction too.
        let mut tx = cosmos.transaction();
        tx.insert(&entity).unwrap();
        let e = tx.send().await.unwrap_err();
        assert!(cosmos_reason(&e).contains("transaction operation 0"), "{e}");
    }
    assert_eq!(seen.lock().unwrap().len(), 0, "nothing was sent");
    // Azure Storage takes them: plain property names there.
    let storage = service(&endpoint, Target::AzureStorage)
        .table::<DynamicEntity>("Cosmic")
        .unwrap();
    storage
        .insert(
            &DynamicEntity::new("p", "r")
                .with("_ts", 1)
                .with("_self", "x"),
        )
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_sas_naming_a_stored_access_policy_is_refused_on_cosmos() {
    let (endpoint, seen) = accepting().await;
    // Signed for a Cosmos DB account: refused when signing.
    let e = TableSas::new("Cosmic")
        .policy_id("readers")
        .sign(&account(&endpoint, Target::CosmosDb))
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    let reason = cosmos_reason(&e);
    assert!(reason.contains("\"readers\""), "{reason}");
    assert!(reason.contains("no stored access policies"), "{reason}");
    // The same SAS on Storage is signed; one with its own fields, on Cosmos DB too.
    TableSas::new("Cosmic")
        .policy_id("readers")
        .sign(&account(&endpoint, Target::AzureStorage))
        .unwrap();
    let own = TableSas::new("Cosmic")
        .permissions(TableSasPermissions::READ_ONLY)
        .expiry(Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap())
        .sign(&account(&endpoint, Target::CosmosDb))
        .unwrap();

    // A SAS handed over as the account's credential: refused when the client
    // is made, whatever order the account was set up in.
    let with_sas = |sas: &str, target: Target| {
        Account::from_connection_string(&format!(
            "AccountName=devstoreaccount1;TableEndpoint={endpoint}"
        ))
        .unwrap()
        .with_target(target)
        .with_credential(Credential::Sas(SasToken::new(sas)))
    };
    let policy_sas = "sv=2019-02-02&tn=Cosmic&si=readers&sig=c2lnbmF0dXJl";
    let e = TableServiceClient::with_options(with_sas(policy_sas, Target::CosmosDb), options())
        .unwrap_err();
    assert!(
        cosmos_reason(&e).contains("stored access policy (si)"),
        "{e}"
    );
    let set_later = Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;TableEndpoint={endpoint};SharedAccessSignature={policy_sas}"
    ))
    .unwrap()
    .with_target(Target::CosmosDb);
    assert!(TableServiceClient::with_options(set_later, options()).is_err());
    // `sig` or `sip` are not `si`.
    let table =
        TableServiceClient::with_options(with_sas(own.as_query(), Target::CosmosDb), options())
            .unwrap()
            .table::<DynamicEntity>("Cosmic")
            .unwrap();
    assert!(!own.as_query().contains("si="), "{}", own.as_query());
    table.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    TableServiceClient::with_options(with_sas(policy_sas, Target::AzureStorage), options())
        .unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn table_names_that_differ_only_in_case_are_refused_on_cosmos() {
    let (endpoint, seen) = accepting().await;
    let cosmos = service(&endpoint, Target::CosmosDb);
    cosmos.create_table("Orders").await.unwrap();
    cosmos
        .table::<DynamicEntity>("Orders")
        .unwrap()
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap();
    let sent = seen.lock().unwrap().len();
    let e = cosmos
        .table::<DynamicEntity>("orders")
        .unwrap()
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    let reason = cosmos_reason(&e);
    assert!(reason.contains("\"orders\""), "{reason}");
    assert!(reason.contains("\"Orders\""), "{reason}");
    assert!(reason.contains("case-sensitive"), "{reason}");
    assert!(cosmos.create_table("ORDERS").await.is_err());
    assert_eq!(
        seen.lock().unwrap().len(),
        sent,
        "refused before any request"
    );

    // Once deleted, the name may be spelt anew.
    cosmos.delete_table("Orders").await.unwrap();
    cosmos.create_table("orders").await.unwrap();

    // A name the service did not find is not remembered: the right spelling
    // still works after a mistyped one.
    let e = cosmos
        .table::<DynamicEntity>("Missing")
        .unwrap()
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");
    cosmos
        .table::<DynamicEntity>("MISSING")
        .unwrap()
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap();

    // Each client keeps its own names; on Storage, one table whatever the case.
    service(&endpoint, Target::CosmosDb)
        .create_table("ORDERS")
        .await
        .unwrap();
    let storage = service(&endpoint, Target::AzureStorage);
    storage.create_table("Orders").await.unwrap();
    storage
        .table::<DynamicEntity>("orders")
        .unwrap()
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap();
}
