//! The embedded store kept in a file (`TableServiceClient::embedded_at`):
//! everything acknowledged is there after a reopen and after a crash (a child
//! process killed with SIGKILL at random moments, one writer or many sharing
//! commits on a current-thread runtime), transactions are all or nothing,
//! and a file in use cannot be opened a second time. (The behaviour
//! suite runs on the file-backed store too: the `embedded_file` tests of
//! `tablekit::testing::conformance!`.)

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::TryStreamExt as _;
use tablekit::{DynamicEntity, EdmValue, IfMatch, TableServiceClient, UpdateMode};

use crate::common::TempStore;

/// Every entity of a table, in key order, with its Timestamp and ETag.
async fn all(svc: &TableServiceClient, table: &str) -> Vec<DynamicEntity> {
    svc.table::<DynamicEntity>(table)
        .unwrap()
        .query()
        .stream()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_reopened_file_holds_every_acknowledged_write_and_nothing_refused() {
    let file = TempStore::new();
    let svc = file.open();
    for name in ["Alpha", "Beta", "Gamma"] {
        svc.create_table(name).await.unwrap();
    }
    svc.delete_table("Beta").await.unwrap();
    let t = svc.table::<DynamicEntity>("Alpha").unwrap();
    let when = chrono::DateTime::from_timestamp(1_234_567_890, 123_456_700).unwrap();
    t.insert(
        &DynamicEntity::new("p", "every-type")
            .with("S", "text \u{1F600}")
            .with("B", vec![0u8, 255])
            .with("O", true)
            .with("D", when)
            .with("F", -0.0)
            .with("N", f64::NAN)
            .with("G", uuid::Uuid::from_u128(42))
            .with("I", i32::MIN)
            .with("L", i64::MAX),
    )
    .await
    .unwrap();
    for rk in ["merge", "replace", "update", "delete"] {
        t.insert(&DynamicEntity::new("p", rk).with("A", 1))
            .await
            .unwrap();
    }
    t.upsert(
        &DynamicEntity::new("p", "merge").with("B", 2),
        UpdateMode::Merge,
    )
    .await
    .unwrap();
    t.upsert(
        &DynamicEntity::new("p", "replace").with("B", 2),
        UpdateMode::Replace,
    )
    .await
    .unwrap();
    let etag = t.get(("p", "update")).await.unwrap().unwrap().etag.unwrap();
    t.update(
        &DynamicEntity::new("p", "update").with("C", 3),
        UpdateMode::Replace,
        IfMatch::ETag(etag.clone()),
    )
    .await
    .unwrap();
    // Refused writes change nothing in the file either.
    let stale = t
        .update(
            &DynamicEntity::new("p", "update").with("C", 4),
            UpdateMode::Replace,
            IfMatch::ETag(etag),
        )
        .await
        .unwrap_err();
    assert!(stale.is_precondition_failed(), "{stale:?}");
    t.delete(("p", "delete"), IfMatch::Any).await.unwrap();
    let mut tx = t.transaction();
    for i in 0..5 {
        tx.insert(&DynamicEntity::new("q", format!("tx{i}")).with("I", i))
            .unwrap();
    }
    tx.send().await.unwrap();
    let mut failing = t.transaction();
    failing
        .insert(&DynamicEntity::new("q", "new").with("I", 9))
        .unwrap();
    failing
        .insert(&DynamicEntity::new("q", "tx0").with("I", 9))
        .unwrap();
    let err = failing.send().await.unwrap_err();
    assert_eq!(err.batch_index(), Some(1), "{err:?}");

    let before = all(&svc, "Alpha").await;
    assert_eq!(before.len(), 9);
    drop((svc, t));

    let svc = file.open();
    let names = svc.list_tables().fetch_all().await.unwrap();
    assert_eq!(names, ["Alpha", "Gamma"]);
    let after = all(&svc, "alpha").await;
    assert_eq!(after.len(), before.len());
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(
            (&a.partition_key, &a.row_key, &a.etag, &a.timestamp),
            (&b.partition_key, &b.row_key, &b.etag, &b.timestamp)
        );
        let props = |e: &DynamicEntity| {
            e.properties
                .iter()
                .map(|(n, v)| match v {
                    // NaN != NaN: compare Doubles by their bits.
                    EdmValue::Double(f) => (n.to_owned(), format!("double {:x}", f.to_bits())),
                    v => (n.to_owned(), format!("{v:?}")),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(props(a), props(b), "{}", a.row_key);
    }
    // The reopened store goes on: ETags keep increasing, conditions hold.
    let t = svc.table::<DynamicEntity>("Alpha").unwrap();
    let old = before.iter().find(|e| e.row_key == "merge").unwrap();
    let w = t
        .update(
            &DynamicEntity::new("p", "merge").with("Z", 1),
            UpdateMode::Merge,
            IfMatch::ETag(old.etag.clone().unwrap()),
        )
        .await
        .unwrap();
    assert!(w.timestamp() > before.iter().filter_map(|e| e.timestamp).max());
    assert!(t.get(("p", "delete")).await.unwrap().is_none());
    assert!(svc
        .table::<DynamicEntity>("Beta")
        .unwrap()
        .get(("p", "x"))
        .await
        .unwrap_err()
        .is_not_found());
}

#[tokio::test]
async fn a_second_open_of_a_file_in_use_is_a_clear_error_and_harms_nothing() {
    let file = TempStore::new();
    let svc = file.open();
    let t = svc.table::<DynamicEntity>("Kept").unwrap();
    t.create_table().await.unwrap();
    t.insert(&DynamicEntity::new("p", "r")).await.unwrap();

    let err = TableServiceClient::embedded_at(file.path()).unwrap_err();
    assert!(
        err.to_string().contains("in use by another open store"),
        "{err}"
    );
    // A second process is refused the same way, and the first goes on.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "durable::open_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(OPEN_VAR, file.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("OPEN-REFUSED") && stdout.contains("in use by another open store"),
        "{stdout}"
    );
    t.insert(&DynamicEntity::new("p", "r2")).await.unwrap();
    drop((svc, t));
    let svc = file.open();
    assert_eq!(all(&svc, "Kept").await.len(), 2);
}

#[tokio::test]
async fn the_connection_string_use_embedded_storage_opens_the_same_file() {
    let file = TempStore::new();
    let conn = format!("UseEmbeddedStorage=true;Path={}", file.path().display());
    let svc = TableServiceClient::from_connection_string(&conn).unwrap();
    assert!(svc.is_embedded());
    let t = svc.table::<DynamicEntity>("Conn").unwrap();
    t.create_table().await.unwrap();
    t.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    drop((svc, t));
    let svc = file.open();
    assert_eq!(all(&svc, "Conn").await.len(), 1);
    drop(svc);
    let err = TableServiceClient::from_connection_string("UseEmbeddedStorage=true").unwrap_err();
    assert!(err.to_string().contains("needs Path=<file>"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_on_a_multi_thread_runtime_all_reach_the_file() {
    let file = TempStore::new();
    let svc = file.open();
    let t = svc.table::<DynamicEntity>("Many").unwrap();
    t.create_table().await.unwrap();
    let writers = (0..8).map(|w| {
        let t = t.clone();
        tokio::spawn(async move {
            for i in 0..10 {
                let pk = format!("w{w}");
                if i % 2 == 0 {
                    t.insert(&DynamicEntity::new(&pk, format!("{i}")))
                        .await
                        .unwrap();
                } else {
                    let mut tx = t.transaction();
                    for j in 0..3 {
                        tx.insert(&DynamicEntity::new(&pk, format!("{i}-{j}")))
                            .unwrap();
                    }
                    tx.send().await.unwrap();
                }
            }
        })
    });
    for w in futures::future::join_all(writers).await {
        w.unwrap();
    }
    drop((svc, t));
    let svc = file.open();
    assert_eq!(all(&svc, "Many").await.len(), 8 * (5 + 5 * 3));
}

const OPEN_VAR: &str = "TABLEKIT_DURABLE_OPEN_CHILD";

/// Run only as the child of the test above (`OPEN_VAR` names the file):
/// tries to open the file and prints what happened.
#[test]
fn open_helper() {
    let Some(path) = std::env::var_os(OPEN_VAR) else {
        return;
    };
    match TableServiceClient::embedded_at(&path) {
        Ok(_) => println!("OPEN-SUCCEEDED"),
        Err(e) => println!("OPEN-REFUSED {e}"),
    }
}

const CRASH_VAR: &str = "TABLEKIT_DURABLE_CRASH_CHILD";

/// Run only as the child of the crash test (`CRASH_VAR` is `path;round`):
/// writes in a loop and prints each write after it was acknowledged: `ACK 1
/// <rk>` for a single insert into partition `single`, `ACK 5 <n>` for a
/// transaction that inserted `tx<n>-0` .. `tx<n>-4` into partition `tx<n>`.
#[tokio::test]
async fn crash_child_helper() {
    let Some(spec) = std::env::var(CRASH_VAR).ok() else {
        return;
    };
    let (path, round) = spec.split_once(';').unwrap();
    let svc = TableServiceClient::embedded_at(path).unwrap();
    let t = svc.table::<DynamicEntity>("Crash").unwrap();
    t.create_table_if_not_exists().await.unwrap();
    let mut out = std::io::stdout();
    for n in 0.. {
        if n % 2 == 0 {
            let rk = format!("r{round}-{n}");
            t.insert(&DynamicEntity::new("single", &rk).with("N", n))
                .await
                .unwrap();
            writeln!(out, "ACK 1 {rk}").unwrap();
        } else {
            let pk = format!("tx{round}-{n}");
            let mut tx = t.transaction();
            for i in 0..5 {
                tx.insert(&DynamicEntity::new(&pk, format!("{i}")).with("N", n))
                    .unwrap();
            }
            tx.send().await.unwrap();
            writeln!(out, "ACK 5 {pk}").unwrap();
        }
        out.flush().unwrap();
    }
}

#[tokio::test]
async fn every_acknowledged_write_survives_sigkill_and_transactions_are_all_or_nothing() {
    let file = TempStore::new();
    let seed = 0x7ab1_e817;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut acked_single = Vec::new();
    let mut acked_tx = Vec::new();
    for round in 0..4 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "durable::crash_child_helper",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_VAR, format!("{};{round}", file.path().display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Kill at a random moment once the child is writing.
        let delay = Duration::from_millis(rng.u64(20..400));
        let (started_tx, started) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut started_tx = Some(started_tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest's "test ... " may stand before the first line.
                if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                    if let Some(s) = started_tx.take() {
                        let _ = s.send(());
                    }
                    lines.push(rest.to_owned());
                }
            }
            lines
        });
        started
            .recv_timeout(Duration::from_secs(60))
            .expect("the child acknowledges a first write");
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL on Unix
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child was killed: {status:?}");
        let lines = reader.join().unwrap();
        assert!(!lines.is_empty());
        for line in lines {
            match line.split_once(' ').unwrap() {
                ("1", rk) => acked_single.push(rk.to_owned()),
                ("5", pk) => acked_tx.push(pk.to_owned()),
                other => panic!("unexpected line {other:?}"),
            }
        }

        // The file opens as it is (redb's own recovery on open), its integrity
        // check passes, and the store holds everything acknowledged so far.
        {
            let mut db = redb::Database::create(file.path()).unwrap();
            assert!(
                db.check_integrity().unwrap(),
                "round {round}: the file passes redb's integrity check"
            );
        }
        let svc = file.open();
        let stored = all(&svc, "Crash").await;
        eprintln!(
            "round {round}: killed after {delay:?}; {} single writes and {} transactions acknowledged so far, {} entities stored",
            acked_single.len(),
            acked_tx.len(),
            stored.len()
        );
        let singles: std::collections::HashSet<&str> = stored
            .iter()
            .filter(|e| e.partition_key == "single")
            .map(|e| e.row_key.as_str())
            .collect();
        for rk in &acked_single {
            assert!(
                singles.contains(rk.as_str()),
                "round {round}: acknowledged {rk} is lost"
            );
        }
        let mut per_tx = std::collections::BTreeMap::<&str, usize>::new();
        for e in stored.iter().filter(|e| e.partition_key.starts_with("tx")) {
            *per_tx.entry(e.partition_key.as_str()).or_default() += 1;
        }
        for (pk, n) in &per_tx {
            assert_eq!(*n, 5, "round {round}: transaction {pk} is partly applied");
        }
        for pk in &acked_tx {
            assert!(
                per_tx.contains_key(pk.as_str()),
                "round {round}: acknowledged {pk} is lost"
            );
        }
        // Each child has at most one write in flight when it dies (committed,
        // perhaps, but not yet acknowledged): every other stored write was seen.
        assert!(
            singles.len() - acked_single.len() <= round + 1,
            "round {round}"
        );
        assert!(per_tx.len() - acked_tx.len() <= round + 1, "round {round}");
    }
    assert!(
        !acked_single.is_empty() && !acked_tx.is_empty(),
        "seed {seed}"
    );
}

const CONCURRENT_CRASH_VAR: &str = "TABLEKIT_DURABLE_CONCURRENT_CRASH_CHILD";

/// How many writers the child of the concurrent crash test runs.
const CRASH_WRITERS: usize = 16;

/// Run only as the child of the concurrent crash test (`CONCURRENT_CRASH_VAR`
/// is `path;round`): on a current-thread runtime (`#[tokio::test]`'s),
/// `CRASH_WRITERS` tasks write at once, so the store's committer is nearly
/// always in a commit shared by several of them; each prints every write
/// after it was acknowledged, as the crash child above does (`ACK 1 <pk>
/// <rk>` for a single insert, `ACK 5 <pk>` for a transaction of 5).
#[tokio::test]
async fn crash_concurrent_child_helper() {
    let Some(spec) = std::env::var(CONCURRENT_CRASH_VAR).ok() else {
        return;
    };
    assert_eq!(
        tokio::runtime::Handle::current().runtime_flavor(),
        tokio::runtime::RuntimeFlavor::CurrentThread
    );
    let (path, round) = spec.split_once(';').unwrap();
    let svc = TableServiceClient::embedded_at(path).unwrap();
    let t = svc.table::<DynamicEntity>("Crash").unwrap();
    t.create_table_if_not_exists().await.unwrap();
    let writers = (0..CRASH_WRITERS).map(|w| {
        let t = t.clone();
        let round = round.to_owned();
        async move {
            for n in 0.. {
                let line = if n % 3 == 2 {
                    let pk = format!("tx{round}-{w}-{n}");
                    let mut tx = t.transaction();
                    for i in 0..5 {
                        tx.insert(&DynamicEntity::new(&pk, format!("{i}")).with("N", n))
                            .unwrap();
                    }
                    tx.send().await.unwrap();
                    format!("ACK 5 {pk}")
                } else {
                    let pk = format!("w{round}-{w}");
                    let rk = format!("{n}");
                    t.insert(&DynamicEntity::new(&pk, &rk).with("N", n))
                        .await
                        .unwrap();
                    format!("ACK 1 {pk} {rk}")
                };
                let mut out = std::io::stdout().lock();
                writeln!(out, "{line}").unwrap();
                out.flush().unwrap();
            }
        }
    });
    futures::future::join_all(writers).await;
}

/// SIGKILL at a random moment of `CRASH_WRITERS` concurrent writers on a
/// current-thread runtime, whose writes share commits: the kill lands while
/// a commit is on its way to the disk, nearly always. Every acknowledged
/// write is in the reopened file, every transaction whole or absent, and at
/// most the writes in flight (one per writer) are there unacknowledged.
#[tokio::test]
async fn concurrent_current_thread_writers_killed_mid_commit_lose_no_acknowledged_write() {
    let file = TempStore::new();
    let seed = 0x5eed_6c0d;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut acked_single = std::collections::HashSet::new();
    let mut acked_tx = std::collections::HashSet::new();
    for round in 0..4 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "durable::crash_concurrent_child_helper",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CONCURRENT_CRASH_VAR,
                format!("{};{round}", file.path().display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let delay = Duration::from_millis(rng.u64(20..400));
        let (started_tx, started) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut started_tx = Some(started_tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                    if let Some(s) = started_tx.take() {
                        let _ = s.send(());
                    }
                    lines.push(rest.to_owned());
                }
            }
            lines
        });
        started
            .recv_timeout(Duration::from_secs(60))
            .expect("the child acknowledges a first write");
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL on Unix
        assert!(!child.wait().unwrap().success(), "the child was killed");
        let lines = reader.join().unwrap();
        let before = (acked_single.len(), acked_tx.len());
        for line in lines {
            match line.split_once(' ').unwrap() {
                ("1", key) => {
                    let (pk, rk) = key.split_once(' ').unwrap();
                    acked_single.insert((pk.to_owned(), rk.to_owned()));
                }
                ("5", pk) => {
                    acked_tx.insert(pk.to_owned());
                }
                other => panic!("unexpected line {other:?}"),
            }
        }
        let acked_now = acked_single.len() + acked_tx.len() - before.0 - before.1;

        {
            let mut db = redb::Database::create(file.path()).unwrap();
            assert!(
                db.check_integrity().unwrap(),
                "round {round}: the file passes redb's integrity check"
            );
        }
        let svc = file.open();
        let stored = all(&svc, "Crash").await;
        drop(svc);
        let singles: std::collections::HashSet<(String, String)> = stored
            .iter()
            .filter(|e| e.partition_key.starts_with('w'))
            .map(|e| (e.partition_key.clone(), e.row_key.clone()))
            .collect();
        let mut per_tx = std::collections::BTreeMap::<&str, usize>::new();
        for e in stored.iter().filter(|e| e.partition_key.starts_with("tx")) {
            *per_tx.entry(e.partition_key.as_str()).or_default() += 1;
        }
        eprintln!(
            "round {round}: killed after {delay:?}; {acked_now} writes acknowledged in it; \
             {} single writes and {} transactions acknowledged so far, {} entities stored",
            acked_single.len(),
            acked_tx.len(),
            stored.len()
        );
        for key in &acked_single {
            assert!(
                singles.contains(key),
                "round {round}: acknowledged {key:?} is lost"
            );
        }
        for (pk, n) in &per_tx {
            assert_eq!(*n, 5, "round {round}: transaction {pk} is partly applied");
        }
        for pk in &acked_tx {
            assert!(
                per_tx.contains_key(pk.as_str()),
                "round {round}: acknowledged {pk} is lost"
            );
        }
        // At most one write per writer was in flight when each child died
        // (committed, perhaps, but not yet acknowledged).
        let unacked = singles.len() - acked_single.len() + per_tx.len() - acked_tx.len();
        assert!(
            unacked <= (round + 1) * CRASH_WRITERS,
            "round {round}: {unacked} writes stored unacknowledged"
        );
    }
    assert!(
        !acked_single.is_empty() && !acked_tx.is_empty(),
        "seed {seed}"
    );
}

/// One file holds an account's tables, queues and blobs: the three services
/// share the file opened once, each acknowledged change is in it after all
/// three are closed, and reopening gives back messages with their visibility,
/// dequeue counts and pop receipts, and blobs with their properties, metadata
/// and blocks.
#[tokio::test]
async fn one_file_holds_tables_queues_and_blobs_and_a_reopen_restores_them_all() {
    use tablekit::{clock::ManualClock, BlobServiceClient, QueueServiceClient};
    let file = TempStore::new();
    let clock = ManualClock::new("2014-07-31T18:00:00Z".parse().unwrap());
    let open = |clock: &ManualClock| {
        (
            file.open(),
            QueueServiceClient::embedded_at_with_clock(file.path(), clock.clone()).unwrap(),
            BlobServiceClient::embedded_at(file.path()).unwrap(),
        )
    };
    let (tables, queues, blobs) = open(&clock);
    let t = tables.table::<DynamicEntity>("Orders").unwrap();
    t.create_table().await.unwrap();
    t.insert(&DynamicEntity::new("p", "r")).await.unwrap();

    let jobs = queues.queue("jobs").unwrap();
    jobs.create_queue().await.unwrap();
    let later = queues.queue("later").unwrap();
    later.create_queue().await.unwrap();
    jobs.send("first").await.unwrap();
    // Received twice: invisible for a minute with dequeue count 2.
    let got = jobs
        .receive()
        .visibility_timeout(Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(got[0].text().unwrap(), "first");
    clock.advance(Duration::from_secs(2));
    let first = jobs
        .receive()
        .visibility_timeout(Duration::from_secs(60))
        .await
        .unwrap()
        .remove(0);
    assert_eq!((first.text().unwrap(), first.dequeue_count()), ("first", 2));
    for text in ["gone", "second", "third"] {
        jobs.send(text).await.unwrap();
    }
    let gone = jobs.receive().await.unwrap().remove(0);
    assert_eq!(gone.text().unwrap(), "gone");
    jobs.delete_message(&gone).await.unwrap();
    // Received and then updated: the update's receipt is the live one.
    let mut second = jobs
        .receive()
        .visibility_timeout(Duration::from_secs(600))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(second.text().unwrap(), "second");
    let stale = second.clone();
    jobs.update_message(
        &mut second,
        Duration::from_secs(30),
        Some(b"second, edited"),
    )
    .await
    .unwrap();
    later
        .send("in an hour")
        .visibility_delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let doomed = queues.queue("doomed").unwrap();
    doomed.create_queue().await.unwrap();
    doomed.send("x").await.unwrap();
    doomed.delete_queue().await.unwrap();

    let photos = blobs.container("photos").unwrap();
    photos.create_container().await.unwrap();
    let small = photos
        .blob("a.txt")
        .unwrap()
        .upload(b"hello".to_vec())
        .content_type("text/plain")
        .metadata("Owner", "ada")
        .await
        .unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    photos
        .blob("big.bin")
        .unwrap()
        .with_blocks(64 << 10, 2)
        .unwrap()
        .upload(big.clone())
        .await
        .unwrap();
    photos
        .blob("deleted")
        .unwrap()
        .upload(vec![1])
        .await
        .unwrap();
    photos
        .blob("deleted")
        .unwrap()
        .delete(tablekit::IfMatch::Any)
        .await
        .unwrap();
    let old = blobs.container("old").unwrap();
    old.create_container().await.unwrap();
    old.blob("x").unwrap().upload(vec![1]).await.unwrap();
    old.delete_container().await.unwrap();

    // While the queues are open, a second queue store on the file is refused;
    // tables and blobs of the same file are in use too.
    let err = QueueServiceClient::embedded_at(file.path()).unwrap_err();
    assert!(
        err.to_string().contains("in use by another open store"),
        "{err}"
    );
    let err = BlobServiceClient::embedded_at(file.path()).unwrap_err();
    assert!(
        err.to_string().contains("in use by another open store"),
        "{err}"
    );
    drop((tables, t, queues, jobs, later, doomed, blobs, photos, old));

    let (tables, queues, blobs) = open(&clock);
    assert_eq!(all(&tables, "Orders").await.len(), 1);
    let jobs = queues.queue("jobs").unwrap();
    let later = queues.queue("later").unwrap();
    assert!(queues.queue("doomed").unwrap().peek(1).await.is_err());
    assert_eq!(jobs.approximate_message_count().await.unwrap(), 3);
    // "first" and "second" are still invisible; "third" is visible.
    let peeked = jobs.peek(32).await.unwrap();
    let texts: Vec<_> = peeked.iter().map(|m| m.text().unwrap()).collect();
    assert_eq!(texts, ["third"]);
    assert!(later.peek(1).await.unwrap().is_empty());
    // The receipts issued before the reopen are the live ones, and a receipt
    // made stale before it stays stale.
    let err = jobs.delete_message(&stale).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err:?}");
    let third = jobs.receive().await.unwrap().remove(0);
    assert_eq!((third.text().unwrap(), third.dequeue_count()), ("third", 1));
    jobs.delete_message(&third).await.unwrap();
    clock.advance(Duration::from_secs(31));
    let again = jobs.receive().await.unwrap().remove(0);
    assert_eq!(
        (again.text().unwrap(), again.dequeue_count()),
        ("second, edited", 2)
    );
    jobs.delete_message(&first).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    let hour = later.receive().await.unwrap();
    assert_eq!(hour[0].text().unwrap(), "in an hour");
    assert_eq!(hour[0].dequeue_count(), 1);

    let photos = blobs.container("photos").unwrap();
    let props = photos.blob("a.txt").unwrap().properties().await.unwrap();
    assert_eq!(props.etag(), small.etag());
    assert_eq!(props.last_modified(), small.last_modified());
    assert_eq!(props.content_type(), Some("text/plain"));
    assert_eq!(props.metadata(), [("owner".to_owned(), "ada".to_owned())]);
    let back = photos
        .blob("big.bin")
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap();
    assert_eq!(back.as_ref(), big.as_slice());
    let names: Vec<_> = photos
        .list_blobs()
        .fetch_all()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name().to_owned())
        .collect();
    assert_eq!(names, ["a.txt", "big.bin"]);
    assert!(
        blobs
            .container("old")
            .unwrap()
            .create_container_if_not_exists()
            .await
            .unwrap(),
        "the deleted container stays deleted"
    );
    // A new write after the reopen gets an ETag never handed out before.
    let rewritten = photos
        .blob("a.txt")
        .unwrap()
        .upload(b"again".to_vec())
        .await
        .unwrap();
    assert_ne!(rewritten.etag(), small.etag());
}

/// `UseEmbeddedStorage=true;Path=<file>` reaches the queue and blob services
/// too: one connection string for the whole account.
#[tokio::test]
async fn the_embedded_connection_string_opens_queues_and_blobs_in_the_same_file() {
    use tablekit::{BlobServiceClient, QueueServiceClient};
    let file = TempStore::new();
    let conn = format!("UseEmbeddedStorage=true;Path={}", file.path().display());
    {
        let tables = TableServiceClient::from_connection_string(&conn).unwrap();
        let queues = QueueServiceClient::from_connection_string(&conn).unwrap();
        let blobs = BlobServiceClient::from_connection_string(&conn).unwrap();
        tables
            .table::<DynamicEntity>("Tee")
            .unwrap()
            .create_table()
            .await
            .unwrap();
        let q = queues.queue("qqq").unwrap();
        q.create_queue().await.unwrap();
        q.send("m").await.unwrap();
        let c = blobs.container("ccc").unwrap();
        c.create_container().await.unwrap();
        c.blob("bbb")
            .unwrap()
            .upload(b"body".to_vec())
            .await
            .unwrap();
    }
    let queues = QueueServiceClient::embedded_at(file.path()).unwrap();
    let blobs = BlobServiceClient::embedded_at(file.path()).unwrap();
    let m = queues.queue("qqq").unwrap().receive().await.unwrap();
    assert_eq!(m[0].text().unwrap(), "m");
    let body = blobs
        .container("ccc")
        .unwrap()
        .blob("bbb")
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.as_ref(), b"body");
    assert!(file
        .open()
        .table::<DynamicEntity>("Tee")
        .unwrap()
        .query()
        .stream()
        .try_collect::<Vec<_>>()
        .await
        .is_ok());
    let err = QueueServiceClient::from_connection_string("UseEmbeddedStorage=true").unwrap_err();
    assert!(err.to_string().contains("needs Path=<file>"), "{err}");
}

const CRASH_QB_VAR: &str = "TABLEKIT_DURABLE_CRASH_QUEUES_BLOBS_CHILD";

/// The bytes of the crash test's blob `name`: its length and content follow
/// from the name (a big one is cut into several blocks by the upload).
fn blob_body(name: &str, big: bool) -> Vec<u8> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let len = if big {
        150_000 + (h % 50_000) as usize
    } else {
        100 + (h % 2_000) as usize
    };
    let mut rng = fastrand::Rng::with_seed(h);
    (0..len).map(|_| rng.u8(..)).collect()
}

/// Run only as the child of the queue and blob crash test (`CRASH_QB_VAR` is
/// `path;round`): in a loop, sends a message (`ACK q <text>`), uploads a small
/// blob in one Put Blob (`ACK s <name>`), uploads a big one in 64 KiB blocks
/// and a Put Block List (`ACK b <name>`), or rewrites the big blob
/// `rewritten` in blocks with metadata `variant` (`ACK r <variant>`); each
/// line is printed once the store acknowledged it.
#[tokio::test]
async fn crash_queues_blobs_child_helper() {
    use tablekit::{BlobServiceClient, QueueServiceClient};
    let Some(spec) = std::env::var(CRASH_QB_VAR).ok() else {
        return;
    };
    let (path, round) = spec.split_once(';').unwrap();
    let queues = QueueServiceClient::embedded_at(path).unwrap();
    let blobs = BlobServiceClient::embedded_at(path).unwrap();
    let q = queues.queue("crashq").unwrap();
    q.create_queue().await.unwrap();
    let c = blobs.container("crashc").unwrap();
    c.create_container_if_not_exists().await.unwrap();
    let mut out = std::io::stdout();
    for n in 0.. {
        let line = match n % 4 {
            0 => {
                let text = format!("m{round}-{n}");
                q.send(&text).await.unwrap();
                format!("q {text}")
            }
            1 => {
                let name = format!("s{round}-{n}");
                c.blob(&name)
                    .unwrap()
                    .upload(blob_body(&name, false))
                    .await
                    .unwrap();
                format!("s {name}")
            }
            2 => {
                let name = format!("b{round}-{n}");
                c.blob(&name)
                    .unwrap()
                    .with_blocks(64 << 10, 2)
                    .unwrap()
                    .upload(blob_body(&name, true))
                    .await
                    .unwrap();
                format!("b {name}")
            }
            _ => {
                let variant = format!("{round}-{n}");
                c.blob("rewritten")
                    .unwrap()
                    .with_blocks(64 << 10, 2)
                    .unwrap()
                    .upload(blob_body(&format!("rewritten-{variant}"), true))
                    .metadata("variant", &variant)
                    .await
                    .unwrap();
                format!("r {variant}")
            }
        };
        writeln!(out, "ACK {line}").unwrap();
        out.flush().unwrap();
    }
}

/// `(round, n)` of a `round-n` variant, for ordering.
fn variant_order(v: &str) -> (u32, u32) {
    let (r, n) = v.split_once('-').unwrap();
    (r.parse().unwrap(), n.parse().unwrap())
}

/// Queues and blobs in the store file survive SIGKILL: a child sending
/// messages and uploading blobs (single Put Blobs, multi-block uploads, a
/// blob rewritten in blocks) is killed at seeded random moments over 4
/// rounds; after each, the file passes redb's integrity check and opens as it
/// is, every acknowledged message is there exactly once, every acknowledged
/// blob is whole, and no block list that was not committed shows up as a
/// blob (the rewritten blob is whole at its last acknowledged version or the
/// one in flight).
#[tokio::test]
async fn every_acknowledged_message_and_blob_survives_sigkill() {
    use std::collections::{HashMap, HashSet};
    use tablekit::{clock::ManualClock, BlobServiceClient, QueueServiceClient};
    let file = TempStore::new();
    let seed = 0x0b10_b5ed;
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut acked_q, mut acked_s, mut acked_b) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_rewrite: Option<String> = None;
    let start = chrono::Utc::now();
    for round in 0..4u32 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "durable::crash_queues_blobs_child_helper",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_QB_VAR, format!("{};{round}", file.path().display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let delay = Duration::from_millis(rng.u64(20..400));
        let (started_tx, started) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut started_tx = Some(started_tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                    if let Some(s) = started_tx.take() {
                        let _ = s.send(());
                    }
                    lines.push(rest.to_owned());
                }
            }
            lines
        });
        started
            .recv_timeout(Duration::from_secs(60))
            .expect("the child acknowledges a first change");
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL on Unix
        assert!(!child.wait().unwrap().success(), "the child was killed");
        let lines = reader.join().unwrap();
        assert!(!lines.is_empty());
        for line in lines {
            match line.split_once(' ').unwrap() {
                ("q", text) => acked_q.push(text.to_owned()),
                ("s", name) => acked_s.push(name.to_owned()),
                ("b", name) => acked_b.push(name.to_owned()),
                ("r", variant) => last_rewrite = Some(variant.to_owned()),
                other => panic!("unexpected line {other:?}"),
            }
        }

        {
            let mut db = redb::Database::create(file.path()).unwrap();
            assert!(
                db.check_integrity().unwrap(),
                "round {round}: the file passes redb's integrity check"
            );
        }
        // A clock an hour further each round: the messages received (hidden
        // for a minute) in the rounds before are visible again.
        let clock = ManualClock::new(start + chrono::Duration::hours(i64::from(round) + 1));
        let queues = QueueServiceClient::embedded_at_with_clock(file.path(), clock).unwrap();
        let blobs = BlobServiceClient::embedded_at(file.path()).unwrap();

        let q = queues.queue("crashq").unwrap();
        let mut received = Vec::new();
        loop {
            let got = q
                .receive()
                .max_messages(32)
                .visibility_timeout(Duration::from_secs(60))
                .await
                .unwrap();
            if got.is_empty() {
                break;
            }
            received.extend(got);
        }
        let ids: HashSet<&str> = received.iter().map(|m| m.id()).collect();
        let texts: HashSet<&str> = received.iter().map(|m| m.text().unwrap()).collect();
        assert_eq!(ids.len(), received.len(), "round {round}: a message twice");
        assert_eq!(texts.len(), received.len(), "round {round}: a text twice");
        assert_eq!(
            q.approximate_message_count().await.unwrap(),
            received.len() as u64,
            "round {round}: every stored message was received"
        );
        for text in &acked_q {
            assert!(
                texts.contains(text.as_str()),
                "round {round}: acknowledged message {text} is lost"
            );
        }
        assert!(received.len() - acked_q.len() <= round as usize + 1);

        let c = blobs.container("crashc").unwrap();
        let listed = c.list_blobs().fetch_all().await.unwrap();
        let mut stored: HashMap<String, Vec<u8>> = HashMap::new();
        for p in &listed {
            let body = c.blob(p.name()).unwrap().download().bytes().await.unwrap();
            assert_eq!(body.len() as u64, p.size(), "{}", p.name());
            stored.insert(p.name().to_owned(), body.to_vec());
        }
        let (mut extra_s, mut extra_b) = (0, 0);
        for (name, body) in &stored {
            match name.as_bytes()[0] {
                b's' => {
                    assert_eq!(body, &blob_body(name, false), "round {round}: {name} torn");
                    extra_s += usize::from(!acked_s.contains(name));
                }
                b'b' => {
                    assert_eq!(body, &blob_body(name, true), "round {round}: {name} torn");
                    extra_b += usize::from(!acked_b.contains(name));
                }
                _ => assert_eq!(name, "rewritten", "round {round}"),
            }
        }
        for name in acked_s.iter().chain(&acked_b) {
            assert!(
                stored.contains_key(name),
                "round {round}: acknowledged blob {name} is lost"
            );
        }
        // At most one upload in flight per child: committed, perhaps, but not
        // acknowledged. A big blob whose block list was not committed is absent.
        assert!(extra_s + extra_b <= round as usize + 1, "round {round}");
        match (&last_rewrite, stored.get("rewritten")) {
            (None, None) => {}
            (acked, Some(body)) => {
                let props = c.blob("rewritten").unwrap().properties().await.unwrap();
                let variant = props
                    .metadata()
                    .iter()
                    .find(|(k, _)| k == "variant")
                    .map(|(_, v)| v.clone())
                    .expect("the rewritten blob carries its variant");
                assert_eq!(
                    body,
                    &blob_body(&format!("rewritten-{variant}"), true),
                    "round {round}: the rewritten blob is whole"
                );
                if let Some(acked) = acked {
                    assert!(
                        variant_order(&variant) >= variant_order(acked),
                        "round {round}: rewritten at {variant}, older than acknowledged {acked}"
                    );
                }
            }
            (Some(acked), None) => panic!("round {round}: the rewritten blob ({acked}) is lost"),
        }
        eprintln!(
            "round {round}: killed after {delay:?}; {} messages, {} small and {} big blobs acknowledged so far; rewritten at {:?}",
            acked_q.len(),
            acked_s.len(),
            acked_b.len(),
            last_rewrite
        );
        drop((q, queues, c, blobs));
    }
    assert!(
        !acked_q.is_empty() && !acked_s.is_empty() && !acked_b.is_empty(),
        "seed {seed}"
    );
}

/// One round trip through each service of a `Storage`, on names unique to
/// the call; returns what was read back.
async fn storage_round_trip(storage: &tablekit::Storage) -> (usize, String, Vec<u8>) {
    let name = crate::common::unique_name("store");
    let t = storage.table::<DynamicEntity>(&name).unwrap();
    t.create_table().await.unwrap();
    t.insert(&DynamicEntity::new("p", "r").with("N", 1))
        .await
        .unwrap();
    let q = storage.queue(&name).unwrap();
    q.create_queue().await.unwrap();
    q.send("hello").await.unwrap();
    let c = storage.container(&name).unwrap();
    c.create_container().await.unwrap();
    c.blob("b").unwrap().upload(b"body".to_vec()).await.unwrap();

    let rows = all(storage.tables().unwrap(), &name).await.len();
    let text = q.receive().await.unwrap()[0].text().unwrap().to_owned();
    let body = c.blob("b").unwrap().download().bytes().await.unwrap();
    (rows, text, body.to_vec())
}

/// The account-level form: `Storage` hands out the three services over one
/// embedded file (or one account over HTTP, the same code), by path or by
/// connection string.
#[tokio::test]
async fn storage_gives_the_three_services_of_one_account_on_a_file_in_memory_and_over_http() {
    let want = (1, "hello".to_owned(), b"body".to_vec());
    let file = TempStore::new();
    let storage = tablekit::Storage::embedded_at(file.path()).unwrap();
    assert!(storage.tables().unwrap().is_embedded());
    assert_eq!(storage_round_trip(&storage).await, want);
    // The file is in use by all three services while the storage lives.
    for err in [
        tablekit::Storage::embedded_at(file.path()).unwrap_err(),
        tablekit::QueueServiceClient::embedded_at(file.path()).unwrap_err(),
        tablekit::BlobServiceClient::embedded_at(file.path()).unwrap_err(),
    ] {
        assert!(
            err.to_string().contains("in use by another open store"),
            "{err}"
        );
    }
    drop(storage);
    let conn = format!("UseEmbeddedStorage=true;Path={}", file.path().display());
    let storage = tablekit::Storage::from_connection_string(&conn).unwrap();
    assert_eq!(
        storage
            .tables()
            .unwrap()
            .list_tables()
            .fetch_all()
            .await
            .unwrap()
            .len(),
        1
    );
    drop(storage);

    assert_eq!(
        storage_round_trip(&tablekit::Storage::embedded()).await,
        want
    );
    if let Some(conn) = crate::common::connection_string() {
        let storage = tablekit::Storage::from_connection_string(&conn).unwrap();
        assert!(!storage.tables().unwrap().is_embedded());
        assert_eq!(storage_round_trip(&storage).await, want);
    }
}

/// A `Storage::embedded_at` that fails on one service releases the services
/// it had opened: nothing of the file stays claimed.
#[tokio::test]
async fn a_storage_open_that_fails_claims_nothing() {
    let file = TempStore::new();
    let queues = tablekit::QueueServiceClient::embedded_at(file.path()).unwrap();
    let err = tablekit::Storage::embedded_at(file.path()).unwrap_err();
    assert!(
        err.to_string().contains("in use by another open store"),
        "{err}"
    );
    // The tables were opened before the queues were refused, and released.
    let tables = file.open();
    drop((tables, queues));
    tablekit::Storage::embedded_at(file.path()).unwrap();
}

/// The embedded stores answer in their own name: the store (and its file),
/// never "the service answered ... (request id ...)".
#[tokio::test]
async fn errors_of_the_embedded_stores_name_the_store_and_its_file() {
    let file = TempStore::new();
    let path = file.path().display().to_string();
    for (svc, named) in [
        (file.open(), format!("the embedded store file {path}")),
        (
            TableServiceClient::embedded(),
            "the embedded store (in memory)".to_owned(),
        ),
    ] {
        let missing = svc.table::<DynamicEntity>("Missing").unwrap();
        let t = svc.table::<DynamicEntity>("Present").unwrap();
        t.create_table().await.unwrap();
        t.insert(&DynamicEntity::new("p", "r")).await.unwrap();
        let errors = [
            missing
                .insert(&DynamicEntity::new("p", "r"))
                .await
                .unwrap_err(),
            t.insert(&DynamicEntity::new("p", "r")).await.unwrap_err(),
            t.delete(("p", "absent"), IfMatch::Any).await.unwrap_err(),
            svc.create_table("Present").await.unwrap_err(),
        ];
        for err in errors {
            assert!(err.status().is_some(), "{err:?}");
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("{named} answered ")),
                "{message}"
            );
            assert!(!message.contains("service"), "{message}");
            assert!(!message.contains("request id"), "{message}");
        }
    }
    // Queues and blobs in the same file answer in its name too.
    let queues = tablekit::QueueServiceClient::embedded_at(file.path()).unwrap();
    let blobs = tablekit::BlobServiceClient::embedded_at(file.path()).unwrap();
    let errors = [
        queues
            .queue("missing")
            .unwrap()
            .send("x")
            .await
            .unwrap_err(),
        blobs
            .container("missing")
            .unwrap()
            .blob("b")
            .unwrap()
            .properties()
            .await
            .unwrap_err(),
    ];
    for err in errors {
        assert!(err.status().is_some(), "{err:?}");
        let message = err.to_string();
        let named = format!("the embedded store file {path} answered ");
        assert!(message.starts_with(&named), "{message}");
        assert!(!message.contains("request id"), "{message}");
    }
}

/// `Storage::embedded_at_with` opens the file with its options, the three
/// services share it, and a second open with options while it is open is
/// refused (the options are the first open's).
#[tokio::test]
async fn a_file_opened_with_options_is_shared_and_its_options_are_the_first_opens() {
    use tablekit::{options::FileOptions, Storage};
    let file = TempStore::new();
    let options = FileOptions::new().cache_bytes(1 << 20);
    let account = Storage::embedded_at_with(file.path(), options.clone()).unwrap();
    let t = account.table::<DynamicEntity>("Small").unwrap();
    t.create_table().await.unwrap();
    for i in 0..2_000 {
        t.insert(
            &DynamicEntity::new(format!("p{}", i % 10), format!("r{i:05}"))
                .with("S", "x".repeat(300)),
        )
        .await
        .unwrap();
    }
    let q = account.queue("jobs").unwrap();
    q.create_queue().await.unwrap();
    let err = Storage::embedded_at_with(file.path(), options.clone()).unwrap_err();
    assert!(
        err.to_string().contains("open in this process already"),
        "{err}"
    );
    // Everything reads back through the small cache, in order.
    let all = all(account.tables().unwrap(), "Small").await;
    assert_eq!(all.len(), 2_000);
    let keys: Vec<_> = all
        .iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    drop((t, q, account));
    let again = Storage::embedded_at_with(file.path(), options).unwrap();
    assert_eq!(all_len(&again).await, 2_000);
}

async fn all_len(account: &tablekit::Storage) -> usize {
    all(account.tables().unwrap(), "Small").await.len()
}

/// An entity that counts its decodes (see
/// `a_stream_of_a_store_file_decodes_each_entity_as_it_is_read`).
struct Counted {
    pk: String,
    rk: String,
    n: i64,
}

static DECODED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl tablekit::TableEntity for Counted {
    fn partition_key(&self) -> std::borrow::Cow<'_, str> {
        self.pk.as_str().into()
    }
    fn row_key(&self) -> std::borrow::Cow<'_, str> {
        self.rk.as_str().into()
    }
    fn write_properties<W: tablekit::entity::PropertyWriter + ?Sized>(
        &self,
        out: &mut W,
    ) -> tablekit::Result<()> {
        out.int64("N", self.n)
    }
    fn decode(e: &tablekit::entity::RawEntity<'_>) -> tablekit::Result<Self> {
        DECODED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Counted {
            pk: e.partition_key().to_owned(),
            rk: e.row_key().to_owned(),
            n: e.get("N").map_or(Ok(0), |v| v.to_i64())?,
        })
    }
}

#[tokio::test]
async fn a_stream_of_a_store_file_decodes_each_entity_as_it_is_read() {
    use std::sync::atomic::Ordering;
    let file = TempStore::new();
    let t = file.open().table::<Counted>("Lazy").unwrap();
    t.create_table().await.unwrap();
    for chunk in (0..250).collect::<Vec<i64>>().chunks(100) {
        let mut tx = t.transaction();
        for &n in chunk {
            tx.insert(&Counted {
                pk: "p".into(),
                rk: format!("{n:04}"),
                n,
            })
            .unwrap();
        }
        tx.send().await.unwrap();
    }
    // A page of 100 read by a stream: decoded one entity at a time, so a
    // page's entities are not all alive at once.
    let mut s = t.query().page_size(100).stream();
    let before = DECODED.load(Ordering::SeqCst);
    let first = s.try_next().await.unwrap().unwrap();
    assert_eq!((first.rk.as_str(), first.n), ("0000", 0));
    assert_eq!(DECODED.load(Ordering::SeqCst) - before, 1, "one decoded");
    let mut rest = Vec::new();
    while let Some(e) = s.try_next().await.unwrap() {
        rest.push(e.n);
    }
    assert_eq!(rest, (1..250).collect::<Vec<_>>());
    // `take` across pages, and the pages themselves, are unchanged.
    let took: Vec<i64> = t
        .query()
        .page_size(100)
        .take(150)
        .stream()
        .map_ok(|e| e.n)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(took, (0..150).collect::<Vec<_>>());
    let first_page = t.query().page_size(100).next_page().await.unwrap();
    assert_eq!(first_page.items.len(), 100);
}
