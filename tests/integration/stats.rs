//! Cost and heat: every request counted by kind, entities, bytes and
//! partition, alike on Azurite and the embedded store; a query's expected
//! request count; `tracing` warnings for a hot partition and for scans,
//! once per interval.

use std::time::Duration;

use tablekit::clock::ManualClock;
use tablekit::options::RetryPolicy;
use tablekit::simulation::Simulation;
use tablekit::table::{RequestKind, ScanPolicy, Stats};
use tablekit::{DynamicEntity, IfMatch, TableClient, TableServiceClient, UpdateMode};
use tablekit_test_support::{field, Recorder};

use crate::common;

fn delta(after: &Stats, before: &Stats, kind: RequestKind) -> u64 {
    after.requests(kind) - before.requests(kind)
}

tablekit::testing::conformance! {
    async fn requests_are_counted_by_kind_entities_bytes_and_partition(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Costed").await;
        let s0 = t.stats();
        assert_eq!(s0.requests(RequestKind::Table), 1, "the creation");
        let mut e = DynamicEntity::new("p", "single").with("Name", "x");
        t.insert(&mut e).await.unwrap();
        t.upsert(&DynamicEntity::new("p", "up"), UpdateMode::Merge).await.unwrap();
        t.update(&e, UpdateMode::Replace, IfMatch::Any).await.unwrap();
        assert!(t.insert(&e).await.unwrap_err().is_conflict());
        let mut tx = t.transaction();
        for i in 0..10 {
            tx.insert(&DynamicEntity::new("p", format!("tx{i}")).with("N", i)).unwrap();
        }
        tx.send().await.unwrap();
        t.insert(&DynamicEntity::new("q", "other")).await.unwrap();
        assert!(t.get(("p", "single")).await.unwrap().is_some());
        let page = t.query().filter_raw("PartitionKey eq 'p'").fetch_all().await.unwrap();
        assert_eq!(page.len(), 12);
        t.delete(("q", "other"), IfMatch::Any).await.unwrap();

        let s = t.stats();
        assert_eq!(delta(&s, &s0, RequestKind::Insert), 3);
        assert_eq!(delta(&s, &s0, RequestKind::Upsert), 1);
        assert_eq!(delta(&s, &s0, RequestKind::Update), 1);
        assert_eq!(delta(&s, &s0, RequestKind::Transaction), 1, "one, whatever it holds");
        assert_eq!(delta(&s, &s0, RequestKind::Get), 1);
        assert_eq!(delta(&s, &s0, RequestKind::QueryPage), 1);
        assert_eq!(delta(&s, &s0, RequestKind::Delete), 1);
        assert_eq!(s.transactions - s0.transactions, 9);
        assert_eq!(s.failed, 1, "the conflicting insert");
        assert_eq!(s.throttled, 0);
        assert_eq!(s.entities_written, 3 + 1 + 1 + 10 + 1);
        assert_eq!(s.entities_read, 1 + 12);
        assert!(s.bytes_up > 0 && s.bytes_down > 0, "{s:?} on {backend:?}");
        let p = &s.partitions[0];
        assert_eq!((p.partition_key.as_str(), p.table.as_str()), ("p", t.name()));
        assert_eq!(p.requests, 7, "all but the other partition's and the table's");
        assert_eq!(p.entities, 3 + 1 + 10 + 1 + 12);
        let q = &s.partitions[1];
        assert_eq!((q.partition_key.as_str(), q.requests, q.entities), ("q", 2, 2));
        // The service client sums its tables; another table's are not this one's.
        let other = common::fresh_table::<DynamicEntity>(&svc, "Other").await;
        other.insert(&DynamicEntity::new("p", "r")).await.unwrap();
        assert_eq!(t.stats(), s);
        let all = svc.stats();
        assert!(all.transactions >= s.transactions + 2);
        common::drop_table(&t).await;
        common::drop_table(&other).await;
    }
}

tablekit::testing::conformance! {
    async fn a_transaction_counts_the_json_of_its_entities_as_bytes_sent(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = common::fresh_table::<DynamicEntity>(&svc, "CostedTx").await;
        let s0 = t.stats();
        let entities: Vec<DynamicEntity> = (0..3)
            .map(|i| DynamicEntity::new("p", format!("r{i}")).with("Name", "x".repeat(i * 10)))
            .collect();
        let mut tx = t.transaction();
        for e in &entities {
            tx.insert(e).unwrap();
        }
        tx.delete(("p", "gone"), IfMatch::Any).unwrap();
        tx.send().await.unwrap_err();
        let sent: usize = entities
            .iter()
            .map(|e| tablekit::codec::entity_to_json(e).unwrap().len())
            .sum();
        // The same count on every backend: the entities' JSON, which a
        // backend that stores property bags never writes.
        assert_eq!(t.stats().bytes_up - s0.bytes_up, sent as u64, "on {backend:?}");
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn a_bounded_key_range_takes_the_requests_it_expected(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Planned").await;
        for chunk in 0..3 {
            let mut tx = t.transaction();
            for i in 0..100 {
                tx.insert(&DynamicEntity::new("p", format!("{:03}", chunk * 100 + i))).unwrap();
            }
            tx.send().await.unwrap();
        }
        let q = t
            .query()
            .filter_raw("PartitionKey eq 'p' and RowKey ge '000'")
            .page_size(100)
            .take(250);
        assert_eq!(q.plan().unwrap().name(), "partition range");
        assert_eq!(q.expected_requests().unwrap(), Some(3));
        let before = t.stats().requests(RequestKind::QueryPage);
        assert_eq!(q.fetch_all().await.unwrap().len(), 250);
        assert_eq!(t.stats().requests(RequestKind::QueryPage) - before, 3);
        let point = t.query().filter_raw("PartitionKey eq 'p' and RowKey eq '007'");
        assert_eq!(point.expected_requests().unwrap(), Some(1));
        let before = t.stats().transactions;
        assert_eq!(point.fetch_all().await.unwrap().len(), 1);
        assert_eq!(t.stats().transactions - before, 1);
        let filtered = t.query().filter_raw("PartitionKey eq 'p' and N gt 3").take(10);
        assert_eq!(filtered.expected_requests().unwrap(), None);
        common::drop_table(&t).await;
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn fill(t: &TableClient<DynamicEntity>, pk: &str, from: usize, n: usize) {
    let mut i = from;
    while i < from + n {
        let mut tx = t.transaction();
        for j in i..(i + 100).min(from + n) {
            tx.insert(&DynamicEntity::new(pk, format!("{j:06}")))
                .unwrap();
        }
        tx.send().await.unwrap();
        i += 100;
    }
}

fn warnings(recorder: &Recorder, message: &str) -> Vec<Vec<(String, String)>> {
    recorder
        .events()
        .into_iter()
        .filter(|f| field(f, "message") == Some(message))
        .collect()
}

#[test]
fn a_partition_near_its_target_is_warned_about_once_per_interval() {
    let recorder = Recorder::default();
    let clock = ManualClock::starting_now();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt().block_on(async {
            let svc = TableServiceClient::embedded_simulated(
                Simulation::new()
                    .retry(RetryPolicy::none())
                    .clock(clock.clone()),
            );
            let t = svc.table::<DynamicEntity>("Heat").unwrap();
            t.create_table().await.unwrap();
            // 1,500 entities in one second: 75% of 2,000, not yet hot.
            fill(&t, "hot", 0, 1_500).await;
            fill(&t, "cold", 0, 100).await;
            assert!(warnings(
                &recorder,
                "a partition approaches its scalability target (entities per second)"
            )
            .is_empty());
            // 1,700: 85%, warned once; more in the same interval is not warned again.
            fill(&t, "hot", 1_500, 200).await;
            fill(&t, "hot", 1_700, 200).await;
            clock.advance(Duration::from_secs(5));
            fill(&t, "hot", 1_900, 1_700).await;
            // After the interval, warned again.
            clock.advance(Duration::from_secs(5));
            fill(&t, "hot", 3_600, 1_700).await;
        })
    });
    let warned = warnings(
        &recorder,
        "a partition approaches its scalability target (entities per second)",
    );
    assert_eq!(warned.len(), 2, "{warned:?}");
    for w in &warned {
        assert_eq!(field(w, "level"), Some("WARN"));
        assert_eq!(field(w, "partition"), Some("hot"));
        assert_eq!(field(w, "table"), Some("Heat"));
        assert_eq!(field(w, "target"), Some("2000"));
    }
    assert_eq!(field(&warned[0], "rate"), Some("1600"));
    assert_eq!(field(&warned[1], "rate"), Some("1600"));
}

#[test]
fn a_scanning_query_is_warned_about_once_per_interval() {
    let recorder = Recorder::default();
    let clock = ManualClock::starting_now();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt().block_on(async {
            let svc =
                TableServiceClient::embedded_simulated(Simulation::new().clock(clock.clone()));
            let t = svc.table::<DynamicEntity>("Scanned").unwrap();
            t.create_table().await.unwrap();
            fill(&t, "p", 0, 10).await;
            // Point reads and ranges are not scans.
            t.query()
                .filter_raw("PartitionKey eq 'p' and RowKey ge '000003'")
                .fetch_all()
                .await
                .unwrap();
            t.query()
                .filter_raw("PartitionKey eq 'p' and RowKey eq '000003'")
                .fetch_all()
                .await
                .unwrap();
            assert!(warnings(&recorder, "a query scans").is_empty());
            for _ in 0..3 {
                t.query()
                    .filter_raw("Name eq 'x'")
                    .fetch_all()
                    .await
                    .unwrap();
            }
            clock.advance(Duration::from_secs(10));
            t.query()
                .filter_raw("PartitionKey eq 'p' and Name eq 'x'")
                .fetch_all()
                .await
                .unwrap();
        })
    });
    let warned = warnings(&recorder, "a query scans");
    assert_eq!(warned.len(), 2, "{warned:?}");
    assert_eq!(field(&warned[0], "plan"), Some("table scan"));
    assert_eq!(field(&warned[0], "table"), Some("Scanned"));
    assert_eq!(field(&warned[0], "filter"), Some("Name eq 'x'"));
    assert_eq!(field(&warned[1], "plan"), Some("partition scan"));
    assert_eq!(field(&warned[1], "partition"), Some("p"));
}

/// A table's scan policy speaks for itself: under `Warn` each table scan is
/// warned about once (by the policy, not a second time by the statistics),
/// and under `Deny` a refused scan is not reported as a scan that ran.
#[test]
fn a_scan_policy_warning_is_not_doubled_and_a_refused_scan_is_not_warned_about() {
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt().block_on(async {
            let svc = TableServiceClient::embedded();
            let t = svc.table::<DynamicEntity>("Policed").unwrap();
            t.create_table().await.unwrap();
            fill(&t, "p", 0, 10).await;
            let denied = t.clone().with_scan_policy(ScanPolicy::Deny);
            denied
                .query()
                .filter_raw("Name eq 'x'")
                .fetch_all()
                .await
                .unwrap_err();
            let warned = t.clone().with_scan_policy(ScanPolicy::Warn);
            for _ in 0..2 {
                warned
                    .query()
                    .filter_raw("Name eq 'x'")
                    .fetch_all()
                    .await
                    .unwrap();
            }
        })
    });
    assert!(warnings(&recorder, "a query scans").is_empty());
    assert_eq!(
        warnings(&recorder, "query reads the whole table (table scan)").len(),
        2
    );
}

/// A load over more partitions than `MAX_PARTITIONS` keeps a bounded count
/// of them: the cold ones are let go, the table's totals keep their counts.
#[test]
fn cold_partitions_are_let_go_past_max_partitions() {
    use tablekit::table::MAX_PARTITIONS;
    rt().block_on(async {
        let svc = TableServiceClient::embedded();
        let t = svc.table::<DynamicEntity>("ManyPartitions").unwrap();
        t.create_table().await.unwrap();
        let n = MAX_PARTITIONS + 100;
        for i in 0..n {
            t.insert(&DynamicEntity::new(format!("p{i}"), "r"))
                .await
                .unwrap();
        }
        let stats = t.stats();
        assert_eq!(
            stats.entities_written, n as u64,
            "the totals keep every count"
        );
        assert!(
            stats.partitions.len() <= MAX_PARTITIONS,
            "{} partitions held",
            stats.partitions.len()
        );
    });
}
