//! Compound keys (§3.6) and the log tail (§3.7) against a live service.

use crate::common;
use tablekit::testing::TestEnv;

use chrono::{DateTime, Duration, TimeZone, Utc};
use tablekit::{DynamicEntity, ETag, IfMatch, TableEntity, UpdateMode};
use tablekit_patterns::compound::{self, children, family};
use tablekit_patterns::log_tail::{LogTail, NewestFirst};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{employee}", row_key = "{key}")]
struct Expense {
    employee: String,
    key: NewestFirst,
    amount: f64,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(
    partition_key = "{department}",
    row_key = "empid_{employee_id:06}_{year}"
)]
struct Review {
    department: String,
    employee_id: u32,
    year: u16,
    manager_rating: i32,
    peer_rating: i32,
    comments: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

/// The guide's separator example, without the `empid_` prefix.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}_{year}")]
struct BareReview {
    department: String,
    employee_id: u32,
    year: u16,
}

/// Expense claims that share the employee's partition with other rows: the
/// derive's RowKey template says their prefix.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{employee}", row_key = "claim_{key}")]
struct Claim {
    employee: String,
    key: NewestFirst,
    amount: f64,
}

fn seed_instant() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap()
}

fn expense(at: DateTime<Utc>, tie: &str, amount: f64) -> Expense {
    Expense {
        employee: "000123".into(),
        key: NewestFirst::new(at, tie),
        amount,
    }
}

async fn latest_returns_the_newest_entries_first_with_ties_kept(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Expense>(&svc, "Tail").await;
    let log = LogTail::new(table.clone());
    let t0 = seed_instant();
    // Written oldest first: 12 entries a minute apart, then two at one instant.
    for i in 0..12 {
        log.append(&mut expense(
            t0 + Duration::minutes(i),
            &format!("{i:03}"),
            i as f64,
        ))
        .await
        .unwrap();
    }
    let last = t0 + Duration::minutes(20);
    log.append(&mut expense(last, "a", 100.0)).await.unwrap();
    log.append(&mut expense(last, "b", 101.0)).await.unwrap();

    let ten = log.latest("000123", 10).await.unwrap();
    let amounts: Vec<f64> = ten.iter().map(|e| e.amount).collect();
    assert_eq!(
        amounts,
        [100.0, 101.0, 11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0],
        "newest first; the two entries of one instant in tie-breaker order"
    );
    assert_eq!(ten[0].key, NewestFirst::new(last, "a"));
    assert_eq!(log.latest("000123", 100).await.unwrap().len(), 14);
    assert!(log.latest("000123", 0).await.unwrap().is_empty());
    assert!(log.latest("999999", 5).await.unwrap().is_empty());

    // The seed vector, read back from the stored RowKey.
    let rows = common::rows(&table, "000123").await;
    assert_eq!(rows.last().unwrap().row_key, "2519936321679999999_000");
}

async fn between_returns_a_half_open_window_newest_first(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Expense>(&svc, "TailWin").await;
    let log = LogTail::new(table);
    let t0 = seed_instant();
    for i in 0..10 {
        log.append(&mut expense(t0 + Duration::minutes(i), "x", i as f64))
            .await
            .unwrap();
    }
    let window = log
        .between(
            "000123",
            t0 + Duration::minutes(3),
            t0 + Duration::minutes(7),
        )
        .await
        .unwrap();
    let amounts: Vec<f64> = window.iter().map(|e| e.amount).collect();
    assert_eq!(amounts, [6.0, 5.0, 4.0, 3.0]);
}

async fn two_writers_of_one_instant_need_different_tie_breakers(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Expense>(&svc, "TailDup").await;
    let mine = LogTail::new(table.clone());
    let theirs = LogTail::new(
        common::second_service(&svc)
            .table::<Expense>(table.name())
            .unwrap(),
    );
    let t = seed_instant();

    theirs.append(&mut expense(t, "same", 1.0)).await.unwrap();
    let err = mine.append(&mut expense(t, "same", 2.0)).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    // Unique tie-breakers: both land.
    let mut a = expense(t, "", 3.0);
    a.key = NewestFirst::unique(t);
    let mut b = expense(t, "", 4.0);
    b.key = NewestFirst::unique(t);
    mine.append(&mut a).await.unwrap();
    theirs.append(&mut b).await.unwrap();

    let rows = common::rows(&table, "000123").await;
    assert_eq!(rows.len(), 3);
    let stored: Vec<f64> = mine
        .latest("000123", 3)
        .await
        .unwrap()
        .iter()
        .map(|e| e.amount)
        .collect();
    assert!(stored.contains(&1.0) && stored.contains(&3.0) && stored.contains(&4.0));
}

#[tokio::test]
async fn bad_keys_are_refused_before_any_request() {
    let log = LogTail::new(
        common::offline_service()
            .table::<Expense>("Offline")
            .unwrap(),
    );
    let err = log
        .append(&mut expense(seed_instant(), "a/b", 1.0))
        .await
        .unwrap_err();
    common::assert_invalid(&err);
}

async fn compound_keys_read_an_employee_and_their_reviews_in_one_range(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "Compound").await;

    assert_eq!(Review::row_key(123, 2012).unwrap(), "empid_000123_2012");
    assert_eq!(BareReview::row_key(123, 2012).unwrap(), "000123_2012");

    let reviews = table.with_type::<Review>();
    table
        .insert(&DynamicEntity::new("Sales", "empid_000123").with("LastName", "Jones"))
        .await
        .unwrap();
    table
        .insert(&DynamicEntity::new("Sales", "empid_000124").with("LastName", "Smith"))
        .await
        .unwrap();
    for (id, year) in [(123, 2013), (123, 2012), (122, 2014), (124, 2012)] {
        reviews
            .insert(&Review {
                department: "Sales".into(),
                employee_id: id,
                year,
                manager_rating: 4,
                peer_rating: 5,
                comments: format!("{id} in {year}"),
                etag: None,
            })
            .await
            .unwrap();
    }

    let rows = compound::read(&table, "Sales", &family("empid_000123"))
        .await
        .unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r.row_key.as_str()).collect();
    assert_eq!(
        keys,
        ["empid_000123", "empid_000123_2012", "empid_000123_2013"]
    );

    let typed = compound::read(&reviews, "Sales", &children("empid_000123", "_"))
        .await
        .unwrap();
    let years: Vec<u16> = typed.iter().map(|r| r.year).collect();
    assert_eq!(years, [2012, 2013]);
}

/// The employee and a review share a partition, so one transaction changes
/// both; a concurrent change of either (a second client, between the read and
/// the write) refuses the whole transaction and both stay as they were.
async fn a_compound_family_changes_together_or_not_at_all(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Review>(&svc, "CompoundTx").await;
    let mut r2012 = Review {
        department: "Sales".into(),
        employee_id: 123,
        year: 2012,
        manager_rating: 3,
        peer_rating: 3,
        comments: "ok".into(),
        etag: None,
    };
    let mut r2013 = Review {
        year: 2013,
        ..r2012.clone()
    };
    table.insert(&mut r2012).await.unwrap();
    table.insert(&mut r2013).await.unwrap();

    // The other writer changes the 2013 review after our reads.
    let other = common::second_service(&svc)
        .table::<Review>(table.name())
        .unwrap();
    let mut theirs = r2013.clone();
    theirs.comments = "theirs".into();
    other
        .update(
            &mut theirs,
            UpdateMode::Replace,
            IfMatch::ETag(r2013.etag.clone().unwrap()),
        )
        .await
        .unwrap();

    let (mut a, mut b) = (r2012.clone(), r2013.clone());
    a.peer_rating = 5;
    b.peer_rating = 5;
    let mut tx = table.transaction();
    tx.update(
        &a,
        UpdateMode::Replace,
        IfMatch::ETag(r2012.etag.clone().unwrap()),
    )
    .unwrap();
    tx.update(
        &b,
        UpdateMode::Replace,
        IfMatch::ETag(r2013.etag.clone().unwrap()),
    )
    .unwrap();
    let err = tx.send().await.unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");

    let stored = compound::read(&table, "Sales", &family("empid_000123"))
        .await
        .unwrap();
    let state: Vec<(i32, &str)> = stored
        .iter()
        .map(|r| (r.peer_rating, r.comments.as_str()))
        .collect();
    assert_eq!(state, [(3, "ok"), (3, "theirs")]);
}

/// A log tail of a type whose RowKey template starts with `claim_` reads only
/// its own rows of a shared partition, with no prefix given again.
async fn a_log_tail_takes_its_prefix_from_the_derive(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Claim>(&svc, "TailClaim").await;
    let log = LogTail::new(table.clone());
    let t0 = seed_instant();
    for i in 0..3 {
        let mut c = Claim {
            employee: "000123".into(),
            key: NewestFirst::new(t0 + Duration::minutes(i), format!("{i}")),
            amount: i as f64,
        };
        log.append(&mut c).await.unwrap();
    }
    // Rows of other kinds before and after the claims' range.
    let raw = table.with_type::<DynamicEntity>();
    for rk in ["address", "zzz"] {
        raw.insert(&DynamicEntity::new("000123", rk).with("Kind", "other"))
            .await
            .unwrap();
    }
    let latest: Vec<f64> = log
        .latest("000123", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.amount)
        .collect();
    assert_eq!(latest, [2.0, 1.0, 0.0]);
}

tablekit::testing::conformance!(
    a_log_tail_takes_its_prefix_from_the_derive,
    latest_returns_the_newest_entries_first_with_ties_kept,
    between_returns_a_half_open_window_newest_first,
    two_writers_of_one_instant_need_different_tie_breakers,
    compound_keys_read_an_employee_and_their_reviews_in_one_range,
    a_compound_family_changes_together_or_not_at_all,
);
