//! `export <table> [--out <file>] [--format csv|jsonl]`: the table as JSON
//! lines, with a progress line; into a file, resumable: an existing file is
//! continued after its last complete line (a line cut off by a crash is
//! dropped first). As CSV (`--format csv`, or an `--out` file named `.csv`),
//! the whole table is read first, since the header names every property, and
//! an existing file is refused rather than continued.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Instant;

use futures::TryStreamExt as _;
use tablekit::entity::EntityKey;
use tablekit::{codec::entity_from_json, DynamicEntity, TableClient};

use crate::copy::literal;
use crate::progress::Progress;

/// Opens `path` to append to it; returns it with the keys of its last
/// complete line, after cutting off an incomplete last line.
pub(crate) fn open_for_resume(path: &Path) -> Result<(File, Option<EntityKey>), String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut last: Option<String> = None;
    let mut complete: u64 = 0;
    if path.exists() {
        let mut reader = BufReader::new(File::open(path).map_err(io)?);
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line).map_err(io)?;
            if n == 0 || !line.ends_with('\n') {
                break;
            }
            complete += n as u64;
            if !line.trim().is_empty() {
                last = Some(line.trim_end().to_owned());
            }
        }
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    file.set_len(complete).map_err(io)?;
    let after = match last {
        Some(line) => {
            let e: DynamicEntity = entity_from_json(line.as_bytes())
                .map_err(|e| format!("{}: its last line is not an entity: {e}", path.display()))?;
            Some(EntityKey::new(e.partition_key, e.row_key))
        }
        None => None,
    };
    Ok((file, after))
}

/// Creates `path` for a CSV export; refuses a file that has content.
pub(crate) fn create_new(path: &Path) -> Result<File, String> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        return Err(format!(
            "{} exists: a CSV export is not continued (its header names every column), so remove it or name another file",
            path.display()
        ));
    }
    File::create(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes every entity of `table` to `out` as CSV (see `csv_table::write`).
pub(crate) async fn export_csv(
    table: &TableClient<DynamicEntity>,
    out: &mut impl Write,
) -> Result<(), String> {
    let bar = Progress::new(&format!("export {}", table.name()));
    let start = Instant::now();
    let mut stream = table.query().stream();
    let mut entities = Vec::new();
    let read = async {
        while let Some(e) = stream.try_next().await.map_err(|e| e.to_string())? {
            entities.push(e);
            let n = entities.len() as u64;
            if n.is_multiple_of(1000) {
                bar.read(n, n as f64 / start.elapsed().as_secs_f64().max(1e-9));
            }
        }
        Ok::<_, String>(())
    }
    .await;
    bar.finish();
    read?;
    crate::csv_table::write(&entities, out)
}

/// Writes the entities of `table` after `after` (all, if `None`) to `out`.
pub(crate) async fn export(
    table: &TableClient<DynamicEntity>,
    after: Option<&EntityKey>,
    out: &mut impl Write,
) -> Result<(), String> {
    let mut query = table.query();
    if let Some(k) = after {
        query = query.filter_raw(format!(
            "PartitionKey gt {pk} or (PartitionKey eq {pk} and RowKey gt {rk})",
            pk = literal(&k.partition_key),
            rk = literal(&k.row_key)
        ));
    }
    let bar = Progress::new(&format!("export {}", table.name()));
    let start = Instant::now();
    let mut stream = query.stream();
    let mut n = 0u64;
    let result = async {
        while let Some(e) = stream.try_next().await.map_err(|e| e.to_string())? {
            crate::json_line(&e, out)?;
            n += 1;
            if n.is_multiple_of(1000) {
                bar.read(n, n as f64 / start.elapsed().as_secs_f64().max(1e-9));
            }
        }
        out.flush().map_err(|e| e.to_string())
    }
    .await;
    bar.finish();
    result
}
