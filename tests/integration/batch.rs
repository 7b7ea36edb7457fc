//! Entity group transactions against Azurite: mixed operations, all-or-nothing
//! failures with the failing index, and the client-side rules checked before I/O.

use crate::common;

use tablekit::{DynamicEntity, EdmValue, IfMatch, TableClient, UpdateMode};

const PK: &str = "Channel_19";

fn row(rk: &str) -> DynamicEntity {
    DynamicEntity::new(PK, rk).with("A", 1).with("Text", "old")
}

async fn exists(t: &TableClient<DynamicEntity>, rk: &str) -> bool {
    t.get((PK, rk)).await.unwrap().is_some()
}

tablekit::testing::conformance! {
    async fn transaction_of_every_operation_kind_applies_all_and_returns_etags(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Batch").await;

        for rk in ["merge", "replace", "update", "delete"] {
            t.insert(&row(rk)).await.unwrap();
        }
        let update_etag = t.get((PK, "update")).await.unwrap().unwrap().etag.unwrap();
        let delete_etag = t.get((PK, "delete")).await.unwrap().unwrap().etag.unwrap();

        let mut tx = t.transaction();
        tx.insert(&row("new")).unwrap();
        tx.upsert(
            &DynamicEntity::new(PK, "merge").with("B", 2),
            UpdateMode::Merge,
        )
        .unwrap();
        tx.upsert(
            &DynamicEntity::new(PK, "replace").with("B", 2),
            UpdateMode::Replace,
        )
        .unwrap();
        tx.update(
            &DynamicEntity::new(PK, "update").with("Text", "new"),
            UpdateMode::Merge,
            update_etag.clone(),
        )
        .unwrap();
        tx.delete((PK, "delete"), delete_etag).unwrap();
        tx.upsert(&row("upserted"), UpdateMode::Merge).unwrap();
        assert_eq!(tx.len(), 6);
        let result = tx.send().await.unwrap();

        assert_eq!(result.etags().len(), 6);
        for i in [0, 1, 2, 3, 5] {
            assert!(result.etag(i).is_some(), "operation {i} wrote an entity");
        }
        assert_eq!(result.etag(4), None, "a delete has no ETag");
        assert_eq!(result.etag(6), None);

        let new = t.get((PK, "new")).await.unwrap().expect("inserted");
        assert_eq!(new.etag.as_ref(), result.etag(0));
        let merged = t.get((PK, "merge")).await.unwrap().unwrap();
        assert_eq!(merged.get("A"), Some(&EdmValue::Int32(1)));
        assert_eq!(merged.get("B"), Some(&EdmValue::Int32(2)));
        assert_eq!(merged.etag.as_ref(), result.etag(1));
        let replaced = t.get((PK, "replace")).await.unwrap().unwrap();
        assert_eq!(replaced.get("A"), None);
        assert_eq!(replaced.get("B"), Some(&EdmValue::Int32(2)));
        let updated = t.get((PK, "update")).await.unwrap().unwrap();
        assert_eq!(updated.get("Text"), Some(&EdmValue::from("new")));
        assert_eq!(updated.get("A"), Some(&EdmValue::Int32(1)));
        assert_ne!(updated.etag.as_ref(), Some(&update_etag));
        assert!(!exists(&t, "delete").await);
        assert!(exists(&t, "upserted").await);
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn transaction_failing_at_its_third_operation_names_index_2_and_writes_nothing(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Batch").await;

        t.insert(&row("c")).await.unwrap();
        let mut tx = t.transaction();
        tx.insert(&row("a")).unwrap();
        tx.upsert(&row("b"), UpdateMode::Replace).unwrap();
        tx.insert(&row("c").with("A", 99)).unwrap(); // exists: conflict
        tx.insert(&row("d")).unwrap();
        let err = tx.send().await.unwrap_err();

        assert!(err.is_conflict(), "{err:?}");
        assert_eq!(err.status(), Some(409));
        assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::EntityAlreadyExists));
        assert_eq!(err.batch_index(), Some(2), "{err:?}");
        assert!(err.to_string().contains("operation 2"), "{err}");

        for rk in ["a", "b", "d"] {
            assert!(!exists(&t, rk).await, "{rk} must not be written");
        }
        let c = t.get((PK, "c")).await.unwrap().unwrap();
        assert_eq!(c.get("A"), Some(&EdmValue::Int32(1)), "c is unchanged");
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn transaction_with_a_stale_etag_fails_with_412_and_writes_nothing(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Batch").await;

        let v1 = t.insert(&row("u")).await.unwrap();
        t.update(&row("u").with("A", 2), UpdateMode::Merge, v1.etag())
            .await
            .unwrap();

        let mut tx = t.transaction();
        tx.insert(&row("a")).unwrap();
        tx.update(&row("u").with("A", 3), UpdateMode::Replace, v1.etag())
            .unwrap();
        let err = tx.send().await.unwrap_err();
        assert!(err.is_precondition_failed(), "{err:?}");
        assert_eq!(
            err.code(),
            Some(&tablekit::error::ErrorCode::UpdateConditionNotSatisfied)
        );
        assert_eq!(err.batch_index(), Some(1), "{err:?}");

        assert!(!exists(&t, "a").await);
        let u = t.get((PK, "u")).await.unwrap().unwrap();
        assert_eq!(u.get("A"), Some(&EdmValue::Int32(2)));
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn transaction_delete_of_a_missing_entity_fails_and_writes_nothing(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Batch").await;

        let mut tx = t.transaction();
        tx.insert(&row("a")).unwrap();
        tx.delete((PK, "missing"), IfMatch::Any).unwrap();
        let err = tx.send().await.unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!(err.batch_index(), Some(1), "{err:?}");
        assert!(!exists(&t, "a").await);
        common::drop_table(&t).await;
    }
}

#[tokio::test]
async fn transaction_with_101_operations_is_rejected_at_index_100() {
    let t = common::offline_table::<DynamicEntity>();
    let mut tx = t.transaction();
    for i in 0..100 {
        tx.insert(&row(&format!("r{i:03}"))).unwrap();
    }
    let err = tx.insert(&row("r100")).unwrap_err();
    let msg = common::assert_invalid(&err);
    assert_eq!(err.batch_index(), Some(100));
    assert_eq!(
        msg,
        "invalid input: transaction operation 100: a transaction holds at most 100 operations"
    );
    let err = tx.delete((PK, "r101"), IfMatch::Any).unwrap_err();
    assert_eq!(err.batch_index(), Some(100));
    assert_eq!(tx.len(), 100, "the rejected operations were not added");
}

#[tokio::test]
async fn transaction_over_two_partitions_is_rejected_at_the_offending_index() {
    let t = common::offline_table::<DynamicEntity>();
    let mut tx = t.transaction();
    tx.insert(&row("a")).unwrap();
    tx.insert(&row("b")).unwrap();
    let err = tx.insert(&DynamicEntity::new("Other", "c")).unwrap_err();
    let msg = common::assert_invalid(&err);
    assert_eq!(err.batch_index(), Some(2));
    assert_eq!(
        msg,
        "invalid input: transaction operation 2: PartitionKey \"Other\" differs from the transaction's \"Channel_19\"; a transaction spans one partition"
    );
    let err = tx.delete(("Other", "d"), IfMatch::Any).unwrap_err();
    assert_eq!(err.batch_index(), Some(2));
    assert_eq!(tx.len(), 2);
}

#[tokio::test]
async fn transaction_with_the_same_row_key_twice_is_rejected_at_the_second() {
    let t = common::offline_table::<DynamicEntity>();
    let mut tx = t.transaction();
    tx.insert(&row("a")).unwrap();
    tx.insert(&row("b")).unwrap();
    let err = tx.upsert(&row("a"), UpdateMode::Merge).unwrap_err();
    let msg = common::assert_invalid(&err);
    assert_eq!(err.batch_index(), Some(2));
    assert_eq!(
        msg,
        "invalid input: transaction operation 2: RowKey \"a\" already has an operation; a transaction holds one operation per entity"
    );
    assert_eq!(
        tx.delete((PK, "b"), IfMatch::Any)
            .unwrap_err()
            .batch_index(),
        Some(2)
    );
}

#[tokio::test]
async fn transaction_over_4_mib_is_rejected_at_the_operation_that_crosses_it() {
    over_4_mib_is_rejected_at_the_crossing(common::offline_table::<DynamicEntity>());
}

/// On the embedded store the JSON is not written, only its length counted
/// (issue 23): the limit falls at the same operation.
#[tokio::test]
async fn transaction_over_4_mib_is_rejected_at_the_operation_that_crosses_it_embedded() {
    let t = tablekit::TableServiceClient::embedded()
        .table::<DynamicEntity>("Over4MiB")
        .unwrap();
    over_4_mib_is_rejected_at_the_crossing(t);
}

fn over_4_mib_is_rejected_at_the_crossing(t: TableClient<DynamicEntity>) {
    // Each entity: 15 strings of 32,000 chars = 960,000 bytes as UTF-16 (under the
    // 1 MiB entity limit) and about 480 KB of JSON; the 9th crosses 4 MiB.
    let big = "x".repeat(32_000);
    let entity = |i: usize| {
        let mut e = DynamicEntity::new(PK, format!("r{i}"));
        for p in 0..15 {
            e.set(format!("S{p}"), big.as_str());
        }
        e
    };
    let mut tx = t.transaction();
    let mut failure = None;
    for i in 0..100 {
        if let Err(e) = tx.insert(&entity(i)) {
            failure = Some((i, e));
            break;
        }
    }
    let (i, err) = failure.expect("the payload limit is enforced");
    assert_eq!(i, 8);
    assert_eq!(err.batch_index(), Some(8));
    assert_eq!(tx.len(), 8);
    let msg = common::assert_invalid(&err);
    assert_eq!(
        msg,
        "invalid input: transaction operation 8: the payload would exceed 4194304 bytes"
    );
}

#[tokio::test]
async fn invalid_entity_in_a_transaction_is_rejected_with_its_index() {
    let t = common::offline_table::<DynamicEntity>();
    let mut tx = t.transaction();
    tx.insert(&row("a")).unwrap();
    let err = tx
        .insert(&DynamicEntity::new(PK, "b").with("my-prop", 1))
        .unwrap_err();
    let msg = common::assert_invalid(&err);
    assert_eq!(err.batch_index(), Some(1));
    assert!(
        msg.contains("operation 1") && msg.contains("\"my-prop\""),
        "{msg}"
    );

    let err = tx.delete((PK, "a#b"), IfMatch::Any).unwrap_err();
    let msg = common::assert_invalid(&err);
    assert!(msg.contains("RowKey") && msg.contains("'#'"), "{msg}");
    assert_eq!(err.batch_index(), Some(1));
    assert_eq!(tx.len(), 1);
}

#[tokio::test]
async fn empty_transaction_is_rejected_before_io() {
    let t = common::offline_table::<DynamicEntity>();
    let tx = t.transaction();
    assert!(tx.is_empty());
    let err = tx.send().await.unwrap_err();
    let msg = common::assert_invalid(&err);
    assert_eq!(err.batch_index(), None);
    assert_eq!(
        msg,
        "invalid input: a transaction needs at least one operation"
    );
}

tablekit::testing::conformance! {
    async fn transaction_of_100_operations_is_accepted(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Batch").await;

        let mut tx = t.transaction();
        for i in 0..100 {
            tx.insert(&row(&format!("r{i:03}"))).unwrap();
        }
        let result = tx.send().await.unwrap();
        assert_eq!(result.etags().len(), 100);
        assert!(result.etags().iter().all(Option::is_some));
        let all = t.query().fetch_all().await.unwrap();
        assert_eq!(all.len(), 100);
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    /// A transaction on a table that does not exist fails at its first
    /// operation (index 0), as the service's answer says, on every backend.
    async fn a_transaction_on_a_missing_table_fails_at_operation_0(env) {
        let svc = env.tables().clone();
        let t = svc
            .table::<DynamicEntity>(&common::unique_name("Missing"))
            .unwrap();
        let mut tx = t.transaction();
        tx.insert(&row("a")).unwrap();
        tx.insert(&row("b")).unwrap();
        let err = tx.send().await.unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!(
            err.code(),
            Some(&tablekit::error::ErrorCode::TableNotFound),
            "{err:?}"
        );
        assert_eq!(err.batch_index(), Some(0), "{err:?}");
    }
}

/// A bad entity in a transaction is refused by the call that adds it, with
/// the same error and index on the embedded store as on the service's client
/// (the store takes the client's check, proven by the bag it receives, as
/// done); what was added before it is sent and nothing else is written.
#[tokio::test]
async fn a_bad_entity_in_a_transaction_is_refused_alike_on_both_backends() {
    let embedded = tablekit::TableServiceClient::embedded()
        .table::<DynamicEntity>("BadInTx")
        .unwrap();
    embedded.create_table().await.unwrap();
    let offline = common::offline_table::<DynamicEntity>();
    let mut many = DynamicEntity::new(PK, "many");
    for i in 0..253 {
        many.set(format!("P{i}"), i);
    }
    let mut huge = DynamicEntity::new(PK, "huge");
    for i in 0..17 {
        huge.set(format!("B{i}"), vec![0u8; 65536]);
    }
    let ancient = chrono::DateTime::parse_from_rfc3339("1600-12-31T23:59:59Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let bad = [
        DynamicEntity::new(PK, "a#b"),
        DynamicEntity::new(PK, "name").with("my-prop", 1),
        DynamicEntity::new(PK, "reserved").with("Timestamp", 1),
        DynamicEntity::new(PK, "long").with("S", "x".repeat(32 * 1024 + 1)),
        DynamicEntity::new(PK, "blob").with("B", vec![0u8; 65537]),
        DynamicEntity::new(PK, "old").with("D", ancient),
        many,
        huge,
    ];
    for (i, e) in bad.iter().enumerate() {
        let ok = format!("ok{i}");
        let mut refusals = Vec::new();
        let mut sendable = None;
        for t in [&offline, &embedded] {
            let mut tx = t.transaction();
            tx.insert(&row(&ok)).unwrap();
            let err = tx.insert(e).unwrap_err();
            assert_eq!(err.batch_index(), Some(1), "{err:?}");
            refusals.push(common::assert_invalid(&err));
            for refused in [
                tx.upsert(e, UpdateMode::Merge).unwrap_err(),
                tx.update(e, UpdateMode::Replace, IfMatch::Any).unwrap_err(),
            ] {
                assert_eq!(refused.batch_index(), Some(1), "{refused:?}");
            }
            assert_eq!(tx.len(), 1);
            sendable = Some(tx);
        }
        assert_eq!(refusals[0], refusals[1], "entity {i}");
        sendable.unwrap().send().await.unwrap();
    }
    let stored = embedded.query().fetch_all().await.unwrap();
    let mut keys: Vec<_> = stored.iter().map(|e| e.row_key.clone()).collect();
    keys.sort();
    let mut want: Vec<_> = (0..bad.len()).map(|i| format!("ok{i}")).collect();
    want.sort();
    assert_eq!(keys, want);
}

tablekit::testing::conformance! {
    /// Entities of different shapes in one transaction (names in another
    /// order, fewer, more, of other types) are stored with their own names
    /// and values, and a later merge into them keeps every name right.
    async fn a_transaction_of_entities_of_different_shapes_stores_each_as_it_is(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Shapes").await;
        let shapes = [
            DynamicEntity::new(PK, "1").with("A", 1).with("B", "b").with("C", true),
            DynamicEntity::new(PK, "2").with("A", 2).with("B", "x").with("C", false),
            DynamicEntity::new(PK, "3").with("B", "y").with("A", 3),
            DynamicEntity::new(PK, "4").with("A", 4),
            DynamicEntity::new(PK, "5").with("A", 5).with("B", "z").with("C", true).with("D", 1.5),
            DynamicEntity::new(PK, "6").with("a", 6).with("B", vec![1u8, 2]).with("C", 7_i64),
            DynamicEntity::new(PK, "7"),
            DynamicEntity::new(PK, "8").with("A", 8).with("B", "w").with("C", false),
        ];
        let mut tx = t.transaction();
        for e in &shapes {
            tx.insert(e).unwrap();
        }
        tx.send().await.unwrap();
        let mut tx = t.transaction();
        for rk in ["2", "3", "6"] {
            tx.upsert(&DynamicEntity::new(PK, rk).with("B", "merged").with("E", 9), UpdateMode::Merge)
                .unwrap();
        }
        tx.send().await.unwrap();
        for e in &shapes {
            let mut want = e.clone();
            if ["2", "3", "6"].contains(&e.row_key.as_str()) {
                want.set("B", "merged");
                want.set("E", 9);
            }
            let got = t.get((PK, e.row_key.as_str())).await.unwrap().unwrap();
            let sorted = |d: &DynamicEntity| {
                let mut p: Vec<_> = d.properties.iter().map(|(n, v)| (n.to_owned(), v.clone())).collect();
                p.sort_by(|a, b| a.0.cmp(&b.0));
                p
            };
            assert_eq!(sorted(&got), sorted(&want), "{}", e.row_key);
        }
        common::drop_table(&t).await;
    }
}
