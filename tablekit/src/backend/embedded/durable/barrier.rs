//! The `fsync` a store's open would wait for, deferred to the first write
//! after it: a storage backend over the file's ([`LazySync`]) that, while the
//! database is being opened, turns each `sync_data` into a *lazy barrier*.
//!
//! redb's open marks the file "in use" (a flag in its header, which tells
//! the next open to rebuild the free-space map if this process dies) and
//! makes that flag durable with an `fsync` before it returns (3.7 ms of a
//! 4 ms reopen at 1,000,000 entities, 10 ms at 100,000 on this disk; SQLite
//! reopens in 0.5 ms, and so does the store with the sync deferred). The
//! flag only has to be on the disk before anything
//! of this session is: the wrapper records the sync as pending instead of
//! waiting for it, and performs it before the next `write` or `set_len`
//! reaches the file (or at the close), whichever comes first. Outside the
//! open every `sync_data` is performed at once, as redb asked.
//!
//! # Why the order is kept
//!
//! The rule: *every write issued before a sync reaches the disk before any
//! write issued after it*. redb relies on nothing else from `sync_data`
//! during its open (it reads nothing back that a sync would change, and its
//! open returns no promise of durability: the open commits nothing new of
//! the caller's).
//!
//! 1. A deferred sync is performed, and returns, before the wrapper passes
//!    on any later `write` or `set_len` (the only calls that change the
//!    file). So for every write `a` issued before a sync `s` and every write
//!    `b` after it, `a` is on the disk before `b` is issued, exactly as if
//!    `s` had been performed in place. The rule holds for every sync.
//! 2. Only syncs asked for *while the open runs* are deferred; after it, a
//!    sync is performed when asked. A commit of this session ends with its
//!    own `sync_data` (and before its first write, the pending one of the
//!    open is performed by 1), so a commit returns, and is acknowledged,
//!    only after the sync that covers it. Durability of every commit is
//!    unchanged.
//! 3. What a crash can find on the disk: if it strikes before the session's
//!    first write, the file holds what it held before the open, plus at most
//!    the open's own header write (the "in use" flag, and on a crash-left
//!    file the repair's commit, which redb writes with syncs of its own
//!    before the flag, so by 1 it is durable first). The file before the
//!    open was consistent (it opened); with the flag the next open merely
//!    rebuilds the free-space map it did not need to. If the crash strikes
//!    later, the flag was durable before the first write (by 1), exactly as
//!    with the sync performed at the open.
//! 4. A failed deferred sync fails the write (or close) that performs it:
//!    that commit fails and is not acknowledged, and redb refuses later
//!    writes until the file is reopened, as after any failed `fsync`.
//!
//! So the open costs no `fsync`; a session that only reads pays none until
//! its close (where redb syncs as it always did; that sync covers the
//! pending one); the first write pays the deferred one. The tests
//! (`barrier_tests.rs`) record the sequence of writes and syncs that reach
//! the file, and simulate crashes at every point of a session.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redb::{BackendError, StorageBackend};

/// A storage backend whose syncs, while the database is being opened, are
/// deferred to the next write (see the module's notes).
#[derive(Debug)]
pub(crate) struct LazySync<B> {
    inner: B,
    /// Whether the open runs (syncs are deferred while it does).
    opening: Arc<AtomicBool>,
    /// The bytes the open read last (offset, length), which is the page a
    /// failed integrity check stopped at (see [`Opening::last_read`]).
    last_read: Arc<Mutex<Option<(u64, u64)>>>,
    /// Whether a deferred sync waits to be performed.
    pending: AtomicBool,
    /// Held while a deferred sync is performed, so a write racing it waits
    /// for it.
    performing: Mutex<()>,
}

/// While this lives, the [`LazySync`] it came with defers its syncs; dropped
/// when the open returns.
pub(crate) struct Opening(Arc<AtomicBool>, Arc<Mutex<Option<(u64, u64)>>>);

impl Opening {
    /// The bytes of the file the open read last: their offset and length.
    /// redb's integrity check reads each page of the committed trees and
    /// stops at the first whose checksum (or whose structure) is wrong, so
    /// after a check that failed this is the damaged page (or the header,
    /// if that is what failed).
    pub(crate) fn last_read(&self) -> Option<(u64, u64)> {
        *self.1.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl<B: StorageBackend> LazySync<B> {
    /// `inner`, with its syncs deferred until the [`Opening`] is dropped.
    pub(crate) fn new(inner: B) -> (LazySync<B>, Opening) {
        let opening = Arc::new(AtomicBool::new(true));
        let last_read = Arc::new(Mutex::new(None));
        let lazy = LazySync {
            inner,
            opening: opening.clone(),
            last_read: last_read.clone(),
            pending: AtomicBool::new(false),
            performing: Mutex::new(()),
        };
        (lazy, Opening(opening, last_read))
    }

    /// Performs the deferred sync, if any, before a change to the file.
    fn barrier(&self) -> Result<(), std::io::Error> {
        if self.pending.load(Ordering::Acquire) {
            let _held = self.performing.lock().unwrap_or_else(|e| e.into_inner());
            if self.pending.load(Ordering::Acquire) {
                self.inner.sync_data()?;
                self.pending.store(false, Ordering::Release);
            }
        }
        Ok(())
    }
}

impl<B: StorageBackend> StorageBackend for LazySync<B> {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        if self.opening.load(Ordering::Relaxed) {
            *self.last_read.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((offset, out.len() as u64));
        }
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.barrier()?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        if self.opening.load(Ordering::SeqCst) {
            self.pending.store(true, Ordering::Release);
            return Ok(());
        }
        let _held = self.performing.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.sync_data()?;
        // This sync covers every write before it, the deferred sync's too.
        self.pending.store(false, Ordering::Release);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.barrier()?;
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        // The file's locks are released whatever the sync's outcome.
        let synced = self.barrier();
        let closed = self.inner.close();
        synced.and(closed)
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
