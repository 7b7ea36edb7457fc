//! A full disk, simulated through redb's storage backend API: every write
//! refused with ENOSPC once the disk "fills". (The queue and blob cases
//! are beside their stores, in `queues.rs` and `blobs.rs`.)

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use std::ops::Bound;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use super::*;
use crate::backend::embedded::{EmbeddedBackend, Store};
use crate::backend::{BatchKind, BatchOp, EntityBody, Operation, Response};
use crate::entity::EntityKey;

/// A path in the temporary directory, removed (with its seal) when dropped.
pub(crate) struct TempFile(pub(crate) PathBuf);

impl TempFile {
    pub(crate) fn new() -> Self {
        TempFile(std::env::temp_dir().join(format!(
            "tablekit-durable-{}.redb",
            uuid::Uuid::new_v4().simple()
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        super::seal::remove(&self.0);
    }
}

#[derive(Debug)]
struct FullDisk {
    file: FileBackend,
    full: Arc<AtomicBool>,
    /// While closed, every `fsync` waits (a slow disk, for group commit).
    gate: Arc<Gate>,
}

/// A gate `fsync`s wait at while it is closed.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    closed: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    /// How many `fsync`s wait at the gate now.
    waiting: std::sync::atomic::AtomicUsize,
}

impl Gate {
    pub(crate) fn close(&self) {
        *self.closed.lock().unwrap() = true;
    }

    pub(crate) fn open(&self) {
        *self.closed.lock().unwrap() = false;
        self.opened.notify_all();
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    fn pass(&self) {
        let mut closed = self.closed.lock().unwrap();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Opens its gate when dropped: a test that fails with the gate closed
/// ends (the store's close waits for the commit held at the gate).
pub(crate) struct OpenAtEnd(pub(crate) Arc<Gate>);

impl Drop for OpenAtEnd {
    fn drop(&mut self) {
        self.0.open();
    }
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

impl StorageBackend for FullDisk {
    fn len(&self) -> std::result::Result<u64, io::Error> {
        self.file.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::result::Result<(), io::Error> {
        self.file.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::result::Result<(), io::Error> {
        if self.full.load(Ordering::SeqCst) && len > self.file.len()? {
            return Err(enospc());
        }
        self.file.set_len(len)
    }
    fn sync_data(&self) -> std::result::Result<(), io::Error> {
        self.gate.pass();
        self.file.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::result::Result<(), io::Error> {
        if self.full.load(Ordering::SeqCst) {
            return Err(enospc());
        }
        self.file.write(offset, data)
    }
    fn close(&self) -> std::result::Result<(), io::Error> {
        self.file.close()
    }
    // The file's locks, as redb's own file backend takes them.
    fn try_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }
    fn lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.file.lock_range(start, end)
    }
    fn lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }
    fn unlock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }
    fn query_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

/// The store file at `path` on a disk that fills when the flag is set:
/// the claim of `service` in it, and the flag.
pub(crate) fn claim_on_full_disk(path: &Path, service: Service) -> (Claim, Arc<AtomicBool>) {
    let (claim, full, _) = claim_on_test_disk(path, service, Durability::Immediate);
    (claim, full)
}

/// The store file at `path` on a disk that fills when the flag is set and
/// whose `fsync`s wait at the gate while it is closed.
pub(crate) fn claim_on_test_disk(
    path: &Path,
    service: Service,
    durability: Durability,
) -> (Claim, Arc<AtomicBool>, Arc<Gate>) {
    let full = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(Gate::default());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    let backend = FullDisk {
        file: FileBackend::new(file).unwrap(),
        full: full.clone(),
        gate: gate.clone(),
    };
    let db = Database::builder().create_with_backend(backend).unwrap();
    (
        Claim::of_db(db, path, service, durability).unwrap(),
        full,
        gate,
    )
}

/// A stored entity of `rk` in partition `p`.
fn entity(rk: &str, ticks: i64) -> StoredEntity {
    let mut e = DynamicEntity::new("p", rk);
    let v = Version::at(ticks);
    e.timestamp = Some(v.timestamp);
    e.etag = Some(v.etag);
    StoredEntity {
        entity: e,
        timestamp_text: v.text,
    }
}

#[test]
fn periodic_durability_acknowledges_before_the_sync_and_syncs_in_the_background() {
    let path = TempFile::new();
    // Long enough for the five writes to fall in the first interval.
    let every = std::time::Duration::from_secs(1);
    let (claim, _, gate) =
        claim_on_test_disk(&path.0, Service::Tables, Durability::Periodic(every));
    let (durable, _) = Durable::from_claim(claim).unwrap();
    let _open_at_end = OpenAtEnd(gate.clone());
    let id = durable.create_table("t1x", "T1x").unwrap();
    gate.close();
    // Acknowledged with every fsync held at the gate: not synced.
    for i in 0..5 {
        let rk = format!("r{i}");
        let e = entity(&rk, 1 + i);
        let put = Put {
            row_key: &rk,
            entity: Some(&e),
        };
        durable.write_now("t1x", id, "p", &[put]).unwrap();
    }
    // The background sync comes within the interval, and waits at the gate.
    for _ in 0..10_000 {
        if gate.waiting() > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(
        gate.waiting() > 0,
        "a background sync of the unsynced commits"
    );
    gate.open();
    drop(durable);
    // The background sync may hold the file a moment longer.
    let mut reopened = Durable::open(&path.0);
    for _ in 0..1_000 {
        if reopened.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        reopened = Durable::open(&path.0);
    }
    let (durable, loaded) = reopened.unwrap();
    let rows: Vec<_> = entities(&durable, &loaded)
        .into_iter()
        .map(|(_, e)| e.entity.row_key)
        .collect();
    assert_eq!(
        rows,
        ["r0", "r1", "r2", "r3", "r4"],
        "a clean close keeps all"
    );
}

#[test]
fn writes_arriving_during_a_commit_share_the_next_and_wait_for_its_fsync() {
    let path = TempFile::new();
    let (claim, _, gate) = claim_on_test_disk(&path.0, Service::Tables, Durability::Immediate);
    let (durable, _) = Durable::from_claim(claim).unwrap();
    let durable = Arc::new(durable);
    let _open_at_end = OpenAtEnd(gate.clone());
    let id = durable.create_table("t1x", "T1x").unwrap();
    let before = durable.commits();
    // Each into a partition of its own: writes of one partition wait for
    // each other's commits (its lock is held to the end of the commit).
    let write = |rk: String, ticks: i64| {
        let durable = durable.clone();
        std::thread::spawn(move || {
            let e = entity(&rk, ticks);
            let put = Put {
                row_key: &rk,
                entity: Some(&e),
            };
            durable.write_now("t1x", id, &format!("p{rk}"), &[put])
        })
    };
    let wait_until = |what: &str, ok: &dyn Fn() -> bool| {
        for _ in 0..10_000 {
            if ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("never: {what}");
    };
    gate.close();
    let first = write("r00".into(), 1);
    wait_until("the first commit waits for its fsync", &|| {
        gate.waiting() > 0
    });
    let rest: Vec<_> = (1..=10).map(|i| write(format!("r{i:02}"), 1 + i)).collect();
    wait_until("ten writes queue behind it", &|| durable.queued() == 10);
    assert!(!first.is_finished(), "acknowledged before its fsync");
    assert!(
        rest.iter().all(|w| !w.is_finished()),
        "acknowledged before any fsync"
    );
    gate.open();
    first.join().unwrap().unwrap();
    for w in rest {
        w.join().unwrap().unwrap();
    }
    assert_eq!(
        durable.commits() - before,
        2,
        "the ten waiting writes share one commit"
    );
    let mut rows = Vec::new();
    durable
        .snapshot(id, "T")
        .unwrap()
        .scan(&[], None, |k, v| {
            rows.push(decode_row(k, v)?.entity.row_key);
            Ok(true)
        })
        .unwrap();
    let expected: Vec<String> = (0..=10).map(|i| format!("r{i:02}")).collect();
    assert_eq!(rows, expected);
}

/// The refusal of a write the file could not take: 500, saying nothing
/// was applied.
#[cfg(any(feature = "queue", feature = "blob"))]
#[track_caller]
pub(crate) fn assert_not_applied(err: &Error) {
    assert_eq!(err.status(), Some(500), "{err:?}");
    assert_eq!(err.code(), Some(&ErrorCode::InternalError), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("was not applied"), "{message}");
}

/// The refusal of the first write on a full disk: as
/// [`assert_not_applied`], and naming the cause (later writes name redb's
/// "previous I/O error" until the file is reopened).
#[cfg(any(feature = "queue", feature = "blob"))]
#[track_caller]
pub(crate) fn assert_refused_for_space(err: &Error) {
    assert_not_applied(err);
    let message = err.to_string();
    assert!(message.contains("os error 28"), "{message}");
}

fn insert(b: &EmbeddedBackend, rk: &str) -> Result<Response> {
    b.run_now(Operation::Insert {
        table: "Notes",
        body: EntityBody::Json(Bytes::from(format!(
            "{{\"PartitionKey\":\"p\",\"RowKey\":\"{rk}\",\"N\":1}}"
        ))),
    })
}

fn rows(b: &EmbeddedBackend) -> Vec<String> {
    let t = b.store.table("Notes").unwrap();
    let (page, _) = t.query(&b.store, None, None, None).unwrap();
    let crate::backend::embedded::store::Page::Records(rows) = page else {
        panic!("a file's page is its records")
    };
    rows.iter()
        .map(|(k, _)| {
            crate::backend::embedded::key::decode_entity_key(k)
                .unwrap()
                .1
        })
        .collect()
}

#[test]
fn a_full_disk_refuses_the_write_clearly_and_loses_nothing_acknowledged() {
    let path = TempFile::new();
    let (claim, full) = claim_on_full_disk(&path.0, Service::Tables);
    let (durable, loaded) = Durable::from_claim(claim).unwrap();
    let b = EmbeddedBackend {
        store: Arc::new(Store::with_file(durable, loaded)),
        #[cfg(feature = "admin")]
        admin: Arc::default(),
    };
    b.run_now(Operation::CreateTable { table: "Notes" })
        .unwrap();
    insert(&b, "kept").unwrap();

    full.store(true, Ordering::SeqCst);
    let err = insert(&b, "lost").unwrap_err();
    assert_eq!(err.status(), Some(500), "{err:?}");
    assert_eq!(err.code(), Some(&ErrorCode::InternalError), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("the write was not applied"), "{message}");
    assert!(message.contains("os error 28"), "{message}");
    let op = |rk: &str| BatchOp {
        kind: BatchKind::Insert,
        key: EntityKey::new("p", rk),
        body: Some(format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"{rk}\"}}").into()),
        bag: None,
        bag_json_len: 0,
    };
    let err = b
        .run_now(Operation::Transaction {
            table: "Notes",
            ops: vec![op("tx1"), op("tx2")],
        })
        .unwrap_err();
    assert_eq!(err.status(), Some(500), "{err:?}");
    let err = b
        .run_now(Operation::CreateTable { table: "Other" })
        .unwrap_err();
    assert_eq!(err.status(), Some(500), "{err:?}");
    assert_eq!(rows(&b), ["kept"], "nothing refused is visible");
    assert!(b.store.table("Other").is_err());

    // Space again: redb refuses further writes after a failed one (its
    // state on disk is uncertain until reopened), and says so.
    full.store(false, Ordering::SeqCst);
    let after = insert(&b, "later").unwrap_err();
    assert_eq!(after.status(), Some(500), "{after:?}");
    drop(b);

    let (durable, loaded) = Durable::open(&path.0).unwrap();
    let names: Vec<_> = loaded.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["Notes"]);
    let rows: Vec<_> = entities(&durable, &loaded)
        .into_iter()
        .map(|(_, e)| e.entity.row_key)
        .collect();
    assert_eq!(
        rows,
        ["kept"],
        "every acknowledged write, and nothing refused"
    );
}

/// Every entity of every table of a store file, in key order.
pub(crate) fn entities(durable: &Durable, loaded: &Loaded) -> Vec<(String, StoredEntity)> {
    let mut out = Vec::new();
    for t in &loaded.tables {
        durable
            .snapshot(t.id, &t.name)
            .unwrap()
            .scan(&[], None, |k, v| {
                out.push((t.name.clone(), decode_row(k, v)?));
                Ok(true)
            })
            .unwrap();
    }
    out
}
