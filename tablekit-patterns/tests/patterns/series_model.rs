//! A model-based test of data series: random additions to a few slots of
//! the daily series (two entities, days 1–183 and 184–366), made by three
//! writers at the same time, each with its own client. Additions commute, so
//! the model is the sum per slot: whatever the interleaving, no increment
//! may be lost or counted twice.

use crate::common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tablekit::{DynamicEntity, TableServiceClient};
use tablekit_patterns::series::{DataSeries, SeriesLayout};

/// A few slots on both sides of the boundary between the two entities.
const SLOTS: [usize; 4] = [0, 182, 183, 365];

fn writes() -> impl Strategy<Value = Vec<Vec<(usize, i64)>>> {
    proptest::collection::vec(
        proptest::collection::vec((0..SLOTS.len(), -3..10i64), 1..8),
        3,
    )
}

async fn case(svc: TableServiceClient, writers: Vec<Vec<(usize, i64)>>) {
    let table = common::fresh_table::<DynamicEntity>(&svc, "SeriesModel").await;
    let mut model = BTreeMap::<usize, i64>::new();
    for (slot, delta) in writers.iter().flatten() {
        *model.entry(SLOTS[*slot]).or_default() += delta;
    }
    let tasks = writers.into_iter().map(|adds| {
        let table = common::second_service(&svc)
            .table::<DynamicEntity>(table.name())
            .unwrap();
        tokio::spawn(async move {
            let series = DataSeries::new(&table, SeriesLayout::daily());
            for (slot, delta) in adds {
                series.add("000123", "", SLOTS[slot], delta).await.unwrap();
            }
        })
    });
    for t in futures::future::join_all(tasks).await {
        t.unwrap();
    }
    let read = DataSeries::new(&table, SeriesLayout::daily())
        .read("000123", "")
        .await
        .unwrap();
    for (i, value) in read.values.iter().enumerate() {
        assert_eq!(*value, model.get(&i).copied().unwrap_or(0), "day {}", i + 1);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn embedded(writers in writes()) {
        runtime().block_on(case(TableServiceClient::embedded(), writers));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn azurite(writers in writes()) {
        if let Some(svc) = common::service() {
            runtime().block_on(case(svc, writers));
        }
    }
}
