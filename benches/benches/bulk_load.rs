//! Bulk load and copy (issue 25): `N` entities of the workload's shape
//! (WORKLOAD.md) written with `TableClient::bulk()` into Azurite and into the
//! durable store file, then each copied back out (query stream into a bulk
//! write, as `tablekit-cli copy` does) to a fresh store file; and the Azurite
//! table read back alone (the read half of a copy).
//!
//! ```text
//! eval "$(bash scripts/azurite.sh start)"     # or any TABLEKIT_CONNECTION_STRING
//! BULK_N=1000000 cargo bench -p tablekit-benches --bench bulk_load
//! # the anchor, the same load with the Python SDK's batch API grouped by hand:
//! python3 benches/bulk_load_python.py     # BULK_N, TABLEKIT_CONNECTION_STRING
//! ```
//!
//! Each step runs in a child process of this binary, so that its CPU time
//! (`getrusage(RUSAGE_SELF)`, user + system) and peak resident set
//! (`VmHWM`) are its own. The entities are generated as the input stream is
//! read (the generation is inside the measured CPU; nothing is built
//! beforehand, so memory shows the writer's own). The writer runs with its
//! defaults: 8 transactions in flight, 2,000 entities/s per partition and
//! 20,000/s for the account. One JSON line per step on stdout.

mod support;

use std::process::Command;
use std::time::Instant;

use futures::{stream, StreamExt as _};
use support::{entity, status_kib};
use tablekit::{DynamicEntity, TableServiceClient, UpdateMode};

const STEP: &str = "BULK_STEP";
const COUNT: &str = "BULK_N";
const TABLE_VAR: &str = "BULK_TABLE";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn cpu_s() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    s(u.user_time()) + s(u.system_time())
}

fn store(spec: &str) -> TableServiceClient {
    if spec.contains('=') {
        TableServiceClient::from_connection_string(spec).expect("a connection string")
    } else {
        TableServiceClient::embedded_at(spec).expect("the store file opens")
    }
}

fn report(step: &str, n: u64, started: Instant, cpu0: f64, extra: &str) {
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_s() - cpu0;
    println!(
        "{{\"step\":\"{step}\",\"n\":{n},\"wall_s\":{wall:.3},\"entities_per_s\":{:.0},\"cpu_s\":{cpu:.3},\"cpu_us_per_entity\":{:.2},\"peak_rss_mib\":{:.1}{extra}}}",
        n as f64 / wall,
        cpu * 1e6 / n as f64,
        status_kib("VmHWM") as f64 / 1024.0
    );
}

/// Child: bulk-loads `n` entities into `table` of `target`.
fn load(target: &str, table: &str, n: usize, step: &str) {
    runtime().block_on(async {
        let t = store(target)
            .table::<DynamicEntity>(table)
            .expect("a valid name");
        t.create_table_if_not_exists()
            .await
            .expect("create the table");
        let (started, cpu0) = (Instant::now(), cpu_s());
        let r = t
            .bulk()
            .upsert_all(stream::iter((0..n).map(entity)), UpdateMode::Replace)
            .await
            .expect("the bulk load");
        assert_eq!(r.written as usize, n, "{r:?}");
        report(
            step,
            r.written,
            started,
            cpu0,
            &format!(
                ",\"transactions\":{},\"throttled\":{}",
                r.transactions, r.throttled
            ),
        );
    });
}

/// Child: copies `table` from `source` to a store file `dest`.
fn copy(source: &str, dest: &str, table: &str, step: &str) {
    runtime().block_on(async {
        let from = store(source)
            .table::<DynamicEntity>(table)
            .expect("a valid name");
        let to = store(dest)
            .table::<DynamicEntity>(table)
            .expect("a valid name");
        to.create_table_if_not_exists()
            .await
            .expect("create the table");
        let (started, cpu0) = (Instant::now(), cpu_s());
        let entities = from.query().stream().map(|r| r.expect("the source reads"));
        let r = to
            .bulk()
            .upsert_all(entities, UpdateMode::Replace)
            .await
            .expect("the copy");
        report(step, r.written, started, cpu0, "");
    });
}

/// Child (run alone: `BULK_STEP=load-durable-sorted BULK_N=... bulk_load FILE`):
/// the load into a store file in partition-major order, as a copy's input
/// comes, to look at the copy's memory growth without HTTP.
fn sorted(target: &str, table: &str, n: usize, step: &str) {
    runtime().block_on(async {
        let t = store(target)
            .table::<DynamicEntity>(table)
            .expect("a valid name");
        t.create_table_if_not_exists()
            .await
            .expect("create the table");
        let (started, cpu0) = (Instant::now(), cpu_s());
        let order = (0..100).flat_map(move |p| (p..n).step_by(100));
        let in_flight = std::env::var("BULK_IN_FLIGHT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(8);
        let r = t
            .bulk()
            .in_flight(in_flight)
            .upsert_all(stream::iter(order.map(entity)), UpdateMode::Replace)
            .await
            .expect("the bulk load");
        report(step, r.written, started, cpu0, "");
    });
}

/// Child: the same partition-major load without the bulk writer: one
/// transaction of 100 after another, to tell the writer's memory from the store's.
fn sorted_by_hand(target: &str, table: &str, n: usize, step: &str) {
    runtime().block_on(async {
        let t = store(target)
            .table::<DynamicEntity>(table)
            .expect("a valid name");
        t.create_table_if_not_exists()
            .await
            .expect("create the table");
        let (started, cpu0) = (Instant::now(), cpu_s());
        for p in 0..100 {
            let rows: Vec<usize> = (p..n).step_by(100).collect();
            for chunk in rows.chunks(100) {
                let mut tx = t.transaction();
                for &i in chunk {
                    tx.upsert(&entity(i), UpdateMode::Replace)
                        .expect("a valid entity");
                }
                tx.send().await.expect("the transaction commits");
            }
        }
        report(step, n as u64, started, cpu0, "");
    });
}

/// Child: reads `table` of `source` back out (the read half of a copy), pages of 1,000.
fn read(source: &str, table: &str, step: &str) {
    runtime().block_on(async {
        let from = store(source)
            .table::<DynamicEntity>(table)
            .expect("a valid name");
        let (started, cpu0) = (Instant::now(), cpu_s());
        let n = from
            .query()
            .stream()
            .fold(0u64, |n, r| {
                r.expect("the source reads");
                futures::future::ready(n + 1)
            })
            .await;
        report(step, n, started, cpu0, "");
    });
}

fn main() {
    let n: usize = std::env::var(COUNT)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let Ok(step) = std::env::var(STEP) {
        let table = std::env::var(TABLE_VAR).unwrap_or_else(|_| "BulkLoad".into());
        match step.as_str() {
            "load-azurite" | "load-durable" => load(&args[0], &table, n, &step),
            "read-azurite" => read(&args[0], &table, &step),
            "load-durable-sorted" => sorted(&args[0], &table, n, &step),
            "tx-durable-sorted" => sorted_by_hand(&args[0], &table, n, &step),
            _ => copy(&args[0], &args[1], &table, &step),
        }
        return;
    }
    let conn = std::env::var("TABLEKIT_CONNECTION_STRING")
        .or_else(|_| std::env::var("TABLEKIT_TEST_CONNECTION_STRING"))
        .expect("TABLEKIT_CONNECTION_STRING names the Azurite to load");
    let dir = std::env::temp_dir().join(format!("tablekit-bulk-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = |name: &str| dir.join(name).to_str().expect("a UTF-8 path").to_owned();
    let (durable, from_azurite, from_durable) = (
        file("loaded.redb"),
        file("from-azurite.redb"),
        file("from-durable.redb"),
    );
    let table = format!("BulkLoad{}", std::process::id());
    // Each step is a child of this binary; the table's name goes by the environment.
    let run = |step: &str, a: &[&str]| {
        let exe = std::env::current_exe().expect("this binary");
        let out = Command::new(exe)
            .env(STEP, step)
            .env(COUNT, n.to_string())
            .env(TABLE_VAR, &table)
            .args(a)
            .output()
            .expect("the child runs");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        assert!(
            out.status.success(),
            "{step} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run("load-azurite", &[&conn]);
    run("load-durable", &[&durable]);
    run("read-azurite", &[&conn]);
    run("copy-azurite-to-file", &[&conn, &from_azurite]);
    run("copy-durable-to-file", &[&durable, &from_durable]);
    let _ = std::fs::remove_dir_all(&dir);
}
