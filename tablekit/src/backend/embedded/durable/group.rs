//! Group commit by the store's committer thread: a table write is queued
//! with the lock of its partition and a channel for its outcome, and the
//! writer's task awaits that outcome without blocking its thread. The
//! committer takes every write queued so far, commits them in one database
//! transaction (one `fsync`), and only then releases their partitions' locks
//! and answers them; the writes queued meanwhile make its next commit. So
//! concurrent writers share commits on every tokio runtime, a current-thread
//! one included, and each is acknowledged only after the `fsync` of a commit
//! that holds it (or, with `Durability::Periodic`, once committed: the
//! committer then also syncs the commits of an interval at its end).

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::*;

/// One write waiting to be committed: its table and its rows, encoded.
pub(super) struct Job {
    pub(super) lower: String,
    pub(super) id: u64,
    /// On-disk key → the entity's bytes, or `None` to remove it.
    pub(super) rows: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The newest version among its entities.
    pub(super) newest: Option<i64>,
}

/// Why a write of a group was not applied.
pub(super) enum Failure {
    /// Its table was deleted since the write found it.
    TableGone,
    /// The commit failed: nothing of the group was applied.
    Write(String),
}

impl Failure {
    pub(super) fn into_error(self) -> Error {
        match self {
            Failure::TableGone => super::super::errors::table_not_found(),
            Failure::Write(what) => write_error(what),
        }
    }
}

/// A write in the committer's queue.
pub(super) struct Queued {
    pub(super) job: Job,
    /// Where its outcome goes (the writer awaits the other end).
    pub(super) done: oneshot::Sender<std::result::Result<(), Failure>>,
    /// The lock of its partition, held until the commit that holds the write
    /// has ended: whether or not the writer still waits, the partition's next
    /// write reads this one's outcome.
    pub(super) partition: PartitionLock,
}

/// The writes of a store file waiting for a commit, shared by the writers
/// and the committer thread.
#[derive(Default)]
pub(super) struct Group {
    pub(super) state: Mutex<GroupState>,
    /// Signalled when a write is queued or the store closes.
    pub(super) arrived: std::sync::Condvar,
}

#[derive(Default)]
pub(super) struct GroupState {
    /// The writes waiting for the next commit, in the order they came: the
    /// order in which they are applied.
    pub(super) queue: Vec<Queued>,
    /// Whether the committer waits for a write (so a new one wakes it).
    idle: bool,
    /// Set when the store closes: the committer commits what is queued and ends.
    pub(super) closing: bool,
    /// Set when the committer has ended: a write is refused, never queued.
    pub(super) stopped: bool,
    /// How many commits of writes were made, and writes queued (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) commits: u64,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) enqueued: u64,
}

impl Group {
    /// Queues `queued` for the committer; refused (and the partition's lock
    /// released) if the committer has ended.
    pub(super) fn enqueue(&self, queued: Queued) -> Result<()> {
        let mut state = lock(&self.state);
        if state.stopped {
            return Err(write_error("the store's committer thread has stopped"));
        }
        state.queue.push(queued);
        state.enqueued += 1;
        if state.idle {
            state.idle = false;
            self.arrived.notify_one();
        }
        Ok(())
    }

    /// Asks the committer to commit what is queued and end.
    pub(super) fn close(&self) {
        lock(&self.state).closing = true;
        self.arrived.notify_one();
    }
}

/// Starts the committer thread of the tables of `file`.
pub(super) fn spawn_committer(
    file: Arc<File>,
    group: Arc<Group>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tablekit-store-commit".into())
        .spawn(move || committer(&file, &group))
}

/// Marks the committer ended however it ends (an unwinding panic too), and
/// fails the writes still queued: their writers are answered, not left waiting.
struct Stopped<'a>(&'a Group);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.stopped = true;
        state.queue.clear();
    }
}

/// The committer: commits the queued writes in groups, in the order they
/// came, until the store closes. With [`Durability::Periodic`] it also syncs
/// the commits not yet synced once their interval ends (an empty durable
/// commit syncs every commit before it), while the file is open.
fn committer(file: &File, group: &Group) {
    let _stopped = Stopped(group);
    let every = match file.durability {
        Durability::Periodic(every) => Some(every),
        _ => None,
    };
    let mut last_sync = Instant::now();
    let mut unsynced = false;
    // The size and the time of the last commit of writes (see `linger`).
    let mut last = (0, Duration::ZERO);
    let mut state = lock(&group.state);
    loop {
        if state.queue.is_empty() {
            if state.closing {
                return;
            }
            state.idle = true;
            match every {
                Some(every) if unsynced => {
                    let due = every.saturating_sub(last_sync.elapsed());
                    if due.is_zero() {
                        drop(state);
                        if let Ok(txn) = file.database().begin_write() {
                            if txn.commit().is_ok() {
                                unsynced = false;
                                last_sync = Instant::now();
                            }
                        }
                        state = lock(&group.state);
                    } else {
                        state = group
                            .arrived
                            .wait_timeout(state, due.max(Duration::from_millis(1)))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
                _ => state = group.arrived.wait(state).unwrap_or_else(|e| e.into_inner()),
            }
            continue;
        }
        if !state.closing && (last.0 > 1 || state.queue.len() > 1) {
            state = linger(group, state, last.1);
        }
        let batch = std::mem::take(&mut state.queue);
        drop(state);
        let started = Instant::now();
        let synced = match every {
            Some(every) if last_sync.elapsed() < every => false,
            Some(_) => {
                last_sync = Instant::now();
                true
            }
            None => true,
        };
        let (outcomes, committed) = commit_group(file.database(), &batch, synced);
        if committed {
            unsynced = !synced;
        }
        last = (batch.len(), started.elapsed());
        state = lock(&group.state);
        state.commits += 1;
        drop(state);
        // The commit has ended: the partitions are released, then the
        // writers answered (a writer that stopped waiting is not).
        for (queued, outcome) in batch.into_iter().zip(outcomes) {
            let Queued {
                done, partition, ..
            } = queued;
            drop(partition);
            let _ = done.send(outcome);
        }
        state = lock(&group.state);
    }
}

/// How long the committer waits for the next write to arrive while it
/// gathers a group (see [`linger`]).
const ARRIVAL_GAP: Duration = Duration::from_micros(200);

/// Gathers writes for the next commit while writers are concurrent (the
/// caller asks only when the last commit held more than one write or more
/// than one is queued): as long as another write arrives within
/// [`ARRIVAL_GAP`] of the last, for at most the time the last commit took.
///
/// Writers answered together come back together, but one by one: on a
/// current-thread runtime each decides its next write in turn on the one
/// thread, and a committer that took the first at once would commit it alone
/// and leave the others for the next commit (two `fsync`s where one does).
/// A write that arrives meanwhile would otherwise wait for the commit in
/// flight and then its own; so waiting at most one commit's time costs the
/// first write of the group at most that. A writer alone (its last commit
/// held its write only, and nothing else is queued) does not wait at all; the
/// first write alone after a group waits [`ARRIVAL_GAP`] at most.
fn linger<'a>(
    group: &'a Group,
    mut state: std::sync::MutexGuard<'a, GroupState>,
    last_commit: Duration,
) -> std::sync::MutexGuard<'a, GroupState> {
    let started = Instant::now();
    loop {
        let queued = state.queue.len();
        let left = last_commit.saturating_sub(started.elapsed());
        if left.is_zero() || state.closing {
            return state;
        }
        state.idle = true;
        state = group
            .arrived
            .wait_timeout(state, ARRIVAL_GAP.min(left))
            .unwrap_or_else(|e| e.into_inner())
            .0;
        state.idle = false;
        if state.queue.len() == queued {
            return state;
        }
    }
}

/// Commits a group of writes in one database transaction (synced unless not
/// `synced`): each one's outcome, in order, and whether the commit was made.
fn commit_group(
    db: &Database,
    batch: &[Queued],
    synced: bool,
) -> (Vec<std::result::Result<(), Failure>>, bool) {
    let all_fail = |e: &dyn std::fmt::Display| {
        let outcomes = batch
            .iter()
            .map(|_| Err(Failure::Write(e.to_string())))
            .collect();
        (outcomes, false)
    };
    let mut txn = match db.begin_write() {
        Ok(txn) => txn,
        Err(e) => return all_fail(&e),
    };
    if !synced {
        if let Err(e) = txn.set_durability(redb::Durability::None) {
            return all_fail(&e);
        }
    }
    let applied = (|| -> std::result::Result<Vec<_>, redb::Error> {
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut newest = None;
        let mut sizes = Sizes::default();
        let tables = txn.open_table(TABLES)?;
        for Queued { job, .. } in batch {
            let current = tables.get(job.lower.as_str())?.map(|v| v.value().0);
            if current != Some(job.id) {
                outcomes.push(Err(Failure::TableGone));
                continue;
            }
            let name = entities_name(job.id);
            let mut entities = txn.open_table(entities_def(&name))?;
            sizes.add(apply_rows(&mut entities, &job.rows)?);
            newest = newest.max(job.newest);
            outcomes.push(Ok(()));
        }
        if sizes != Sizes::default() {
            let mut meta = txn.open_table(META)?;
            if sizes.freed > 0 {
                let before = meta.get(FREED)?.map_or(0, |v| v.value());
                meta.insert(FREED, before.saturating_add(sizes.freed))?;
            }
            // Kept only where it is known from the start (see `LIVE`).
            let live = meta.get(LIVE)?.map(|v| v.value());
            if let Some(live) = live {
                meta.insert(LIVE, live.saturating_add_signed(sizes.live))?;
            }
        }
        if let Some(t) = newest {
            // The clock of the next open starts after every version given.
            txn.open_table(META)?.insert("clock", t.max(0) as u64)?;
        }
        Ok(outcomes)
    })();
    let outcomes = match applied {
        Ok(outcomes) => outcomes,
        Err(e) => return all_fail(&e),
    };
    match txn.commit() {
        Ok(()) => (outcomes, true),
        Err(e) => all_fail(&e),
    }
}

/// What a write did to the size of its table's entities: the bytes of the
/// entities it removed (keys and records), and the change of the bytes of
/// all its table's entities.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sizes {
    pub(super) freed: u64,
    pub(super) live: i64,
}

impl Sizes {
    fn add(&mut self, other: Sizes) {
        self.freed += other.freed;
        self.live += other.live;
    }
}

/// Applies one write's rows to its table: what it did to the sizes.
///
/// A write of several rows puts its new keys in key order through a cursor
/// (`lower_bound_mut` and `insert_before`): redb buffers the run and packs it
/// with the rest of the leaf at the gap into full leaves. A plain insert into
/// the middle of the tree splits a full leaf in two halves, and the half
/// before the gap is never written again when input arrives by partition in
/// turn (each partition's rows go to the end of its key range, the middle of
/// the tree): `writes_of_partitions_in_turn_leave_leaves_as_full_as_sorted_writes`
/// counts 343 leaves for 288 that way, 283 for 280 through the cursor (and
/// see the `durable_store` bench's `bulk`). A key that exists is replaced by
/// a plain insert; rows to remove are removed.
pub(super) fn apply_rows(
    entities: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    rows: &[(Vec<u8>, Option<Vec<u8>>)],
) -> std::result::Result<Sizes, redb::Error> {
    let mut sizes = Sizes::default();
    let len = |n: usize| n as i64;
    let remove = |entities: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
                  key: &[u8],
                  sizes: &mut Sizes|
     -> std::result::Result<(), redb::Error> {
        if let Some(old) = entities.remove(key)? {
            let bytes = key.len() + old.value().len();
            sizes.freed += bytes as u64;
            sizes.live -= len(bytes);
        }
        Ok(())
    };
    let insert = |entities: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
                  key: &[u8],
                  value: &[u8],
                  sizes: &mut Sizes|
     -> std::result::Result<(), redb::Error> {
        sizes.live += match entities.insert(key, value)? {
            Some(old) => len(value.len()) - len(old.value().len()),
            None => len(key.len() + value.len()),
        };
        Ok(())
    };
    let mut keys: Vec<&[u8]> = rows.iter().map(|(k, _)| k.as_slice()).collect();
    keys.sort_unstable();
    if rows.len() < 2 || keys.windows(2).any(|w| w[0] == w[1]) {
        // One row, or (never from a write: a transaction names a row once) a
        // key twice: in the write's order, the last change wins.
        for (key, value) in rows {
            match value {
                Some(v) => insert(entities, key, v, &mut sizes)?,
                None => remove(entities, key, &mut sizes)?,
            }
        }
        return Ok(sizes);
    }
    let mut puts: Vec<(&[u8], &[u8])> = Vec::with_capacity(rows.len());
    for (key, value) in rows {
        match value {
            Some(v) => puts.push((key, v)),
            None => remove(entities, key, &mut sizes)?,
        }
    }
    puts.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut i = 0;
    while i < puts.len() {
        let mut cursor = entities.lower_bound_mut(Bound::Included(puts[i].0))?;
        let mut j = i;
        while j < puts.len() {
            match cursor.insert_before(puts[j].0, puts[j].1) {
                Ok(()) => {
                    sizes.live += len(puts[j].0.len() + puts[j].1.len());
                    j += 1;
                }
                // The key exists (or one does between the last and this):
                // the run ends here.
                Err(redb::CursorError::UnorderedKey) => break,
                Err(e) => return Err(e.into()),
            }
        }
        cursor.close()?;
        if j == i {
            // `puts[i]` exists: replaced in place.
            insert(entities, puts[i].0, puts[i].1, &mut sizes)?;
            i += 1;
        } else {
            i = j;
        }
    }
    Ok(sizes)
}
