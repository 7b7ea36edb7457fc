//! Offline tasks on a store file: the integrity check and the compaction.

use super::*;

/// The database of an existing store file, opened for an offline task
/// (a check, a compaction): refused if the file is missing, or in use in
/// this or another process.
fn open_existing(path: &Path) -> Result<Database> {
    if !path.exists() {
        return Err(open_error(path, "there is no such file"));
    }
    let db = open_db(path, &FileOptions::new())?;
    check_format(&db, path)?;
    Ok(db)
}

/// Checks the store file at `path`: redb's integrity check of every page
/// (as every open does) and every entity of every table read and decoded.
/// The tables' names and entity counts, in name order.
pub(crate) fn check_file(path: &Path) -> Result<Vec<(String, u64)>> {
    let db = open_existing(path)?;
    let fail = |e: &dyn std::fmt::Display| open_error(path, e);
    let txn = db.begin_read().map_err(|e| fail(&e))?;
    let registry = match txn.open_table(TABLES) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(fail(&e)),
    };
    let mut out = Vec::new();
    for row in registry.iter().map_err(|e| fail(&e))? {
        let (_, v) = row.map_err(|e| fail(&e))?;
        let (id, name) = v.value();
        let mut count = 0;
        let mut last: Option<Vec<u8>> = None;
        match txn.open_table(entities_def(&entities_name(id))) {
            Ok(entities) => {
                for row in entities.iter().map_err(|e| fail(&e))? {
                    let (k, v) = row.map_err(|e| fail(&e))?;
                    decode_row(k.value(), v.value())
                        .map_err(|e| fail(&format_args!("in table {name}: {e}")))?;
                    if last.as_deref().is_some_and(|l| l >= k.value()) {
                        return Err(fail(&format_args!("table {name} is out of order")));
                    }
                    last = Some(k.value().to_vec());
                    count += 1;
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(fail(&e)),
        }
        out.push((name.to_owned(), count));
    }
    Ok(out)
}

/// Compacts the store file at `path`, returning the space of deleted
/// entities (and of old versions) to the file system: the file's size
/// before and after.
pub(crate) fn compact_file(path: &Path) -> Result<(u64, u64)> {
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let before = size();
    let mut db = open_existing(path)?;
    // Each pass moves what it can towards the start; a few suffice.
    for _ in 0..16 {
        match db.compact() {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                return Err(open_error(
                    path,
                    format_args!("it could not be compacted: {e}"),
                ))
            }
        }
    }
    drop(db);
    Ok((before, size()))
}
