//! `copy SOURCE DEST [TABLE] [--filter F] [--checkpoint DIR]`: streams the
//! entities of a table (or of every table) from one store to another with the
//! bulk writer, upserting (an entity of the same keys in DEST is replaced).
//!
//! With `--checkpoint DIR`, each table's progress is kept in
//! `DIR/<table>.checkpoint`; a copy run again with the same directory starts
//! each table's query after the last key of its settled prefix and skips what
//! the earlier run settled past it, so an interrupted copy resumes where it
//! stopped. The source must not change in between (the checkpoint notices a
//! different entity at a settled position and stops).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use tablekit::table::bulk::{BulkProgress, BulkResult, Checkpoint};
use tablekit::{DynamicEntity, TableServiceClient, UpdateMode};

use crate::progress::{summary, Progress};

/// What `copy` was asked.
#[derive(Debug, PartialEq)]
pub(crate) struct CopyArgs {
    pub(crate) source: String,
    pub(crate) dest: String,
    pub(crate) table: Option<String>,
    pub(crate) filter: Option<String>,
    pub(crate) checkpoint: Option<PathBuf>,
}

/// Parses what follows `copy`.
pub(crate) fn parse(args: &[String]) -> Result<CopyArgs, String> {
    let mut positional = Vec::new();
    let (mut filter, mut checkpoint) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--filter" => filter = Some(it.next().ok_or("--filter needs an OData filter")?.clone()),
            "--checkpoint" => {
                checkpoint = Some(PathBuf::from(
                    it.next().ok_or("--checkpoint needs a directory")?,
                ))
            }
            o if o.starts_with("--") => return Err(format!("unknown option {o:?} of copy")),
            _ => positional.push(a.clone()),
        }
    }
    match positional.as_slice() {
        [source, dest] | [source, dest, _] => Ok(CopyArgs {
            source: source.clone(),
            dest: dest.clone(),
            table: positional.get(2).cloned(),
            filter,
            checkpoint,
        }),
        _ => Err("copy needs a source and a destination store, and optionally a table".into()),
    }
}

/// An OData string literal.
pub(crate) fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The filter of a query that resumes after `checkpoint`'s last key, within `filter`.
pub(crate) fn resume_filter(
    filter: Option<&str>,
    checkpoint: Option<&Checkpoint>,
) -> Option<String> {
    let after = checkpoint.and_then(Checkpoint::last_key).map(|k| {
        format!(
            "(PartitionKey gt {pk} or (PartitionKey eq {pk} and RowKey gt {rk}))",
            pk = literal(&k.partition_key),
            rk = literal(&k.row_key)
        )
    });
    match (filter, after) {
        (Some(f), Some(a)) => Some(format!("({f}) and {a}")),
        (Some(f), None) => Some(f.to_owned()),
        (None, a) => a,
    }
}

pub(crate) async fn copy(
    args: CopyArgs,
    open: impl Fn(&str, bool) -> Result<TableServiceClient, String>,
    out: &mut impl Write,
    warnings: &mut impl Write,
) -> Result<(), String> {
    let err = |e: tablekit::Error| e.to_string();
    let source = open(&args.source, false)?;
    let dest = open(&args.dest, true)?;
    let tables = match &args.table {
        Some(t) => vec![t.clone()],
        None => source.list_tables().fetch_all().await.map_err(err)?,
    };
    if let Some(dir) = &args.checkpoint {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let mut failed = 0u64;
    for name in tables {
        let from = source.table::<DynamicEntity>(&name).map_err(err)?;
        let to = dest.table::<DynamicEntity>(&name).map_err(err)?;
        to.create_table_if_not_exists().await.map_err(err)?;
        let checkpoint = match &args.checkpoint {
            Some(dir) => {
                Some(Checkpoint::open(dir.join(format!("{name}.checkpoint"))).map_err(err)?)
            }
            None => None,
        };
        let mut query = from.query();
        if let Some(f) = resume_filter(args.filter.as_deref(), checkpoint.as_ref()) {
            query = query.filter_raw(f);
        }
        // A failed read ends the input; the error is reported after the
        // writer settled what it had.
        let read_error: Arc<Mutex<Option<String>>> = Arc::default();
        let kept = read_error.clone();
        let entities = query
            .stream()
            .take_while(move |r| {
                if let Err(e) = r {
                    *kept.lock().unwrap() = Some(e.to_string());
                }
                futures::future::ready(r.is_ok())
            })
            .filter_map(|r| futures::future::ready(r.ok()));
        let bar = Progress::new(&format!("copy {name}"));
        let refusals: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = refusals.clone();
        let mut writer = to
            .bulk()
            .on_progress(|p: &BulkProgress| bar.bulk(p))
            .on_outcome(move |o| {
                let mut kept = kept.lock().unwrap();
                if kept.len() < 10 {
                    match &o.result {
                        BulkResult::Refused(e) | BulkResult::Ambiguous(e) => {
                            kept.push(format!("{}: {e}", o.key))
                        }
                        _ => {}
                    }
                }
            });
        if let Some(cp) = checkpoint {
            writer = writer.checkpoint(cp);
        }
        let report = writer.upsert_all(entities, UpdateMode::Replace).await;
        bar.finish();
        let report = report.map_err(err)?;
        writeln!(out, "{}", summary("copied", &name, &report)).map_err(|e| e.to_string())?;
        for r in refusals.lock().unwrap().iter() {
            writeln!(warnings, "tablekit-cli: not copied: {r}").map_err(|e| e.to_string())?;
        }
        if let Some(e) = read_error.lock().unwrap().take() {
            return Err(format!(
                "reading {name} failed: {e}; run the copy again with the same --checkpoint to resume"
            ));
        }
        failed += report.refused + report.ambiguous;
    }
    if failed > 0 {
        return Err(format!(
            "{} not copied (see above)",
            crate::progress::count(failed, "entity was", "entities were")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit::EdmValue;

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn temp_dir() -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tablekit-cli-copy-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    async fn cli(args: &[&str], input: &str) -> Result<String, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        crate::run(&args, input.as_bytes(), &mut out, &mut err).await?;
        Ok(String::from_utf8(out).unwrap())
    }

    /// Entities holding every type at its edges.
    fn typed(i: u32) -> DynamicEntity {
        let at = tablekit::edm::parse_datetime("2026-11-25T22:02:10.5157354Z").unwrap();
        let early = tablekit::edm::parse_datetime("1601-01-01T00:00:00.0000001Z").unwrap();
        DynamicEntity::new("p'1", format!("r{i:03}"))
            .with("Big", EdmValue::Int64(i64::MAX - i64::from(i)))
            .with("Small", EdmValue::Int64(i64::MIN))
            .with("Int", EdmValue::Int32(i32::MIN + i as i32))
            .with("Double", EdmValue::Double(0.1 + 0.2 + f64::from(i)))
            .with("Whole", EdmValue::Double(2.0))
            .with("Ok", i.is_multiple_of(2))
            .with("Text", format!("O'Brien \u{e9}\u{1f600} {i}"))
            .with(
                "Id",
                EdmValue::Guid(uuid::Uuid::from_u128(
                    0x3f25_04e0_4f89_11d3_9a0c_0305_e82c_3301 + u128::from(i),
                )),
            )
            .with("Bytes", EdmValue::Binary((0..=255u8).collect()))
            .with("At", EdmValue::DateTime(at))
            .with("Early", EdmValue::DateTime(early))
    }

    async fn stored(store: &str, table: &str) -> Vec<DynamicEntity> {
        crate::open(store, false)
            .unwrap()
            .table::<DynamicEntity>(table)
            .unwrap()
            .query()
            .fetch_all()
            .await
            .unwrap()
    }

    fn same(a: &[DynamicEntity], b: &[DynamicEntity]) {
        assert_eq!(a.len(), b.len());
        for (a, b) in a.iter().zip(b) {
            assert_eq!(
                (&a.partition_key, &a.row_key),
                (&b.partition_key, &b.row_key)
            );
            assert_eq!(a.properties, b.properties, "{}", a.row_key);
        }
    }

    #[tokio::test]
    async fn copy_keeps_every_type_exactly_between_files_and_through_azurite() {
        let dir = temp_dir();
        let a = dir.0.join("a.redb");
        let b = dir.0.join("b.redb");
        let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
        let originals: Vec<DynamicEntity> = (0..3).map(typed).collect();
        {
            let svc = TableServiceClient::embedded_at(a).unwrap();
            let t = svc.table::<DynamicEntity>("Typed").unwrap();
            t.create_table().await.unwrap();
            for e in &originals {
                t.insert(e).await.unwrap();
            }
        }
        let said = cli(&["copy", a, b, "Typed"], "").await.unwrap();
        assert!(
            said.starts_with("copied Typed: 3 written, 0 refused"),
            "{said}"
        );
        same(&stored(b, "Typed").await, &originals);
        // Export and import keep them too.
        let exported = cli(&[b, "export", "Typed"], "").await.unwrap();
        let c = dir.0.join("c.redb");
        let c = c.to_str().unwrap();
        cli(&[c, "import", "Typed"], &exported).await.unwrap();
        same(&stored(c, "Typed").await, &originals);
        // To Azurite and back.
        if let Ok(conn) = std::env::var("TABLEKIT_TEST_CONNECTION_STRING") {
            let name = format!("Typed{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
            let remote = TableServiceClient::from_connection_string(&conn).unwrap();
            {
                let svc = TableServiceClient::embedded_at(a).unwrap();
                let t = svc.table::<DynamicEntity>(&name).unwrap();
                t.create_table().await.unwrap();
                for e in &originals {
                    t.insert(e).await.unwrap();
                }
            }
            cli(&["copy", a, &conn, &name], "").await.unwrap();
            let d = dir.0.join("d.redb");
            let d = d.to_str().unwrap();
            cli(
                &[
                    "copy",
                    &conn,
                    d,
                    &name,
                    "--filter",
                    "PartitionKey eq 'p''1'",
                ],
                "",
            )
            .await
            .unwrap();
            same(&stored(d, &name).await, &originals);
            let _ = remote.delete_table(&name).await;
        }
    }

    #[tokio::test]
    async fn a_copy_with_a_checkpoint_resumes_after_what_it_settled_and_copies_whole_stores() {
        let dir = temp_dir();
        let a = dir.0.join("a.redb");
        let b = dir.0.join("b.redb");
        let cp = dir.0.join("checkpoints");
        let (a, b, cp) = (
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            cp.to_str().unwrap(),
        );
        let put = |range: std::ops::Range<u32>| async move {
            let svc = TableServiceClient::embedded_at(a).unwrap();
            for table in ["One", "Two"] {
                let t = svc.table::<DynamicEntity>(table).unwrap();
                t.create_table_if_not_exists().await.unwrap();
                for i in range.clone() {
                    t.insert(&typed(i)).await.unwrap();
                }
            }
        };
        put(0..3).await;
        let said = cli(&["copy", a, b, "--checkpoint", cp], "").await.unwrap();
        assert!(said.contains("copied One: 3 written"), "{said}");
        assert!(said.contains("copied Two: 3 written"), "{said}");
        // New entities after the last copied key: only they are read and written.
        put(3..5).await;
        let said = cli(&["copy", a, b, "One", "--checkpoint", cp], "")
            .await
            .unwrap();
        assert!(
            said.starts_with("copied One: 2 written, 0 refused"),
            "{said}"
        );
        let original: Vec<DynamicEntity> = (0..5).map(typed).collect();
        same(&stored(b, "One").await, &original);
        assert_eq!(stored(b, "Two").await.len(), 3);
        assert!(parse(&["x".into()]).is_err());
        assert!(parse(&["x".into(), "y".into(), "--nope".into()]).is_err());
    }

    #[tokio::test]
    async fn import_resumes_from_its_checkpoint_and_export_from_its_file() {
        let dir = temp_dir();
        let a = dir.0.join("a.redb");
        let a = a.to_str().unwrap();
        let cp = dir.0.join("import.checkpoint");
        let cp = cp.to_str().unwrap();
        let lines: String = (0..5)
            .map(|i| {
                let json = tablekit::codec::entity_to_json(&typed(i)).unwrap();
                format!("{}\n", String::from_utf8(json).unwrap())
            })
            .collect();
        let said = cli(&[a, "import", "Tee", "--checkpoint", cp], &lines)
            .await
            .unwrap();
        assert!(said.starts_with("imported Tee: 5 written,"), "{said}");
        let said = cli(&[a, "import", "Tee", "--checkpoint", cp], &lines)
            .await
            .unwrap();
        assert!(
            said.starts_with("imported Tee: 0 written,"),
            "settled before: {said}"
        );
        // Export into a file, cut it as a crash would, and export again.
        let file = dir.0.join("t.jsonl");
        let path = file.to_str().unwrap();
        cli(&[a, "export", "Tee", "--out", path], "").await.unwrap();
        let full = std::fs::read_to_string(&file).unwrap();
        assert_eq!(full, lines);
        let cut: String = full.lines().take(2).map(|l| format!("{l}\n")).collect();
        std::fs::write(&file, format!("{cut}{{\"PartitionKey\":\"p")).unwrap();
        cli(&[a, "export", "Tee", "--out", path], "").await.unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), full);
    }
}
