//! Data series (§3.9) against a live service: 24 hourly counts in one
//! entity, 366 daily counts over entities 01 and 02, increments under the
//! ETag from two clients, and the daily rollover.

use crate::common;
use crate::common::BeforeWrite as _;
use tablekit::testing::TestEnv;

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, TimeZone, Utc};
use tablekit::{DynamicEntity, EdmValue};
use tablekit_patterns::series::{DataSeries, HourlyCounters, SeriesLayout};

fn at(d: u32, h: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2014, 7, d, h, 0, 0).unwrap()
}

async fn hourly_counts_live_in_one_entity_and_read_in_one_request(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "Hourly").await;
    let series = DataSeries::new(&table, SeriesLayout::hourly());
    assert!(series
        .read("000123", "")
        .await
        .unwrap()
        .values
        .iter()
        .all(|v| *v == 0));

    for (hour, n) in [(0, 3), (9, 1), (9, 1), (23, 5)] {
        series.add("000123", "", hour, n).await.unwrap();
    }
    let rows = common::rows(&table, "000123").await;
    assert_eq!(rows.len(), 1, "one entity for the 24 hours");
    assert_eq!(rows[0].row_key, "01");
    assert_eq!(rows[0].get("H09"), Some(&EdmValue::Int64(2)));
    assert_eq!(rows[0].properties.len(), 3, "a merge sends only its hour");

    let data = series.read("000123", "").await.unwrap();
    assert_eq!(data.values.len(), 24);
    assert_eq!(
        (
            data.values[0],
            data.values[9],
            data.values[23],
            data.values[1]
        ),
        (3, 2, 5, 0)
    );
    assert_eq!(data.etags, [rows[0].etag.clone()]);

    series.set("000123", "", 9, 40).await.unwrap();
    assert_eq!(series.read("000123", "").await.unwrap().values[9], 40);
}

async fn daily_counts_are_split_over_entities_01_and_02(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "Daily").await;
    let series = DataSeries::new(&table, SeriesLayout::daily());
    series.add("000123", "", 0, 7).await.unwrap();
    series.add("000123", "", 182, 8).await.unwrap();
    series.add("000123", "", 183, 9).await.unwrap();
    series.add("000123", "", 364, 10).await.unwrap();
    let keys: Vec<(String, Vec<String>)> = common::rows(&table, "000123")
        .await
        .into_iter()
        .map(|r| {
            (
                r.row_key,
                r.properties.iter().map(|(n, _)| n.to_owned()).collect(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            (
                "01".to_owned(),
                vec!["Day001".to_owned(), "Day183".to_owned()]
            ),
            (
                "02".to_owned(),
                vec!["Day184".to_owned(), "Day365".to_owned()]
            ),
        ]
    );
    let data = series.read("000123", "").await.unwrap();
    assert_eq!(
        (
            data.values[0],
            data.values[182],
            data.values[183],
            data.values[364],
            data.values[365]
        ),
        (7, 8, 9, 10, 0)
    );
    assert!(data.etags.iter().all(Option::is_some));
}

/// Two clients increment one slot at the same time: every increment lands,
/// because each is a merge under the ETag read, retried on 412/409.
async fn concurrent_increments_are_never_lost(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "Contend").await;
    let mine = DataSeries::new(&table, SeriesLayout::hourly());
    let theirs = DataSeries::new(
        &common::second_service(&svc)
            .table::<DynamicEntity>(table.name())
            .unwrap(),
        SeriesLayout::hourly(),
    );
    let run = |s: DataSeries| async move {
        for _ in 0..10 {
            s.add("000123", "", 5, 1).await.unwrap();
        }
    };
    tokio::join!(run(mine.clone()), run(theirs));
    assert_eq!(mine.read("000123", "").await.unwrap().values[5], 20);
}

/// Another client increments the slot between our read of its entity and our
/// write: the write is refused (409 when the other created the entity, 412
/// after), read again and retried, and both increments land.
async fn an_increment_raced_between_its_read_and_its_write_is_read_again(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "SeriesInject").await;
    let theirs = DataSeries::new(
        &common::second_service(&svc)
            .table::<DynamicEntity>(table.name())
            .unwrap(),
        SeriesLayout::hourly(),
    );
    let calls = Arc::new(Mutex::new(Vec::new()));
    let handle = tokio::runtime::Handle::current();
    let mine = {
        let calls = calls.clone();
        DataSeries::new(&table, SeriesLayout::hourly()).before_write(move |attempt| {
            calls.lock().unwrap().push(attempt);
            if attempt == 1 {
                tokio::task::block_in_place(|| {
                    handle.block_on(async { theirs.add("000123", "", 5, 10).await.unwrap() })
                });
            }
        })
    };
    assert_eq!(mine.add("000123", "", 5, 1).await.unwrap(), 11);
    assert_eq!(std::mem::take(&mut *calls.lock().unwrap()), [1, 2]);
    assert_eq!(mine.add("000123", "", 5, 1).await.unwrap(), 22);
    assert_eq!(std::mem::take(&mut *calls.lock().unwrap()), [1, 2]);
    let rows = common::rows(&table, "000123").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get("H05"), Some(&EdmValue::Int64(22)));
}

async fn hourly_counters_roll_over_to_a_new_series_each_day(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "Rollover").await;
    let counters = HourlyCounters::new(&table);
    counters.record("000123", at(30, 5), 100).await.unwrap(); // more than 24 h before
    counters
        .record("000123", at(30, 6) + Duration::minutes(59), 1)
        .await
        .unwrap();
    counters.record("000123", at(30, 23), 2).await.unwrap();
    counters.record("000123", at(31, 0), 3).await.unwrap();
    assert_eq!(counters.record("000123", at(31, 5), 4).await.unwrap(), 4);
    assert_eq!(counters.record("000123", at(31, 5), 1).await.unwrap(), 5);

    let keys: Vec<String> = common::rows(&table, "000123")
        .await
        .into_iter()
        .map(|r| r.row_key)
        .collect();
    assert_eq!(keys, ["20140730_01", "20140731_01"]);

    let chart = counters
        .last_24_hours("000123", at(31, 5) + Duration::minutes(30))
        .await
        .unwrap();
    assert_eq!(chart.len(), 24);
    assert_eq!(chart[0], (at(30, 6), 1));
    assert_eq!(chart[23], (at(31, 5), 5));
    let nonzero: Vec<(DateTime<Utc>, i64)> = chart.into_iter().filter(|(_, n)| *n != 0).collect();
    assert_eq!(
        nonzero,
        [
            (at(30, 6), 1),
            (at(30, 23), 2),
            (at(31, 0), 3),
            (at(31, 5), 5)
        ]
    );
}

#[tokio::test]
async fn bad_layouts_slots_and_keys_are_refused_before_any_request() {
    common::assert_invalid(&SeriesLayout::new(300, 253, |i| format!("S{i}")).unwrap_err());
    common::assert_invalid(&SeriesLayout::new(0, 10, |i| format!("S{i}")).unwrap_err());
    common::assert_invalid(&SeriesLayout::new(10_000, 100, |i| format!("S{i}")).unwrap_err());
    let table = common::offline_service()
        .table::<DynamicEntity>("Offline")
        .unwrap();
    let series = DataSeries::new(&table, SeriesLayout::hourly());
    common::assert_invalid(&series.add("000123", "", 24, 1).await.unwrap_err());
    common::assert_invalid(&series.add("a/b", "", 1, 1).await.unwrap_err());
    common::assert_invalid(&series.set("000123", "", 99, 1).await.unwrap_err());
}

tablekit::testing::conformance!(
    hourly_counts_live_in_one_entity_and_read_in_one_request,
    daily_counts_are_split_over_entities_01_and_02,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    concurrent_increments_are_never_lost,
    hourly_counters_roll_over_to_a_new_series_each_day,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_increment_raced_between_its_read_and_its_write_is_read_again,
);
