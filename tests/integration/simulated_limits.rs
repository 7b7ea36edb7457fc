//! The embedded store simulating the service's limits ([`Simulation`]): a hot
//! partition is refused with the service's 503 `ServerBusy` while a cold one
//! is not, the retry policy rides through a refusal, and the account target
//! binds across partitions. All on a [`ManualClock`]: nothing sleeps.

use std::time::Duration;

use tablekit::clock::ManualClock;
use tablekit::error::ErrorCode;
use tablekit::options::RetryPolicy;
use tablekit::simulation::Simulation;
use tablekit::{DynamicEntity, Storage, TableClient, TableServiceClient};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn table(svc: &TableServiceClient, name: &str) -> TableClient<DynamicEntity> {
    let t = svc.table::<DynamicEntity>(name).unwrap();
    t.create_table().await.unwrap();
    t
}

/// Writes `n` entities to partition `pk` in transactions of 100.
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

#[test]
fn a_hot_partition_gets_503s_while_a_cold_one_does_not() {
    rt().block_on(async {
        let clock = ManualClock::starting_now();
        let svc = TableServiceClient::embedded_simulated(
            Simulation::new()
                .retry(RetryPolicy::none())
                .clock(clock.clone()),
        );
        let t = table(&svc, "Hot").await;
        // The partition's one second of burst: 2,000 entities, then refusals.
        fill(&t, "hot", 0, 2_000).await;
        let refused = t
            .insert(&DynamicEntity::new("hot", "one-more"))
            .await
            .unwrap_err();
        assert_eq!(refused.status(), Some(503), "{refused:?}");
        assert_eq!(refused.code(), Some(&ErrorCode::ServerBusy));
        assert!(refused.is_throttled() && refused.is_retryable());
        assert!(!refused.is_ambiguous(), "a 503 was not applied");
        assert!(
            refused.to_string().contains("The server is busy."),
            "{refused}"
        );
        let point = t.get(("hot", "000001")).await.unwrap_err();
        assert!(
            point.is_throttled(),
            "reads count against the partition too"
        );
        // Nothing of the refused insert was written.
        clock.advance(Duration::from_secs(1));
        assert!(t.get(("hot", "one-more")).await.unwrap().is_none());
        // Refilled after a second: the next second's 2,000 (one went to the read).
        fill(&t, "hot", 2_000, 1_999).await;
        assert!(t
            .insert(&DynamicEntity::new("hot", "x"))
            .await
            .unwrap_err()
            .is_throttled());
        // A cold partition of the same table, at the same moment, is served.
        for i in 0..50 {
            t.insert(&DynamicEntity::new("cold", format!("{i}")))
                .await
                .expect("a cold partition is not throttled");
        }
        // The partition refills at its target: 1 ms is two more entities.
        clock.advance(Duration::from_millis(1));
        t.insert(&DynamicEntity::new("hot", "x")).await.unwrap();
        t.insert(&DynamicEntity::new("hot", "y")).await.unwrap();
        assert!(t
            .insert(&DynamicEntity::new("hot", "z"))
            .await
            .unwrap_err()
            .is_throttled());
    });
}

#[test]
fn the_retry_policy_rides_through_a_refusal() {
    rt().block_on(async {
        let clock = ManualClock::starting_now();
        let svc = TableServiceClient::embedded_simulated(
            Simulation::new().partition_target(100).clock(clock.clone()),
        );
        let t = table(&svc, "Retried").await;
        fill(&t, "p", 0, 100).await;
        let before = clock.now();
        // The default policy retries (up to 3 times, backing off): the
        // backoff moves the manual clock, the bucket refills, the write lands.
        let mut written = 0;
        for i in 0..20 {
            if t.insert(&DynamicEntity::new("p", format!("late-{i}")))
                .await
                .is_ok()
            {
                written += 1;
            }
        }
        assert!(written >= 19, "the retries rode through: {written} of 20");
        assert!(
            clock.now() > before,
            "only the retries' backoff moves the clock"
        );
        let stored = t
            .query()
            .filter_raw("PartitionKey eq 'p'")
            .fetch_all()
            .await;
        // The query may itself be throttled and retried; it is served.
        assert_eq!(stored.unwrap().len(), 100 + written);
    });
}

#[test]
fn the_account_target_binds_across_partitions() {
    rt().block_on(async {
        let clock = ManualClock::starting_now();
        let storage = Storage::embedded_simulated(
            Simulation::new()
                .account_target(1_000)
                .retry(RetryPolicy::none())
                .clock(clock.clone()),
        );
        let svc = storage.tables().unwrap();
        let a = table(svc, "AccountA").await;
        let b = table(svc, "AccountB").await;
        // Nine transactions of 100 over two tables and five partitions, each
        // far below its 2,000 per partition: with the two table creations,
        // 902 of the account's 1,000 per second.
        for p in 0..4 {
            fill(&a, &format!("p{p}"), 0, 100).await;
            fill(&b, &format!("p{p}"), 0, 100).await;
        }
        fill(&a, "p4", 0, 100).await;
        // The tenth is refused: the account target binds, not the partition's.
        let mut tx = b.transaction();
        for j in 0..100 {
            tx.insert(&DynamicEntity::new("p4", format!("{j:06}")))
                .unwrap();
        }
        let refused = tx.send().await.unwrap_err();
        assert!(refused.is_throttled(), "{refused:?}");
        assert_eq!(refused.code(), Some(&ErrorCode::ServerBusy));
        assert_eq!(refused.batch_index(), None, "the request as a whole");
        assert!(
            refused.to_string().contains("over the account limit"),
            "{refused}"
        );
        assert!(
            b.get(("p4", "000000")).await.unwrap().is_none(),
            "nothing applied"
        );
        // Single entities still fit in what is left (97).
        a.insert(&DynamicEntity::new("fresh", "r")).await.unwrap();
        clock.advance(Duration::from_secs(1));
        tx_again(&b).await;
    });
}

async fn tx_again(b: &TableClient<DynamicEntity>) {
    fill(b, "p4", 0, 100).await;
}

#[test]
fn without_a_simulation_nothing_is_throttled() {
    rt().block_on(async {
        let svc = TableServiceClient::embedded();
        let t = table(&svc, "Unlimited").await;
        fill(&t, "hot", 0, 2_500).await;
        t.insert(&DynamicEntity::new("hot", "more")).await.unwrap();
    });
}

#[test]
fn the_file_store_is_simulated_too() {
    rt().block_on(async {
        let file = crate::common::TempStore::new();
        let clock = ManualClock::starting_now();
        let sim = || {
            Simulation::new()
                .partition_target(100)
                .retry(RetryPolicy::none())
                .clock(clock.clone())
        };
        {
            let svc = TableServiceClient::embedded_at_simulated(file.path(), sim()).unwrap();
            let t = table(&svc, "Kept").await;
            fill(&t, "p", 0, 100).await;
            let refused = t
                .insert(&DynamicEntity::new("p", "over"))
                .await
                .unwrap_err();
            assert!(refused.is_throttled(), "{refused:?}");
            assert!(
                refused.to_string().contains("embedded store file"),
                "{refused}"
            );
        }
        // Reopened: the data is kept, the buckets start full.
        let svc = TableServiceClient::embedded_at_simulated(file.path(), sim()).unwrap();
        let t = svc.table::<DynamicEntity>("Kept").unwrap();
        assert_eq!(t.query().fetch_all().await.unwrap().len(), 100);
    });
}

/// A query page costs one unit per entity it returns, on the file store (whose
/// pages are records read from the file) as in memory: reading a partition's
/// 100 entities spends its second, and the next write to it is refused.
#[test]
fn a_query_page_costs_its_entities_in_memory_and_in_a_file() {
    rt().block_on(async {
        let file = crate::common::TempStore::new();
        for in_file in [false, true] {
            let clock = ManualClock::starting_now();
            let sim = Simulation::new()
                .partition_target(100)
                .retry(RetryPolicy::none())
                .clock(clock.clone());
            let svc = if in_file {
                TableServiceClient::embedded_at_simulated(file.path(), sim).unwrap()
            } else {
                TableServiceClient::embedded_simulated(sim)
            };
            let t = table(&svc, "Read").await;
            fill(&t, "p", 0, 100).await;
            clock.advance(Duration::from_secs(1));
            let found = t
                .query()
                .filter_raw("PartitionKey eq 'p'")
                .fetch_all()
                .await
                .unwrap();
            assert_eq!(found.len(), 100, "in file: {in_file}");
            let refused = t
                .insert(&DynamicEntity::new("p", "after-the-read"))
                .await
                .unwrap_err();
            assert!(refused.is_throttled(), "in file: {in_file}: {refused:?}");
        }
    });
}
