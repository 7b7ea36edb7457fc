//! SAS round trips on Azurite: an account SAS and service SAS tied to stored
//! access policies actually authorise requests there, within what they grant,
//! and a SAS tied to a policy stops working when the policy is removed or has
//! expired (Azurite enforces `si` for tables, queues and containers). The
//! signatures themselves are checked against the REST reference's
//! string-to-sign in the unit tests of `tablekit::account::sas`.

use chrono::{Duration, Utc};
use tablekit::account::{
    AccountSas, AccountSasPermissions, AccountSasResourceTypes, AccountSasServices, BlobSas,
    BlobSasPermissions, QueueSas, QueueSasPermissions, SasProtocol, SasToken, TableSas,
    TableSasPermissions,
};
use tablekit::acl::StoredAccessPolicy;
use tablekit::{
    Account, BlobServiceClient, Credential, DynamicEntity, QueueServiceClient, TableServiceClient,
};

use crate::common;

fn test_account() -> Option<Account> {
    let conn = common::connection_string()?;
    Some(Account::from_connection_string(&conn).expect("valid connection string"))
}

fn with_sas(account: &Account, sas: SasToken) -> Account {
    account.clone().with_credential(Credential::Sas(sas))
}

fn tables_with(account: &Account, sas: SasToken) -> TableServiceClient {
    TableServiceClient::with_options(with_sas(account, sas), common::client_options()).unwrap()
}

/// A policy window around now: Azurite takes all three parts from the policy.
fn window() -> (chrono::DateTime<Utc>, chrono::DateTime<Utc>) {
    (
        Utc::now() - Duration::minutes(5),
        Utc::now() + Duration::hours(1),
    )
}

fn account_sas(
    services: AccountSasServices,
    types: AccountSasResourceTypes,
    permissions: AccountSasPermissions,
) -> AccountSas {
    AccountSas::new()
        .services(services)
        .resource_types(types)
        .permissions(permissions)
        .start(Utc::now() - Duration::minutes(5))
        .expiry(Utc::now() + Duration::hours(1))
        .protocol(SasProtocol::HttpsAndHttp)
}

const TABLES: AccountSasServices = AccountSasServices {
    blob: false,
    queue: false,
    table: true,
};

#[tokio::test]
async fn an_account_sas_lists_tables_and_reads_entities_but_cannot_create_tables() {
    let Some(account) = test_account() else {
        return;
    };
    let svc = TableServiceClient::with_options(account.clone(), common::client_options()).unwrap();
    let table = common::fresh_table::<DynamicEntity>(&svc, "AccSas").await;
    table
        .insert(&DynamicEntity::new("p", "r").with("N", 5))
        .await
        .unwrap();

    let sas = account_sas(
        TABLES,
        AccountSasResourceTypes::ALL,
        AccountSasPermissions {
            read: true,
            list: true,
            ..Default::default()
        },
    )
    .sign(&account)
    .unwrap();
    let reader = tables_with(&account, sas);
    let names = reader
        .list_tables()
        .prefix(table.name())
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(names, [table.name()]);
    let entity = reader
        .table::<DynamicEntity>(table.name())
        .unwrap()
        .get(("p", "r"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(entity.get("N").and_then(|v| v.as_i32()), Some(5));
    let name = common::unique_name("AccSasNew");
    let refused = reader.create_table(&name).await.unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
    assert!(!refused.to_string().contains("sig="), "{refused}");
    assert!(svc
        .list_tables()
        .prefix(&name)
        .fetch_all()
        .await
        .unwrap()
        .is_empty());
    common::drop_table(&table).await;
}

#[tokio::test]
async fn an_account_sas_for_object_calls_cannot_list_tables() {
    let Some(account) = test_account() else {
        return;
    };
    let sas = account_sas(
        TABLES,
        AccountSasResourceTypes {
            object: true,
            ..Default::default()
        },
        AccountSasPermissions::ALL,
    )
    .sign(&account)
    .unwrap();
    let refused = tables_with(&account, sas)
        .list_tables()
        .fetch_all()
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
}

#[tokio::test]
async fn an_account_sas_for_queues_does_not_open_tables() {
    let Some(account) = test_account() else {
        return;
    };
    let queues_only = AccountSasServices {
        queue: true,
        ..Default::default()
    };
    let sas = account_sas(
        queues_only,
        AccountSasResourceTypes::ALL,
        AccountSasPermissions::ALL,
    )
    .sign(&account)
    .unwrap();
    let refused = tables_with(&account, sas.clone())
        .list_tables()
        .fetch_all()
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
    // The same SAS works for queues.
    let queues =
        QueueServiceClient::with_options(with_sas(&account, sas), common::client_options())
            .unwrap();
    let queue = queues
        .queue(&common::unique_name("accsas").to_ascii_lowercase())
        .unwrap();
    queue.create_queue().await.unwrap();
    queue.send("hello").await.unwrap();
    assert_eq!(queue.peek(1).await.unwrap()[0].text().unwrap(), "hello");
    queue.delete_queue().await.unwrap();
}

#[tokio::test]
async fn an_account_sas_reads_and_sets_service_properties() {
    let Some(account) = test_account() else {
        return;
    };
    let sas = account_sas(
        TABLES,
        AccountSasResourceTypes {
            service: true,
            ..Default::default()
        },
        AccountSasPermissions {
            read: true,
            ..Default::default()
        },
    )
    .sign(&account)
    .unwrap();
    let reader = tables_with(&account, sas);
    let properties = reader.service_properties().await.unwrap();
    let refused = reader
        .set_service_properties(&properties)
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
}

#[tokio::test]
async fn a_table_sas_tied_to_a_policy_reads_until_the_policy_is_removed() {
    let Some(account) = test_account() else {
        return;
    };
    let svc = TableServiceClient::with_options(account.clone(), common::client_options()).unwrap();
    let table = common::fresh_table::<DynamicEntity>(&svc, "PolicySas").await;
    table
        .insert(&DynamicEntity::new("p", "r").with("N", 9))
        .await
        .unwrap();
    let (start, expiry) = window();
    table
        .set_access_policies(&[StoredAccessPolicy::new("readers")
            .permissions(TableSasPermissions::READ_ONLY)
            .start(start)
            .expiry(expiry)])
        .await
        .unwrap();

    // The SAS carries no permission and no expiry: the policy gives them.
    let sas = TableSas::new(table.name())
        .policy_id("readers")
        .sign(&account)
        .unwrap();
    let reader = tables_with(&account, sas)
        .table::<DynamicEntity>(table.name())
        .unwrap();
    let read = reader.get(("p", "r")).await.unwrap().unwrap();
    assert_eq!(read.get("N").and_then(|v| v.as_i32()), Some(9));
    let refused = reader
        .insert(&DynamicEntity::new("p", "w"))
        .await
        .unwrap_err();
    assert_eq!(
        refused.status(),
        Some(403),
        "the policy grants read only: {refused}"
    );

    // Revoked: the same SAS stops working.
    table.set_access_policies(&[]).await.unwrap();
    let revoked = reader.get(("p", "r")).await.unwrap_err();
    assert_eq!(revoked.status(), Some(403), "{revoked}");
    common::drop_table(&table).await;
}

#[tokio::test]
async fn a_table_sas_tied_to_an_expired_policy_is_refused() {
    let Some(account) = test_account() else {
        return;
    };
    let svc = TableServiceClient::with_options(account.clone(), common::client_options()).unwrap();
    let table = common::fresh_table::<DynamicEntity>(&svc, "OldPolicy").await;
    table
        .set_access_policies(&[StoredAccessPolicy::new("past")
            .permissions(TableSasPermissions::READ_ONLY)
            .start(Utc::now() - Duration::hours(2))
            .expiry(Utc::now() - Duration::hours(1))])
        .await
        .unwrap();
    let sas = TableSas::new(table.name())
        .policy_id("past")
        .sign(&account)
        .unwrap();
    let reader = tables_with(&account, sas)
        .table::<DynamicEntity>(table.name())
        .unwrap();
    let refused = reader.get(("p", "r")).await.unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
    common::drop_table(&table).await;
}

#[tokio::test]
async fn a_queue_sas_tied_to_a_policy_sends_until_the_policy_is_removed() {
    let Some(account) = test_account() else {
        return;
    };
    let conn = common::connection_string().unwrap();
    let queues = common::queues(&conn).unwrap();
    let name = common::unique_name("policysas").to_ascii_lowercase();
    let queue = queues.queue(&name).unwrap();
    queue.create_queue().await.unwrap();
    let (start, expiry) = window();
    queue
        .set_access_policies(&[StoredAccessPolicy::new("senders")
            .permissions(QueueSasPermissions {
                add: true,
                ..Default::default()
            })
            .start(start)
            .expiry(expiry)])
        .await
        .unwrap();
    let sas = QueueSas::new(&name)
        .policy_id("senders")
        .sign(&account)
        .unwrap();
    let sender =
        QueueServiceClient::with_options(with_sas(&account, sas), common::client_options())
            .unwrap()
            .queue(&name)
            .unwrap();
    sender.send("one").await.unwrap();
    let refused = sender.peek(1).await.unwrap_err();
    assert_eq!(
        refused.status(),
        Some(403),
        "the policy grants add only: {refused}"
    );
    queue.set_access_policies(&[]).await.unwrap();
    let revoked = sender.send("two").await.unwrap_err();
    assert_eq!(revoked.status(), Some(403), "{revoked}");
    assert_eq!(queue.approximate_message_count().await.unwrap(), 1);
    queue.delete_queue().await.unwrap();
}

#[tokio::test]
async fn a_container_sas_tied_to_a_policy_reads_until_the_policy_is_removed() {
    let Some(account) = test_account() else {
        return;
    };
    let conn = common::connection_string().unwrap();
    let blobs = common::blobs(&conn).unwrap();
    let name = common::unique_name("policysas").to_ascii_lowercase();
    let container = blobs.container(&name).unwrap();
    container.create_container().await.unwrap();
    container
        .blob("a.txt")
        .unwrap()
        .upload(&b"hello"[..])
        .await
        .unwrap();
    let (start, expiry) = window();
    container
        .set_access_policies(&[StoredAccessPolicy::new("readers")
            .permissions(BlobSasPermissions::READ_ONLY)
            .start(start)
            .expiry(expiry)])
        .await
        .unwrap();
    let sas = BlobSas::container(&name)
        .policy_id("readers")
        .sign(&account)
        .unwrap();
    let reader = BlobServiceClient::with_options(with_sas(&account, sas), common::client_options())
        .unwrap()
        .container(&name)
        .unwrap();
    let bytes = reader
        .blob("a.txt")
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"hello");
    container.set_access_policies(&[]).await.unwrap();
    let revoked = reader
        .blob("a.txt")
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap_err();
    assert_eq!(revoked.status(), Some(403), "{revoked}");
    container.delete_container().await.unwrap();
}
