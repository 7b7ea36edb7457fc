//! High-volume delete (§3.8) against a live service: one table per day,
//! routed writes, windows over several days, and the retention sweep.

use crate::common;
use tablekit::testing::TestEnv;

use chrono::{DateTime, Duration, TimeZone, Utc};
use tablekit::{TableEntity, TableServiceClient, UpdateMode};
use tablekit_patterns::log_tail::NewestFirst;
use tablekit_patterns::periodic::{Period, PeriodicTables};

/// A login attempt: one partition per user, newest first within the day.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{user}", row_key = "{key}")]
struct LoginAttempt {
    user: String,
    key: NewestFirst,
    success: bool,
}

fn attempt(user: &str, at: DateTime<Utc>, success: bool) -> LoginAttempt {
    LoginAttempt {
        user: user.into(),
        key: NewestFirst::new(at, "0"),
        success,
    }
}

fn day(m: u32, d: u32, h: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2014, m, d, h, 0, 0).unwrap()
}

/// A prefix of its own per test, so tests can list and sweep in parallel.
fn logins(svc: &TableServiceClient) -> PeriodicTables<LoginAttempt> {
    PeriodicTables::new(
        svc.clone(),
        common::unique_name("Login"),
        Period::Day,
        Duration::days(60),
        |a: &LoginAttempt| a.key.at(),
    )
    .unwrap()
}

async fn names(svc: &TableServiceClient, prefix: &str) -> Vec<String> {
    let mut n = svc.list_tables().prefix(prefix).fetch_all().await.unwrap();
    n.sort();
    n
}

async fn writes_are_routed_to_the_table_of_their_day(env: TestEnv) {
    let svc = env.tables().clone();
    let seed = PeriodicTables::new(
        svc.clone(),
        "LoginAttempts",
        Period::Day,
        Duration::days(60),
        |a: &LoginAttempt| a.key.at(),
    )
    .unwrap();
    assert_eq!(
        seed.table_at(day(7, 31, 18)).unwrap().name(),
        "LoginAttempts20140731"
    );

    let log = logins(&svc);
    let p = log.prefix().to_owned();
    log.insert(&mut attempt("alice", day(7, 31, 18), true))
        .await
        .unwrap();
    log.insert(&mut attempt("alice", day(7, 31, 19), false))
        .await
        .unwrap();
    log.insert(&mut attempt("bob", day(8, 2, 9), true))
        .await
        .unwrap();
    log.upsert(
        &mut attempt("bob", day(8, 2, 9), false),
        UpdateMode::Replace,
    )
    .await
    .unwrap();
    assert_eq!(
        names(&svc, &p).await,
        [format!("{p}20140731"), format!("{p}20140802")]
    );

    let july31 = common::rows(&log.table_at(day(7, 31, 0)).unwrap(), "alice").await;
    assert_eq!(july31.len(), 2);
    let err = log
        .insert(&mut attempt("alice", day(7, 31, 18), true))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "a taken key: {err:?}");
}

async fn a_window_over_several_days_is_merged_in_key_order(env: TestEnv) {
    let svc = env.tables().clone();
    let log = logins(&svc);
    // Written out of order, over Jul 30, Jul 31 and Aug 2 (Aug 1 has no table).
    for t in [
        day(8, 2, 5),
        day(7, 30, 23),
        day(7, 31, 1),
        day(7, 31, 12),
        day(8, 2, 1),
    ] {
        log.insert(&mut attempt("alice", t, true)).await.unwrap();
    }
    log.insert(&mut attempt("bob", day(7, 31, 2), true))
        .await
        .unwrap();

    let window = log
        .query(day(7, 30, 0), day(8, 3, 0), |q| {
            q.filter(|a| a.partition_key.eq("alice"))
        })
        .await
        .unwrap();
    let times: Vec<DateTime<Utc>> = window.iter().map(|a| a.key.at()).collect();
    // Merged into RowKey order across the days: newest first.
    assert_eq!(
        times,
        [
            day(8, 2, 5),
            day(8, 2, 1),
            day(7, 31, 12),
            day(7, 31, 1),
            day(7, 30, 23)
        ]
    );
    // Across partitions: (PartitionKey, RowKey) order, as from one table.
    let users: Vec<String> = log
        .query(day(7, 30, 0), day(8, 3, 0), |q| q)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.user)
        .collect();
    assert_eq!(users, ["alice", "alice", "alice", "alice", "alice", "bob"]);
    let one_day = log.query(day(7, 31, 0), day(8, 1, 0), |q| q).await.unwrap();
    assert_eq!(one_day.len(), 3);
    // A window that cuts days: only the instants inside it.
    let cut = log.query(day(7, 31, 2), day(8, 2, 3), |q| q).await.unwrap();
    let times: Vec<DateTime<Utc>> = cut.iter().map(|a| a.key.at()).collect();
    assert_eq!(times, [day(8, 2, 1), day(7, 31, 12), day(7, 31, 2)]);
}

async fn the_sweep_drops_whole_tables_past_the_retention_and_is_idempotent(env: TestEnv) {
    let svc = env.tables().clone();
    let log = logins(&svc);
    let p = log.prefix().to_owned();
    for d in [(7, 31), (8, 1), (8, 2), (8, 3)] {
        for i in 0..3 {
            log.insert(&mut attempt(&format!("u{i}"), day(d.0, d.1, 6), true))
                .await
                .unwrap();
        }
    }
    // Another table under the prefix that is not a day: left alone.
    svc.create_table(&format!("{p}Archive")).await.unwrap();

    // 60 days before 2014-10-02T00:00Z is 2014-08-03T00:00Z: Jul 31 to Aug 2 are over.
    let now = day(10, 2, 0);
    let other = PeriodicTables::new(
        common::second_service(&svc),
        p.clone(),
        Period::Day,
        Duration::days(60),
        |a: &LoginAttempt| a.key.at(),
    )
    .unwrap();
    let deleted = log.sweep(now).await.unwrap();
    assert_eq!(
        deleted,
        [
            format!("{p}20140731"),
            format!("{p}20140801"),
            format!("{p}20140802")
        ]
    );
    // A second sweeper (another client) finds nothing left to do, and no error.
    assert!(other.sweep(now).await.unwrap().is_empty());
    assert_eq!(
        names(&svc, &p).await,
        [format!("{p}20140803"), format!("{p}Archive")]
    );

    // Reads of a swept window skip the missing tables.
    let rows = log.query(day(7, 31, 0), day(8, 4, 0), |q| q).await.unwrap();
    assert_eq!(rows.len(), 3);
}

async fn two_first_writers_of_a_new_day_both_land(env: TestEnv) {
    let svc = env.tables().clone();
    let mine = logins(&svc);
    let theirs = PeriodicTables::new(
        common::second_service(&svc),
        mine.prefix().to_owned(),
        Period::Day,
        Duration::days(60),
        |a: &LoginAttempt| a.key.at(),
    )
    .unwrap();
    let mut a = attempt("alice", day(7, 31, 18), true);
    let mut b = attempt("bob", day(7, 31, 18), true);
    let (ra, rb) = tokio::join!(mine.insert(&mut a), theirs.insert(&mut b));
    ra.unwrap();
    rb.unwrap();
    assert_eq!(
        mine.query(day(7, 31, 0), day(8, 1, 0), |q| q)
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn bad_names_and_keys_are_refused_before_any_request() {
    let svc = common::offline_service();
    let at = |a: &LoginAttempt| a.key.at();
    for prefix in ["Login-Attempts", "1Login", &"L".repeat(56)] {
        let err = PeriodicTables::new(svc.clone(), prefix, Period::Day, Duration::days(60), at)
            .unwrap_err();
        common::assert_invalid(&err);
    }
    let log =
        PeriodicTables::new(svc, "LoginAttempts", Period::Day, Duration::days(60), at).unwrap();
    let err = log
        .insert(&mut attempt("a/b", day(7, 31, 18), true))
        .await
        .unwrap_err();
    common::assert_invalid(&err);
}

#[test]
fn period_names_parse_back_only_when_canonical() {
    let t = Utc.with_ymd_and_hms(2014, 7, 31, 18, 30, 0).unwrap();
    assert_eq!(Period::Hour.table_name("L", t), "L2014073118");
    assert_eq!(Period::Hour.parse("L", "L2014073118"), Some(day(7, 31, 18)));
    assert_eq!(Period::Day.parse("L", "L20140732"), None);
    assert_eq!(Period::Day.parse("L", "L2014073"), None);
    assert_eq!(Period::Month.parse("L", "L201407"), Some(day(7, 1, 0)));
    assert_eq!(
        Period::Month.next(day(12, 1, 0)),
        Utc.with_ymd_and_hms(2015, 1, 1, 0, 0, 0).unwrap()
    );
}

tablekit::testing::conformance!(
    writes_are_routed_to_the_table_of_their_day,
    a_window_over_several_days_is_merged_in_key_order,
    the_sweep_drops_whole_tables_past_the_retention_and_is_idempotent,
    two_first_writers_of_a_new_day_both_land,
);
