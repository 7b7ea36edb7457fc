//! Offline tasks on a store file: the integrity check and the compaction.

use super::*;

/// The database of an existing store file, opened for an offline task
/// (a check, a compaction): refused if the file is missing, or in use in
/// this or another process.
fn open_existing(path: &Path) -> Result<Database> {
    if !path.exists() {
        return Err(open_error(path, "there is no such file"));
    }
    // Every page checked, whatever the seal says.
    let (db, _) = open_db(path, &FileOptions::new(), false)?;
    check_format(&db, path)?;
    Ok(db)
}

/// Checks the store file at `path`: redb's integrity check of every page
/// and every entity of every table read and decoded. The tables' names and
/// entity counts, in name order. A file that passes is sealed (`seal.rs`):
/// its next open skips the check of every page.
pub(crate) fn check_file(path: &Path) -> Result<Vec<(String, u64)>> {
    let db = open_existing(path)?;
    let tables = check_tables(&db, path)?;
    close_and_seal(db, path);
    Ok(tables)
}

/// Closes a database opened by an offline task, sealing its file if the
/// close is clean.
fn close_and_seal(db: Database, path: &Path) {
    if db.close().is_ok() {
        seal::write(path);
    }
}

/// Every entity of every table of `db` read and decoded, in key order. An
/// error names the table and the entity found (or the last one read before
/// a row that could not be read), and keeps redb's error as its source.
fn check_tables(db: &Database, path: &Path) -> Result<Vec<(String, u64)>> {
    let fail = |e: &dyn std::fmt::Display| open_error(path, e);
    let txn = db.begin_read().map_err(|e| fail(&e))?;
    let registry = match txn.open_table(TABLES) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(fail(&format_args!("its list of tables: {e}")).with_cause(e)),
    };
    let mut out = Vec::new();
    let rows = registry
        .iter()
        .map_err(|e| fail(&format_args!("its list of tables: {e}")).with_cause(e))?;
    for row in rows {
        let (_, v) =
            row.map_err(|e| fail(&format_args!("its list of tables: {e}")).with_cause(e))?;
        let (id, name) = v.value();
        let name = name.to_owned();
        let count = check_table(&txn, id).map_err(|(what, cause)| {
            let e = fail(&format_args!("it is damaged: in table {name}, {what}"));
            match cause {
                Some(c) => e.with_cause(c),
                None => e,
            }
        })?;
        out.push((name, count));
    }
    Ok(out)
}

/// An entity named by its on-disk key, for a check's error.
fn entity_named(key: &[u8]) -> String {
    match super::super::key::decode_entity_key(key) {
        Some((pk, rk)) => format!("the entity ({pk:?}, {rk:?})"),
        None => "an entity whose key is unreadable".to_owned(),
    }
}

/// Reads and decodes every entity of table `id` in key order: how
/// many there are, or what is wrong and where (and redb's error).
fn check_table(
    txn: &redb::ReadTransaction,
    id: u64,
) -> std::result::Result<u64, (String, Option<redb::Error>)> {
    let after = |last: &Option<Vec<u8>>| match last {
        Some(k) => format!("after {}", entity_named(k)),
        None => "at its first entity".to_owned(),
    };
    let redb_failed = |last: &Option<Vec<u8>>, e: redb::Error| {
        (format!("redb cannot read on {}: {e}", after(last)), Some(e))
    };
    let entities = match txn.open_table(entities_def(&entities_name(id))) {
        Ok(t) => t,
        // A table with no entity written yet has no tree.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(redb_failed(&None, e.into())),
    };
    let mut count = 0;
    let mut last: Option<Vec<u8>> = None;
    for row in entities.iter().map_err(|e| redb_failed(&None, e.into()))? {
        let (k, v) = row.map_err(|e| redb_failed(&last, e.into()))?;
        let key = k.value();
        let Some((pk, rk)) = super::super::key::decode_entity_key(key) else {
            return Err((
                format!("the key of the entity {} is unreadable", after(&last)),
                None,
            ));
        };
        if let Some(what) = decode(pk, rk, v.value()).err() {
            return Err((what, None));
        }
        if let Some(l) = last.as_deref().filter(|l| *l >= key) {
            return Err((
                format!(
                    "{} comes after {}: the table is out of order",
                    entity_named(key),
                    entity_named(l)
                ),
                None,
            ));
        }
        last = Some(key.to_vec());
        count += 1;
    }
    Ok(count)
}

/// Compacts the store file at `path`, returning the space of deleted
/// entities (and of old versions) to the file system: the file's size
/// before and after.
pub(crate) fn compact_file(path: &Path) -> Result<(u64, u64)> {
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let before = size();
    let mut db = open_existing(path)?;
    compact(&mut db)
        .map_err(|e| open_error(path, format_args!("it could not be compacted: {e}")))?;
    close_and_seal(db, path);
    Ok((before, size()))
}

/// The `meta` key of the bytes of entities deleted since the file was last
/// compacted (keys and records: what the deletes gave back to redb's free
/// space).
pub(super) const FREED: &str = "freed";

/// The `meta` key of the bytes of every table's entities (keys and
/// records), kept by each commit, in files created by this version or
/// compacted since: in others it is absent until their first compaction.
pub(super) const LIVE: &str = "live";

/// The least [`FREED`] that makes a compaction at close worthwhile, with a
/// quarter of the file's size.
pub(super) const COMPACT_AT_CLOSE_BYTES: u64 = 1 << 20;

/// The least size of a file compacted at close because its entities take
/// at most half of it ([`LIVE`]), whatever freed the rest. A densely filled
/// file holds its entities in well over half of it: the `durable_store`
/// bench's `bulk` files (100,000 entities, 35.7 MB) are not compacted.
pub(super) const COMPACT_SPARSE_BYTES: u64 = 4 << 20;

/// Rebuilds every table's entities and moves the file's pages towards its
/// start until nothing moves, shrinking the file, and resets [`FREED`].
///
/// redb's compaction moves pages but does not merge the leaves deletes left
/// sparse (a file 90% deleted compacted to 1.5 times a fresh one's size), so
/// each table's entities are first copied, in key order, into a new tree
/// that replaces the old one in the same commit (as dense as a fresh fill;
/// every page of the old tree is freed). A table at a time: the file grows
/// by at most that table's live entities meanwhile. Nothing is committed
/// after the moves (see below): the bench's file 90% deleted at 100,000
/// entities kept 7.2 MB with a commit there, 3.6 MB without. See
/// `compaction_leaves_a_file_as_dense_as_a_fresh_one`,
/// `a_compaction_after_single_commits_leaves_the_file_as_dense_as_a_fresh_one`
/// and `a_compacted_file_ends_near_its_last_used_page`.
fn compact(db: &mut Database) -> std::result::Result<(), redb::Error> {
    let ids: Vec<u64> = {
        let txn = db.begin_read()?;
        match txn.open_table(TABLES) {
            Ok(tables) => tables
                .iter()?
                .map(|row| row.map(|(_, v)| v.value().0))
                .collect::<std::result::Result<_, _>>()?,
            Err(redb::TableError::TableDoesNotExist(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        }
    };
    let mut live = 0;
    for id in ids {
        live += rebuild(db, id)?;
    }
    // Reset before the pages move: a commit after them would find no free
    // page below the file's end yet (those the moves free are released by
    // the next commit) and grow the file again for its own.
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        meta.insert(FREED, 0)?;
        meta.insert(LIVE, live)?;
    }
    txn.commit()?;
    // Each pass moves what it can towards the start; a few suffice.
    for _ in 0..16 {
        if !db.compact()? {
            break;
        }
    }
    Ok(())
}

/// Replaces the entities tree of table `id` by a copy of it made in key
/// order, in one commit (all or nothing): the bytes of its entities.
fn rebuild(db: &Database, id: u64) -> std::result::Result<u64, redb::Error> {
    let name = entities_name(id);
    let copy = format!("{name}~");
    let exists = {
        let txn = db.begin_read()?;
        match txn.open_table(entities_def(&name)) {
            Ok(_) => true,
            // A table with no entity written yet has no tree.
            Err(redb::TableError::TableDoesNotExist(_)) => false,
            Err(e) => return Err(e.into()),
        }
    };
    if !exists {
        return Ok(0);
    }
    let mut live = 0;
    let txn = db.begin_write()?;
    {
        let old = txn.open_table(entities_def(&name))?;
        let mut new = txn.open_table(entities_def(&copy))?;
        for row in old.iter()? {
            let (k, v) = row?;
            live += (k.value().len() + v.value().len()) as u64;
            new.insert(k.value(), v.value())?;
        }
    }
    txn.delete_table(entities_def(&name))?;
    txn.rename_table(entities_def(&copy), entities_def(&name))?;
    txn.commit()?;
    Ok(live)
}

/// Compacts the file of `db`, closing, when that gives back enough: if
/// deletes since its last compaction freed at least
/// [`COMPACT_AT_CLOSE_BYTES`] and a quarter of its size, or if its entities
/// ([`LIVE`], where known) take at most half of a file of at least
/// [`COMPACT_SPARSE_BYTES`] that holds no queue or blob (whose bytes
/// [`LIVE`] does not count): what leaves the rest free does not matter
/// (deletes, entities replaced by smaller ones, sparse pages). A failure
/// leaves the file as it was (a compaction is a series of commits) and the
/// close goes on.
pub(super) fn compact_at_close(db: &mut Database, path: &Path) {
    let sizes = (|| -> std::result::Result<(u64, Option<u64>, bool), redb::Error> {
        let txn = db.begin_read()?;
        let meta = txn.open_table(META)?;
        let freed = meta.get(FREED)?.map_or(0, |v| v.value());
        let live = meta.get(LIVE)?.map(|v| v.value());
        let only_tables = txn.list_tables()?.all(|t| {
            let name = t.name();
            name == "meta" || name == "tables" || name.starts_with("entities/")
        });
        Ok((freed, live, only_tables))
    })();
    let Ok((freed, live, only_tables)) = sizes else {
        return;
    };
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    if worth_compacting(len, freed, live, only_tables) {
        let _ = compact(db);
    }
}

/// Whether a file of `len` bytes is compacted at close (see
/// [`compact_at_close`]).
pub(super) fn worth_compacting(len: u64, freed: u64, live: Option<u64>, only_tables: bool) -> bool {
    let deleted = freed >= COMPACT_AT_CLOSE_BYTES && freed >= len / 4;
    let sparse =
        only_tables && len >= COMPACT_SPARSE_BYTES && live.is_some_and(|live| live <= len / 2);
    deleted || sparse
}

/// Removes the store file at `path` and its seal. Refused while a store of
/// this process has the file open (a store in another process is not seen:
/// the file system lets the file go and that store keeps writing to it
/// unnamed).
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    let key = registry_key(path);
    let open = lock(&FILES)
        .as_ref()
        .and_then(|files| files.get(&key))
        .is_some_and(|w| w.strong_count() > 0);
    if open {
        return Err(open_error(
            path,
            "it is open in this process; drop its clients first",
        ));
    }
    seal::remove(path);
    std::fs::remove_file(path)
        .map_err(|e| open_error(path, format_args!("it could not be removed: {e}")))
}
