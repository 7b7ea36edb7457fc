//! `TableClient::modify` and `try_modify`: read, change, conditional write; on
//! 412 back off and go again up to the caller's limit; a `try_modify` closure
//! may stop without writing.
//! The limit is checked on the scripted fake server of `retry`; the rest
//! against Azurite.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use tablekit::{table::Modified, DynamicEntity, EdmValue, UpdateMode};

use crate::common;
use crate::retry::{fake_server, table, Answer};

const ENTITY: &str =
    r#"{"PartitionKey":"p","RowKey":"r","Timestamp":"2024-01-01T00:00:00Z","N":1}"#;

#[tokio::test]
async fn modify_gives_up_after_the_callers_attempt_limit() {
    let lost = Answer::Status("412 Precondition Failed", "UpdateConditionNotSatisfied");
    let (endpoint, count) = fake_server(vec![
        Answer::Entity(ENTITY),
        lost,
        Answer::Entity(ENTITY),
        lost,
        Answer::Entity(ENTITY),
        lost,
        // A fourth round would read this and succeed.
        Answer::Entity(ENTITY),
        Answer::Created,
    ])
    .await;
    let mut calls = 0;
    let err = table(&endpoint)
        .modify(("p", "r"), UpdateMode::Merge, |e| {
            calls += 1;
            e.set("N", 2);
        })
        .max_attempts(3)
        .await
        .expect_err("every write loses the race");
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(calls, 3);
    assert_eq!(count.load(Ordering::SeqCst), 6, "three reads, three writes");
}

#[tokio::test]
async fn an_aborting_change_sends_no_write() {
    let (endpoint, count) = fake_server(vec![
        Answer::Entity(ENTITY),
        Answer::Status("500 Internal Server Error", "InternalError"),
    ])
    .await;
    let outcome = table(&endpoint)
        .try_modify(("p", "r"), UpdateMode::Merge, |e| {
            match e.get("N").and_then(EdmValue::as_i32) {
                Some(n) if n < 5 => ControlFlow::Break(n),
                _ => ControlFlow::Continue(()),
            }
        })
        .await
        .unwrap();
    assert_eq!(outcome, Modified::Aborted(1));
    assert_eq!(count.load(Ordering::SeqCst), 1, "the read only");
}

#[tokio::test]
async fn an_aborted_modify_leaves_the_entity_unchanged() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<DynamicEntity>(&svc, "Modify").await;
    t.insert(&DynamicEntity::new("acct", "alice").with("Balance", 20i64))
        .await
        .unwrap();
    let before = t.get(("acct", "alice")).await.unwrap().unwrap();

    let outcome = t
        .try_modify(("acct", "alice"), UpdateMode::Replace, |e| {
            let balance = e.get("Balance").and_then(EdmValue::as_i64).unwrap_or(0);
            e.set("Balance", balance - 30);
            if balance < 30 {
                // The change made so far is thrown away with the copy.
                return ControlFlow::Break("insufficient funds");
            }
            ControlFlow::Continue(())
        })
        .await
        .unwrap();
    assert_eq!(outcome, Modified::Aborted("insufficient funds"));
    let after = t.get(("acct", "alice")).await.unwrap().unwrap();
    assert_eq!(after.get("Balance"), Some(&EdmValue::Int64(20)));
    assert_eq!(after.etag, before.etag, "nothing was written");

    let missing = t
        .try_modify(("acct", "bob"), UpdateMode::Merge, |_| {
            ControlFlow::<()>::Continue(())
        })
        .await
        .unwrap();
    assert_eq!(missing, Modified::Missing);
    common::drop_table(&t).await;
}

#[tokio::test]
async fn concurrent_modifies_all_land() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<DynamicEntity>(&svc, "Modify").await;
    t.insert(&DynamicEntity::new("c", "counter").with("N", 0))
        .await
        .unwrap();
    const WRITERS: i32 = 8;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move {
                t.modify(("c", "counter"), UpdateMode::Merge, |e| {
                    let n = e.get("N").and_then(EdmValue::as_i32).unwrap();
                    e.set("N", n + 1);
                })
                .max_attempts(64)
                .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap().expect("the counter exists");
    }
    let read = t.get(("c", "counter")).await.unwrap().unwrap();
    assert_eq!(read.get("N"), Some(&EdmValue::Int32(WRITERS)));
    common::drop_table(&t).await;
}
