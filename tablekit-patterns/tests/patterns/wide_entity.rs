//! Wide entities (§3.10) against a live service: 365 daily counts over two
//! parts, replace, merge, delete, concurrency and the limits.

use crate::common;
use tablekit::testing::TestEnv;

use std::borrow::Cow;

use tablekit::{
    entity::{PropertyWriter, RawEntity},
    DynamicEntity, ETag, EdmValue, IfMatch, TableClient, TableEntity, UpdateMode,
};
use tablekit_patterns::wide::{WideTable, PARTS};

/// A year of daily message counts as a typed logical entity: written by hand,
/// since the derive refuses more than 252 properties.
#[derive(Debug, Clone, PartialEq)]
struct MessageStats {
    employee: String,
    year: String,
    days: Vec<i32>,
    etag: Option<ETag>,
}

impl TableEntity for MessageStats {
    fn partition_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.employee)
    }
    fn row_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.year)
    }
    fn write_properties<W: PropertyWriter + ?Sized>(&self, out: &mut W) -> tablekit::Result<()> {
        for (i, n) in self.days.iter().enumerate() {
            out.int32(&format!("Day{:03}", i + 1), *n)?;
        }
        Ok(())
    }
    fn decode(e: &RawEntity<'_>) -> tablekit::Result<Self> {
        let mut days = Vec::new();
        while let Some(v) = e.get(&format!("Day{:03}", days.len() + 1)) {
            days.push(v.to_i32()?);
        }
        Ok(MessageStats {
            employee: e.partition_key().to_owned(),
            year: e.row_key().to_owned(),
            days,
            etag: e.etag(),
        })
    }
    fn etag(&self) -> Option<&ETag> {
        self.etag.as_ref()
    }
    fn set_etag(&mut self, etag: ETag) {
        self.etag = Some(etag);
    }
}

fn year(value: i32, days: usize) -> DynamicEntity {
    let mut e = DynamicEntity::new("000123", "2014");
    for d in 1..=days {
        e.set(format!("Day{d:03}"), value);
    }
    e
}

/// Reads the parts directly: checks the part count and that every stored
/// value is `value` (each write in these tests sets all days to one value),
/// and returns the RowKeys and property counts.
async fn parts<T: TableEntity>(table: &TableClient<T>, value: i32) -> Vec<(String, usize)> {
    let rows = common::rows(table, "000123").await;
    if let Some(first) = rows.first() {
        assert_eq!(first.get(PARTS), Some(&EdmValue::Int32(rows.len() as i32)));
    }
    for r in &rows {
        for (name, v) in &r.properties {
            if name != PARTS {
                assert_eq!(v, &EdmValue::Int32(value), "{} {name}", r.row_key);
            }
        }
    }
    rows.into_iter()
        .map(|r| (r.row_key, r.properties.len()))
        .collect()
}

async fn a_year_of_daily_counts_is_two_parts_written_and_read_together(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "Wide").await;
    let wide = WideTable::new(table.clone());

    let mut stats = year(7, 365);
    wide.insert(&mut stats).await.unwrap();
    assert!(stats.etag.is_some());
    assert_eq!(
        parts(&table, 7).await,
        [("2014_0".to_owned(), 252), ("2014_1".to_owned(), 114)],
        "251 counts + the part count, then the other 114"
    );
    let back = wide.get(("000123", "2014")).await.unwrap().unwrap();
    assert_eq!(back.properties.len(), 365);
    assert_eq!(back.get("Day365"), Some(&EdmValue::Int32(7)));
    assert_eq!(back.etag, stats.etag, "the logical ETag is part 0's");
    assert!(wide.get(("000123", "2015")).await.unwrap().is_none());

    // A duplicate insert is a conflict and changes nothing.
    let err = wide.insert(&mut year(8, 365)).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(parts(&table, 7).await.len(), 2);
}

async fn replace_merge_and_delete_act_on_every_part(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "WideOps").await;
    let wide = WideTable::new(table.clone());
    let mut stats = year(1, 365);
    wide.insert(&mut stats).await.unwrap();

    // Replace with fewer properties: part 1 is deleted in the same transaction.
    let mut small = year(2, 100);
    wide.update(
        &mut small,
        UpdateMode::Replace,
        IfMatch::ETag(stats.etag.clone().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(parts(&table, 2).await, [("2014_0".to_owned(), 101)]);

    // Merge in 300 more days: stored ones are kept, a second part appears.
    let mut more = DynamicEntity::new("000123", "2014");
    for d in 101..=400 {
        more.set(format!("Day{d:03}"), 2);
    }
    wide.update(&mut more, UpdateMode::Merge, IfMatch::Any)
        .await
        .unwrap();
    assert_eq!(
        wide.get(("000123", "2014"))
            .await
            .unwrap()
            .unwrap()
            .properties
            .len(),
        400
    );
    assert_eq!(
        parts(&table, 2).await,
        [("2014_0".to_owned(), 252), ("2014_1".to_owned(), 149)]
    );

    // A replace with the ETag from before the merge is refused.
    let err = wide
        .update(
            &mut year(3, 10),
            UpdateMode::Replace,
            IfMatch::ETag(small.etag.clone().unwrap()),
        )
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(parts(&table, 2).await.len(), 2);

    // Delete with a stale ETag is refused; with the current one it removes every part.
    let err = wide
        .delete(
            ("000123", "2014"),
            IfMatch::ETag(small.etag.clone().unwrap()),
        )
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(parts(&table, 2).await.len(), 2);
    wide.delete(
        ("000123", "2014"),
        IfMatch::ETag(more.etag.clone().unwrap()),
    )
    .await
    .unwrap();
    assert!(common::rows(&table, "000123").await.is_empty());
    assert!(!wide
        .delete_if_exists(("000123", "2014"), IfMatch::Any)
        .await
        .unwrap());
    let err = wide
        .delete(("000123", "2014"), IfMatch::Any)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    let err = wide
        .update(&mut year(3, 10), UpdateMode::Replace, IfMatch::Any)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}

async fn a_typed_logical_entity_round_trips(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<MessageStats>(&svc, "WideTyped").await;
    let wide = WideTable::new(table.clone());
    let mut stats = MessageStats {
        employee: "000123".into(),
        year: "2014".into(),
        days: (0..365).collect(),
        etag: None,
    };
    wide.insert(&mut stats).await.unwrap();
    let back = wide.get(("000123", "2014")).await.unwrap().unwrap();
    assert_eq!(back, stats);

    let changed = wide
        .modify(("000123", "2014"), |s| s.days[364] += 1000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(changed.days[364], 1364);
    assert_eq!(
        wide.get(("000123", "2014")).await.unwrap().unwrap().days[364],
        1364
    );
}

/// A second client changes the entity between our read and our write: the
/// stale replace is refused and the table holds the other writer's parts
/// only; `modify` starts again from the read and applies on top of it.
async fn a_concurrent_writer_never_leaves_mixed_parts(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "WideRace").await;
    let wide = WideTable::new(table.clone());
    let other = WideTable::new(
        common::second_service(&svc)
            .table::<DynamicEntity>(table.name())
            .unwrap(),
    );
    let mut stats = year(1, 365);
    wide.insert(&mut stats).await.unwrap();
    let (_, etag) = wide
        .get_with_etag(("000123", "2014"))
        .await
        .unwrap()
        .unwrap();

    other
        .update(&mut year(5, 300), UpdateMode::Replace, IfMatch::Any)
        .await
        .unwrap();
    let err = wide
        .update(&mut year(9, 365), UpdateMode::Replace, IfMatch::ETag(etag))
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(
        parts(&table, 5).await,
        [("2014_0".to_owned(), 252), ("2014_1".to_owned(), 49)]
    );

    let handle = tokio::runtime::Handle::current();
    let mut calls = 0;
    let written = wide
        .modify(("000123", "2014"), |e| {
            calls += 1;
            if calls == 1 {
                tokio::task::block_in_place(|| {
                    handle.block_on(async {
                        other
                            .update(&mut year(6, 365), UpdateMode::Replace, IfMatch::Any)
                            .await
                            .unwrap();
                    })
                });
            }
            for (_, v) in e.properties.iter() {
                assert!(matches!(v, EdmValue::Int32(5) | EdmValue::Int32(6)));
            }
            let n = e.properties.len();
            *e = year(8, n);
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calls, 2);
    assert_eq!(
        written.properties.len(),
        365,
        "the retry saw the other writer's 365 days"
    );
    assert_eq!(parts(&table, 8).await.len(), 2);
}

async fn a_missing_part_is_reported_not_read_as_a_smaller_entity(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "WideGap").await;
    let wide = WideTable::new(table.clone());
    wide.insert(&mut year(1, 365)).await.unwrap();
    table
        .delete(("000123", "2014_1"), IfMatch::Any)
        .await
        .unwrap();
    let err = wide.get(("000123", "2014")).await.unwrap_err();
    assert!(err.to_string().contains("2 parts"), "{err}");
}

#[tokio::test]
async fn what_cannot_fit_one_transaction_is_refused_before_any_request() {
    let wide = WideTable::new(
        common::offline_service()
            .table::<DynamicEntity>("Offline")
            .unwrap(),
    );
    // 101 parts of 251 properties.
    let mut many = DynamicEntity::new("000123", "2014");
    for i in 0..(101 * 252) {
        many.set(format!("P{i}"), 1);
    }
    let err = wide.insert(&mut many).await.unwrap_err();
    common::assert_invalid(&err);
    // 140 strings of 32,000 characters (64 KB stored each, 14 per part): ten
    // parts of a legal size, but 4.5 MB of payload, over a transaction's 4 MiB.
    let mut big = DynamicEntity::new("000123", "2014");
    for i in 0..140 {
        big.set(format!("Text{i}"), "x".repeat(32_000));
    }
    assert_eq!(wide.parts(&big).unwrap().len(), 10);
    let err = wide.insert(&mut big).await.unwrap_err();
    let msg = common::assert_invalid(&err);
    assert!(msg.contains("bytes"), "{msg}");
    // The reserved property name.
    let err = wide
        .insert(&mut DynamicEntity::new("000123", "2014").with(PARTS, 1))
        .await
        .unwrap_err();
    common::assert_invalid(&err);
    // A bad key.
    let err = wide
        .insert(&mut DynamicEntity::new("a/b", "2014").with("X", 1))
        .await
        .unwrap_err();
    common::assert_invalid(&err);
}

tablekit::testing::conformance!(
    a_year_of_daily_counts_is_two_parts_written_and_read_together,
    replace_merge_and_delete_act_on_every_part,
    a_typed_logical_entity_round_trips,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_concurrent_writer_never_leaves_mixed_parts,
    a_missing_part_is_reported_not_read_as_a_smaller_entity,
);
