//! Single-entity operations against Azurite: insert, get, upsert, update, delete,
//! optimistic concurrency, and what errors show.

use crate::common;
use tablekit::testing::TestEnv;

use chrono::Utc;
use tablekit::{DynamicEntity, EdmValue, IfMatch, TableServiceClient, UpdateMode};

fn blog(rk: &str) -> DynamicEntity {
    DynamicEntity::new("Channel9", rk)
        .with("Text", "Hello")
        .with("Rating", 3)
}

tablekit::testing::conformance! {
    async fn insert_returns_etag_and_timestamp_from_the_etag(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        let before = Utc::now();
        let written = t.insert(&blog("Oct-29")).await.unwrap();
        let etag = written.etag().as_str();
        assert!(etag.starts_with("W/\"datetime'"), "{etag}");
        let ts = written.timestamp().expect("the ETag embeds the Timestamp");
        assert_eq!(written.etag().timestamp(), Some(ts));
        // Same machine: the service clock is the test clock, give or take a few minutes.
        let skew = (ts - before).num_seconds().abs();
        assert!(skew < 300, "Timestamp {ts} is far from now ({before})");

        let read = t.get(("Channel9", "Oct-29")).await.unwrap().unwrap();
        assert_eq!(read.etag.as_ref(), Some(written.etag()));
        assert_eq!(read.timestamp, Some(ts));
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn insert_twice_is_a_conflict_with_entity_already_exists(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("a")).await.unwrap();
        let err = t.insert(&blog("a")).await.unwrap_err();
        assert!(err.is_conflict(), "{err:?}");
        assert_eq!(err.status(), Some(409));
        assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::EntityAlreadyExists));
        assert!(!err.is_not_found() && !err.is_precondition_failed());
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn get_existing_is_some_with_etag_and_missing_is_none(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("a")).await.unwrap();
        let read = t.get(("Channel9", "a")).await.unwrap().expect("exists");
        assert_eq!(read.partition_key, "Channel9");
        assert_eq!(read.row_key, "a");
        assert!(read.etag.is_some());
        assert!(read.timestamp.is_some());
        assert_eq!(read.get("Text"), Some(&EdmValue::from("Hello")));
        assert_eq!(read.get("Rating"), Some(&EdmValue::Int32(3)));
        assert_eq!(read.properties.len(), 2, "{read:?}");

        assert!(t.get(("Channel9", "missing")).await.unwrap().is_none());
        assert!(t.get(("Nowhere", "a")).await.unwrap().is_none());
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn get_with_select_returns_only_selected_properties(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("a").with("Extra", true)).await.unwrap();
        let read = t
            .get(("Channel9", "a"))
            .select(["Rating"])
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(read.row_key, "a");
        assert_eq!(read.get("Rating"), Some(&EdmValue::Int32(3)));
        assert_eq!(read.get("Text"), None);
        assert_eq!(read.get("Extra"), None);
        assert_eq!(read.properties.len(), 1, "{read:?}");
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn upsert_merge_keeps_other_properties_and_replace_removes_them(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("m")).await.unwrap();
        t.insert(&blog("r")).await.unwrap();
        let change = |rk: &str| DynamicEntity::new("Channel9", rk).with("Text", "Hi there");
        t.upsert(&change("m"), UpdateMode::Merge).await.unwrap();
        t.upsert(&change("r"), UpdateMode::Replace).await.unwrap();

        let merged = t.get(("Channel9", "m")).await.unwrap().unwrap();
        assert_eq!(merged.get("Text"), Some(&EdmValue::from("Hi there")));
        assert_eq!(merged.get("Rating"), Some(&EdmValue::Int32(3)));
        let replaced = t.get(("Channel9", "r")).await.unwrap().unwrap();
        assert_eq!(replaced.get("Text"), Some(&EdmValue::from("Hi there")));
        assert_eq!(replaced.get("Rating"), None);
        assert_eq!(replaced.properties.len(), 1);
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn upsert_inserts_a_missing_entity_in_both_modes(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        for (rk, mode) in [("m", UpdateMode::Merge), ("r", UpdateMode::Replace)] {
            let w = t.upsert(&blog(rk), mode).await.unwrap();
            let read = t
                .get(("Channel9", rk))
                .await
                .unwrap()
                .expect("upsert inserted");
            assert_eq!(read.etag.as_ref(), Some(w.etag()));
            assert_eq!(read.get("Rating"), Some(&EdmValue::Int32(3)));
        }
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn update_with_current_etag_applies_merge_and_replace(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        let w = t.insert(&blog("a")).await.unwrap();
        let patch = DynamicEntity::new("Channel9", "a").with("Text", "Hi there");
        let w2 = t.update(&patch, UpdateMode::Merge, w.etag()).await.unwrap();
        assert_ne!(w2.etag(), w.etag(), "an update bumps the version");
        let read = t.get(("Channel9", "a")).await.unwrap().unwrap();
        assert_eq!(read.get("Text"), Some(&EdmValue::from("Hi there")));
        assert_eq!(read.get("Rating"), Some(&EdmValue::Int32(3)));

        let only_rating = DynamicEntity::new("Channel9", "a").with("Rating", 5);
        t.update(
            &only_rating,
            UpdateMode::Replace,
            IfMatch::ETag(w2.etag().clone()),
        )
        .await
        .unwrap();
        let read = t.get(("Channel9", "a")).await.unwrap().unwrap();
        assert_eq!(read.get("Rating"), Some(&EdmValue::Int32(5)));
        assert_eq!(read.get("Text"), None, "Replace removes absent properties");
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn update_with_if_match_any_ignores_the_version(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("a")).await.unwrap();
        // Someone else changes it; an unconditional update still applies.
        t.upsert(&blog("a").with("Rating", 4), UpdateMode::Merge)
            .await
            .unwrap();
        let patch = DynamicEntity::new("Channel9", "a").with("Text", "Any");
        t.update(&patch, UpdateMode::Merge, IfMatch::Any)
            .await
            .unwrap();
        t.update(
            &patch.clone().with("Only", 1),
            UpdateMode::Replace,
            IfMatch::Any,
        )
        .await
        .unwrap();
        let read = t.get(("Channel9", "a")).await.unwrap().unwrap();
        assert_eq!(read.get("Text"), Some(&EdmValue::from("Any")));
        assert_eq!(read.get("Only"), Some(&EdmValue::Int32(1)));
        assert_eq!(read.get("Rating"), None);
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn update_with_stale_etag_is_rejected(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        let v1 = t.insert(&blog("a")).await.unwrap();
        t.update(&blog("a").with("Rating", 4), UpdateMode::Merge, v1.etag())
            .await
            .unwrap();
        let err = t
            .update(&blog("a").with("Rating", 5), UpdateMode::Merge, v1.etag())
            .await
            .unwrap_err();
        assert!(err.is_precondition_failed(), "{err:?}");
        assert_eq!(err.status(), Some(412));
        assert_eq!(
            err.code(),
            Some(&tablekit::error::ErrorCode::UpdateConditionNotSatisfied)
        );
        let read = t.get(("Channel9", "a")).await.unwrap().unwrap();
        assert_eq!(read.get("Rating"), Some(&EdmValue::Int32(4)));
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn update_of_a_missing_entity_is_not_found(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        for mode in [UpdateMode::Merge, UpdateMode::Replace] {
            let err = t
                .update(&blog("missing"), mode, IfMatch::Any)
                .await
                .unwrap_err();
            assert!(err.is_not_found(), "{mode:?}: {err:?}");
            assert_eq!(
                err.code(),
                Some(&tablekit::error::ErrorCode::ResourceNotFound),
                "{mode:?}"
            );
        }
        assert!(t.get(("Channel9", "missing")).await.unwrap().is_none());
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn delete_with_stale_etag_is_precondition_failed_and_keeps_the_entity(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        let v1 = t.insert(&blog("a")).await.unwrap();
        let v2 = t
            .update(&blog("a").with("Rating", 4), UpdateMode::Merge, v1.etag())
            .await
            .unwrap();
        let err = t.delete(("Channel9", "a"), v1.etag()).await.unwrap_err();
        assert!(err.is_precondition_failed(), "{err:?}");
        assert!(t.get(("Channel9", "a")).await.unwrap().is_some());

        t.delete(("Channel9", "a"), v2.etag()).await.unwrap();
        assert!(t.get(("Channel9", "a")).await.unwrap().is_none());
        let err = t.delete(("Channel9", "a"), IfMatch::Any).await.unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn delete_if_exists_returns_true_then_false(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("a")).await.unwrap();
        assert!(t
            .delete_if_exists(("Channel9", "a"), IfMatch::Any)
            .await
            .unwrap());
        assert!(!t
            .delete_if_exists(("Channel9", "a"), IfMatch::Any)
            .await
            .unwrap());
        assert!(t.get(("Channel9", "a")).await.unwrap().is_none());
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn insert_through_mut_fills_the_etag_and_through_ref_does_not(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        let by_ref = blog("ref");
        let w = t.insert(&by_ref).await.unwrap();
        assert_eq!(by_ref.etag, None);
        assert_eq!(by_ref.timestamp, None);
        assert!(!w.etag().as_str().is_empty());

        let mut by_mut = blog("mut");
        let w = t.insert(&mut by_mut).await.unwrap();
        assert_eq!(by_mut.etag.as_ref(), Some(w.etag()));
        assert_eq!(by_mut.timestamp, w.timestamp());

        // The filled ETag makes the next write conditional on it.
        by_mut.set("Rating", 4);
        let etag = by_mut.etag.clone().unwrap();
        let w2 = t
            .update(&mut by_mut, UpdateMode::Merge, etag)
            .await
            .unwrap();
        assert_eq!(by_mut.etag.as_ref(), Some(w2.etag()));
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn modify_reads_changes_and_writes(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("a")).await.unwrap();
        let written = t
            .modify(("Channel9", "a"), UpdateMode::Replace, |e| {
                e.set("Text", "Hi there");
            })
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(written.get("Text"), Some(&EdmValue::from("Hi there")));
        let read = t.get(("Channel9", "a")).await.unwrap().unwrap();
        assert_eq!(read.get("Text"), Some(&EdmValue::from("Hi there")));
        assert_eq!(read.get("Rating"), Some(&EdmValue::Int32(3)));
        assert_eq!(read.etag, written.etag);

        let missing = t
            .modify(("Channel9", "missing"), UpdateMode::Merge, |_| {
                panic!("no entity to change")
            })
            .await
            .unwrap();
        assert!(missing.is_none());
        common::drop_table(&t).await;
    }
}

/// Another writer, on its own runtime and client, changes the entity while
/// `modify` holds a copy: the conditional write gets 412, and `modify` must read
/// again and re-apply its change on the new version.
fn concurrent_write(table_name: &str, svc: &TableServiceClient, env: &TestEnv) {
    let name = table_name.to_owned();
    // An embedded client belongs to no runtime: a clone shares the store.
    let embedded = env.backend().is_embedded().then(|| svc.clone());
    let conn = env.connection_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let svc = embedded.unwrap_or_else(|| {
                common::tables(&conn.expect("an HTTP backend has a connection string")).unwrap()
            });
            let other = svc.table::<DynamicEntity>(&name).unwrap();
            let e = DynamicEntity::new("Channel9", "a")
                .with("Counter", 10)
                .with("Note", "other writer");
            other
                .update(&e, UpdateMode::Merge, IfMatch::Any)
                .await
                .unwrap();
        });
    })
    .join()
    .expect("the other writer succeeded");
}

tablekit::testing::conformance! {
    async fn modify_retries_after_a_concurrent_write(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&DynamicEntity::new("Channel9", "a").with("Counter", 0))
            .await
            .unwrap();
        let mut calls = 0;
        let written = t
            .modify(("Channel9", "a"), UpdateMode::Replace, |e| {
                calls += 1;
                if calls == 1 {
                    concurrent_write(t.name(), &svc, &env);
                }
                let n = e.get("Counter").and_then(EdmValue::as_i32).unwrap();
                e.set("Counter", n + 1);
            })
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(calls, 2, "one 412, one retry");
        let read = t.get(("Channel9", "a")).await.unwrap().unwrap();
        // Both changes survive: the other writer's 10 and Note, then our +1 on top.
        assert_eq!(read.get("Counter"), Some(&EdmValue::Int32(11)));
        assert_eq!(read.get("Note"), Some(&EdmValue::from("other writer")));
        assert_eq!(read.etag, written.etag);
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn two_writers_second_gets_412_then_rereads_and_wins(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;
        // A second client: its own connection pool over HTTP, the same store embedded.
        let other = env.second_tables().table::<DynamicEntity>(t.name()).unwrap();

        t.insert(&blog("Oct-29")).await.unwrap();
        // 1. A and B both read v1.
        let mut a = t.get(("Channel9", "Oct-29")).await.unwrap().unwrap();
        let mut b = other.get(("Channel9", "Oct-29")).await.unwrap().unwrap();
        let v1 = a.etag.clone().unwrap();
        assert_eq!(b.etag.as_ref(), Some(&v1));

        // 2-3. A's update arrives first and wins.
        a.set("Text", "Hi there");
        t.update(&mut a, UpdateMode::Merge, v1.clone())
            .await
            .unwrap();
        assert_ne!(a.etag.as_ref(), Some(&v1));

        // 4. B's update with v1 is rejected.
        b.set("Text", "Hi there again");
        let err = other
            .update(&b, UpdateMode::Merge, v1.clone())
            .await
            .unwrap_err();
        assert!(err.is_precondition_failed(), "{err:?}");

        // Recovery: B re-reads, re-applies, and succeeds.
        let mut b = other.get(("Channel9", "Oct-29")).await.unwrap().unwrap();
        assert_eq!(b.get("Text"), Some(&EdmValue::from("Hi there")));
        b.set("Text", "Hi there again");
        let etag = b.etag.clone().unwrap();
        other.update(&b, UpdateMode::Merge, etag).await.unwrap();

        let fin = t.get(("Channel9", "Oct-29")).await.unwrap().unwrap();
        assert_eq!(fin.get("Text"), Some(&EdmValue::from("Hi there again")));
        assert_eq!(fin.get("Rating"), Some(&EdmValue::Int32(3)));
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn service_error_display_has_status_and_code_but_no_key(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Crud").await;

        t.insert(&blog("a")).await.unwrap();
        let err = t.insert(&blog("a")).await.unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("409"), "{shown}");
        assert!(shown.contains("EntityAlreadyExists"), "{shown}");
        assert!(!shown.contains(common::KEY_FRAGMENT), "{shown}");
        assert!(!format!("{err:?}").contains(common::KEY_FRAGMENT));
        // The service names its answers; an embedded store made no request.
        assert_eq!(err.request_id().is_some(), backend.is_http(), "{err:?}");
        assert!(!shown.contains('\n'), "one line: {shown:?}");

        let missing = svc.delete_table("NoSuchTable").await.unwrap_err();
        assert!(missing.is_not_found(), "{missing:?}");
        assert!(missing.to_string().contains("404"), "{missing}");
        assert!(!missing.to_string().contains(common::KEY_FRAGMENT));
        common::drop_table(&t).await;
    }
}

#[tokio::test]
async fn debug_output_of_clients_holds_no_account_key() {
    let Some(svc) = common::service() else { return };
    let t = svc.table::<DynamicEntity>("Anything").unwrap();
    for shown in [
        format!("{svc:?}"),
        format!("{svc:#?}"),
        format!("{t:?}"),
        format!("{:?}", common::offline_service()),
    ] {
        assert!(!shown.contains(common::KEY_FRAGMENT), "{shown}");
        assert!(!shown.contains(&common::EMULATOR_KEY[20..40]), "{shown}");
    }
    let account = tablekit::Account::from_connection_string(
        &std::env::var(common::CONNECTION_STRING_VAR).unwrap(),
    )
    .unwrap();
    assert!(!format!("{account:?}").contains(common::KEY_FRAGMENT));
}

#[tokio::test]
async fn transport_errors_hold_no_account_key() {
    let t = common::offline_table::<DynamicEntity>();
    let err = t.get(("p", "r")).await.unwrap_err();
    assert!(err.is_transport(), "{err:?}");
    assert!(!err.to_string().contains(common::KEY_FRAGMENT));
    assert!(!format!("{err:?}").contains(common::KEY_FRAGMENT));
}
