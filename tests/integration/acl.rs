//! Stored access policies of tables, queues and containers: set, read back,
//! cleared, limited before any I/O, and gone with their resource, on Azurite
//! and on the embedded store (which keeps them but enforces no SAS; the SAS
//! they authorise on Azurite is in `sas_account`).

use chrono::{DateTime, TimeZone as _, Utc};
use tablekit::account::{BlobSasPermissions, QueueSasPermissions, TableSasPermissions};
use tablekit::acl::StoredAccessPolicy;
use tablekit::DynamicEntity;

use crate::common;
use tablekit::testing::TestEnv;

fn at(y: i32, m: u32, d: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).unwrap()
}

/// Policies that set all three parts: Azurite refuses a table policy that
/// leaves one out (see `a_table_policy_may_leave_parts_to_the_sas`).
fn table_policies() -> Vec<StoredAccessPolicy<TableSasPermissions>> {
    vec![
        StoredAccessPolicy::new("readers")
            .permissions(TableSasPermissions::READ_ONLY)
            .start(at(2029, 12, 31))
            .expiry(at(2030, 1, 1)),
        StoredAccessPolicy::new("writers")
            .permissions(TableSasPermissions {
                add: true,
                update: true,
                ..Default::default()
            })
            .start(at(2029, 1, 1))
            .expiry(at(2031, 1, 1)),
    ]
}

tablekit::testing::conformance! {
    async fn table_policies_are_set_read_back_and_cleared(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<DynamicEntity>(&svc, "Acl").await;
        assert!(table.access_policies().await.unwrap().is_empty());
        table.set_access_policies(&table_policies()).await.unwrap();
        assert_eq!(table.access_policies().await.unwrap(), table_policies());
        // A set replaces the whole list.
        let one = &table_policies()[1..];
        table.set_access_policies(one).await.unwrap();
        assert_eq!(table.access_policies().await.unwrap(), one);
        table.set_access_policies(&[]).await.unwrap();
        assert!(table.access_policies().await.unwrap().is_empty());
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    /// The service lets a policy leave its start, expiry or permissions to
    /// the SAS; Azurite 3.35 answers 400 (empty body) to a table policy
    /// without all three (its queue and container policies may leave them).
    async fn a_table_policy_may_leave_parts_to_the_sas(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let table = common::fresh_table::<DynamicEntity>(&svc, "AclPart").await;
        let partial = [StoredAccessPolicy::new("writers").permissions(TableSasPermissions {
            add: true,
            ..Default::default()
        })];
        let set = table.set_access_policies(&partial).await;
        if backend.is_azurite() {
            assert_eq!(set.unwrap_err().status(), Some(400));
        } else {
            set.unwrap();
            assert_eq!(table.access_policies().await.unwrap(), partial);
        }
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    async fn five_table_policies_are_kept(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<DynamicEntity>(&svc, "AclFive").await;
        let five: Vec<_> = (0..5)
            .map(|i| {
                StoredAccessPolicy::new(format!("p{i}-{}", "x".repeat(60)))
                    .permissions(TableSasPermissions::READ_ONLY)
                    .start(at(2029, 1, 1))
                    .expiry(at(2030, 1, 1))
            })
            .collect();
        table.set_access_policies(&five).await.unwrap();
        assert_eq!(table.access_policies().await.unwrap(), five);
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    async fn policies_of_a_missing_table_are_not_found(env) {
        let svc = env.tables().clone();
        let missing = svc
            .table::<DynamicEntity>(&common::unique_name("NoAcl"))
            .unwrap();
        let err = missing.access_policies().await.unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        let err = missing
            .set_access_policies(&table_policies())
            .await
            .unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
    }
}

tablekit::testing::conformance! {
    async fn a_table_deleted_and_created_again_has_no_policies(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<DynamicEntity>(&svc, "AclGone").await;
        table.set_access_policies(&table_policies()).await.unwrap();
        table.delete_table().await.unwrap();
        table.create_table().await.unwrap();
        assert!(table.access_policies().await.unwrap().is_empty());
        common::drop_table(&table).await;
    }
}

#[tokio::test]
async fn a_sixth_policy_or_a_bad_id_is_refused_before_any_io() {
    let table = common::offline_table::<DynamicEntity>();
    let six: Vec<_> = (0..6)
        .map(|i| StoredAccessPolicy::<TableSasPermissions>::new(format!("p{i}")))
        .collect();
    let err = table.set_access_policies(&six).await.unwrap_err();
    assert!(common::assert_invalid(&err).contains("at most 5"), "{err}");
    for bad in [String::new(), "x".repeat(65)] {
        let err = table
            .set_access_policies(&[StoredAccessPolicy::new(bad)])
            .await
            .unwrap_err();
        assert!(common::assert_invalid(&err).contains("1 to 64"), "{err}");
    }
    let twice = [
        StoredAccessPolicy::<TableSasPermissions>::new("same"),
        StoredAccessPolicy::new("same"),
    ];
    let err = table.set_access_policies(&twice).await.unwrap_err();
    assert!(common::assert_invalid(&err).contains("twice"), "{err}");
}

/// A queue or container name: lower case, unique.
fn lower_name(prefix: &str) -> String {
    common::unique_name(prefix).to_ascii_lowercase()
}

async fn queue_policies_are_set_read_back_and_gone_with_the_queue(env: TestEnv) {
    let queue = env.queues().queue(&lower_name("acl")).unwrap();
    let err = queue.access_policies().await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    queue.create_queue().await.unwrap();
    let policies = vec![
        StoredAccessPolicy::new("workers")
            .permissions(QueueSasPermissions {
                process: true,
                ..Default::default()
            })
            .expiry(at(2030, 1, 1)),
        StoredAccessPolicy::new("senders").permissions(QueueSasPermissions {
            add: true,
            ..Default::default()
        }),
    ];
    queue.set_access_policies(&policies).await.unwrap();
    assert_eq!(queue.access_policies().await.unwrap(), policies);
    queue.delete_queue().await.unwrap();
    queue.create_queue().await.unwrap();
    assert!(queue.access_policies().await.unwrap().is_empty());
    queue.delete_queue().await.unwrap();
}

async fn container_policies_are_set_read_back_and_gone_with_the_container(env: TestEnv) {
    let container = env.blobs().container(&lower_name("acl")).unwrap();
    let err = container.access_policies().await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    container.create_container().await.unwrap();
    let policies = vec![StoredAccessPolicy::new("readers")
        .permissions(BlobSasPermissions {
            read: true,
            list: true,
            ..Default::default()
        })
        .start(at(2029, 6, 1))
        .expiry(at(2030, 1, 1))];
    container.set_access_policies(&policies).await.unwrap();
    assert_eq!(container.access_policies().await.unwrap(), policies);
    container.set_access_policies(&[]).await.unwrap();
    assert!(container.access_policies().await.unwrap().is_empty());
    container.set_access_policies(&policies).await.unwrap();
    container.delete_container().await.unwrap();
    let err = container.access_policies().await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}

tablekit::testing::conformance!(
    queue_policies_are_set_read_back_and_gone_with_the_queue,
    container_policies_are_set_read_back_and_gone_with_the_container,
);
