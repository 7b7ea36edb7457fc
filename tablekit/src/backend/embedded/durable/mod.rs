//! The embedded store kept in one file: every acknowledged write is first
//! committed to an embedded database, and opening the file loads it back
//! (see [`TableServiceClient::embedded_at`](crate::TableServiceClient::embedded_at)).
//!
//! One file holds an account's tables, queues and blobs: each service keeps
//! its own database tables in it (the queue and blob layouts are described
//! in `queues.rs` and `blobs.rs`), and the services of one process that name
//! the same path share the one open database through a registry here.
//!
//! # Design
//!
//! The file is the store: its entities live in it, not in memory. Point
//! reads, range queries and listings read the database (through its cache of
//! the file's pages, [`FileOptions::cache_bytes`]); the process keeps no
//! second copy, only the names of the tables. Each read of a query's page
//! reads one snapshot (one read transaction), so a page is consistent.
//!
//! A write keeps the in-memory store's rules (conditions, merges, limits,
//! transactions) by running the same decision code: under its partition's
//! lock ([`Durable::lock_partition`]), it reads the entities it touches from
//! the file as the last commit left them, decides, and queues the outcome
//! (a single write's, or an entity group transaction's as one whole) for the
//! store's committer thread (`group.rs`). The committer commits every write
//! queued since its last commit in one database write transaction, in the
//! order they were queued, durable: the commit returns after its `fsync`.
//! Only then are the writes in it acknowledged. A write whose commit fails
//! changes nothing and answers 500 `InternalError`.
//!
//! The partition's lock is held from the read to the end of the commit that
//! holds the write: the committer releases it, after the commit, so also when
//! the writer's task stopped waiting (its future dropped) meanwhile. A later
//! write of the partition therefore reads the earlier one's outcome, and is
//! queued, and so committed, after it. This makes a transaction atomic and
//! isolated within its partition, as the service's are; writes to one
//! partition follow one another, each in its own commit, while writes to
//! different partitions do not wait for each other and share commits. The
//! behaviour suite runs on this store a third time to prove it answers as the
//! in-memory one.
//!
//! # Group commit on every runtime
//!
//! The writer's task awaits its commit (an async partition lock, and a
//! channel the committer answers on); no thread of the caller blocks in an
//! `fsync`. So writers share commits whatever runs them: on a current-thread
//! tokio runtime (`#[tokio::test]`, `#[tokio::main(flavor =
//! "current_thread")]`) the one thread goes on running the other writers
//! while a commit is on its way to the disk, and they queue for the next.
//! While writers are concurrent the committer gathers them for a moment
//! before it commits (`group::linger`); a writer alone does not wait for it.
//! The `durable_store` bench's `group_commit` measures 32 writers on both
//! runtimes.
//!
//! On-disk keys are the PartitionKey and RowKey in a form whose byte order
//! is the service's order (UTF-16 code units; `key::entity_key`), so a query
//! over a PartitionKey range is a range scan of the file.
//!
//! # The database: redb
//!
//! | candidate | durability | maintenance | build | pure Rust |
//! |---|---|---|---|---|
//! | **redb** | ACID; copy-on-write B-trees with two checksummed commit slots, `fsync` on every commit by default (`Durability::Immediate`); after a crash the newest slot with a valid checksum is used | one active maintainer, steady releases, stable file format since 1.0, a fuzzed crash/recovery test suite | small: a handful of dependencies, seconds | yes, and no `unsafe` needed here |
//! | fjall | LSM tree with a write-ahead journal; durable writes need an explicit `persist(SyncAll)` per batch; cross-keyspace atomicity through its transactional layer | active, but a younger project whose format changed across 1.x/2.x | larger (lsm-tree, compression, several crates) | yes |
//! | sled | ACID in design, but the 0.34 release is years old and the 1.0 rewrite is still alpha; its docs warn the on-disk format will change | effectively unmaintained release line | moderate | yes |
//! | rusqlite (bundled) | SQLite: the most proven of all (WAL, `synchronous=FULL`) | excellent | compiles SQLite's C amalgamation: a C compiler and tens of seconds | no (C) |
//!
//! redb is chosen: it has the guarantee this store promises (a commit that
//! returned is on disk, a torn commit is ignored on open), one file, a lock
//! that keeps a second process (or a second open in this process) out, a
//! stable format, and it builds fast without C. SQLite would be as safe but
//! brings a C toolchain and a second data model (SQL) for what is a sorted
//! key-value store; fjall is an LSM tree built for write-heavy workloads,
//! where this store's reads matter as much; sled's stable line is
//! unmaintained. redb 4 (file format 3) sets the workspace's rust-version
//! (1.90); files written by redb 2.x (file format 2) are refused by name.
//!
//! # The file
//!
//! - `meta`: `format` → [`FORMAT_VERSION`]; a file of a newer version is refused
//!   with a clear error, never guessed at. `next_table` → the next table id.
//! - `tables`: the lower-cased name → (id, the name as created).
//! - `meta`: `clock` → the newest version given, so a reopened store's
//!   versions go on after it without reading its entities. `freed` → the
//!   bytes of the entities deleted since the last compaction.
//! - `entities/{id}`: the on-disk key (PartitionKey, RowKey in the service's
//!   order) → the stored entity (below). Each table has its own database
//!   table, so deleting a table is one step and a write racing a delete
//!   cannot land in a later table of the same name.
//!
//! An entity is stored as a compact binary record (`record.rs`): the version
//! (100 ns ticks; the Timestamp and ETag are derived from it) and the
//! properties in order, each with its Edm type; a Double as its IEEE bits, a
//! DateTime as seconds and nanoseconds and a Binary as its bytes, so every
//! value reads back bit for bit (`-0.0`, NaN, 100 ns). Files of format 2
//! kept compact JSON records; they read as they are, and are marked format
//! 3 at their first open (older builds then refuse them by their version).
//!
//! # Space
//!
//! redb reuses the pages of deleted entities for later writes but does not
//! shrink the file by itself. Each commit adds the size of the entities it
//! deletes to `meta`'s `freed`; when the file closes (its last store is
//! dropped) and `freed` is at least 1 MiB and a quarter of the file's size,
//! the file is compacted there (`files::compact_at_close`: each table's
//! entities copied in key order into a new tree that replaces the old one,
//! then the pages moved towards the start and the file cut, with no commit
//! after the moves, which would grow the file again), and `freed` starts
//! again from 0. Files created by this version (and files compacted since)
//! also keep `meta`'s `live`, the bytes of all their entities (keys and
//! records, adjusted by each commit); the close compacts too when `live` is
//! at most half of a file of at least 4 MiB that holds no queue or blob,
//! whatever freed the rest (updates that shrank entities, sparse pages); a
//! densely filled file holds its entities in well over half of it (the
//! `durable_store` bench's `bulk` files are not compacted at their close). At
//! the close nothing reads or writes, so nothing waits for it but the close
//! itself (and other opens in this process, which the registry's lock holds
//! meanwhile). `storage::compact_file` does it on demand. Queue messages and
//! blobs do not count towards `freed`.
//!
//! # Opening: no `fsync`
//!
//! redb's open marks the file in use and syncs that mark before it returns;
//! the open of a store file defers this one sync to the first write after it
//! (`barrier.rs`: a storage backend over redb's file backend that, only
//! while the database is being opened, records a sync as pending and
//! performs it before the next write or length change reaches the file).
//! Decided sound: every write issued before a sync still reaches the disk
//! before any write issued after it, and every commit after the open still
//! ends with its own sync before it is acknowledged; a crash before the
//! first write finds the file as it was before the open (the mark at most,
//! which only makes the next open rebuild the free-space map, and the store
//! checks every page of a file without a seal anyway). The proof is in
//! `barrier.rs`; `barrier_tests.rs` records the writes and syncs reaching a
//! simulated disk and reopens every crash image of a session. So a reopen
//! costs no `fsync`, a session that only reads syncs only at its close (as
//! redb's close always did), and the first write pays the deferred one.
//!
//! # When things go wrong
//!
//! - A file that is empty, or has content but is no redb database, is
//!   refused and left untouched (redb would initialise a new database in it).
//! - A damaged file (cut short, a page overwritten, a broken header) is
//!   refused at open with an error naming the file and the damage: the open
//!   verifies the checksum of every page of the committed trees (redb's
//!   integrity check), which reads the whole file once, unless the file is
//!   as its last clean close left it, which the seal written at that close
//!   tells without reading the file (`seal.rs`). The error names where the
//!   damage is: the page whose checksum fails (the bytes the check read
//!   last, recorded by `barrier.rs` while the file opens), or the length of
//!   a file cut short; redb's error is its source. A record that does not
//!   decode is named by its table and entity (PartitionKey, RowKey) where a
//!   read meets it, and by `storage::check_file`. Without the check redb
//!   trusts a cleanly closed file and panics on a damaged page it later
//!   reads; with it nothing is caught or unwound, so this holds with
//!   `panic = "abort"` too.
//! - A write the disk refuses (full, read-only, failing) answers 500
//!   `InternalError` and is not applied; redb then refuses every later write
//!   until the store is reopened, since the file's state after a failed commit
//!   is known only to its recovery on open. If the failure came after the
//!   commit reached the disk (a failed final `fsync`), the reopened store may
//!   show that one write: it is ambiguous, as a lost answer over HTTP is.
//!
//! A crash (power loss, SIGKILL) loses nothing acknowledged; on the next open
//! redb rebuilds its free-space map from the last committed state by itself,
//! which takes time proportional to the file's size. A crash in the middle of
//! a commit leaves the commit before it as the file's state (redb's two
//! checksummed commit slots): the writes of the torn commit were not
//! acknowledged, and none of them is applied.
//!
//! Blocking: entity writes and transactions do not block the caller's thread
//! (above). The rarer writes still commit on the calling thread and block it
//! for their `fsync`, like a local disk write does: creating and deleting a
//! table, and the queue and blob stores' writes; on a multi-thread tokio
//! runtime they first hand the worker's other tasks on (`block_in_place`), on
//! a current-thread runtime the other tasks wait. Dropping the store waits
//! for the committer to commit what is queued and end, so the file is closed
//! when the last client of the store is dropped.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use base64::Engine as _;
use chrono::DateTime;
use redb::backends::FileBackend;
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition,
    TableHandle,
};
use serde::{Deserialize, Serialize};

use super::clock::{ticks_of, Version};
use crate::backend::StoredEntity;
use crate::entity::{DynamicEntity, Properties};
use crate::error::{Error, ErrorCode, Result};
use crate::options::{Durability, FileOptions};
use crate::EdmValue;

mod barrier;
#[cfg(test)]
mod barrier_tests;
mod files;
#[cfg(test)]
pub(crate) mod full_disk;
mod group;
#[cfg(test)]
mod group_tests;
mod record;
pub(crate) mod rows;
mod seal;
#[cfg(test)]
mod tests;

pub(crate) use files::{check_file, compact_file, remove_file};
use files::{FREED, LIVE};
use group::*;
use record::{decode, encode};

/// The version of the file's layout this code writes and reads.
pub(crate) const FORMAT_VERSION: u64 = 3;

/// The older version this code reads too (entity records as JSON, see
/// `record.rs`): its files are marked [`FORMAT_VERSION`] when opened, since
/// the entities written from then on are binary.
const FORMAT_JSON_RECORDS: u64 = 2;

pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const TABLES: TableDefinition<&str, (u64, &str)> = TableDefinition::new("tables");

fn entities_name(id: u64) -> String {
    format!("entities/{id}")
}

/// A table's entities: the on-disk key (`key::entity_key`: PartitionKey and
/// RowKey in the service's order) → the stored entity.
fn entities_def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

/// An open store file: one redb database, shared in this process by the
/// account's services (tables, queues, blobs) that name the same file. redb
/// locks a file against every second open, in this process too, so the file
/// is opened once and each service claims its part of it (see [`Claim`]).
pub(crate) struct File {
    /// `None` only while the file closes.
    db: Option<Database>,
    path: PathBuf,
    /// The key in [`FILES`], if the file is registered there.
    key: Option<PathBuf>,
    /// Which services (by [`Service`] index) an open store holds.
    claimed: Mutex<[bool; 3]>,
    /// When table writes are synced.
    durability: Durability,
    /// Whether the open checked every page (the file had no matching seal).
    #[cfg_attr(not(test), allow(dead_code))]
    checked_whole: bool,
}

impl File {
    fn database(&self) -> &Database {
        self.db
            .as_ref()
            .expect("a file is open until it is dropped")
    }
}

/// The files open in this process, by their canonical path.
static FILES: Mutex<Option<HashMap<PathBuf, Weak<File>>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for File {
    fn drop(&mut self) {
        // The database closes under the registry's lock, so an open racing
        // this drop finds either this file or a closed one, never a locked one.
        let mut files = lock(&FILES);
        if let (Some(key), Some(map)) = (&self.key, files.as_mut()) {
            if map.get(key).is_some_and(|w| w.strong_count() == 0) {
                map.remove(key);
            }
        }
        if let Some(mut db) = self.db.take() {
            files::compact_at_close(&mut db, &self.path);
            // A clean close of a file this process opened by its path seals it.
            if db.close().is_ok() && self.key.is_some() {
                seal::write(&self.path);
            }
        }
    }
}

/// The part of a store file a service keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Service {
    Tables = 0,
    #[cfg_attr(not(feature = "queue"), allow(dead_code))]
    Queues = 1,
    #[cfg_attr(not(feature = "blob"), allow(dead_code))]
    Blobs = 2,
}

/// One service's hold on an open store file: while it lives, no other store
/// of that service opens the file; the file closes when the last claim on it
/// is dropped.
pub(crate) struct Claim {
    file: Arc<File>,
    service: Service,
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.file.claimed)[self.service as usize] = false;
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("path", &self.file.path)
            .field("service", &self.service)
            .finish()
    }
}

/// The path `path` is registered under: canonical if it (or its folder) exists.
fn registry_key(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            dir.canonicalize()
                .map_or_else(|_| path.to_owned(), |d| d.join(name))
        }
        _ => path.to_owned(),
    }
}

/// Opens the store file at `path` with `options` (refused if this process
/// has it open already), and holds it open while the result lives: the
/// stores opened on `path` meanwhile share it.
pub(crate) fn hold(path: &Path, options: &FileOptions) -> Result<Arc<File>> {
    let held = open_file(path, options)?;
    if Arc::strong_count(&held) > 1 {
        return Err(open_error(
            path,
            "it is open in this process already; its options are those of its first open",
        ));
    }
    Ok(held)
}

/// The open file at `path`: this process's, or opened (or created) now with
/// `options`.
fn open_file(path: &Path, options: &FileOptions) -> Result<Arc<File>> {
    create_folders(path)?;
    let key = registry_key(path);
    let mut files = lock(&FILES);
    let map = files.get_or_insert_with(HashMap::new);
    if let Some(file) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(file);
    }
    let (db, checked_whole) = open_db(path, options, true)?;
    // Checked before it becomes a `File`, whose drop takes the registry's
    // lock (held here).
    check_format(&db, path)?;
    let file = Arc::new(File {
        db: Some(db),
        path: path.to_owned(),
        key: Some(key.clone()),
        claimed: Mutex::new([false; 3]),
        durability: options.durability,
        checked_whole,
    });
    map.insert(key, Arc::downgrade(&file));
    Ok(file)
}

impl Claim {
    /// Claims `service` of the store file at `path`, opening (or creating) the
    /// file unless this process has it open already.
    pub(crate) fn open(path: &Path, service: Service) -> Result<Claim> {
        let file = open_file(path, &FileOptions::new())?;
        Claim::take(file, service)
    }

    /// Claims `service` of an open file.
    fn take(file: Arc<File>, service: Service) -> Result<Claim> {
        let mut claimed = lock(&file.claimed);
        if claimed[service as usize] {
            return Err(open_error(
                &file.path,
                "it is in use by another open store (in this or another process)",
            ));
        }
        claimed[service as usize] = true;
        drop(claimed);
        Ok(Claim { file, service })
    }

    /// The claim of an unregistered database (tests with an injected I/O backend).
    #[cfg(test)]
    pub(crate) fn of_db(
        db: Database,
        path: &Path,
        service: Service,
        durability: Durability,
    ) -> Result<Claim> {
        check_format(&db, path)?;
        let file = Arc::new(File {
            db: Some(db),
            path: path.to_owned(),
            key: None,
            claimed: Mutex::new([false; 3]),
            durability,
            checked_whole: false,
        });
        Claim::take(file, service)
    }

    /// The open database.
    pub(crate) fn db(&self) -> &Database {
        self.file.database()
    }

    /// The file's path as it was opened.
    pub(crate) fn path(&self) -> &Path {
        &self.file.path
    }
}

/// The tables of a store file (see [`Claim`]).
pub(crate) struct Durable {
    claim: Claim,
    /// The partitions' locks, by a hash of (table id, PartitionKey): a write
    /// holds its partition's lock from the read that decides it to the end
    /// of the commit that holds it, so it reads the partition as the last
    /// commit left it. Async locks, fair (first come, first served): a writer
    /// waiting for one does not block its thread. A fixed number, whatever
    /// the number of partitions; two partitions that share a lock only wait
    /// for each other.
    stripes: Box<[Arc<tokio::sync::Mutex<()>>]>,
    /// The writes waiting for a commit.
    group: Arc<Group>,
    /// The committer thread (`None` once it has been joined).
    committer: Option<std::thread::JoinHandle<()>>,
}

/// A held partition lock ([`Durable::lock_partition`]). It moves with a write
/// into the committer's queue, which releases it when the write's commit has
/// ended.
pub(crate) struct PartitionLock {
    _held: tokio::sync::OwnedMutexGuard<()>,
}

/// How many partition locks a store file has (see [`Durable::stripes`]).
const STRIPES: usize = 1024;

impl Durable {
    /// The file's path as it was opened.
    pub(crate) fn path(&self) -> &Path {
        self.claim.path()
    }
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("path", &self.claim.path())
            .finish()
    }
}

/// A table as the file names it: its id and its name as created.
pub(crate) struct LoadedTable {
    pub(crate) id: u64,
    pub(crate) name: String,
}

/// What a store file holds when it is opened: its tables, and the newest
/// version it has given (the clock goes on after it).
pub(crate) struct Loaded {
    pub(crate) tables: Vec<LoadedTable>,
    pub(crate) last_version: i64,
}

/// The entities of one table as of one commit: every read of a snapshot
/// sees the same state.
pub(crate) struct Snapshot {
    /// `None` if the table has no entities yet (its database table is made by
    /// its first write).
    table: Option<redb::ReadOnlyTable<&'static [u8], &'static [u8]>>,
    /// The table and the file, as errors name them.
    origin: String,
}

impl Snapshot {
    /// The entity at (`pk`, `rk`), if any.
    pub(crate) fn get(&self, pk: &str, rk: &str) -> Result<Option<StoredEntity>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let key = super::key::entity_key(pk, rk);
        let found = table
            .get(key.as_slice())
            .map_err(|e| read_failed(&self.origin, Some(&key), e.into()))?;
        match found {
            Some(v) => decode(pk.to_owned(), rk.to_owned(), v.value())
                .map(Some)
                .map_err(|what| read_error(format_args!("{}: {what}", self.origin))),
            None => Ok(None),
        }
    }

    /// How errors name this snapshot's table and file.
    pub(crate) fn origin(&self) -> &str {
        &self.origin
    }

    /// Calls `each` with the (PartitionKey, RowKey, entity bytes) of every
    /// entity from `start` (an on-disk key, inclusive) to `end`, in key order,
    /// until it returns `false`.
    pub(crate) fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        mut each: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        let end = end.map_or(Bound::Unbounded, Bound::Excluded);
        let range = table
            .range::<&[u8]>((Bound::Included(start), end))
            .map_err(|e| read_failed(&self.origin, Some(start), e.into()))?;
        // The key of the last row read, to say where a failed read was.
        let mut last: Vec<u8> = start.to_vec();
        for row in range {
            let (k, v) = row.map_err(|e| read_failed(&self.origin, Some(&last), e.into()))?;
            if !each(k.value(), v.value())? {
                break;
            }
            last.clear();
            last.extend_from_slice(k.value());
        }
        Ok(())
    }
}

/// A read of `origin` (a table of a file) failed in redb, at or after the
/// on-disk key `at` if known: the entity it names, and redb's error as the
/// source.
fn read_failed(origin: &str, at: Option<&[u8]>, e: redb::Error) -> Error {
    let near = at
        .and_then(super::key::decode_entity_key)
        .map(|(pk, rk)| format!(" at or after the entity ({pk:?}, {rk:?})"))
        .unwrap_or_default();
    let what = match &e {
        redb::Error::Corrupted(_) => "it is damaged",
        _ => "redb failed",
    };
    read_error(format_args!("{origin}{near}: {what} ({e})")).with_cause(e)
}

/// The entity of an on-disk key and value, read.
#[cfg(test)]
pub(crate) fn decode_row(key: &[u8], value: &[u8]) -> Result<StoredEntity> {
    let (pk, rk) = super::key::decode_entity_key(key)
        .ok_or_else(|| read_error("an entity key is unreadable"))?;
    decode(pk, rk, value).map_err(read_error)
}

/// [`decode_row`] of a row of `snapshot`: an error names its table and file.
pub(crate) fn decode_row_of(snapshot: &Snapshot, key: &[u8], value: &[u8]) -> Result<StoredEntity> {
    let (pk, rk) = super::key::decode_entity_key(key).ok_or_else(|| {
        read_error(format_args!(
            "{}: an entity key is unreadable",
            snapshot.origin
        ))
    })?;
    decode(pk, rk, value).map_err(|what| read_error(format_args!("{}: {what}", snapshot.origin)))
}

/// Adds the entity of an on-disk key and record to a page's `rows`, in the
/// binary form (a format 2 record is converted). A binary record is copied
/// as it is: the page's decode (`rows::fill`) reads it whole, once, and
/// reports damage there.
pub(crate) fn push_row(
    snapshot: &Snapshot,
    rows: &mut rows::Rows,
    key: &[u8],
    record: &[u8],
) -> Result<()> {
    if record.first() == Some(&rows::BINARY) {
        rows.push(key, record);
    } else {
        // Format 2's JSON, or damage (which this decode reports).
        let e = decode_row_of(snapshot, key, record)?;
        let mut binary = Vec::new();
        encode(&e, &mut binary);
        rows.push(key, &binary);
    }
    Ok(())
}

/// A failure to read the file: 500, nothing was changed.
pub(crate) fn read_error(what: impl std::fmt::Display) -> Error {
    Error::service(
        500,
        ErrorCode::InternalError,
        format!("the file could not be read: {what}"),
    )
}

/// One change of a committed write: the entity at `row_key` becomes `Some`
/// version or is removed (`None`).
pub(crate) struct Put<'a> {
    pub(crate) row_key: &'a str,
    pub(crate) entity: Option<&'a StoredEntity>,
}

pub(crate) fn open_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::config(format!(
        "the embedded store file {} cannot be opened: {what}",
        path.display()
    ))
}

/// Creates the missing folders above the store file at `path`, as the file
/// itself is created when missing: `UseEmbeddedStorage=true;Path=./data/app.redb`
/// works on a fresh checkout. Done before the registry key is taken, since the
/// key canonicalises the (then existing) folder.
fn create_folders(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => std::fs::create_dir_all(dir)
            .map_err(|e| {
                open_error(
                    path,
                    format_args!("its folder {} cannot be created: {e}", dir.display()),
                )
            }),
        _ => Ok(()),
    }
}

/// The first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// Refuses a file that is empty or has content but is no redb database,
/// before redb sees it: redb initialises a new database in an empty file
/// (and redb 2.2 did over any file), and the file is left as it was.
fn refuse_foreign_file(path: &Path) -> Result<()> {
    use std::io::Read as _;
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(open_error(path, e)),
    };
    if file.metadata().map_err(|e| open_error(path, e))?.is_dir() {
        return Err(open_error(path, "it is a directory"));
    }
    let mut head = Vec::with_capacity(REDB_MAGIC.len());
    (&mut file)
        .take(REDB_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| open_error(path, e))?;
    if head.is_empty() {
        // redb would initialise a new database in it; an empty file where a
        // store is expected is more likely a store lost to a failed copy.
        Err(open_error(
            path,
            "it is empty (0 bytes), so it holds no store; remove it to start a new one",
        ))
    } else if head == REDB_MAGIC {
        Ok(())
    } else {
        Err(open_error(
            path,
            "it is not a tablekit store (not a redb database); it was left untouched",
        ))
    }
}

/// A failure to commit: nothing of the write was applied.
pub(crate) fn write_error(what: impl std::fmt::Display) -> Error {
    Error::service(
        500,
        ErrorCode::InternalError,
        format!("the file could not be written, so the write was not applied: {what}"),
    )
}

/// Opens (or creates) the redb database at `path`, refusing what is not one,
/// and whether the open checked every page: unless `trust_seal` and the file
/// is as its seal recorded it (see `seal.rs`).
fn open_db(path: &Path, options: &FileOptions, trust_seal: bool) -> Result<(Database, bool)> {
    refuse_foreign_file(path)?;
    let sealed = seal::take(path);
    let check_whole = !(trust_seal && sealed);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(DatabaseError::from);
    let mut last_read = None;
    let opened = file.and_then(FileBackend::new).and_then(|backend| {
        let (opened, read) = open_backend(backend, options, check_whole);
        last_read = read;
        opened
    });
    opened
        .map(|db| (db, check_whole))
        .map_err(|e| open_db_error(path, e, last_read))
}

/// The error of a failed open of the database at `path`, naming the damage
/// and where it was found: `last_read` is the bytes the open read last (the
/// page redb's integrity check stopped at, see `barrier::Opening::last_read`).
/// redb's own error is its source.
fn open_db_error(path: &Path, e: DatabaseError, last_read: Option<(u64, u64)>) -> Error {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let message = match &e {
        DatabaseError::DatabaseAlreadyOpen => {
            return open_error(
                path,
                "it is in use by another open store (in this or another process)",
            )
        }
        DatabaseError::UpgradeRequired(v) => {
            return open_error(
                path,
                format!(
                    "it has redb file format {v} (written by a tablekit built on redb 2.x), which this build (redb 4, file format 3) cannot read"
                ),
            )
        }
        DatabaseError::Storage(StorageError::Corrupted(what)) if what.contains("truncated") => {
            format!("it is damaged: it is cut short ({len} bytes, fewer than its header records) (redb: {what})")
        }
        DatabaseError::Storage(StorageError::Corrupted(what)) => format!(
            "it is damaged: {} (redb: {what})",
            where_damaged(last_read, len)
        ),
        DatabaseError::Storage(StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            match last_read {
                Some((at, n)) if at >= PAGE => format!(
                    "it is damaged: it is cut short ({len} bytes): {} lies past its end",
                    page_at(at, n)
                ),
                _ => format!("it is damaged: it ends inside its header (truncated to {len} bytes)"),
            }
        }
        other => other.to_string(),
    };
    open_error(path, message).with_cause(e)
}

/// The size of a page of the file (redb's default, which the store uses).
const PAGE: u64 = 4096;

/// The bytes `at..at + n` of a store file, named as a page.
fn page_at(at: u64, n: u64) -> String {
    if n == PAGE && at.is_multiple_of(PAGE) {
        format!("page {} (bytes {at}..{})", at / PAGE, at + n)
    } else {
        format!("the page at bytes {at}..{}", at + n)
    }
}

/// Where redb's integrity check found a file of `len` bytes damaged, from
/// the bytes it read last.
fn where_damaged(last_read: Option<(u64, u64)>, len: u64) -> String {
    match last_read {
        Some((at, _)) if at < PAGE => "its header (page 0) fails its checks".to_owned(),
        Some((at, n)) if at + n > len => format!(
            "it is cut short ({len} bytes): {} lies past its end",
            page_at(at, n)
        ),
        Some((at, n)) => format!("{} fails its checksum", page_at(at, n)),
        None => "redb's integrity check fails".to_owned(),
    }
}

/// Opens (or creates) the redb database on `backend`, checking every page if
/// `check_whole`; the open's `fsync` is deferred to the first write after it
/// (`barrier.rs`). Also the bytes of the file the open read last.
fn open_backend(
    backend: impl redb::StorageBackend,
    options: &FileOptions,
    check_whole: bool,
) -> (
    std::result::Result<Database, DatabaseError>,
    Option<(u64, u64)>,
) {
    let (backend, opening) = barrier::LazySync::new(backend);
    let opened = Database::builder()
        .set_cache_size(options.cache_bytes)
        .set_check_integrity_on_open(check_whole)
        .create_with_backend(backend);
    let last_read = opening.last_read();
    drop(opening);
    (opened, last_read)
}

/// Writes the format version into a new file; refuses a file of another
/// version, or a redb file that is not a tablekit store.
fn check_format(db: &Database, path: &Path) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| open_error(path, e);
    // A file of this version is read, not written: no commit, no `fsync`.
    let current = (|| -> std::result::Result<bool, redb::Error> {
        let txn = db.begin_read()?;
        let found = match txn.open_table(META) {
            Ok(meta) => meta.get("format")?.map(|v| v.value()),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(found == Some(FORMAT_VERSION))
    })()
    .map_err(|e| fail(&e))?;
    if current {
        return Ok(());
    }
    let txn = db.begin_write().map_err(|e| fail(&e))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| fail(&e))?;
        let found = meta.get("format").map_err(|e| fail(&e))?.map(|v| v.value());
        match found {
            Some(FORMAT_VERSION) => {}
            Some(FORMAT_JSON_RECORDS) => {
                meta.insert("format", FORMAT_VERSION)
                    .map_err(|e| fail(&e))?;
            }
            Some(v) => {
                return Err(fail(&format_args!(
                    "its format version is {v}, and this version of tablekit reads versions {FORMAT_JSON_RECORDS} and {FORMAT_VERSION}"
                )))
            }
            None => {
                let others = txn
                    .list_tables()
                    .map_err(|e| fail(&e))?
                    .any(|t| t.name() != "meta");
                if others {
                    return Err(fail(&"it is a redb database but not a tablekit store (no format version)"));
                }
                meta.insert("format", FORMAT_VERSION)
                    .map_err(|e| fail(&e))?;
                meta.insert("next_table", 1).map_err(|e| fail(&e))?;
                meta.insert(LIVE, 0).map_err(|e| fail(&e))?;
            }
        }
    }
    txn.commit().map_err(|e| fail(&e))
}

impl Durable {
    /// Opens (or creates) the file at `path` and reads the names of its
    /// tables (their entities stay in the file).
    pub(crate) fn open(path: &Path) -> Result<(Durable, Loaded)> {
        Durable::from_claim(Claim::open(path, Service::Tables)?)
    }

    /// The tables of a claimed file, named.
    pub(crate) fn from_claim(claim: Claim) -> Result<(Durable, Loaded)> {
        let group = Arc::new(Group::default());
        let committer = spawn_committer(claim.file.clone(), group.clone()).map_err(|e| {
            open_error(
                claim.path(),
                format_args!("its committer thread cannot be started: {e}"),
            )
        })?;
        let durable = Durable {
            claim,
            stripes: (0..STRIPES)
                .map(|_| Arc::new(tokio::sync::Mutex::new(())))
                .collect(),
            group,
            committer: Some(committer),
        };
        let loaded = durable.load()?;
        Ok((durable, loaded))
    }

    fn load(&self) -> Result<Loaded> {
        let fail = |e: &dyn std::fmt::Display| open_error(self.claim.path(), e);
        let txn = self.claim.db().begin_read().map_err(|e| fail(&e))?;
        let last_version = match txn.open_table(META) {
            Ok(meta) => meta
                .get("clock")
                .map_err(|e| fail(&e))?
                .map_or(0, |v| v.value() as i64),
            Err(redb::TableError::TableDoesNotExist(_)) => 0,
            Err(e) => return Err(fail(&e)),
        };
        let registry = match txn.open_table(TABLES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => {
                return Ok(Loaded {
                    tables: Vec::new(),
                    last_version,
                });
            }
            Err(e) => return Err(fail(&e)),
        };
        let mut tables = Vec::new();
        for row in registry.iter().map_err(|e| fail(&e))? {
            let (_, v) = row.map_err(|e| fail(&e))?;
            let (id, name) = v.value();
            tables.push(LoadedTable {
                id,
                name: name.to_owned(),
            });
        }
        Ok(Loaded {
            tables,
            last_version,
        })
    }

    /// The lock of partition `pk` of table `id` (see [`Durable::stripes`]),
    /// awaited without blocking the thread.
    pub(crate) async fn lock_partition(&self, id: u64, pk: &str) -> PartitionLock {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        pk.hash(&mut h);
        let stripe = &self.stripes[(h.finish() % self.stripes.len() as u64) as usize];
        PartitionLock {
            _held: stripe.clone().lock_owned().await,
        }
    }

    /// The entities of table `id` (named `name`, for errors) as of the last
    /// commit.
    pub(crate) fn snapshot(&self, id: u64, name: &str) -> Result<Snapshot> {
        let in_table = |e: redb::Error| self.read_error_in(name, None, e);
        let txn = self
            .claim
            .db()
            .begin_read()
            .map_err(|e| in_table(e.into()))?;
        let entities = entities_name(id);
        match txn.open_table(entities_def(&entities)) {
            Ok(table) => Ok(Snapshot {
                table: Some(table),
                origin: self.origin(name),
            }),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(Snapshot {
                table: None,
                origin: self.origin(name),
            }),
            Err(e) => Err(in_table(e.into())),
        }
    }

    /// How errors name table `name` of this file.
    fn origin(&self, name: &str) -> String {
        format!(
            "table {name} of the embedded store file {}",
            self.claim.path().display()
        )
    }

    /// A read of table `name` failed in redb (near the entity after `at`,
    /// an on-disk key, if known); redb's error is the source.
    fn read_error_in(&self, name: &str, at: Option<&[u8]>, e: redb::Error) -> Error {
        read_failed(&self.origin(name), at, e)
    }

    /// Commits a new table; returns its id.
    pub(crate) fn create_table(&self, lower: &str, name: &str) -> Result<u64> {
        let txn = self.claim.db().begin_write().map_err(write_error)?;
        let id = {
            let mut meta = txn.open_table(META).map_err(write_error)?;
            let id = meta
                .get("next_table")
                .map_err(write_error)?
                .map_or(1, |v| v.value());
            meta.insert("next_table", id + 1).map_err(write_error)?;
            let mut tables = txn.open_table(TABLES).map_err(write_error)?;
            tables.insert(lower, (id, name)).map_err(write_error)?;
            id
        };
        commit(txn)?;
        Ok(id)
    }

    /// Commits the deletion of a table and all its entities.
    pub(crate) fn delete_table(&self, lower: &str, id: u64) -> Result<()> {
        let txn = self.claim.db().begin_write().map_err(write_error)?;
        {
            let mut tables = txn.open_table(TABLES).map_err(write_error)?;
            tables.remove(lower).map_err(write_error)?;
            let name = entities_name(id);
            txn.delete_table(entities_def(&name)).map_err(write_error)?;
        }
        commit(txn)
    }

    /// Commits the changes of one write or one transaction, all or nothing, in
    /// partition `pk` of the table `lower` with id `id`, and returns once a
    /// commit that holds them is on disk. `partition` is the partition's lock,
    /// taken before the read that decided the changes; it is released when
    /// that commit has ended, even if this future is dropped before. A table
    /// deleted (and perhaps created again) since the write found it is 404
    /// `TableNotFound`.
    ///
    /// Group commit: the write is queued for the store's committer thread,
    /// and the caller's task awaits its outcome without blocking its thread.
    /// The committer commits every write queued since its last commit
    /// together, in the order they came, in one database transaction with
    /// one `fsync`. Each write is applied whole or not at all within it (a
    /// write whose table is gone is skipped alone); a commit that fails fails
    /// every write in it, and none is applied.
    pub(crate) async fn write(
        &self,
        partition: PartitionLock,
        lower: &str,
        id: u64,
        pk: &str,
        puts: &[Put<'_>],
    ) -> Result<()> {
        let mut rows = Vec::with_capacity(puts.len());
        let mut newest = None;
        for put in puts {
            let key = super::key::entity_key(pk, put.row_key);
            let value = put.entity.map(|e| {
                newest = newest.max(e.entity.timestamp.as_ref().map(ticks_of));
                let mut buf = Vec::new();
                encode(e, &mut buf);
                buf
            });
            rows.push((key, value));
        }
        let job = Job {
            lower: lower.to_owned(),
            id,
            rows,
            newest,
        };
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.group.enqueue(Queued {
            job,
            done,
            partition,
        })?;
        match outcome.await {
            Ok(outcome) => outcome.map_err(Failure::into_error),
            // The committer ended without answering (it panicked).
            Err(_) => Err(write_error("the store's committer thread has stopped")),
        }
    }

    /// [`Durable::write`] under the partition's lock, waited for on this thread.
    #[cfg(test)]
    pub(crate) fn write_now(&self, lower: &str, id: u64, pk: &str, puts: &[Put<'_>]) -> Result<()> {
        super::block_on(async {
            let partition = self.lock_partition(id, pk).await;
            self.write(partition, lower, id, pk, puts).await
        })
    }

    /// How many group commits this store has made.
    #[cfg(test)]
    pub(crate) fn commits(&self) -> u64 {
        lock(&self.group.state).commits
    }

    /// How many writes have been queued for a commit since the open.
    #[cfg(test)]
    pub(crate) fn enqueued(&self) -> u64 {
        lock(&self.group.state).enqueued
    }

    /// How many writes wait for a commit that has not begun.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        lock(&self.group.state).queue.len()
    }
}

impl Drop for Durable {
    /// Waits for the committer to commit what is queued and end, so the file
    /// is closed when the store is dropped.
    fn drop(&mut self) {
        self.group.close();
        if let Some(committer) = self.committer.take() {
            let _ = committer.join();
        }
    }
}

/// Commits `txn` and waits for its `fsync`; on a multi-thread tokio runtime the
/// worker hands its other tasks to another thread first.
pub(crate) fn commit(txn: redb::WriteTransaction) -> Result<()> {
    let wait = || txn.commit().map_err(write_error);
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}
