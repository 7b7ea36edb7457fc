//! Group commit: writes that arrive while a commit is in flight queue, and
//! one of them commits the queue in one transaction; each is acknowledged only
//! after the fsync that covers it (or, with `Durability::Periodic`, the
//! syncer thread's next sync).

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

/// The writes of a store file waiting for or in a commit (see
/// [`Durable::write`]).
pub(super) struct Group {
    pub(super) state: Mutex<GroupState>,
    /// Signalled when a commit ends.
    pub(super) changed: std::sync::Condvar,
    /// With [`Durability::Periodic`]: when a commit was last synced, and
    /// whether a commit since is not.
    pub(super) last_sync: Mutex<std::time::Instant>,
    pub(super) unsynced: std::sync::atomic::AtomicBool,
}

impl Default for Group {
    fn default() -> Self {
        Group {
            state: Mutex::default(),
            changed: std::sync::Condvar::new(),
            last_sync: Mutex::new(std::time::Instant::now()),
            unsynced: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// With [`Durability::Periodic`]: a thread that syncs the commits not yet
/// synced once per interval (an empty durable commit syncs every commit
/// before it), while the file is open.
pub(super) fn spawn_syncer(file: Weak<File>, group: Weak<Group>, every: std::time::Duration) {
    use std::sync::atomic::Ordering;
    let sync = move || loop {
        std::thread::sleep(every);
        let (Some(file), Some(group)) = (file.upgrade(), group.upgrade()) else {
            return;
        };
        if !group.unsynced.load(Ordering::SeqCst) {
            continue;
        }
        // Under the group's lock as a leader: no group commit runs meanwhile.
        let mut state = lock(&group.state);
        while state.committing {
            state = group.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        if let Ok(txn) = file.database().begin_write() {
            if txn.commit().is_ok() {
                group.unsynced.store(false, Ordering::SeqCst);
                *lock(&group.last_sync) = std::time::Instant::now();
            }
        }
        drop(state);
    };
    // A failure to start the thread leaves the syncs to the next commits.
    let _ = std::thread::Builder::new()
        .name("tablekit-store-sync".into())
        .spawn(sync);
}

#[derive(Default)]
pub(super) struct GroupState {
    pub(super) next_ticket: u64,
    /// The writes waiting for the next commit.
    pub(super) queue: Vec<(u64, Job)>,
    /// Whether a writer is committing a group now.
    pub(super) committing: bool,
    /// The outcomes of committed writes not yet collected, by ticket.
    pub(super) done: HashMap<u64, std::result::Result<(), Failure>>,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) commits: u64,
}

/// Runs `f`, which blocks (for a commit's `fsync`); on a multi-thread tokio
/// runtime the worker hands its other tasks to another thread first.
pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
