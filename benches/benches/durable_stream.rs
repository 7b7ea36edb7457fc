//! Memory while streaming a whole table out of the file-backed embedded store
//! (`TableServiceClient::embedded_at`, issue 11): for N = 10,000 and 100,000
//! entities, a fresh store file is filled (transactions of 100), closed,
//! reopened in a new process, and the whole table streamed with
//! `query().stream()` (pages of 1,000).
//!
//! ```text
//! cargo bench -p tablekit-benches --bench durable_stream    # DURABLE_STREAM_N=10000,100000
//! ```
//!
//! Each N runs in two child processes of this binary (fill, then reopen and
//! stream), so one's peak does not hide the other's. The stream child prints,
//! from `/proc/self/status`, the resident set (VmRSS) and its peak (VmHWM)
//! after the reopen and after the stream: the stream's own cost is the growth
//! of the peak while streaming, which stays flat in N. The store reads its
//! entities from the file through a bounded cache (see
//! `backend/embedded/durable.rs`), so the resident set after the reopen is
//! flat in N too. One JSON line per N on stdout.

mod support;

use std::process::Command;
use std::time::Instant;
use support::{entity, status_kib, PARTITIONS};

use futures::TryStreamExt as _;
use tablekit::{DynamicEntity, TableServiceClient};

const PHASE: &str = "DURABLE_STREAM_PHASE";
const FILE: &str = "DURABLE_STREAM_FILE";
const COUNT: &str = "DURABLE_STREAM_COUNT";
const TABLE: &str = "Streamed";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Child: fills a fresh store file with `n` entities, 100 per transaction.
fn fill(path: &str, n: usize) {
    runtime().block_on(async {
        let svc = TableServiceClient::embedded_at(path).expect("the store file opens");
        let t = svc.table::<DynamicEntity>(TABLE).expect("a valid name");
        t.create_table().await.expect("create the table");
        let started = Instant::now();
        for p in 0..PARTITIONS {
            let rows: Vec<usize> = (p..n).step_by(PARTITIONS).collect();
            for chunk in rows.chunks(100) {
                let mut tx = t.transaction();
                for &i in chunk {
                    tx.insert(&entity(i)).expect("a valid entity");
                }
                tx.send().await.expect("the transaction commits");
            }
        }
        println!(
            "fill_s={:.3} file_bytes={}",
            started.elapsed().as_secs_f64(),
            std::fs::metadata(path).map_or(0, |m| m.len())
        );
    });
}

/// Child: reopens the file, streams the table, prints the memory figures.
fn stream(path: &str, n: usize) {
    let start_hwm = status_kib("VmHWM");
    let started = Instant::now();
    let svc = TableServiceClient::embedded_at(path).expect("the store file opens");
    let open_s = started.elapsed().as_secs_f64();
    let (open_rss, open_hwm) = (status_kib("VmRSS"), status_kib("VmHWM"));
    let t = svc.table::<DynamicEntity>(TABLE).expect("a valid name");
    let started = Instant::now();
    let (count, ages) = runtime().block_on(async {
        let mut s = t.query().page_size(1000).stream();
        let (mut count, mut ages) = (0usize, 0i64);
        while let Some(e) = s.try_next().await.expect("the stream reads") {
            count += 1;
            if let Some(tablekit::EdmValue::Int32(a)) = e.get("Age") {
                ages += i64::from(*a);
            }
        }
        (count, ages)
    });
    let stream_s = started.elapsed().as_secs_f64();
    let (end_rss, end_hwm) = (status_kib("VmRSS"), status_kib("VmHWM"));
    let want_ages: i64 = (0..n).map(|i| 18 + ((7 * i + i / 100) % 50) as i64).sum();
    let ok = count == n && ages == want_ages;
    println!(
        "{{\"n\":{n},\"ok\":{ok},\"start_hwm_kib\":{start_hwm},\"open_s\":{open_s:.3},\
         \"after_open_rss_kib\":{open_rss},\"after_open_hwm_kib\":{open_hwm},\
         \"stream_s\":{stream_s:.3},\"after_stream_rss_kib\":{end_rss},\
         \"after_stream_hwm_kib\":{end_hwm},\"stream_growth_kib\":{}}}",
        end_hwm.saturating_sub(open_hwm)
    );
    if !ok {
        eprintln!("durable_stream: streamed {count} entities (sum of Age {ages}), expected {n} ({want_ages})");
        std::process::exit(1);
    }
}

/// Runs this binary as the child `phase` for `n` entities in `path`; its stdout.
fn child(phase: &str, path: &std::path::Path, n: usize) -> String {
    let out = Command::new(std::env::current_exe().expect("this binary"))
        .arg("--bench")
        .env(PHASE, phase)
        .env(FILE, path)
        .env(COUNT, n.to_string())
        .output()
        .expect("the child runs");
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        eprintln!("durable_stream: the {phase} child for N = {n} failed");
        std::process::exit(1);
    }
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn main() {
    if let Ok(phase) = std::env::var(PHASE) {
        let path = std::env::var(FILE).expect("the child is given a file");
        let n: usize = std::env::var(COUNT)
            .ok()
            .and_then(|v| v.parse().ok())
            .expect("the child is given N");
        match phase.as_str() {
            "fill" => fill(&path, n),
            _ => stream(&path, n),
        }
        return;
    }
    // `cargo test --benches` runs bench binaries without --bench: skip there.
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        eprintln!("durable_stream: run it with `cargo bench --bench durable_stream`; skipped");
        return;
    }
    let ns: Vec<usize> = std::env::var("DURABLE_STREAM_N")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .map(|v| match v.trim().parse() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!(
                    "durable_stream: DURABLE_STREAM_N is a list of positive integers, not {v:?}"
                );
                std::process::exit(2);
            }
        })
        .collect();
    for n in ns {
        let path = std::env::temp_dir().join(format!(
            "tablekit-durable-stream-{}-{n}.redb",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let filled = child("fill", &path, n);
        eprintln!("durable_stream: N = {n}: {filled}");
        println!("{}", child("stream", &path, n));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(format!("{}.seal", path.display()));
    }
}
