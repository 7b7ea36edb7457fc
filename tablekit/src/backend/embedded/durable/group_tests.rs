//! Group commit through the store's committer thread: concurrent writers on a
//! current-thread runtime share commits, and a write's partition stays locked
//! until its commit has ended even if its writer stops waiting.

use std::future::Future as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;

use super::full_disk::{claim_on_test_disk, Gate, OpenAtEnd, TempFile};
use super::*;
use crate::backend::embedded::{EmbeddedBackend, Store};
use crate::backend::{Backend as _, EntityBody, Operation, Response};
use crate::entity::EntityKey;
use crate::error::ErrorCode;

/// A store on a test disk (its `fsync`s wait while the gate is closed) with
/// the table `Notes`. (Its gate is opened at the end of the test, through
/// [`OpenAtEnd`], before the store's drop waits for the commit held there.)
fn store_on_test_disk(path: &TempFile) -> (EmbeddedBackend, Arc<Gate>) {
    let (claim, _, gate) = claim_on_test_disk(&path.0, Service::Tables, Durability::Immediate);
    let (durable, loaded) = Durable::from_claim(claim).unwrap();
    let b = EmbeddedBackend {
        store: Arc::new(Store::with_file(durable, loaded)),
        #[cfg(feature = "admin")]
        admin: Arc::default(),
    };
    b.run_now(Operation::CreateTable { table: "Notes" })
        .unwrap();
    (b, gate)
}

fn file(b: &EmbeddedBackend) -> &Durable {
    b.store.file().expect("a store with a file")
}

fn insert(pk: &str, rk: &str, n: i32) -> Operation<'static> {
    Operation::Insert {
        table: "Notes",
        body: EntityBody::Json(Bytes::from(format!(
            "{{\"PartitionKey\":\"{pk}\",\"RowKey\":\"{rk}\",\"N\":{n}}}"
        ))),
    }
}

/// Waits (at most 10 s) until `ok`; whether it came.
fn wait_until(ok: impl Fn() -> bool) -> bool {
    for _ in 0..10_000 {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn concurrent_writers_on_a_current_thread_runtime_share_commits() {
    const WRITERS: u64 = 16;
    let path = TempFile::new();
    let (b, gate) = store_on_test_disk(&path);
    let _open_at_end = OpenAtEnd(gate.clone());
    let before = (file(&b).commits(), file(&b).enqueued());
    gate.close();
    // Opens the gate once a commit waits at it and every write is queued or
    // in that commit: writers that blocked the runtime's one thread in the
    // first commit would never queue, and the gate opens after 10 s instead
    // (then each write commits alone, and the count below fails).
    // Writers answered so far: none before an fsync has passed the gate.
    let answered = Arc::new(AtomicU64::new(0));
    let watchdog = {
        let (b, gate, answered) = (b.clone(), gate.clone(), answered.clone());
        std::thread::spawn(move || {
            let all_in =
                wait_until(|| gate.waiting() > 0 && file(&b).enqueued() - before.1 == WRITERS);
            let early = answered.load(Ordering::SeqCst);
            gate.open();
            (all_in, early)
        })
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (b, answered) = (b.clone(), answered.clone());
                tokio::spawn(async move {
                    let r = b.execute(insert(&format!("w{w}"), "r", 1)).await;
                    answered.fetch_add(1, Ordering::SeqCst);
                    r
                })
            })
            .collect();
        for w in writers {
            assert!(matches!(w.await.unwrap().unwrap(), Response::Written(_)));
        }
    });
    let (all_in, early) = watchdog.join().unwrap();
    assert_eq!(
        early, 0,
        "a write was acknowledged before its commit's fsync"
    );
    let commits = file(&b).commits() - before.0;
    assert!(
        all_in && commits < WRITERS,
        "{WRITERS} writers made {commits} commits (all queued while the first committed: {all_in})"
    );
    // The first commit held one write or more; the rest waited for one more.
    assert!(commits <= 2, "{commits}");
    let snapshot = file(&b).snapshot(1, "T").unwrap();
    for w in 0..WRITERS {
        assert!(snapshot.get(&format!("w{w}"), "r").unwrap().is_some());
    }
}

#[test]
fn a_write_whose_caller_stops_waiting_keeps_its_partition_locked_until_its_commit_ends() {
    let path = TempFile::new();
    let (b, gate) = store_on_test_disk(&path);
    let _open_at_end = OpenAtEnd(gate.clone());
    let id = 1;
    gate.close();
    // The write runs up to its wait for the commit, which waits at the gate.
    let mut first = Box::pin(b.execute(insert("p", "r1", 1)));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert!(
        wait_until(|| gate.waiting() > 0),
        "the commit waits for its fsync"
    );
    // Its caller stops waiting: the write is in the commit all the same, and
    // the partition stays locked, so no later write decides on a state
    // without it.
    drop(first);
    let held = || {
        let file = file(&b);
        file.lock_partition(id, "p").now_or_never().is_none()
    };
    assert!(held(), "the partition is locked while its write commits");
    assert!(
        file(&b).lock_partition(id, "q").now_or_never().is_some(),
        "another partition is not"
    );
    gate.open();
    assert!(wait_until(|| !held()), "released once the commit has ended");
    // The next write of the partition sees the first one's result.
    let err = b.run_now(insert("p", "r1", 2)).unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::EntityAlreadyExists), "{err:?}");
    let kept = b
        .store
        .table("Notes")
        .unwrap()
        .get(&b.store, &EntityKey::new("p", "r1"))
        .unwrap()
        .expect("the first write is committed");
    assert_eq!(kept.entity.get("N"), Some(&EdmValue::Int32(1)));
}

#[test]
fn writes_of_one_partition_are_committed_in_the_order_they_were_decided() {
    let path = TempFile::new();
    let (b, gate) = store_on_test_disk(&path);
    let _open_at_end = OpenAtEnd(gate.clone());
    gate.close();
    // An insert in a commit held at the gate, then a merge of the same
    // entity from another thread: it waits for the partition, so it merges
    // into the inserted entity rather than failing to find it.
    let first = {
        let b = b.clone();
        std::thread::spawn(move || b.run_now(insert("p", "r", 1)))
    };
    assert!(wait_until(|| gate.waiting() > 0));
    let merge = {
        let b = b.clone();
        std::thread::spawn(move || {
            let key = EntityKey::new("p", "r");
            b.run_now(Operation::Write {
                table: "Notes",
                key: &key,
                body: EntityBody::Json(Bytes::from_static(
                    b"{\"PartitionKey\":\"p\",\"RowKey\":\"r\",\"M\":2}",
                )),
                mode: crate::UpdateMode::Merge,
                if_match: Some(&crate::IfMatch::Any),
            })
        })
    };
    // The merge waits for the partition, not in the queue.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(file(&b).queued(), 0, "the merge has not decided yet");
    assert!(!merge.is_finished());
    gate.open();
    first.join().unwrap().unwrap();
    merge.join().unwrap().unwrap();
    let e = b
        .store
        .table("Notes")
        .unwrap()
        .get(&b.store, &EntityKey::new("p", "r"))
        .unwrap()
        .unwrap();
    assert_eq!(e.entity.get("N"), Some(&EdmValue::Int32(1)));
    assert_eq!(e.entity.get("M"), Some(&EdmValue::Int32(2)));
}
