//! Whether writes to different partitions of the embedded store wait for each
//! other: 8 tasks insert 250 entities each, every task into its own partition,
//! or all into one. The store locks per partition, so the one-partition case is
//! what a single global lock would cost every workload.
//!
//! ```text
//! cargo bench -p tablekit-benches --bench embedded_contention
//! ```

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tablekit::{DynamicEntity, TableServiceClient};

const TASKS: usize = 8;
const PER_TASK: usize = 250;

fn entity(partition: usize, task: usize, i: usize) -> DynamicEntity {
    DynamicEntity::new(format!("p{partition:03}"), format!("{task:02}-{i:06}"))
        .with("FirstName", "First-00000001-abcdef")
        .with("Age", 42)
        .with("Salary", 30_000.37)
        .with("EmployeeId", 9_000_000_001_i64)
}

fn run(rt: &tokio::runtime::Runtime, one_partition: bool) -> Duration {
    rt.block_on(async {
        let svc = TableServiceClient::embedded();
        let t = svc.table::<DynamicEntity>("Contention").unwrap();
        t.create_table().await.unwrap();
        let start = Instant::now();
        let tasks = (0..TASKS).map(|task| {
            let t = t.clone();
            tokio::spawn(async move {
                let partition = if one_partition { 0 } else { task };
                for i in 0..PER_TASK {
                    t.insert(&entity(partition, task, i)).await.unwrap();
                }
            })
        });
        futures::future::try_join_all(tasks).await.unwrap();
        start.elapsed()
    })
}

fn contention(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let mut g = c.benchmark_group("embedded 8 tasks x 250 inserts");
    g.sample_size(30);
    g.bench_function("a partition per task", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| run(&rt, false)).sum())
    });
    g.bench_function("one partition for all", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| run(&rt, true)).sum())
    });
    g.finish();
}

criterion_group!(benches, contention);
criterion_main!(benches);
