//! The file-backed embedded store as a database (issue 26): memory, file
//! size, reads and write throughput with 1 and 32 writers, for N entities
//! (100,000 unless `DURABLE_STORE_N` says otherwise) of the workload's shape.
//!
//! ```text
//! cargo bench -p tablekit-benches --bench durable_store
//! ```
//!
//! Each phase runs in a child process of this binary, so one's peak memory
//! does not hide another's; each prints one JSON line:
//!
//! - `fill`: a fresh file filled with transactions of 100 (one partition at a
//!   time), then its size; the same N in the in-memory store (`memory`) for
//!   the resident-memory ratio.
//! - `read`: the file reopened (its open time and resident memory), 10,000
//!   point reads of random keys, 100 range queries of 1,000 entities (the
//!   first 1,000 of a partition), and the whole table streamed (the peak's
//!   growth while streaming).
//! - `writers`: single-entity inserts into the filled file, by one writer
//!   (one at a time: one commit each) and by 32 concurrent writers on a
//!   multi-thread runtime (sharing commits), in entities per second.
//!
//! - `compact`: 90% of the N entities deleted (transactions of 100), the
//!   file's size before the deletes, after them (the store still open),
//!   after the store's close (which compacts a file that deletes freed by a
//!   quarter) and after `storage::compact_file`.
//!
//! - `sqlite_*`: the same operations on SQLite (rusqlite, bundled), the
//!   anchor a user would otherwise pick: a table keyed (PartitionKey,
//!   RowKey), the properties as a JSON column (the service's JSON form),
//!   WAL with `synchronous=FULL`, one connection (shared behind a mutex by
//!   the 32 writers), a read first of the row a write replaces as the store
//!   does, and `VACUUM` to compact.
//!
//! - `group_commit` (criterion): 32 concurrent writers of single inserts on
//!   a current-thread runtime and on a multi-thread runtime (tokio's default
//!   worker count, as `#[tokio::main]`), each into a fresh store file with the
//!   default options, in entities per second, and the ratio current/multi of
//!   the two measured in the same run: each iteration runs a round of one
//!   runtime for criterion and a round of the other beside it, and the ratio
//!   is of all rounds (warm-up included) summed per runtime, so a drift of
//!   the disk's fsync time weighs on both alike; beside it, the median time
//!   of a 4 KiB write and `fdatasync` on the same disk (what a commit waits
//!   for). Run it alone with a filter:
//!
//!   ```text
//!   cargo bench -p tablekit-benches --bench durable_store -- group_commit
//!   ```
//!
//!   Without a filter the phases above run first, then this benchmark;
//!   `bulk` and `scan` (below) run only when named.
//!
//! - `bulk` (issue 38 item 2): 100,000 rows (`DURABLE_STORE_BULK_N`) of
//!   the workload's shape over 997 partitions, upserted with `bulk()` (its
//!   defaults) on a current-thread runtime into a fresh file, once sorted by
//!   PartitionKey and once as generated (partitions interleaved), each in its
//!   own child process: rows per second (also counting the close), the
//!   file's size while open and after the close, the child's peak resident
//!   set and CPU time, and the ratios interleaved/sorted.
//!   `DURABLE_STORE_BULK_IN_FLIGHT` and `DURABLE_STORE_BULK_BUFFER` set the
//!   writer's `in_flight` and `buffer`.
//!
//!   ```text
//!   cargo bench -p tablekit-benches --bench durable_store -- bulk
//!   ```
//!
//!   One run each, on a shared 2-core virtual machine whose disk's `fsync`
//!   time drifts between runs (so compare the ratios of one run):
//!
//!   | | rate interleaved/sorted | file | peak RSS |
//!   |---|---|---|---|
//!   | before (plain inserts; 8 in flight, window 10,000) | 0.36 (6,010 / 16,769 rows/s) | 1.94 (69.2 MB / 35.7 MB) | 1.69 (89 / 53 MB) |
//!   | after, run 1 | 0.92 (35,322 / 38,542 rows/s) | 1.00 (35.7 MB both) | 1.98 (163 / 83 MB) |
//!   | after, run 2 | 0.88 (28,915 / 33,021 rows/s) | 1.00 | 1.96 (164 / 84 MB) |
//!   | after, with the old writer settings (8, 10,000) | 0.17 | 0.73 after the close (2.00 open: compacted at the close, 0.68 s) | 2.37 |
//!
//!   The cause: interleaved, the window of 10,000 entities gave transactions
//!   of about 10 rows (9,970 against 1,297), each a commit's share that
//!   rewrites the pages at its partition's end, so the disk wrote several
//!   times the bytes (the runs are I/O-bound: 1 to 3 s of CPU in 6 to 17 s),
//!   and the file kept leaves that inserts into the middle of the tree split
//!   in halves never filled again, and the pages those many commits freed
//!   (with the cursor below alone, the old settings left 1.17 times the
//!   file in one run, 2.00 in another). Now a write's
//!   new keys go through a redb cursor, which packs the leaf it inserts into
//!   (`durable/group.rs`; its test: 283 leaves for 280 sorted, where plain
//!   inserts leave 343), and `bulk()` on a plain embedded store keeps 64
//!   transactions in flight (sharing commits) and a window of 100,000
//!   entities (transactions of about 100 rows here), reading ahead only while
//!   fewer transactions are ready than may be in flight (so sorted input
//!   holds little of it). The window bounds the writer's memory: about 1 KiB
//!   an entity of this shape, hence the peak above for interleaved input; a
//!   smaller `buffer` trades it for rate.
//!
//! - `scan` (issue 38 item 3): `DURABLE_STORE_SCAN_N` entities (1,000,000
//!   by default) filled into a store file and into SQLite (as `sqlite_fill`),
//!   then, each in its own child process, the whole table read in key order
//!   and decoded into a `#[derive(TableEntity)]` struct, pages of 1,000 (the
//!   store: `query().page_size(1000).stream()`; SQLite: `LIMIT 1000` queries
//!   resumed after the last key, each row's JSON decoded with
//!   `codec::entity_from_json`); both sum the same fields, checked equal.
//!
//!   ```text
//!   cargo bench -p tablekit-benches --bench durable_store -- scan
//!   DURABLE_STORE_SCAN_N=100000 cargo bench -p tablekit-benches --bench durable_store -- scan
//!   ```
//!
//!   One run at 1,000,000 (same machine): the store file 3.17 s, SQLite
//!   5.66 s: tablekit/SQLite 0.56 (peak RSS 78 MB and 9 MB; fills 73 s and
//!   68 s; files 285 MB and 511 MB). The store decodes its binary records
//!   straight into the struct (`durable/rows.rs`); SQLite's rows are the
//!   service's JSON, whose parse is most of its time. A profile of the
//!   store's scan shows no single hot spot: the record's decode 10%, copies
//!   of records into the page 7%, UTF-8 checks 5%, allocation of the
//!   struct's strings about 10%, and redb's page reads through the kernel.
//!
//! Resident memory is VmRSS / VmHWM from `/proc/self/status`.
//! `DURABLE_STORE_CACHE` (bytes) sets the file store's cache for the `read`
//! phase (its default, 64 MiB, otherwise).

mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use support::{entity, status_kib, PARTITIONS};

use futures::TryStreamExt as _;
use tablekit::{options::FileOptions, Storage};
use tablekit::{DynamicEntity, TableServiceClient};

const PHASE: &str = "DURABLE_STORE_PHASE";
const FILE: &str = "DURABLE_STORE_FILE";
const COUNT: &str = "DURABLE_STORE_COUNT";
const TABLE: &str = "Measured";

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Fills `svc` with `n` entities, 100 per transaction; seconds taken.
async fn fill_service(svc: &TableServiceClient, n: usize) -> f64 {
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
    started.elapsed().as_secs_f64()
}

fn fill(path: &str, n: usize) {
    runtime(1).block_on(async {
        let svc = TableServiceClient::embedded_at(path).expect("the store file opens");
        let fill_s = fill_service(&svc, n).await;
        drop(svc);
        println!(
            "{{\"phase\":\"fill\",\"n\":{n},\"fill_s\":{fill_s:.3},\"file_bytes\":{},\"peak_rss_kib\":{},\"rss_kib\":{}}}",
            std::fs::metadata(path).map_or(0, |m| m.len()),
            status_kib("VmHWM"),
            status_kib("VmRSS"),
        );
    });
}

fn memory(n: usize) {
    runtime(1).block_on(async {
        let svc = TableServiceClient::embedded();
        let fill_s = fill_service(&svc, n).await;
        println!(
            "{{\"phase\":\"memory\",\"n\":{n},\"fill_s\":{fill_s:.3},\"peak_rss_kib\":{},\"rss_kib\":{}}}",
            status_kib("VmHWM"),
            status_kib("VmRSS"),
        );
        drop(svc);
    });
}

/// The store's options: its defaults, or the cache size `DURABLE_STORE_CACHE`
/// (bytes) names.
fn options() -> FileOptions {
    match std::env::var("DURABLE_STORE_CACHE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(bytes) => FileOptions::new().cache_bytes(bytes),
        None => FileOptions::new(),
    }
}

fn read(path: &str, n: usize) {
    let started = Instant::now();
    let account = Storage::embedded_at_with(path, options()).expect("the file opens");
    let open_s = started.elapsed().as_secs_f64();
    let open_rss = status_kib("VmRSS");
    let t = account.table::<DynamicEntity>(TABLE).expect("a valid name");
    let line = runtime(1).block_on(async {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let started = Instant::now();
        for _ in 0..10_000 {
            let i = (next() % n as u64) as usize;
            let key = (format!("p{:03}", i % PARTITIONS), format!("{i:08}"));
            assert!(t.get((key.0.as_str(), key.1.as_str())).await.unwrap().is_some());
        }
        let point_us = started.elapsed().as_secs_f64() * 1e6 / 10_000.0;
        let started = Instant::now();
        let ranges = 100;
        for r in 0..ranges {
            let p = format!("p{:03}", r % PARTITIONS);
            let got = t
                .query()
                .filter_raw(format!("PartitionKey eq '{p}'"))
                .page_size(1000)
                .take(1000)
                .fetch_all()
                .await
                .unwrap();
            assert_eq!(got.len(), (n / PARTITIONS).min(1000));
        }
        let range_ms = started.elapsed().as_secs_f64() * 1e3 / ranges as f64;
        let before_scan_hwm = status_kib("VmHWM");
        let started = Instant::now();
        let mut s = t.query().page_size(1000).stream();
        let mut count = 0;
        while s.try_next().await.expect("the stream reads").is_some() {
            count += 1;
        }
        assert_eq!(count, n);
        let scan_s = started.elapsed().as_secs_f64();
        format!(
            "{{\"phase\":\"read\",\"n\":{n},\"open_s\":{open_s:.4},\"after_open_rss_kib\":{open_rss},\
             \"point_read_us\":{point_us:.1},\"range_1000_ms\":{range_ms:.2},\"scan_s\":{scan_s:.3},\
             \"scan_hwm_growth_kib\":{},\"end_rss_kib\":{}}}",
            status_kib("VmHWM").saturating_sub(before_scan_hwm),
            status_kib("VmRSS")
        )
    });
    println!("{line}");
}

fn writers(path: &str, n: usize) {
    let rt = runtime(4);
    let svc = TableServiceClient::embedded_at(path).expect("the store file opens");
    let t = Arc::new(svc.table::<DynamicEntity>(TABLE).expect("a valid name"));
    let per_writer = |writers: usize| if writers == 1 { 500 } else { 100 };
    let mut rates = Vec::new();
    for (round, writers) in [1usize, 32].into_iter().enumerate() {
        let each = per_writer(writers);
        let started = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..writers)
                .map(|w| {
                    let t = t.clone();
                    tokio::spawn(async move {
                        for k in 0..each {
                            let i = n + round * 1_000_000 + w * 10_000 + k;
                            t.insert(&entity(i)).await.expect("the insert commits");
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        rates.push((writers * each) as f64 / started.elapsed().as_secs_f64());
    }
    println!(
        "{{\"phase\":\"writers\",\"n\":{n},\"one_writer_per_s\":{:.0},\"32_writers_per_s\":{:.0},\"ratio\":{:.1},\"peak_rss_kib\":{}}}",
        rates[0],
        rates[1],
        rates[1] / rates[0],
        status_kib("VmHWM")
    );
}

fn compact(path: &str, n: usize) {
    let size = || std::fs::metadata(path).map_or(0, |m| m.len());
    let before = size();
    let started = Instant::now();
    let (delete_s, after_delete) = runtime(1).block_on(async {
        let svc = TableServiceClient::embedded_at(path).expect("the store file opens");
        let t = svc.table::<DynamicEntity>(TABLE).expect("a valid name");
        for p in 0..PARTITIONS {
            let rows: Vec<usize> = (p..n).step_by(PARTITIONS).filter(|i| i % 10 != 0).collect();
            for chunk in rows.chunks(100) {
                let mut tx = t.transaction();
                for &i in chunk {
                    let (pk, rk) = (format!("p{:03}", i % PARTITIONS), format!("{i:08}"));
                    tx.delete((pk.as_str(), rk.as_str()), tablekit::IfMatch::Any)
                        .expect("a valid key");
                }
                tx.send().await.expect("the deletes commit");
            }
        }
        // Measured open: the close compacts.
        (started.elapsed().as_secs_f64(), size())
    });
    // The store closed with its client above, compacting the file (more
    // than a quarter of it freed by the deletes).
    let close_s = started.elapsed().as_secs_f64() - delete_s;
    let after_close = size();
    let started = Instant::now();
    let (_, after) = tablekit::storage::compact_file(path).expect("the file compacts");
    println!(
        "{{\"phase\":\"compact\",\"n\":{n},\"bytes_before\":{before},\"bytes_after_delete_90pct\":{after_delete},\
         \"bytes_after_close\":{after_close},\"close_s\":{close_s:.3},\
         \"bytes_after_compact\":{after},\"delete_s\":{delete_s:.3},\"compact_s\":{:.3}}}",
        started.elapsed().as_secs_f64()
    );
}

mod sqlite {
    use super::*;
    use rusqlite::{params, Connection, OptionalExtension as _};

    pub(super) fn open(path: &str) -> Connection {
        let c = Connection::open(path).expect("sqlite opens");
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "synchronous", "FULL").unwrap();
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS entities (pk TEXT NOT NULL, rk TEXT NOT NULL, \
             body BLOB NOT NULL, PRIMARY KEY (pk, rk)) WITHOUT ROWID",
        )
        .unwrap();
        c
    }

    fn body(i: usize) -> Vec<u8> {
        tablekit::codec::entity_to_json(&entity(i)).expect("an entity encodes")
    }

    /// An insert as the store does it: is the key free, then write.
    fn insert(c: &Connection, i: usize) {
        let (pk, rk) = (format!("p{:03}", i % PARTITIONS), format!("{i:08}"));
        let found: Option<i32> = c
            .query_row(
                "SELECT 1 FROM entities WHERE pk = ?1 AND rk = ?2",
                params![pk, rk],
                |r| r.get(0),
            )
            .optional()
            .unwrap();
        assert!(found.is_none());
        c.execute(
            "INSERT INTO entities (pk, rk, body) VALUES (?1, ?2, ?3)",
            params![pk, rk, body(i)],
        )
        .unwrap();
    }

    pub(super) fn fill(path: &str, n: usize) {
        let started = Instant::now();
        fill_quiet(path, n);
        let fill_s = started.elapsed().as_secs_f64();
        println!(
            "{{\"phase\":\"sqlite_fill\",\"n\":{n},\"fill_s\":{fill_s:.3},\"file_bytes\":{},\"peak_rss_kib\":{},\"rss_kib\":{}}}",
            std::fs::metadata(path).map_or(0, |m| m.len()),
            status_kib("VmHWM"),
            status_kib("VmRSS"),
        );
    }

    /// Fills a fresh SQLite file with `n` entities, 100 per transaction.
    pub(super) fn fill_quiet(path: &str, n: usize) {
        let c = open(path);
        for p in 0..PARTITIONS {
            let rows: Vec<usize> = (p..n).step_by(PARTITIONS).collect();
            for chunk in rows.chunks(100) {
                c.execute_batch("BEGIN").unwrap();
                for &i in chunk {
                    insert(&c, i);
                }
                c.execute_batch("COMMIT").unwrap();
            }
        }
    }

    pub(super) fn read(path: &str, n: usize) {
        let started = Instant::now();
        let c = open(path);
        let open_s = started.elapsed().as_secs_f64();
        let open_rss = status_kib("VmRSS");
        let decode = |b: Vec<u8>| -> DynamicEntity {
            tablekit::codec::entity_from_json(&b).expect("a stored entity decodes")
        };
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let started = Instant::now();
        let mut get = c
            .prepare("SELECT body FROM entities WHERE pk = ?1 AND rk = ?2")
            .unwrap();
        for _ in 0..10_000 {
            let i = (next() % n as u64) as usize;
            let b: Vec<u8> = get
                .query_row(
                    params![format!("p{:03}", i % PARTITIONS), format!("{i:08}")],
                    |r| r.get(0),
                )
                .unwrap();
            decode(b);
        }
        let point_us = started.elapsed().as_secs_f64() * 1e6 / 10_000.0;
        let started = Instant::now();
        let ranges = 100;
        let mut range = c
            .prepare("SELECT body FROM entities WHERE pk = ?1 ORDER BY pk, rk LIMIT 1000")
            .unwrap();
        for r in 0..ranges {
            let got: Vec<DynamicEntity> = range
                .query_map(params![format!("p{:03}", r % PARTITIONS)], |row| row.get(0))
                .unwrap()
                .map(|b| decode(b.unwrap()))
                .collect();
            assert_eq!(got.len(), (n / PARTITIONS).min(1000));
        }
        let range_ms = started.elapsed().as_secs_f64() * 1e3 / ranges as f64;
        let before_scan_hwm = status_kib("VmHWM");
        let started = Instant::now();
        let mut scan = c
            .prepare("SELECT body FROM entities ORDER BY pk, rk")
            .unwrap();
        let mut count = 0;
        for b in scan.query_map([], |row| row.get::<_, Vec<u8>>(0)).unwrap() {
            // Each row decoded, as the store decodes each entity it streams.
            let e = decode(b.unwrap());
            count += usize::from(!e.partition_key.is_empty());
        }
        assert_eq!(count, n);
        let scan_s = started.elapsed().as_secs_f64();
        println!(
            "{{\"phase\":\"sqlite_read\",\"n\":{n},\"open_s\":{open_s:.4},\"after_open_rss_kib\":{open_rss},\
             \"point_read_us\":{point_us:.1},\"range_1000_ms\":{range_ms:.2},\"scan_s\":{scan_s:.3},\
             \"scan_hwm_growth_kib\":{},\"end_rss_kib\":{}}}",
            status_kib("VmHWM").saturating_sub(before_scan_hwm),
            status_kib("VmRSS")
        );
    }

    pub(super) fn writers(path: &str, n: usize) {
        let c = Arc::new(std::sync::Mutex::new(open(path)));
        let mut rates = Vec::new();
        for (round, writers) in [1usize, 32].into_iter().enumerate() {
            let each = if writers == 1 { 500 } else { 100 };
            let started = Instant::now();
            let threads: Vec<_> = (0..writers)
                .map(|w| {
                    let c = c.clone();
                    std::thread::spawn(move || {
                        for k in 0..each {
                            let i = n + round * 1_000_000 + w * 10_000 + k;
                            let c = c.lock().unwrap();
                            insert(&c, i);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            rates.push((writers * each) as f64 / started.elapsed().as_secs_f64());
        }
        println!(
            "{{\"phase\":\"sqlite_writers\",\"n\":{n},\"one_writer_per_s\":{:.0},\"32_writers_per_s\":{:.0},\"ratio\":{:.1},\"peak_rss_kib\":{}}}",
            rates[0],
            rates[1],
            rates[1] / rates[0],
            status_kib("VmHWM")
        );
    }

    pub(super) fn compact(path: &str, n: usize) {
        let size = || std::fs::metadata(path).map_or(0, |m| m.len());
        let c = open(path);
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        let before = size();
        let started = Instant::now();
        let mut del = c
            .prepare("DELETE FROM entities WHERE pk = ?1 AND rk = ?2")
            .unwrap();
        for p in 0..PARTITIONS {
            let rows: Vec<usize> = (p..n).step_by(PARTITIONS).filter(|i| i % 10 != 0).collect();
            for chunk in rows.chunks(100) {
                c.execute_batch("BEGIN").unwrap();
                for &i in chunk {
                    del.execute(params![
                        format!("p{:03}", i % PARTITIONS),
                        format!("{i:08}")
                    ])
                    .unwrap();
                }
                c.execute_batch("COMMIT").unwrap();
            }
        }
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        let delete_s = started.elapsed().as_secs_f64();
        let after_delete = size();
        let started = Instant::now();
        c.execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        println!(
            "{{\"phase\":\"sqlite_compact\",\"n\":{n},\"bytes_before\":{before},\"bytes_after_delete_90pct\":{after_delete},\
             \"bytes_after_compact\":{},\"delete_s\":{delete_s:.3},\"compact_s\":{:.3}}}",
            size(),
            started.elapsed().as_secs_f64()
        );
    }
}

/// Issue 38 item 2: `bulk()` of the same rows sorted by PartitionKey and as
/// generated (997 partitions interleaved), each into a fresh file in its own
/// child process.
mod bulk {
    use super::*;
    use futures::stream;
    use tablekit::UpdateMode;

    /// How many partitions the bulk rows are spread over.
    pub(super) const PARTITIONS: usize = 997;

    /// Row `i`: the workload's entity in partition `i % 997`.
    fn row(i: usize) -> DynamicEntity {
        let mut e = entity(i);
        e.partition_key = format!("q{:03}", i % PARTITIONS);
        e
    }

    /// The rows' order: by partition (then RowKey), or as generated.
    fn order(n: usize, sorted: bool) -> Vec<usize> {
        if sorted {
            (0..PARTITIONS)
                .flat_map(|p| (p..n).step_by(PARTITIONS))
                .collect()
        } else {
            (0..n).collect()
        }
    }

    /// Child: `n` rows upserted with `bulk()` into a fresh file; the rate,
    /// the file's size before and after the store's close, the close's time
    /// and the peak resident set.
    pub(super) fn write(path: &str, n: usize, sorted: bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let svc = TableServiceClient::embedded_at(path).expect("the store file opens");
        let t = svc.table::<DynamicEntity>(TABLE).expect("a valid name");
        rt.block_on(t.create_table()).expect("create the table");
        let rows = order(n, sorted);
        let setting = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
        let mut writer = t.bulk();
        if let Some(v) = setting("DURABLE_STORE_BULK_IN_FLIGHT") {
            writer = writer.in_flight(v);
        }
        if let Some(v) = setting("DURABLE_STORE_BULK_BUFFER") {
            writer = writer.buffer(v);
        }
        let cpu0 = cpu_s();
        let started = Instant::now();
        let report = rt
            .block_on(
                writer.upsert_all(stream::iter(rows.into_iter().map(row)), UpdateMode::Replace),
            )
            .expect("the bulk write runs");
        let cpu = cpu_s() - cpu0;
        let write_s = started.elapsed().as_secs_f64();
        assert_eq!(report.written, n as u64);
        let size = || std::fs::metadata(path).map_or(0, |m| m.len());
        let open_bytes = size();
        let started = Instant::now();
        drop((t, svc));
        let close_s = started.elapsed().as_secs_f64();
        println!(
            "{{\"phase\":\"bulk_{}\",\"n\":{n},\"partitions\":{PARTITIONS},\"write_s\":{write_s:.3},\
             \"rows_per_s\":{:.0},\"close_s\":{close_s:.3},\"rows_per_s_with_close\":{:.0},\
             \"file_bytes_open\":{open_bytes},\"file_bytes\":{},\"peak_rss_kib\":{},\"cpu_s\":{cpu:.3},\"transactions\":{}}}",
            if sorted { "sorted" } else { "interleaved" },
            n as f64 / write_s,
            n as f64 / (write_s + close_s),
            size(),
            status_kib("VmHWM"),
            report.transactions,
        );
    }

    /// The CPU time of this process so far (user and system, all threads).
    fn cpu_s() -> f64 {
        use nix::sys::resource::{getrusage, UsageWho};
        let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
        let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        s(u.user_time()) + s(u.system_time())
    }

    /// A number field of a child's JSON line.
    pub(super) fn field(line: &str, name: &str) -> f64 {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        v[name].as_f64().unwrap_or(f64::NAN)
    }

    /// Sorted, then interleaved, each in a fresh file; then the ratios
    /// interleaved/sorted.
    pub(super) fn run() {
        let n: usize = std::env::var("DURABLE_STORE_BULK_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        let mut lines = Vec::new();
        for phase in ["bulk_sorted", "bulk_interleaved"] {
            let path = std::env::temp_dir().join(format!(
                "tablekit-durable-bulk-{}-{phase}.redb",
                std::process::id()
            ));
            let _ = tablekit::storage::remove_file(&path);
            let line = child(phase, &path, n);
            println!("{line}");
            lines.push(line);
            let _ = tablekit::storage::remove_file(&path);
        }
        let ratio = |name: &str| field(&lines[1], name) / field(&lines[0], name);
        println!(
            "{{\"phase\":\"bulk_ratio\",\"n\":{n},\"interleaved_to_sorted_rate\":{:.2},\
             \"interleaved_to_sorted_rate_with_close\":{:.2},\"interleaved_to_sorted_file\":{:.2},\
             \"interleaved_to_sorted_file_open\":{:.2},\"interleaved_to_sorted_peak_rss\":{:.2}}}",
            ratio("rows_per_s"),
            ratio("rows_per_s_with_close"),
            ratio("file_bytes"),
            ratio("file_bytes_open"),
            ratio("peak_rss_kib"),
        );
    }
}

/// Issue 38 item 3: the whole table scanned, decoded into a typed entity,
/// pages of 1,000, from the store file and from SQLite, each in its own
/// child process after both were filled.
mod scan {
    use super::*;
    use tablekit::TableEntity;

    /// The bench's entity as a typed struct (support::entity's properties).
    #[derive(TableEntity, Debug, Clone, PartialEq)]
    pub(super) struct Employee {
        #[tablekit(partition_key)]
        pk: String,
        #[tablekit(row_key)]
        rk: String,
        first_name: String,
        last_name: String,
        email: String,
        age: i32,
        salary: f64,
        employee_id: i64,
        active: bool,
        photo: Vec<u8>,
    }

    impl Employee {
        /// What the scan adds up, so that no field goes unread.
        fn weight(&self) -> u64 {
            (self.pk.len()
                + self.rk.len()
                + self.first_name.len()
                + self.last_name.len()
                + self.email.len()
                + self.photo.len()) as u64
                + self.age as u64
                + (self.employee_id - 9_000_000_000) as u64
                + u64::from(self.active)
                + self.salary as u64
        }
    }

    /// Child: fills the store file and the SQLite file with `n` entities.
    pub(super) fn fill(path: &str, n: usize) {
        let fill_s = runtime(1).block_on(async {
            let svc = TableServiceClient::embedded_at(path).expect("the store file opens");
            fill_service(&svc, n).await
        });
        let started = Instant::now();
        super::sqlite::fill_quiet(&format!("{path}.sqlite"), n);
        println!(
            "{{\"phase\":\"scan_fill\",\"n\":{n},\"file_fill_s\":{fill_s:.3},\"sqlite_fill_s\":{:.3},\
             \"file_bytes\":{},\"sqlite_bytes\":{}}}",
            started.elapsed().as_secs_f64(),
            std::fs::metadata(path).map_or(0, |m| m.len()),
            std::fs::metadata(format!("{path}.sqlite")).map_or(0, |m| m.len()),
        );
    }

    /// Child: the store file's table streamed as `Employee`, pages of 1,000.
    pub(super) fn file(path: &str, n: usize) {
        let account = Storage::embedded_at_with(path, options()).expect("the file opens");
        let t = account.table::<Employee>(TABLE).expect("a valid name");
        let (scan_s, weight) = runtime(1).block_on(async {
            let started = Instant::now();
            let mut s = t.query().page_size(1000).stream();
            let (mut count, mut weight) = (0usize, 0u64);
            while let Some(e) = s.try_next().await.expect("the stream reads") {
                count += 1;
                weight += e.weight();
            }
            assert_eq!(count, n);
            (started.elapsed().as_secs_f64(), weight)
        });
        println!(
            "{{\"phase\":\"scan_file\",\"n\":{n},\"scan_s\":{scan_s:.3},\"weight\":{weight},\"peak_rss_kib\":{}}}",
            status_kib("VmHWM")
        );
    }

    /// Child: the SQLite table read in key order, each row's JSON decoded
    /// as `Employee`, 1,000 rows a query (a page, resumed after its last key).
    pub(super) fn sqlite(path: &str, n: usize) {
        let c = super::sqlite::open(&format!("{path}.sqlite"));
        let started = Instant::now();
        let mut first = c
            .prepare("SELECT pk, rk, body FROM entities ORDER BY pk, rk LIMIT 1000")
            .unwrap();
        let mut next = c
            .prepare(
                "SELECT pk, rk, body FROM entities WHERE (pk, rk) > (?1, ?2) ORDER BY pk, rk LIMIT 1000",
            )
            .unwrap();
        let (mut count, mut weight) = (0usize, 0u64);
        let mut last: Option<(String, String)> = None;
        loop {
            let read = |r: &rusqlite::Row<'_>| -> rusqlite::Result<(String, String, Vec<u8>)> {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            };
            let page: Vec<(String, String, Vec<u8>)> = match &last {
                None => first
                    .query_map([], read)
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect(),
                Some((pk, rk)) => next
                    .query_map(rusqlite::params![pk, rk], read)
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect(),
            };
            let Some((pk, rk, _)) = page.last() else {
                break;
            };
            last = Some((pk.clone(), rk.clone()));
            for (_, _, body) in &page {
                let e: Employee =
                    tablekit::codec::entity_from_json(body).expect("a stored entity decodes");
                count += 1;
                weight += e.weight();
            }
        }
        assert_eq!(count, n);
        println!(
            "{{\"phase\":\"scan_sqlite\",\"n\":{n},\"scan_s\":{:.3},\"weight\":{weight},\"peak_rss_kib\":{}}}",
            started.elapsed().as_secs_f64(),
            status_kib("VmHWM")
        );
    }

    /// Both filled, then each scanned; the ratio tablekit/SQLite of the
    /// scan times.
    pub(super) fn run() {
        let n: usize = std::env::var("DURABLE_STORE_SCAN_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let path =
            std::env::temp_dir().join(format!("tablekit-durable-scan-{}.redb", std::process::id()));
        let _ = tablekit::storage::remove_file(&path);
        println!("{}", child("scan_fill", &path, n));
        let file = child("scan_file", &path, n);
        println!("{file}");
        let sqlite = child("scan_sqlite", &path, n);
        println!("{sqlite}");
        assert_eq!(
            super::bulk::field(&file, "weight"),
            super::bulk::field(&sqlite, "weight"),
            "both read the same entities"
        );
        println!(
            "{{\"phase\":\"scan_ratio\",\"n\":{n},\"file_to_sqlite_time\":{:.2}}}",
            super::bulk::field(&file, "scan_s") / super::bulk::field(&sqlite, "scan_s")
        );
        let _ = tablekit::storage::remove_file(&path);
        for tail in [".sqlite", ".sqlite-wal", ".sqlite-shm"] {
            let _ = std::fs::remove_file(format!("{}{tail}", path.display()));
        }
    }
}

/// The criterion benchmarks (selected by the filter given after `--`).
mod group_commit {
    use super::*;
    use criterion::{Criterion, Throughput};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    /// Concurrent writers, and the single inserts each makes per iteration.
    const WRITERS: usize = 32;
    const EACH: usize = 10;

    /// Per runtime: the entities written and the time taken, over every
    /// iteration criterion timed.
    static TOTALS: Mutex<[(usize, f64); 2]> = Mutex::new([(0, 0.0); 2]);

    fn runtime(multi: bool) -> tokio::runtime::Runtime {
        let mut b = if multi {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        };
        b.enable_all().build().expect("a tokio runtime")
    }

    /// One iteration: `WRITERS` tasks, each inserting `EACH` entities one at
    /// a time (keys from `next`, never repeated); the time it took.
    fn round(
        rt: &tokio::runtime::Runtime,
        t: &Arc<tablekit::TableClient<DynamicEntity>>,
        next: &Arc<AtomicUsize>,
    ) -> Duration {
        rt.block_on(async {
            let started = Instant::now();
            let tasks: Vec<_> = (0..WRITERS)
                .map(|_| {
                    let (t, next) = (t.clone(), next.clone());
                    tokio::spawn(async move {
                        for _ in 0..EACH {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            t.insert(&entity(i)).await.expect("the insert commits");
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("a writer ends");
            }
            started.elapsed()
        })
    }

    /// A store file with the default options and the table, on its runtime.
    struct Side {
        rt: tokio::runtime::Runtime,
        svc: TableServiceClient,
        t: Arc<tablekit::TableClient<DynamicEntity>>,
        next: Arc<AtomicUsize>,
        path: std::path::PathBuf,
    }

    impl Side {
        fn new(multi: bool) -> Side {
            let path = std::env::temp_dir().join(format!(
                "tablekit-group-commit-{}-{multi}.redb",
                std::process::id()
            ));
            let _ = tablekit::storage::remove_file(&path);
            let rt = runtime(multi);
            let svc = TableServiceClient::embedded_at(&path).expect("the store file opens");
            let t = Arc::new(svc.table::<DynamicEntity>(TABLE).expect("a valid name"));
            rt.block_on(t.create_table()).expect("create the table");
            Side {
                rt,
                svc,
                t,
                next: Arc::new(AtomicUsize::new(0)),
                path,
            }
        }

        fn round(&self) -> Duration {
            round(&self.rt, &self.t, &self.next)
        }
    }

    fn writers(c: &mut Criterion) {
        let mut g = c.benchmark_group("group_commit");
        g.throughput(Throughput::Elements((WRITERS * EACH) as u64));
        g.sample_size(10)
            .warm_up_time(Duration::from_secs(2))
            .measurement_time(Duration::from_secs(8));
        let sides = [Side::new(false), Side::new(true)];
        // Each iteration times a round of the benchmarked runtime for
        // criterion, and a round of the other beside it for the ratio: the
        // disk's fsync time drifts over a run (0.4 to 7 ms on a shared
        // virtual disk), and alternating rounds weighs it on both alike.
        for (slot, name) in ["current_thread", "multi_thread"].into_iter().enumerate() {
            g.bench_function(format!("32 writers {name}"), |b| {
                b.iter_custom(|iters| {
                    let mut took = Duration::ZERO;
                    for _ in 0..iters {
                        let mine = sides[slot].round();
                        let other = sides[1 - slot].round();
                        let mut totals = TOTALS.lock().expect("not poisoned");
                        for (s, d) in [(slot, mine), (1 - slot, other)] {
                            totals[s].0 += WRITERS * EACH;
                            totals[s].1 += d.as_secs_f64();
                        }
                        took += mine;
                    }
                    took
                })
            });
        }
        g.finish();
        for side in sides {
            let Side {
                rt, svc, t, path, ..
            } = side;
            // The file closes with the last client of its store.
            drop((t, svc, rt));
            let _ = tablekit::storage::remove_file(&path);
        }
        let totals = *TOTALS.lock().expect("not poisoned");
        if totals.iter().all(|&(n, _)| n > 0) {
            let rate = |(n, s): (usize, f64)| n as f64 / s;
            let (current, multi) = (rate(totals[0]), rate(totals[1]));
            println!(
                "{{\"phase\":\"group_commit\",\"writers\":{WRITERS},\"current_thread_per_s\":{current:.0},\
                 \"multi_thread_per_s\":{multi:.0},\"ratio_current_to_multi\":{:.2},\"fdatasync_median_ms\":{:.2}}}",
                current / multi,
                fdatasync_ms()
            );
        }
    }

    /// The median time of a 4 KiB write and `fdatasync` in the temporary
    /// directory, in ms: what a commit waits for on this disk, which sets
    /// the rate of writers that do not share commits.
    fn fdatasync_ms() -> f64 {
        use std::io::{Seek as _, SeekFrom, Write as _};
        let path =
            std::env::temp_dir().join(format!("tablekit-group-commit-{}.sync", std::process::id()));
        let mut f = std::fs::File::create(&path).expect("a temporary file");
        let mut times: Vec<f64> = (0..50)
            .map(|i| {
                f.seek(SeekFrom::Start(i % 10 * 4096)).expect("seek");
                f.write_all(&[i as u8; 4096]).expect("write");
                let started = Instant::now();
                f.sync_data().expect("fdatasync");
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let _ = std::fs::remove_file(&path);
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    }

    pub(super) fn run() {
        let mut c = Criterion::default().configure_from_args();
        writers(&mut c);
        c.final_summary();
    }
}

/// Runs this binary as the child `phase`; its stdout.
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
        eprintln!("durable_store: the {phase} child failed");
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
            "memory" => memory(n),
            "read" => read(&path, n),
            "compact" => compact(&path, n),
            "writers" => writers(&path, n),
            "sqlite_fill" => sqlite::fill(&format!("{path}.sqlite"), n),
            "sqlite_read" => sqlite::read(&format!("{path}.sqlite"), n),
            "sqlite_writers" => sqlite::writers(&format!("{path}.sqlite"), n),
            "bulk_sorted" => bulk::write(&path, n, true),
            "bulk_interleaved" => bulk::write(&path, n, false),
            "scan_fill" => scan::fill(&path, n),
            "scan_file" => scan::file(&path, n),
            "scan_sqlite" => scan::sqlite(&path, n),
            _ => sqlite::compact(&format!("{path}.sqlite"), n),
        }
        return;
    }
    // `cargo test --benches` runs bench binaries without --bench: skip there.
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        eprintln!("durable_store: run it with `cargo bench --bench durable_store`; skipped");
        return;
    }
    // A filter (`-- group_commit`) selects among the criterion benchmarks
    // alone; without one the phases run first.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filters.is_empty() {
        let selects = |group: &str| filters.iter().any(|f| group.contains(f.as_str()));
        if selects("bulk") {
            bulk::run();
        }
        if selects("scan") {
            scan::run();
        }
        if selects("group_commit") {
            group_commit::run();
        }
        return;
    }
    let n: usize = std::env::var("DURABLE_STORE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let path = std::env::temp_dir().join(format!(
        "tablekit-durable-store-{}.redb",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let phases = std::env::var("DURABLE_STORE_PHASES").unwrap_or_else(|_| {
        "fill,memory,read,writers,compact,sqlite_fill,sqlite_read,sqlite_writers,sqlite_compact"
            .into()
    });
    for phase in phases.split(',') {
        println!("{}", child(phase.trim(), &path, n));
    }
    let _ = std::fs::remove_file(&path);
    for tail in [".seal", ".sqlite", ".sqlite-wal", ".sqlite-shm"] {
        let _ = std::fs::remove_file(format!("{}{tail}", path.display()));
    }
    group_commit::run();
}
