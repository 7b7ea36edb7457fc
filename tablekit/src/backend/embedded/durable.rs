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
//! The in-memory store stays the authority for reads and for every rule
//! (conditions, merges, limits, transactions, paging): the file only journals
//! the outcome. A write is decided under its partition's lock exactly as in
//! memory, then committed to the file (one database write transaction per
//! single write, one per entity group transaction, durable: the commit returns
//! after `fsync`), and only then applied in memory and acknowledged. A write
//! whose commit fails changes nothing and answers 500 `InternalError`. So the
//! file-backed store has the in-memory semantics by construction, and the
//! behaviour suite runs on it a third time to prove it. The cost is memory (the
//! whole store is held, as in memory) and one `fsync` per write.
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
//! key-value journal; fjall is built for write-heavy workloads larger than
//! memory, which this store (held in memory) is not; sled's stable line is
//! unmaintained. The workspace's rust-version (1.80) pins redb to 2.2 (later
//! 2.x releases need 1.81 and 1.85); the 2.x file format is the same.
//!
//! # The file
//!
//! - `meta`: `format` → [`FORMAT_VERSION`]; a file of a newer version is refused
//!   with a clear error, never guessed at. `next_table` → the next table id.
//! - `tables`: the lower-cased name → (id, the name as created).
//! - `entities/{id}`: (PartitionKey, RowKey) → the stored entity (below). Each
//!   table has its own database table, so deleting a table is one step and a
//!   write racing a delete cannot land in a later table of the same name.
//!
//! An entity is stored as compact JSON: the version (100 ns ticks; the
//! Timestamp and ETag are derived from it) and the properties in order, each
//! with its Edm type; a Double as its IEEE bits and a DateTime as seconds and
//! nanoseconds, so every value reads back bit for bit (`-0.0`, NaN, 100 ns).
//!
//! # When things go wrong
//!
//! - A file that has content but is no redb database is refused and left
//!   untouched (redb 2.2 itself would initialise a new database over it).
//! - A damaged file (cut short, a broken header) is refused at open with a clear
//!   error; redb 2.2 panics on some of these, which the open turns into that error.
//! - A write the disk refuses (full, read-only, failing) answers 500
//!   `InternalError` and is not applied; redb then refuses every later write
//!   until the store is reopened, since the file's state after a failed commit
//!   is known only to its recovery on open. If the failure came after the
//!   commit reached the disk (a failed final `fsync`), the reopened store may
//!   show that one write: it is ambiguous, as a lost answer over HTTP is.
//!
//! A crash (power loss, SIGKILL) loses nothing acknowledged; on the next open
//! redb rebuilds its free-space map from the last committed state by itself,
//! which takes time proportional to the file's size. Blocking: a write blocks
//! the calling thread for its `fsync`, like a local disk write does; on a
//! multi-thread tokio runtime it first hands the worker's other tasks on
//! (`block_in_place`), on a current-thread runtime they wait.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use base64::Engine as _;
use chrono::DateTime;
use redb::{Database, DatabaseError, ReadableTable, TableDefinition, TableHandle};
use serde::{Deserialize, Serialize};

use super::clock::{ticks_of, Version};
use crate::backend::StoredEntity;
use crate::entity::{DynamicEntity, Properties};
use crate::error::{Error, ErrorCode, Result};
use crate::EdmValue;

/// The version of the file's layout this code writes and reads.
pub(crate) const FORMAT_VERSION: u64 = 1;

pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const TABLES: TableDefinition<&str, (u64, &str)> = TableDefinition::new("tables");

fn entities_name(id: u64) -> String {
    format!("entities/{id}")
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
        drop(self.db.take());
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

impl Claim {
    /// Claims `service` of the store file at `path`, opening (or creating) the
    /// file unless this process has it open already.
    pub(crate) fn open(path: &Path, service: Service) -> Result<Claim> {
        create_folders(path)?;
        let key = registry_key(path);
        let file = {
            let mut files = lock(&FILES);
            let map = files.get_or_insert_with(HashMap::new);
            match map.get(&key).and_then(Weak::upgrade) {
                Some(file) => file,
                None => {
                    let db = open_db(path)?;
                    // Checked before it becomes a `File`, whose drop takes the
                    // registry's lock (held here).
                    check_format(&db, path)?;
                    let file = Arc::new(File {
                        db: Some(db),
                        path: path.to_owned(),
                        key: Some(key.clone()),
                        claimed: Mutex::new([false; 3]),
                    });
                    map.insert(key, Arc::downgrade(&file));
                    file
                }
            }
        };
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
    pub(crate) fn of_db(db: Database, path: &Path, service: Service) -> Result<Claim> {
        check_format(&db, path)?;
        let file = Arc::new(File {
            db: Some(db),
            path: path.to_owned(),
            key: None,
            claimed: Mutex::new([false; 3]),
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
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("path", &self.claim.path())
            .finish()
    }
}

/// A table as the file holds it, with its entities in the file's order.
pub(crate) struct LoadedTable {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) entities: Vec<StoredEntity>,
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

/// Refuses a file that has content but is no redb database: redb 2.2 would
/// initialise a new database over it (its docs say it refuses; its code does
/// not), destroying whatever the user pointed us at by mistake.
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
    if head.is_empty() || head == REDB_MAGIC {
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
        format!(
            "the embedded store file could not be written, so the write was not applied: {what}"
        ),
    )
}

/// The most of the file redb keeps cached in memory. Reads are served from
/// the store in memory, so redb's cache only helps the pages a commit
/// rewrites (the B-tree's upper levels); redb's default (1 GiB) would keep
/// the whole file resident after the load on open, doubling the store's
/// memory (the `durable_stream` bench measured 205 MB resident for 100,000
/// entities with it).
const FILE_CACHE_BYTES: usize = 16 << 20;

/// Runs an open that reads the file through redb (the format check, the load
/// of every table): redb 2.2 panics on some damaged files beyond those its own
/// open catches (an `unreachable!` in a B-tree lookup, found by the
/// `durable_store` fuzz target), and a damaged file is an error, not a crash.
pub(crate) fn refuse_damage<T>(path: &Path, open: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(open))
        .unwrap_or_else(|_| Err(open_error(path, "it is damaged (truncated or corrupted)")))
}

/// Opens (or creates) the redb database at `path`, refusing what is not one.
fn open_db(path: &Path) -> Result<Database> {
    refuse_foreign_file(path)?;
    // redb 2.2 asserts (panics) on some damaged files, such as one cut
    // shorter than its header says: that is a damaged file, not a bug here.
    let opened = std::panic::catch_unwind(|| {
        Database::builder()
            .set_cache_size(FILE_CACHE_BYTES)
            .create(path)
    })
    .map_err(|_| open_error(path, "it is damaged (truncated or corrupted)"))?;
    opened.map_err(|e| match e {
        DatabaseError::DatabaseAlreadyOpen => open_error(
            path,
            "it is in use by another open store (in this or another process)",
        ),
        DatabaseError::UpgradeRequired(v) => open_error(
            path,
            format!("it has redb file format {v}, which this build cannot read"),
        ),
        other => open_error(path, other),
    })
}

/// Writes the format version into a new file; refuses a file of another
/// version, or a redb file that is not a tablekit store.
fn check_format(db: &Database, path: &Path) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| open_error(path, e);
    let txn = db.begin_write().map_err(|e| fail(&e))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| fail(&e))?;
        let found = meta.get("format").map_err(|e| fail(&e))?.map(|v| v.value());
        match found {
            Some(FORMAT_VERSION) => {}
            Some(v) => {
                return Err(fail(&format_args!(
                    "its format version is {v}, and this version of tablekit reads only version {FORMAT_VERSION}"
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
            }
        }
    }
    txn.commit().map_err(|e| fail(&e))
}

impl Durable {
    /// Opens (or creates) the file at `path` and reads every table in it.
    pub(crate) fn open(path: &Path) -> Result<(Durable, Vec<LoadedTable>)> {
        refuse_damage(path, || {
            Durable::from_claim(Claim::open(path, Service::Tables)?)
        })
    }

    /// The tables of a claimed file, read.
    fn from_claim(claim: Claim) -> Result<(Durable, Vec<LoadedTable>)> {
        let durable = Durable { claim };
        let tables = durable.load()?;
        Ok((durable, tables))
    }

    fn load(&self) -> Result<Vec<LoadedTable>> {
        let fail = |e: &dyn std::fmt::Display| open_error(self.claim.path(), e);
        let txn = self.claim.db().begin_read().map_err(|e| fail(&e))?;
        let registry = match txn.open_table(TABLES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(fail(&e)),
        };
        let mut out = Vec::new();
        for row in registry.iter().map_err(|e| fail(&e))? {
            let (_, v) = row.map_err(|e| fail(&e))?;
            let (id, name) = v.value();
            let mut table = LoadedTable {
                id,
                name: name.to_owned(),
                entities: Vec::new(),
            };
            let name = entities_name(id);
            let def: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(&name);
            match txn.open_table(def) {
                Ok(entities) => {
                    for row in entities.iter().map_err(|e| fail(&e))? {
                        let (k, v) = row.map_err(|e| fail(&e))?;
                        let (pk, rk) = k.value();
                        let stored = decode(pk, rk, v.value()).map_err(|e| fail(&e))?;
                        table.entities.push(stored);
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(fail(&e)),
            }
            out.push(table);
        }
        Ok(out)
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
            let def: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(&name);
            txn.delete_table(def).map_err(write_error)?;
        }
        commit(txn)
    }

    /// Commits the changes of one write or one transaction, all or nothing, in
    /// partition `pk` of the table `lower` with id `id`. A table deleted (and
    /// perhaps created again) since the write found it is 404 `TableNotFound`.
    pub(crate) fn write(&self, lower: &str, id: u64, pk: &str, puts: &[Put<'_>]) -> Result<()> {
        let txn = self.claim.db().begin_write().map_err(write_error)?;
        {
            let tables = txn.open_table(TABLES).map_err(write_error)?;
            let current = tables.get(lower).map_err(write_error)?.map(|v| v.value().0);
            if current != Some(id) {
                return Err(super::errors::table_not_found());
            }
            let name = entities_name(id);
            let def: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(&name);
            let mut entities = txn.open_table(def).map_err(write_error)?;
            let mut buf = Vec::new();
            for put in puts {
                match put.entity {
                    Some(e) => {
                        buf.clear();
                        encode(e, &mut buf);
                        entities
                            .insert((pk, put.row_key), buf.as_slice())
                            .map_err(write_error)?;
                    }
                    None => {
                        entities.remove((pk, put.row_key)).map_err(write_error)?;
                    }
                }
            }
        }
        commit(txn)
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

/// A stored entity's record: its version and its properties in order.
#[derive(Serialize, Deserialize)]
struct Record<'a> {
    /// The version: 100 ns ticks since the Unix epoch.
    t: i64,
    #[serde(borrow)]
    p: Vec<(Cow<'a, str>, Value<'a>)>,
}

/// A property value with its Edm type, in a form that reads back bit for bit.
#[derive(Serialize, Deserialize)]
enum Value<'a> {
    #[serde(rename = "s", borrow)]
    String(Cow<'a, str>),
    /// Base64.
    #[serde(rename = "b")]
    Binary(String),
    #[serde(rename = "o")]
    Boolean(bool),
    /// Seconds and nanoseconds since the Unix epoch.
    #[serde(rename = "d")]
    DateTime(i64, u32),
    /// The IEEE 754 bits.
    #[serde(rename = "f")]
    Double(u64),
    #[serde(rename = "g")]
    Guid(u128),
    #[serde(rename = "i")]
    Int32(i32),
    #[serde(rename = "l")]
    Int64(i64),
}

fn encode(stored: &StoredEntity, out: &mut Vec<u8>) {
    let e = &stored.entity;
    let p = e
        .properties
        .iter()
        .map(|(n, v)| {
            let v = match v {
                EdmValue::String(s) => Value::String(Cow::Borrowed(s)),
                EdmValue::Binary(b) => {
                    Value::Binary(base64::engine::general_purpose::STANDARD.encode(b))
                }
                EdmValue::Boolean(b) => Value::Boolean(*b),
                EdmValue::DateTime(d) => Value::DateTime(d.timestamp(), d.timestamp_subsec_nanos()),
                EdmValue::Double(f) => Value::Double(f.to_bits()),
                EdmValue::Guid(g) => Value::Guid(g.as_u128()),
                EdmValue::Int32(i) => Value::Int32(*i),
                EdmValue::Int64(i) => Value::Int64(*i),
            };
            (Cow::Borrowed(n), v)
        })
        .collect();
    let record = Record {
        t: e.timestamp.as_ref().map_or(0, ticks_of),
        p,
    };
    serde_json::to_writer(out, &record).expect("a record serialises to memory");
}

fn decode(pk: &str, rk: &str, bytes: &[u8]) -> std::result::Result<StoredEntity, String> {
    let bad = |what: &str| format!("the entity ({pk:?}, {rk:?}) is unreadable: {what}");
    let record: Record<'_> = serde_json::from_slice(bytes).map_err(|e| bad(&e.to_string()))?;
    let mut properties = Properties::with_capacity(record.p.len());
    for (name, v) in record.p {
        let v = match v {
            Value::String(s) => EdmValue::String(s.into_owned()),
            Value::Binary(b) => EdmValue::Binary(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| bad(&e.to_string()))?,
            ),
            Value::Boolean(b) => EdmValue::Boolean(b),
            Value::DateTime(s, n) => EdmValue::DateTime(
                DateTime::from_timestamp(s, n).ok_or_else(|| bad("a DateTime is out of range"))?,
            ),
            Value::Double(bits) => EdmValue::Double(f64::from_bits(bits)),
            Value::Guid(g) => EdmValue::Guid(uuid::Uuid::from_u128(g)),
            Value::Int32(i) => EdmValue::Int32(i),
            Value::Int64(i) => EdmValue::Int64(i),
        };
        properties.push_unchecked(name.into_owned(), v);
    }
    let version = Version::at(record.t);
    Ok(StoredEntity {
        entity: DynamicEntity {
            partition_key: pk.to_owned(),
            row_key: rk.to_owned(),
            timestamp: Some(version.timestamp),
            etag: Some(version.etag),
            properties,
        },
        timestamp_text: version.text,
    })
}

#[cfg(test)]
mod tests {
    use super::full_disk::TempFile;
    use super::*;
    use crate::error::ErrorKind;

    #[track_caller]
    fn open_message(path: &Path) -> String {
        let err = Durable::open(path).map(|_| ()).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Config(_)), "{err:?}");
        err.to_string()
    }

    #[test]
    fn every_edm_value_reads_back_bit_for_bit() {
        let nan = f64::from_bits(0x7ff8_0000_dead_beef);
        let when = DateTime::from_timestamp(1_700_000_000, 123_456_700).unwrap();
        let values = [
            EdmValue::String("a\u{1F600}\"\\\u{0}é".into()),
            EdmValue::String(String::new()),
            EdmValue::Binary(vec![0, 255, 1, 2]),
            EdmValue::Binary(Vec::new()),
            EdmValue::Boolean(true),
            EdmValue::DateTime(when),
            EdmValue::DateTime(DateTime::from_timestamp(-11_644_473_600, 0).unwrap()),
            EdmValue::Double(-0.0),
            EdmValue::Double(nan),
            EdmValue::Double(f64::INFINITY),
            EdmValue::Double(f64::MIN_POSITIVE / 3.0),
            EdmValue::Double(0.1 + 0.2),
            EdmValue::Guid(uuid::Uuid::from_u128(u128::MAX - 7)),
            EdmValue::Int32(i32::MIN),
            EdmValue::Int64(i64::MAX),
        ];
        let mut entity = DynamicEntity::new("p\u{1F600}", "r'1");
        for (i, v) in values.iter().enumerate() {
            entity
                .properties
                .push_unchecked(format!("P{}", 20 - i), v.clone());
        }
        let version = Version::at(17_000_000_001_234_567);
        entity.timestamp = Some(version.timestamp);
        entity.etag = Some(version.etag.clone());
        let stored = StoredEntity {
            entity,
            timestamp_text: version.text,
        };
        let mut bytes = Vec::new();
        encode(&stored, &mut bytes);
        let back = decode("p\u{1F600}", "r'1", &bytes).unwrap();
        assert_eq!(back.entity.etag, stored.entity.etag);
        assert_eq!(back.entity.timestamp, stored.entity.timestamp);
        assert_eq!(back.timestamp_text, stored.timestamp_text);
        assert_eq!(back.entity.partition_key, "p\u{1F600}");
        let names = |e: &StoredEntity| {
            e.entity
                .properties
                .iter()
                .map(|(n, _)| n.to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&back), names(&stored), "order is kept");
        for ((_, a), b) in back.entity.properties.iter().zip(&values) {
            match (a, b) {
                (EdmValue::Double(x), EdmValue::Double(y)) => assert_eq!(x.to_bits(), y.to_bits()),
                _ => assert_eq!(a, b),
            }
        }
    }

    #[test]
    fn a_file_of_a_newer_format_version_is_refused() {
        let file = TempFile::new();
        drop(Durable::open(&file.0).unwrap());
        let db = Database::create(&file.0).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("format", FORMAT_VERSION + 1)
            .unwrap();
        txn.commit().unwrap();
        drop(db);
        let message = open_message(&file.0);
        assert!(message.contains("format version is 2"), "{message}");
        assert!(message.contains("reads only version 1"), "{message}");
    }

    #[test]
    fn a_second_open_of_a_file_in_use_is_refused_until_it_is_closed() {
        let file = TempFile::new();
        let (first, _) = Durable::open(&file.0).unwrap();
        first.create_table("t1x", "T1x").unwrap();
        let message = open_message(&file.0);
        assert!(
            message.contains("in use by another open store"),
            "{message}"
        );
        // The first open goes on working, and the file is whole once it closes.
        first.create_table("t2x", "T2x").unwrap();
        drop(first);
        let (_, tables) = Durable::open(&file.0).unwrap();
        let names: Vec<_> = tables.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["T1x", "T2x"]);
    }

    #[test]
    fn a_truncated_or_corrupted_store_is_a_clear_error() {
        let file = TempFile::new();
        {
            let (d, _) = Durable::open(&file.0).unwrap();
            let id = d.create_table("t1x", "T1x").unwrap();
            let mut e = DynamicEntity::new("p", "r");
            e.properties
                .push_unchecked("S".into(), EdmValue::String("x".repeat(20_000)));
            let v = Version::at(1);
            e.timestamp = Some(v.timestamp);
            e.etag = Some(v.etag);
            let stored = StoredEntity {
                entity: e,
                timestamp_text: v.text,
            };
            let put = Put {
                row_key: "r",
                entity: Some(&stored),
            };
            d.write("t1x", id, "p", &[put]).unwrap();
        }
        let whole = std::fs::read(&file.0).unwrap();
        // Per table, the length of its one entity's string.
        let shape = |tables: &[LoadedTable]| -> Vec<usize> {
            tables
                .iter()
                .flat_map(|t| &t.entities)
                .map(|e| match e.entity.properties.iter().next() {
                    Some((_, EdmValue::String(s))) => s.len(),
                    _ => 0,
                })
                .collect()
        };
        let mut outcomes = Vec::new();
        for len in [whole.len() / 2, 4096, 600, 20] {
            std::fs::write(&file.0, &whole[..len]).unwrap();
            outcomes.push((len, Durable::open(&file.0).map(|(_, t)| shape(&t))));
        }
        // Every byte of the header region flipped in turn would be slow; flip
        // a run of bytes in the middle of the file (pages, not the header).
        let mut corrupt = whole.clone();
        let mid = whole.len() / 2;
        for b in &mut corrupt[mid..mid + 4096] {
            *b ^= 0x5a;
        }
        std::fs::write(&file.0, &corrupt).unwrap();
        outcomes.push((0, Durable::open(&file.0).map(|(_, t)| shape(&t))));
        for (len, outcome) in outcomes {
            eprintln!(
                "cut to {len} bytes (0: corrupted): {:?}",
                outcome.as_ref().map_err(ToString::to_string)
            );
            match outcome {
                Err(e) => {
                    let message = e.to_string();
                    assert!(message.contains("cannot be opened"), "{len}: {message}");
                }
                // A cut or flipped region that held no live page may leave the
                // store readable: then it must read back whole.
                Ok(tables) => assert_eq!(tables, [20_000], "{len}"),
            }
        }
    }

    #[test]
    fn a_file_that_is_not_a_tablekit_store_is_refused() {
        let file = TempFile::new();
        let db = Database::create(&file.0).unwrap();
        let other: TableDefinition<&str, u64> = TableDefinition::new("something");
        let txn = db.begin_write().unwrap();
        txn.open_table(other).unwrap().insert("x", 1).unwrap();
        txn.commit().unwrap();
        drop(db);
        let message = open_message(&file.0);
        assert!(message.contains("not a tablekit store"), "{message}");

        std::fs::write(
            &file.0,
            b"not a database at all, just some text".repeat(200),
        )
        .unwrap();
        let message = open_message(&file.0);
        assert!(message.contains("left untouched"), "{message}");
        assert_eq!(
            std::fs::read(&file.0).unwrap(),
            b"not a database at all, just some text".repeat(200),
            "a file that is not a store is left as it was"
        );

        let dir = std::env::temp_dir();
        let message = open_message(&dir);
        assert!(message.contains("it is a directory"), "{message}");
    }
}

#[cfg(test)]
pub(crate) mod full_disk {
    //! A full disk, simulated through redb's storage backend API: every write
    //! refused with ENOSPC once the disk "fills". (The queue and blob cases
    //! are beside their stores, in `queues.rs` and `blobs.rs`.)

    use std::io;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use bytes::Bytes;
    use redb::backends::FileBackend;
    use redb::StorageBackend;

    use super::*;
    use crate::backend::embedded::{EmbeddedBackend, Store};
    use crate::backend::{BatchKind, BatchOp, EntityBody, Operation, Response};
    use crate::entity::EntityKey;

    /// A path in the temporary directory, removed when dropped.
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
        }
    }

    #[derive(Debug)]
    struct FullDisk {
        file: FileBackend,
        full: Arc<AtomicBool>,
    }

    fn enospc() -> io::Error {
        io::Error::from_raw_os_error(28)
    }

    impl StorageBackend for FullDisk {
        fn len(&self) -> std::result::Result<u64, io::Error> {
            self.file.len()
        }
        fn read(&self, offset: u64, len: usize) -> std::result::Result<Vec<u8>, io::Error> {
            self.file.read(offset, len)
        }
        fn set_len(&self, len: u64) -> std::result::Result<(), io::Error> {
            if self.full.load(Ordering::SeqCst) && len > self.file.len()? {
                return Err(enospc());
            }
            self.file.set_len(len)
        }
        fn sync_data(&self, eventual: bool) -> std::result::Result<(), io::Error> {
            self.file.sync_data(eventual)
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::result::Result<(), io::Error> {
            if self.full.load(Ordering::SeqCst) {
                return Err(enospc());
            }
            self.file.write(offset, data)
        }
    }

    /// The store file at `path` on a disk that fills when the flag is set:
    /// the claim of `service` in it, and the flag.
    pub(crate) fn claim_on_full_disk(path: &Path, service: Service) -> (Claim, Arc<AtomicBool>) {
        let full = Arc::new(AtomicBool::new(false));
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
        };
        let db = Database::builder().create_with_backend(backend).unwrap();
        (Claim::of_db(db, path, service).unwrap(), full)
    }

    /// The refusal of a write the file could not take: 500, saying nothing
    /// was applied.
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
    #[track_caller]
    pub(crate) fn assert_refused_for_space(err: &Error) {
        assert_not_applied(err);
        let message = err.to_string();
        assert!(message.contains("os error 28"), "{message}");
    }

    fn insert(b: &EmbeddedBackend, rk: &str) -> Result<Response> {
        b.run(Operation::Insert {
            table: "Notes",
            body: EntityBody::Json(Bytes::from(format!(
                "{{\"PartitionKey\":\"p\",\"RowKey\":\"{rk}\",\"N\":1}}"
            ))),
        })
    }

    fn rows(b: &EmbeddedBackend) -> Vec<String> {
        let t = b.store.table("Notes").unwrap();
        let (page, _) = t.query(None, None, None);
        page.iter().map(|e| e.entity.row_key.clone()).collect()
    }

    #[test]
    fn a_full_disk_refuses_the_write_clearly_and_loses_nothing_acknowledged() {
        let path = TempFile::new();
        let (claim, full) = claim_on_full_disk(&path.0, Service::Tables);
        let (durable, loaded) = Durable::from_claim(claim).unwrap();
        let b = EmbeddedBackend {
            store: Arc::new(Store::with_file(durable, loaded)),
        };
        b.run(Operation::CreateTable { table: "Notes" }).unwrap();
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
            body: Some(format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"{rk}\"}}").into_bytes()),
            bag: None,
        };
        let err = b
            .run(Operation::Transaction {
                table: "Notes",
                ops: vec![op("tx1"), op("tx2")],
            })
            .unwrap_err();
        assert_eq!(err.status(), Some(500), "{err:?}");
        let err = b
            .run(Operation::CreateTable { table: "Other" })
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

        let (_, tables) = Durable::open(&path.0).unwrap();
        let names: Vec<_> = tables.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["Notes"]);
        let rows: Vec<_> = tables[0]
            .entities
            .iter()
            .map(|e| e.entity.row_key.as_str())
            .collect();
        assert_eq!(
            rows,
            ["kept"],
            "every acknowledged write, and nothing refused"
        );
    }
}
