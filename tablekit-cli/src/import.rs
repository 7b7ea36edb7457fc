//! `import <table> [<file>] [--format csv|jsonl] [--schema S] [--checkpoint F]`:
//! entities from JSON lines or CSV, upserted with the bulk writer.
//!
//! All that can be refused without writing (the options, the file, its
//! format, a CSV's header and `--schema`) is refused before the store is
//! opened. A bad line or cell later ends the input: what came before it is
//! written, then it is reported with its line (and column).
//!
//! The format is `--format`'s, else the file name's (`.csv`; `.jsonl`,
//! `.ndjson`, `.json`), else the first line's: a `{` starts JSON lines, a
//! header naming `PartitionKey` or `RowKey` starts CSV.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read as _, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use csv::StringRecord;
use serde_json::Value;
use tablekit::codec::entity_from_json;
use tablekit::edm::EdmType;
use tablekit::table::bulk::{BulkResult, Checkpoint};
use tablekit::{DynamicEntity, TableClient, UpdateMode};

use crate::csv_table::{parse_schema, Columns};
use crate::progress::{count, summary, InputShare, Progress};

/// How many rows of a CSV read from standard input its column types are
/// inferred from (a file's are inferred from all its rows).
const SAMPLE_ROWS: usize = 1_000;

/// The formats, for a message that names them.
pub(crate) const FORMATS: &str = "csv (a header row naming PartitionKey, RowKey and the properties) and jsonl (one entity per line in the service's JSON, as export writes)";

/// A format of entities in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// A header row, then a row per entity.
    Csv,
    /// One entity per line in the service's JSON form.
    Jsonl,
}

impl Format {
    /// `--format`'s value.
    pub(crate) fn parse(name: &str) -> Result<Format, String> {
        match name.to_ascii_lowercase().as_str() {
            "csv" => Ok(Format::Csv),
            "jsonl" | "ndjson" | "json" => Ok(Format::Jsonl),
            _ => Err(format!("--format {name:?}: the formats are {FORMATS}")),
        }
    }

    /// The format a file's name says.
    pub(crate) fn of_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "csv" => Some(Format::Csv),
            "jsonl" | "ndjson" | "json" => Some(Format::Jsonl),
            _ => None,
        }
    }
}

/// What `import` was asked.
#[derive(Debug, PartialEq)]
pub(crate) struct ImportArgs {
    pub(crate) table: String,
    /// The file to read; standard input without one.
    pub(crate) file: Option<PathBuf>,
    pub(crate) format: Option<Format>,
    pub(crate) schema: Vec<(String, EdmType)>,
    pub(crate) checkpoint: Option<PathBuf>,
}

/// Parses what follows `import`.
pub(crate) fn parse(args: &[String]) -> Result<ImportArgs, String> {
    let mut positional = Vec::new();
    let (mut format, mut schema, mut checkpoint) = (None, Vec::new(), None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs {what}"))
        };
        match a.as_str() {
            "--format" => format = Some(Format::parse(&value("csv or jsonl")?)?),
            "--schema" => schema = parse_schema(&value("Name:Type,... (such as Age:Int32)")?)?,
            "--checkpoint" => checkpoint = Some(PathBuf::from(value("a file")?)),
            o if o.starts_with("--") => return Err(format!("unknown option {o:?} of import")),
            _ => positional.push(a.clone()),
        }
    }
    match positional.as_slice() {
        [table] | [table, _] => Ok(ImportArgs {
            table: table.clone(),
            file: positional.get(1).filter(|f| *f != "-").map(PathBuf::from),
            format,
            schema,
            checkpoint,
        }),
        _ => Err(
            "import needs a table, then optionally the file to read (standard input without one)"
                .into(),
        ),
    }
}

/// The input, read as far as its format and, for CSV, its columns.
pub(crate) struct Input<'a> {
    source: Source<'a>,
    /// Its size in bytes, when known.
    total: Option<u64>,
}

enum Source<'a> {
    Jsonl(Box<dyn BufRead + Send + 'a>),
    Csv {
        reader: Box<csv::Reader<Box<dyn BufRead + Send + 'a>>>,
        columns: Columns,
        /// Rows read to infer the columns' types, to be imported first.
        sample: VecDeque<csv::Result<(StringRecord, u64)>>,
    },
}

/// An entity of the input, or why its line is none.
struct Item {
    line: Option<u64>,
    /// Where it ends in the input, in bytes.
    end: u64,
    entity: Result<DynamicEntity, String>,
}

/// Opens the input (`args.file`, else `stdin`, whose size `stdin_len` is when
/// known), tells its format and, for CSV, reads its header and infers its
/// columns' types (saying which on `warnings`).
pub(crate) fn open_input<'a>(
    args: &ImportArgs,
    stdin: impl BufRead + Send + 'a,
    stdin_len: Option<u64>,
    warnings: &mut impl Write,
) -> Result<Input<'a>, String> {
    let (reader, total, name): (Box<dyn BufRead + Send + 'a>, _, _) = match &args.file {
        Some(path) => {
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let len = file
                .metadata()
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len());
            let reader = BufReader::with_capacity(1 << 16, file);
            (Box::new(reader), len, path.display().to_string())
        }
        None => (Box::new(stdin), stdin_len, "standard input".to_owned()),
    };
    let named = args
        .format
        .or_else(|| args.file.as_deref().and_then(Format::of_path));
    let (format, reader) = match named {
        Some(f) => (f, reader),
        None => {
            let (first, reader) = first_line(reader).map_err(|e| format!("{name}: {e}"))?;
            let format = sniff(&first).ok_or_else(|| {
                let shown: String = String::from_utf8_lossy(&first).trim().chars().take(60).collect();
                format!(
                    "cannot tell the format of {name}: its first line ({shown:?}) is neither a JSON entity nor a CSV header naming PartitionKey and RowKey. The formats are {FORMATS}: give --format csv or --format jsonl{}",
                    if args.file.is_some() { ", or name the file .csv or .jsonl" } else { "" }
                )
            })?;
            (format, reader)
        }
    };
    if !args.schema.is_empty() && format == Format::Jsonl {
        return Err("--schema types the columns of a CSV; JSON lines carry their types (\"Age@odata.type\": \"Edm.Int64\")".into());
    }
    let source = match format {
        Format::Jsonl => Source::Jsonl(reader),
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(reader);
            let header = reader
                .headers()
                .map_err(|e| format!("{name}: line 1: {}", csv_error(&e)))?
                .clone();
            if header.is_empty() {
                return Err(format!(
                    "{name} is empty: a CSV starts with a header row naming PartitionKey, RowKey and the properties"
                ));
            }
            let mut columns = Columns::new(&header, &args.schema)?;
            let mut sample = VecDeque::new();
            let rows = match &args.file {
                // A file is read twice: its types come from every row.
                Some(path) => {
                    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
                    let mut all = csv::ReaderBuilder::new()
                        .flexible(true)
                        .from_reader(BufReader::with_capacity(1 << 16, file));
                    let mut record = StringRecord::new();
                    let mut rows = 0u64;
                    // A row that does not parse is reported when the import reaches it.
                    while let Ok(true) = all.read_record(&mut record) {
                        columns.learn(&record);
                        rows += 1;
                    }
                    format!("all {rows} rows")
                }
                None => {
                    while sample.len() < SAMPLE_ROWS {
                        let mut record = StringRecord::new();
                        match reader.read_record(&mut record) {
                            Ok(true) => {
                                columns.learn(&record);
                                sample.push_back(Ok((record, reader.position().byte())));
                            }
                            Ok(false) => break,
                            Err(e) => {
                                sample.push_back(Err(e));
                                break;
                            }
                        }
                    }
                    let n = sample.iter().filter(|r| r.is_ok()).count();
                    if n == SAMPLE_ROWS {
                        format!("the first {n} rows")
                    } else {
                        format!("all {n} rows")
                    }
                }
            };
            let inferred = columns.inferred();
            if !inferred.is_empty() {
                writeln!(
                    warnings,
                    "tablekit-cli: column types inferred from {rows} of {name} (--schema Name:Type,... sets them): {}",
                    inferred.join(", ")
                )
                .map_err(|e| e.to_string())?;
            }
            Source::Csv {
                reader: Box::new(reader),
                columns,
                sample,
            }
        }
    };
    Ok(Input { source, total })
}

/// The first line of `reader` that is not blank (at most 1 MiB of it), and a
/// reader that reads everything again.
#[allow(clippy::type_complexity)]
fn first_line<'a>(
    mut reader: Box<dyn BufRead + Send + 'a>,
) -> std::io::Result<(Vec<u8>, Box<dyn BufRead + Send + 'a>)> {
    let mut seen = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader).take(1 << 20).read_until(b'\n', &mut line)?;
        seen.extend_from_slice(&line);
        if n == 0 || !line.trim_ascii().is_empty() {
            break;
        }
    }
    Ok((line, Box::new(Cursor::new(seen).chain(reader))))
}

/// The format whose start `first` (the first line that is not blank) is.
fn sniff(first: &[u8]) -> Option<Format> {
    let text = String::from_utf8_lossy(first);
    let text = text.trim_start_matches('\u{feff}').trim();
    if text.is_empty() || text.starts_with('{') {
        return Some(Format::Jsonl);
    }
    let header = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes())
        .into_records()
        .next()?
        .ok()?;
    header
        .iter()
        .any(|n| n == "PartitionKey" || n == "RowKey")
        .then_some(Format::Csv)
}

/// What is wrong with a CSV row that did not parse, without the CSV
/// reader's own position (the caller names the line).
fn csv_error(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::Utf8 { err, .. } => {
            format!("field {} is not UTF-8 text", err.field() + 1)
        }
        csv::ErrorKind::Io(e) => e.to_string(),
        _ => e.to_string(),
    }
}

impl<'a> Input<'a> {
    /// The entities after the first `skip` (settled by an earlier run, so
    /// read past without decoding), each with its line; a line that is no
    /// entity ends them.
    fn items(self, skip: u64) -> Box<dyn Iterator<Item = Item> + Send + 'a> {
        let mut n = 0u64;
        let mut past = move || {
            n += 1;
            n <= skip
        };
        match self.source {
            Source::Jsonl(mut reader) => {
                let (mut line_no, mut end) = (0u64, 0u64);
                let mut done = false;
                Box::new(std::iter::from_fn(move || loop {
                    if done {
                        return None;
                    }
                    let mut line = String::new();
                    line_no += 1;
                    match reader.read_line(&mut line) {
                        Ok(0) => return None,
                        Ok(read) => {
                            end += read as u64;
                            if line.trim().is_empty() || past() {
                                continue;
                            }
                            let line = line.strip_suffix('\n').unwrap_or(&line);
                            let line = line.strip_suffix('\r').unwrap_or(line);
                            return Some(Item {
                                line: Some(line_no),
                                end,
                                entity: decode_json(line),
                            });
                        }
                        Err(e) => {
                            done = true;
                            return Some(Item {
                                line: Some(line_no),
                                end,
                                entity: Err(e.to_string()),
                            });
                        }
                    }
                }))
            }
            Source::Csv {
                mut reader,
                columns,
                mut sample,
            } => {
                let mut done = false;
                Box::new(std::iter::from_fn(move || loop {
                    if done {
                        return None;
                    }
                    let next = match sample.pop_front() {
                        Some(row) => row,
                        None => {
                            let mut record = StringRecord::new();
                            match reader.read_record(&mut record) {
                                Ok(false) => return None,
                                Ok(true) => Ok((record, reader.position().byte())),
                                Err(e) => Err(e),
                            }
                        }
                    };
                    match next {
                        Ok((record, end)) => {
                            if past() {
                                continue;
                            }
                            return Some(Item {
                                line: record.position().map(|p| p.line()),
                                end,
                                entity: columns.entity(&record),
                            });
                        }
                        Err(e) => {
                            done = true;
                            return Some(Item {
                                line: e.position().map(|p| p.line()),
                                end: 0,
                                entity: Err(csv_error(&e)),
                            });
                        }
                    }
                }))
            }
        }
    }
}

/// A line of JSON as an entity, or what is wrong with it in the line's terms.
fn decode_json(line: &str) -> Result<DynamicEntity, String> {
    entity_from_json::<DynamicEntity>(line.as_bytes()).map_err(|e| {
        explain(line).unwrap_or_else(|| {
            // The decoder's words are a response's: say "line".
            e.to_string().replace("cannot decode response: ", "")
        })
    })
}

/// Upserts the entities of `input` into `table` with the bulk writer; with
/// `args.checkpoint`, resumes a run that stopped (the entities the
/// checkpoint settled are skipped). Prints one summary.
pub(crate) async fn import(
    table: &TableClient<DynamicEntity>,
    args: &ImportArgs,
    input: Input<'_>,
    out: &mut impl Write,
    warnings: &mut impl Write,
) -> Result<(), String> {
    let name = &args.table;
    let checkpoint = args
        .checkpoint
        .as_deref()
        .map(Checkpoint::open)
        .transpose()
        .map_err(|e| e.to_string())?;
    let skip = checkpoint.as_ref().map_or(0, Checkpoint::position);
    let share = input
        .total
        .map(|total| Arc::new(InputShare::new(total, skip)));
    let bad: Arc<Mutex<Option<String>>> = Arc::default();
    let kept = bad.clone();
    let handed = share.clone();
    let entities = input.items(skip).map_while(move |item| match item.entity {
        Ok(e) => {
            if let Some(s) = &handed {
                s.handed(item.end);
            }
            Some(e)
        }
        Err(why) => {
            *kept.lock().unwrap() = Some(match item.line {
                Some(line) => format!("line {line}: {why}"),
                None => why,
            });
            None
        }
    });
    let bar = Progress::with_share(&format!("import {name}"), share.as_deref());
    let refusals: Arc<Mutex<Vec<String>>> = Arc::default();
    let refused = refusals.clone();
    let mut writer = table
        .bulk()
        .on_progress(|p| bar.bulk(p))
        .on_outcome(move |o| {
            let mut refused = refused.lock().unwrap();
            if refused.len() < 10 {
                if let BulkResult::Refused(e) | BulkResult::Ambiguous(e) = &o.result {
                    refused.push(format!("entity {} ({}): {e}", o.position + 1, o.key));
                }
            }
        });
    if let Some(cp) = checkpoint {
        writer = writer.checkpoint(cp);
    }
    let report = writer
        .upsert_all(futures::stream::iter(entities), UpdateMode::Replace)
        .await;
    bar.finish();
    let report = report.map_err(|e| e.to_string())?;
    let w = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    w(writeln!(out, "{}", summary("imported", name, &report)))?;
    for r in refusals.lock().unwrap().iter() {
        w(writeln!(warnings, "tablekit-cli: not imported: {r}"))?;
    }
    if let Some(bad) = bad.lock().unwrap().take() {
        return Err(bad);
    }
    let failed = report.refused + report.ambiguous;
    if failed > 0 {
        return Err(format!(
            "{} not imported (see above)",
            count(failed, "entity was", "entities were")
        ));
    }
    Ok(())
}

/// Why `line` is not an entity in the service's JSON form, or `None` when
/// nothing here sees a fault (the caller then reports the decoder's own
/// message). Called only after the decoder refused the line, so it never
/// refuses a line the decoder takes.
pub(crate) fn explain(line: &str) -> Option<String> {
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            // serde_json says "at line 1 column N": the input line is named
            // by the caller, so keep only the column.
            let what = e.to_string();
            let what = what.split(" at line ").next().unwrap_or(&what);
            return Some(format!("not JSON: {what} (column {})", e.column()));
        }
    };
    let Value::Object(map) = &value else {
        return Some(format!(
            "an entity is one JSON object ({{\"PartitionKey\": ..., \"RowKey\": ..., ...}}), not {}",
            describe(&value)
        ));
    };
    for key in ["PartitionKey", "RowKey"] {
        match map.get(key) {
            None => return Some(format!("{key} is missing")),
            Some(Value::String(_)) => {}
            Some(other) => return Some(format!("{key} must be a string, not {}", describe(other))),
        }
    }
    for (name, value) in map {
        if let Some(property) = name.strip_suffix("@odata.type") {
            let Value::String(wire) = value else {
                return Some(format!(
                    "{name} names a type as a string such as \"Edm.Int64\", not {}",
                    describe(value)
                ));
            };
            let Some(edm) = EdmType::from_wire(wire) else {
                return Some(format!(
                    "property {property}: unknown type {wire:?} (the types are Edm.String, Edm.Int32, Edm.Int64, Edm.Double, Edm.Boolean, Edm.DateTime, Edm.Guid and Edm.Binary)"
                ));
            };
            match map.get(property) {
                None | Some(Value::Null) => {}
                Some(v) if fits(edm, v) => {}
                Some(v) => {
                    return Some(format!(
                        "property {property}: {edm} needs {}, not {}",
                        expected(edm),
                        describe(v)
                    ))
                }
            }
        } else if matches!(value, Value::Array(_) | Value::Object(_)) {
            return Some(format!(
                "property {name}: a value is a string, a number, true or false (or null), not {}",
                describe(value)
            ));
        }
    }
    None
}

/// Whether `v` has the JSON form the service's format gives `edm` (the
/// decoder checks the text inside a string, such as a date's).
fn fits(edm: EdmType, v: &Value) -> bool {
    match edm {
        EdmType::Boolean => v.is_boolean(),
        EdmType::Int32 => match v {
            Value::Number(n) => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
            Value::String(s) => s.parse::<i32>().is_ok(),
            _ => false,
        },
        EdmType::Int64 => v.is_string() || v.is_i64(),
        EdmType::Double => v.is_number() || v.is_string(),
        _ => v.is_string(),
    }
}

/// The JSON form `edm` takes, for a message.
fn expected(edm: EdmType) -> &'static str {
    match edm {
        EdmType::Boolean => "true or false",
        EdmType::Int32 => "a whole number from -2147483648 to 2147483647",
        EdmType::Int64 => "a whole number written as a string, such as \"9000000000\"",
        EdmType::Double => "a number (or \"NaN\", \"Infinity\" or \"-Infinity\")",
        EdmType::DateTime => "a string such as \"2026-11-25T22:02:10.5157354Z\"",
        EdmType::Guid => "a string such as \"c9da6455-213d-42c9-9a79-3e9149a57833\"",
        EdmType::Binary => "a string of Base64",
        _ => "a string",
    }
}

/// A JSON value as a message names it: `the string "true"`, `the number 1`.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            format!("the string {:?}...", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit::{EdmValue, TableServiceClient};

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn temp_dir() -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tablekit-cli-import-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// Standard output and standard error of a run, or its error.
    async fn cli(args: &[&str], input: &str) -> Result<(String, String), String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        crate::run(&args, input.as_bytes(), &mut out, &mut err).await?;
        Ok((
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        ))
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

    /// The properties of `e` by name, whatever their order.
    fn props(e: &DynamicEntity) -> Vec<(String, EdmValue)> {
        let mut p: Vec<(String, EdmValue)> = e
            .properties
            .iter()
            .map(|(n, v)| (n.to_owned(), v.clone()))
            .collect();
        p.sort_by(|a, b| a.0.cmp(&b.0));
        p
    }

    fn at(s: &str) -> EdmValue {
        EdmValue::DateTime(tablekit::edm::parse_datetime(s).unwrap())
    }

    #[tokio::test]
    async fn csv_cells_of_every_type_are_imported_with_their_types() {
        let dir = temp_dir();
        let store = dir.0.join("s.redb");
        let store = store.to_str().unwrap();
        let file = dir.0.join("people.csv");
        std::fs::write(
            &file,
            "PartitionKey,RowKey,Name,Zip,Age,Big,Score,Ok,Joined,Id,Photo,Note\n\
             p,1,Ann,007,34,9000000000,2.5,true,2026-11-25T22:02:10.5157354Z,c9da6455-213d-42c9-9a79-3e9149a57833,AAEC/w==,x\n\
             p,2,Bo,10115,-7,1,1e-7,FALSE,1601-01-01T00:00:00Z,00000000-0000-0000-0000-000000000001,,\n",
        )
        .unwrap();
        let (out, err) = cli(
            &[
                store,
                "import",
                "People",
                file.to_str().unwrap(),
                "--schema",
                "Photo:Binary",
            ],
            "",
        )
        .await
        .unwrap();
        assert!(out.starts_with("imported People: 2 written,"), "{out}");
        assert_eq!(out.lines().count(), 1, "{out}");
        assert_eq!(
            err,
            "tablekit-cli: column types inferred from all 2 rows of {file} (--schema Name:Type,... sets them): \
             Name String, Zip String, Age Int32, Big Int64, Score Double, Ok Boolean, Joined DateTime, Id Guid, Note String\n"
                .replace("{file}", file.to_str().unwrap())
        );
        let got = stored(store, "People").await;
        let id = |s: &str| EdmValue::Guid(uuid::Uuid::parse_str(s).unwrap());
        assert_eq!(
            props(&got[0]),
            props(
                &DynamicEntity::new("p", "1")
                    .with("Name", "Ann")
                    .with("Zip", "007")
                    .with("Age", 34)
                    .with("Big", 9_000_000_000i64)
                    .with("Score", 2.5)
                    .with("Ok", true)
                    .with("Joined", at("2026-11-25T22:02:10.5157354Z"))
                    .with("Id", id("c9da6455-213d-42c9-9a79-3e9149a57833"))
                    .with("Photo", EdmValue::Binary(vec![0, 1, 2, 255]))
                    .with("Note", "x")
            )
        );
        // An empty cell is no property; Big, though it fits an Int32 here, is
        // an Int64 like the rest of its column.
        assert_eq!(
            props(&got[1]),
            props(
                &DynamicEntity::new("p", "2")
                    .with("Name", "Bo")
                    .with("Zip", "10115")
                    .with("Age", -7)
                    .with("Big", 1i64)
                    .with("Score", 1e-7)
                    .with("Ok", false)
                    .with("Joined", at("1601-01-01T00:00:00Z"))
                    .with("Id", id("00000000-0000-0000-0000-000000000001"))
            )
        );
    }

    #[tokio::test]
    async fn a_typed_csv_of_storage_explorer_is_read_by_its_type_columns() {
        let dir = temp_dir();
        let store = dir.0.join("s.redb");
        let store = store.to_str().unwrap();
        // Types as Edm.X or X; an empty @type cell falls back to --schema,
        // else to the column's inferred type; an empty String cell is "".
        let csv = "\u{feff}PartitionKey,RowKey,Timestamp,Count,Count@type,Code,Code@type,Empty,Empty@type,Blob,Blob@type\r\n\
                   a,1,2026-01-01T00:00:00.0000000Z,5,Edm.Int64,12,String,,Edm.String,AQI=,Binary\r\n\
                   a,2,2026-01-01T00:00:00.0000000Z,6,,13,,,,AwQ=,\r\n";
        let (out, _) = cli(
            &[
                store,
                "import",
                "Tab",
                "--format",
                "csv",
                "--schema",
                "Count:Int64,Blob:Binary",
            ],
            csv,
        )
        .await
        .unwrap();
        assert!(out.starts_with("imported Tab: 2 written,"), "{out}");
        let got = stored(store, "Tab").await;
        assert_eq!(
            props(&got[0]),
            props(
                &DynamicEntity::new("a", "1")
                    .with("Count", 5i64)
                    .with("Code", "12")
                    .with("Empty", "")
                    .with("Blob", EdmValue::Binary(vec![1, 2]))
            )
        );
        assert_eq!(
            props(&got[1]),
            props(
                &DynamicEntity::new("a", "2")
                    .with("Count", 6i64)
                    .with("Code", 13)
                    .with("Blob", EdmValue::Binary(vec![3, 4]))
            )
        );
        let bad = cli(
            &[store, "import", "Tab", "--format", "csv"],
            "PartitionKey,RowKey,N,N@type\na,1,5,Edm.Int16\n",
        )
        .await
        .unwrap_err();
        assert!(
            bad.starts_with("line 2: column 4 (N@type): unknown type \"Edm.Int16\""),
            "{bad}"
        );
    }

    #[tokio::test]
    async fn quoted_csv_fields_keep_their_commas_newlines_and_quotes() {
        let dir = temp_dir();
        let store = dir.0.join("s.redb");
        let store = store.to_str().unwrap();
        // From standard input, told apart from JSON lines by its header.
        let csv = "PartitionKey,RowKey,Text\n\
                   \"p,1\",\"r\"\"1\",\"a, b\nc \"\"quoted\"\"\r\nd\"\n\
                   p2,r2,plain\n";
        let (out, _) = cli(&[store, "import", "Tab"], csv).await.unwrap();
        assert!(out.starts_with("imported Tab: 2 written,"), "{out}");
        let got = stored(store, "Tab").await;
        assert_eq!(
            (got[0].partition_key.as_str(), got[0].row_key.as_str()),
            ("p,1", "r\"1")
        );
        assert_eq!(
            got[0].get("Text"),
            Some(&EdmValue::from("a, b\nc \"quoted\"\r\nd"))
        );
        assert_eq!(got[1].get("Text"), Some(&EdmValue::from("plain")));
        let bad = cli(
            &[store, "import", "Tab"],
            "PartitionKey,RowKey\na,1\nb,2,3\n",
        )
        .await
        .unwrap_err();
        assert_eq!(bad, "line 3: 3 fields where the header has 2");
    }

    #[tokio::test]
    async fn an_input_is_refused_before_anything_is_written() {
        let dir = temp_dir();
        let store = dir.0.join("s.redb");
        let path = store.to_str().unwrap();
        let no_key = dir.0.join("no-key.csv");
        std::fs::write(&no_key, "RowKey,Name\n1,Ann\n").unwrap();
        let neither = dir.0.join("data.txt");
        std::fs::write(&neither, "\n<rows><row/></rows>\n").unwrap();
        for (args, input, says) in [
            (
                vec![path, "import", "Tab", no_key.to_str().unwrap()],
                "",
                "the header (line 1) has no PartitionKey column, which every entity needs; its columns are RowKey, Name",
            ),
            (
                vec![path, "import", "Tab"],
                "RowKey,Name\n1,Ann\n",
                "has no PartitionKey column",
            ),
            (
                vec![path, "import", "Tab", neither.to_str().unwrap()],
                "",
                "is neither a JSON entity nor a CSV header naming PartitionKey and RowKey. The formats are csv (",
            ),
            (
                vec![path, "import", "Tab"],
                "Name,Age\nAnn,3\n",
                "cannot tell the format of standard input: its first line (\"Name,Age\")",
            ),
            (
                vec![path, "import", "Tab", "--format", "xml"],
                "",
                "--format \"xml\": the formats are csv (a header row naming PartitionKey, RowKey and the properties) and jsonl",
            ),
            (
                vec![path, "import", "Tab", "--format", "csv"],
                "",
                "standard input is empty: a CSV starts with a header row",
            ),
            (
                vec![path, "import", "Tab", "--format", "csv", "--schema", "Age:Int32"],
                "PartitionKey,RowKey,Name\n",
                "--schema names Age, which is no column of the header (line 1): PartitionKey, RowKey, Name",
            ),
            (
                vec![path, "import", "Tab", "--schema", "Age:Int32"],
                "{\"PartitionKey\":\"p\",\"RowKey\":\"r\"}\n",
                "--schema types the columns of a CSV",
            ),
            (
                vec![path, "import", "Tab", dir.0.join("missing.csv").to_str().unwrap()],
                "",
                "missing.csv: No such file",
            ),
            (
                vec![path, "import", "T"],
                "",
                "table name \"T\" is invalid: a table name has 3 to 63 characters",
            ),
        ] {
            let err = cli(&args, input).await.unwrap_err();
            assert!(err.contains(says), "{args:?}: {err}");
            assert!(!store.exists(), "{args:?}: the store file was created");
        }
        // An existing store gets no table either.
        cli(&[path, "import", "Other"], "").await.unwrap();
        cli(&[path, "import", "Tab", no_key.to_str().unwrap()], "")
            .await
            .unwrap_err();
        assert_eq!(cli(&[path, "tables"], "").await.unwrap().0, "Other\n");
    }

    #[tokio::test]
    async fn a_bad_cell_is_named_by_line_and_column_after_the_rows_before_it() {
        let dir = temp_dir();
        let store = dir.0.join("s.redb");
        let store = store.to_str().unwrap();
        // Row 2 spans lines 3 and 4, so the bad row 4 is on line 6.
        let csv = "PartitionKey,RowKey,Note,Age\n\
                   p,1,a,1\n\
                   p,2,\"two\nlines\",2\n\
                   p,3,c,3\n\
                   p,4,d,four\n\
                   p,5,e,5\n";
        let err = cli(
            &[
                store,
                "import",
                "Tab",
                "--format",
                "csv",
                "--schema",
                "Age:Int32",
            ],
            csv,
        )
        .await
        .unwrap_err();
        assert_eq!(
            err,
            "line 6: column 4 (Age): \"four\" is not an Edm.Int32 (a whole number from -2147483648 to 2147483647) (--schema)"
        );
        let keys: Vec<String> = stored(store, "Tab")
            .await
            .into_iter()
            .map(|e| e.row_key)
            .collect();
        assert_eq!(keys, ["1", "2", "3"]);

        // A type inferred from the first 1,000 rows of standard input that a
        // later cell does not fit says how to give it.
        let mut csv = String::from("PartitionKey,RowKey,Age\n");
        for i in 0..1_000 {
            csv.push_str(&format!("q,{i:04},{i}\n"));
        }
        csv.push_str("q,1000,unknown\n");
        let err = cli(&[store, "import", "Unk"], &csv).await.unwrap_err();
        assert_eq!(
            err,
            "line 1002: column 3 (Age): \"unknown\" is not an Edm.Int32 (a whole number from -2147483648 to 2147483647) (inferred from the column's cells; --schema sets it)"
        );
        assert_eq!(stored(store, "Unk").await.len(), 1_000);
        // From a file, every row counts: the column is text.
        let file = dir.0.join("u.csv");
        std::fs::write(&file, &csv).unwrap();
        let (out, err) = cli(&[store, "import", "Vee", file.to_str().unwrap()], "")
            .await
            .unwrap();
        assert!(out.starts_with("imported Vee: 1001 written,"), "{out}");
        assert!(
            err.contains("from all 1001 rows") && err.contains("Age String"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_csv_of_several_partitions_is_written_in_several_transactions() {
        let dir = temp_dir();
        let store = dir.0.join("s.redb");
        let store = store.to_str().unwrap();
        let mut csv = String::from("PartitionKey,RowKey,N,Half\n");
        for i in 0..450 {
            csv.push_str(&format!("p{},{i:03},{i},{}\n", i % 3, i % 2 == 0));
        }
        let file = dir.0.join("rows.csv");
        std::fs::write(&file, &csv).unwrap();
        let file = file.to_str().unwrap();
        let mut stores = vec![(store.to_owned(), "Rows".to_owned())];
        if let Ok(conn) = std::env::var("TABLEKIT_TEST_CONNECTION_STRING") {
            let name = format!("Rows{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
            stores.push((conn, name));
        }
        for (store, table) in &stores {
            let (out, _) = cli(&[store, "import", table, file], "").await.unwrap();
            // 150 rows in each of 3 partitions: at least 2 transactions each.
            let transactions: u64 = out
                .split(", ")
                .find_map(|part| part.strip_suffix(" transactions"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{out}"));
            assert!(transactions >= 6, "{out}");
            assert!(
                out.starts_with(&format!("imported {table}: 450 written, 0 refused")),
                "{out}"
            );
            assert_eq!(out.lines().count(), 1, "{out}");
            let got = stored(store, table).await;
            assert_eq!(got.len(), 450);
            for e in &got {
                let i: i32 = e.row_key.parse().unwrap();
                assert_eq!(e.partition_key, format!("p{}", i % 3));
                assert_eq!(e.get("N"), Some(&EdmValue::Int32(i)));
                assert_eq!(e.get("Half"), Some(&EdmValue::Boolean(i % 2 == 0)));
            }
            if store.contains("=") {
                let _ = TableServiceClient::from_connection_string(store)
                    .unwrap()
                    .delete_table(table)
                    .await;
            }
        }
    }

    #[tokio::test]
    async fn a_csv_export_imports_back_with_every_value_and_type() {
        let dir = temp_dir();
        let from = dir.0.join("from.redb");
        let to = dir.0.join("to.redb");
        let (from, to) = (from.to_str().unwrap(), to.to_str().unwrap());
        let originals: Vec<DynamicEntity> = (0..3u8)
            .map(|i| {
                let mut e = DynamicEntity::new("p,\"1\"", format!("r, {i}"))
                    .with("Text", format!("O'Brien, \"\u{e9}\u{1f600}\"\n{i}"))
                    .with("Int", i32::MIN + i32::from(i))
                    .with("Big", i64::MAX - i64::from(i))
                    .with("Small", 5i64)
                    .with("Double", 0.1 + 0.2 + f64::from(i))
                    .with("Whole", 2.0)
                    .with("Inf", f64::NEG_INFINITY)
                    .with("Ok", i % 2 == 0)
                    .with("At", at("2026-11-25T22:02:10.5157354Z"))
                    .with("Early", at("1601-01-01T00:00:00.0000001Z"))
                    .with(
                        "Id",
                        EdmValue::Guid(uuid::Uuid::from_u128(u128::from(i) << 64)),
                    )
                    .with("Bytes", EdmValue::Binary((0..=255u8).rev().collect()))
                    .with("Number", "12");
                // Lacking a property and holding an empty string stay apart.
                if i == 1 {
                    e.properties.remove("Number");
                    e.set("Empty", "");
                }
                e
            })
            .collect();
        {
            let svc = TableServiceClient::embedded_at(from).unwrap();
            let t = svc.table::<DynamicEntity>("Typed").unwrap();
            t.create_table().await.unwrap();
            for e in &originals {
                t.insert(e).await.unwrap();
            }
        }
        let (csv, _) = cli(&[from, "export", "Typed", "--format", "csv"], "")
            .await
            .unwrap();
        assert!(
            csv.starts_with("PartitionKey,RowKey,Timestamp,Text,Text@type,Int,Int@type,"),
            "{csv}"
        );
        let (out, _) = cli(&[to, "import", "Typed"], &csv).await.unwrap();
        assert!(out.starts_with("imported Typed: 3 written,"), "{out}");
        let back = stored(to, "Typed").await;
        assert_eq!(back.len(), originals.len());
        for (a, b) in originals.iter().zip(&back) {
            assert_eq!(
                (&a.partition_key, &a.row_key),
                (&b.partition_key, &b.row_key)
            );
            assert_eq!(props(a), props(b), "{}", a.row_key);
        }
        // Into a file named .csv, which is not continued once it exists.
        let file = dir.0.join("typed.csv");
        let path = file.to_str().unwrap();
        cli(&[from, "export", "Typed", "--out", path], "")
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), csv);
        let again = cli(&[from, "export", "Typed", "--out", path], "")
            .await
            .unwrap_err();
        assert!(
            again.contains("exists: a CSV export is not continued"),
            "{again}"
        );
        let (out, _) = cli(&[to, "import", "Again", path], "").await.unwrap();
        assert!(out.starts_with("imported Again: 3 written,"), "{out}");
    }

    #[test]
    fn a_file_input_knows_its_size() {
        let dir = temp_dir();
        let file = dir.0.join("t.jsonl");
        std::fs::write(&file, "{\"PartitionKey\":\"p\",\"RowKey\":\"r\"}\n").unwrap();
        let args = parse(&["T".into(), file.to_str().unwrap().into()]).unwrap();
        let input = open_input(&args, &b""[..], None, &mut Vec::new()).unwrap();
        assert_eq!(input.total, Some(34));
        let args = parse(&["T".into()]).unwrap();
        let input = open_input(&args, &b""[..], Some(7), &mut Vec::new()).unwrap();
        assert_eq!(input.total, Some(7));
        assert!(parse(&[]).is_err());
        assert!(parse(&["T".into(), "a".into(), "b".into()]).is_err());
        assert!(parse(&["T".into(), "--nope".into()]).is_err());
        assert!(parse(&["T".into(), "--schema".into()])
            .unwrap_err()
            .contains("--schema needs Name:Type"));
    }
}
