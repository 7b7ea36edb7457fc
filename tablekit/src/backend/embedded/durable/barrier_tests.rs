//! The deferred `fsync` of the open (`barrier.rs`): the order of the writes
//! and syncs that reach the disk, and crashes simulated at every point of a
//! session.

use std::io;
use std::sync::Mutex as StdMutex;

use redb::StorageBackend;

use super::full_disk::entities;
use super::*;

/// What reached the simulated disk, or what redb asked of the backend.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// redb asked for a sync (above the lazy barrier).
    AskedSync,
    /// A write or length change reached the disk.
    Write(u64, Vec<u8>),
    SetLen(u64),
    /// A sync reached the disk.
    Sync,
    /// The write of row `i` was acknowledged.
    Ack(usize),
}

/// A disk in memory that logs every change and sync reaching it, so a crash
/// at any point can be replayed: what was synced, plus any of the changes
/// since the last sync.
#[derive(Debug, Default)]
struct Disk {
    bytes: Vec<u8>,
    log: Vec<Event>,
}

#[derive(Debug, Clone, Default)]
struct SimDisk(Arc<StdMutex<Disk>>);

impl SimDisk {
    fn with(bytes: Vec<u8>) -> Self {
        SimDisk(Arc::new(StdMutex::new(Disk {
            bytes,
            log: Vec::new(),
        })))
    }

    fn log(&self, e: Event) {
        self.0.lock().unwrap().log.push(e);
    }

    fn take_log(&self) -> Vec<Event> {
        std::mem::take(&mut self.0.lock().unwrap().log)
    }

    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().bytes.clone()
    }
}

impl StorageBackend for SimDisk {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.lock().unwrap().bytes.len() as u64)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let d = self.0.lock().unwrap();
        let end = offset as usize + out.len();
        if end > d.bytes.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        out.copy_from_slice(&d.bytes[offset as usize..end]);
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        d.bytes.resize(len as usize, 0);
        d.log.push(Event::SetLen(len));
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.log(Event::Sync);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        let end = offset as usize + data.len();
        if end > d.bytes.len() {
            d.bytes.resize(end, 0);
        }
        d.bytes[offset as usize..end].copy_from_slice(data);
        d.log.push(Event::Write(offset, data.to_vec()));
        Ok(())
    }
}

/// redb's side of the lazy barrier: logs each sync redb asks for.
#[derive(Debug)]
struct Asking<B>(B, SimDisk);

impl<B: StorageBackend> StorageBackend for Asking<B> {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.1.log(Event::AskedSync);
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> io::Result<()> {
        self.0.close()
    }
}

const PATH: &str = "simulated.redb";

/// A store over `disk` as `open_db` opens one (the lazy barrier included),
/// with redb's syncs logged before the barrier.
fn open_sim(disk: &SimDisk, check_whole: bool) -> Durable {
    let (lazy, opening) = barrier::LazySync::new(disk.clone());
    let db = Database::builder()
        .set_cache_size(1 << 20)
        .set_check_integrity_on_open(check_whole)
        .create_with_backend(Asking(lazy, disk.clone()))
        .unwrap();
    drop(opening);
    let claim = Claim::of_db(db, Path::new(PATH), Service::Tables, Durability::Immediate).unwrap();
    Durable::from_claim(claim).unwrap().0
}

/// Writes row `i` of partition `p` of table `id` and logs its acknowledgement.
fn put_acked(d: &Durable, disk: &SimDisk, id: u64, i: usize) {
    let rk = format!("r{i:04}");
    let mut e = DynamicEntity::new("p", rk.as_str()).with("N", i as i64);
    let v = Version::at(1_000 + i as i64);
    e.timestamp = Some(v.timestamp);
    e.etag = Some(v.etag);
    let stored = StoredEntity {
        entity: e,
        timestamp_text: v.text,
    };
    let put = Put {
        row_key: &rk,
        entity: Some(&stored),
    };
    d.write_now("t", id, "p", &[put]).unwrap();
    disk.log(Event::Ack(i));
}

/// A store of table `T` (id returned) with rows 0..`n` written and closed.
fn closed_store(disk: &SimDisk, n: usize) -> u64 {
    let d = open_sim(disk, false);
    let id = d.create_table("t", "T").unwrap();
    for i in 0..n {
        put_acked(&d, disk, id, i);
    }
    drop(d);
    id
}

fn is_change(e: &Event) -> bool {
    matches!(e, Event::Write(..) | Event::SetLen(_))
}

/// Checks the lazy barrier's promise on a log: after every sync redb asked
/// for, a sync reaches the disk before any later change does; and every
/// acknowledgement comes after a sync that follows the last write before it.
#[track_caller]
fn assert_ordered(log: &[Event]) {
    for (i, e) in log.iter().enumerate() {
        if *e == Event::AskedSync {
            let next_change = log[i..].iter().position(is_change);
            let next_sync = log[i..].iter().position(|e| *e == Event::Sync);
            if let Some(c) = next_change {
                assert!(
                    next_sync.is_some_and(|s| s < c),
                    "a change at {} before the sync asked for at {i}",
                    i + c
                );
            }
        }
        if let Event::Ack(row) = e {
            // A write, not a length change: redb cuts the file's free tail
            // after a commit's sync (a crash before the cut reaches the disk
            // leaves a longer file, which opens; the crash test covers it).
            let last_change = log[..i].iter().rposition(|e| matches!(e, Event::Write(..)));
            let last_sync = log[..i].iter().rposition(|e| *e == Event::Sync);
            assert!(
                last_change.is_none_or(|c| last_sync.is_some_and(|s| s > c)),
                "row {row} acknowledged before its sync: {:?}",
                log[..i]
                    .iter()
                    .map(|e| match e {
                        Event::Write(o, d) => format!("W{o}+{}", d.len()),
                        e => format!("{e:?}"),
                    })
                    .collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn the_open_of_a_store_file_waits_for_no_fsync_and_the_first_write_pays_it() {
    let disk = SimDisk::default();
    let id = closed_store(&disk, 3);
    assert_ordered(&disk.take_log());

    // A reopen: redb asks for its sync, none reaches the disk.
    let d = open_sim(&disk, false);
    let open_log = disk.take_log();
    assert!(open_log.contains(&Event::AskedSync), "{open_log:?}");
    assert!(!open_log.contains(&Event::Sync), "{open_log:?}");
    // Reads change nothing and sync nothing.
    let snap = d.snapshot(id, "T").unwrap();
    assert!(snap.get("p", "r0001").unwrap().is_some());
    drop(snap);
    assert!(disk.take_log().iter().all(|e| !matches!(e, Event::Sync)));

    // The first write performs the deferred sync before its first change.
    put_acked(&d, &disk, id, 3);
    let write_log = disk.take_log();
    let first_change = write_log.iter().position(is_change).unwrap();
    assert!(
        write_log[..first_change].contains(&Event::Sync),
        "{write_log:?}"
    );
    let mut whole = open_log;
    whole.extend(write_log);
    assert_ordered(&whole);
    put_acked(&d, &disk, id, 4);
    drop(d);
    assert_ordered(&disk.take_log());
}

#[test]
fn a_session_that_only_reads_syncs_only_at_its_close() {
    let disk = SimDisk::default();
    let id = closed_store(&disk, 2);
    disk.take_log();
    let d = open_sim(&disk, false);
    assert!(d
        .snapshot(id, "T")
        .unwrap()
        .get("p", "r0000")
        .unwrap()
        .is_some());
    assert!(!disk.take_log().contains(&Event::Sync));
    drop(d);
    // redb's close flushes and writes its header; the deferred sync is
    // covered by (or performed before) those.
    let close_log = disk.take_log();
    assert_ordered(&close_log);
    assert!(close_log.contains(&Event::Sync));
}

/// The disk images a crash after the first `k` events of `log` can leave,
/// starting from `base` (synced): the synced state, with none, all, or some
/// of the changes since the last sync applied.
fn crash_images(base: &[u8], log: &[Event], k: usize, seed: &mut u64) -> Vec<Vec<u8>> {
    let mut synced = base.to_vec();
    let mut unsynced: Vec<&Event> = Vec::new();
    let apply = |bytes: &mut Vec<u8>, e: &Event| match e {
        Event::Write(offset, data) => {
            let end = *offset as usize + data.len();
            if end > bytes.len() {
                bytes.resize(end, 0);
            }
            bytes[*offset as usize..end].copy_from_slice(data);
        }
        Event::SetLen(len) => bytes.resize(*len as usize, 0),
        _ => {}
    };
    for e in &log[..k] {
        match e {
            Event::Sync => {
                for u in unsynced.drain(..) {
                    apply(&mut synced, u);
                }
            }
            e if is_change(e) => unsynced.push(e),
            _ => {}
        }
    }
    let mut images = vec![synced.clone()];
    if !unsynced.is_empty() {
        let mut all = synced.clone();
        for u in &unsynced {
            apply(&mut all, u);
        }
        images.push(all);
        // Two random subsets, in their order (the page cache writes any).
        for _ in 0..2 {
            let mut some = synced.clone();
            for u in &unsynced {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                if *seed & 1 == 1 {
                    apply(&mut some, u);
                }
            }
            images.push(some);
        }
    }
    images
}

#[test]
fn a_crash_at_any_point_of_a_session_keeps_every_acknowledged_write() {
    let disk = SimDisk::default();
    let id = closed_store(&disk, 3);
    disk.take_log();
    let base = disk.bytes();

    // The session: a reopen (its sync deferred), reads, five writes.
    let d = open_sim(&disk, false);
    assert!(d
        .snapshot(id, "T")
        .unwrap()
        .get("p", "r0002")
        .unwrap()
        .is_some());
    for i in 3..8 {
        put_acked(&d, &disk, id, i);
    }
    drop(d);
    let log = disk.take_log();
    assert_ordered(&log);

    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut checked = 0;
    for k in 0..=log.len() {
        let acked: Vec<String> = (0..3)
            .chain(log[..k].iter().filter_map(|e| match e {
                Event::Ack(i) => Some(*i),
                _ => None,
            }))
            .map(|i| format!("r{i:04}"))
            .collect();
        let images = crash_images(&base, &log, k, &mut seed);
        // Opened as the store opens a file without its seal (every page
        // checked, the free-space map rebuilt), and as redb alone would
        // (trusting the "in use" flag).
        for (image, check_whole) in images
            .iter()
            .flat_map(|i| [(i.clone(), true), (i.clone(), false)])
        {
            let reopened = SimDisk::with(image);
            let d = open_sim(&reopened, check_whole);
            let loaded = d.load().unwrap();
            let rows: Vec<String> = entities(&d, &loaded)
                .into_iter()
                .map(|(_, e)| e.entity.row_key)
                .collect();
            for rk in &acked {
                assert!(
                    rows.contains(rk),
                    "after {k} events (whole check {check_whole}): {rk} lost ({rows:?})"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > log.len(), "{checked} images");
}
