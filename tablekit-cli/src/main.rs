//! A look inside a store, as Azure Storage Explorer gives one for the service:
//! list tables, query with an OData filter, print entities as a table or JSON,
//! export a table to JSON lines or CSV and import it back. The store is an
//! embedded store file or a connection string.
//!
//! ```text
//! cargo install tablekit-cli --locked   # or, in tablekit's repository: cargo install --path tablekit-cli --locked
//! tablekit-cli <store> tables
//! tablekit-cli <store> query <table> [--filter <odata>] [--top <n>] [--json]
//! tablekit-cli <store> export <table> [--out <file>] [--format csv|jsonl] > table.jsonl
//! tablekit-cli <store> import <table> [<file>] [--format csv|jsonl] [--schema <Name:Type,...>] [--checkpoint <file>]
//! tablekit-cli copy <source> <dest> [<table>] [--filter <odata>] [--checkpoint <dir>]
//! tablekit-cli <store> infer <table> [--sample <n>] > entity.rs
//! tablekit-cli <file> check
//! tablekit-cli <file> compact
//! tablekit-cli serve [<file>] [--host <ip>] [--blob-port <n>] [--queue-port <n>] [--table-port <n>] [--account <name>:<key>]...
//! ```
//!
//! `check` verifies an embedded store file without changing it (every page's
//! checksum, every entity decoded and in order) and prints each table's
//! entity count; `compact` gives the space of deleted entities back to the
//! file system. Both need the file closed (no program has it open).
//!
//! `serve` is a storage emulator: the Table, Queue and Blob REST APIs over
//! HTTP from the embedded store (in memory, or durable in `<file>`), on
//! Azurite's ports by default, for the official SDKs and any other client,
//! with the store's strict rules; it prints its addresses and connection
//! string when ready and stops gracefully on SIGTERM or Ctrl-C (`serve`
//! says the rest; `tablekit-cli serve --help`).
//!
//! `<store>` is a connection string if it contains `=` (Azure, Azurite, or
//! `UseEmbeddedStorage=true;Path=<file>`), else the path of an embedded store
//! file. Only `import` creates a missing file (and table); the other commands
//! refuse a path that does not exist rather than create an empty store.
//!
//! Entities are printed with their values as OData literals (`'text'`, `5L`,
//! `datetime'...'`), so each value shows its type; `--json` and `export` write
//! the service's JSON form (with `@odata.type` annotations), one entity per
//! line, which `import` reads back (upserting: an entity of the same keys is
//! replaced). Timestamps print as the service writes them (seven fractional
//! digits and `Z`). `import` also reads CSV with a header row (`csv_table`
//! says how its cells get their types), and `export --format csv` writes it
//! with a `Name@type` column beside each property, as Azure Storage Explorer
//! does, so that a CSV export imports back with every type.
//!
//! A filter compares a property only with a literal of its type, as Azure
//! does: `Age gt 40L` finds no entity whose `Age` is an Int32. The CLI warns
//! when the entities it read show such a mismatch (`literal_types`);
//! `tablekit-cli --help` says the rest.

mod copy;
mod csv_table;
mod export;
mod import;
mod infer;
mod literal_types;
mod progress;
mod serve;

use std::io::{BufRead, Write};

use futures::TryStreamExt as _;
use tablekit::{codec::entity_to_json, DynamicEntity, TableServiceClient};

const USAGE: &str = "\
usage: tablekit-cli <store> tables
       tablekit-cli <store> query <table> [--filter <odata>] [--top <n>] [--json]
       tablekit-cli <store> export <table> [--out <file>] [--format csv|jsonl]
       tablekit-cli <store> import <table> [<file>] [--format csv|jsonl] [--schema <Name:Type,...>]
                                  [--checkpoint <file>]   (standard input without <file>)
       tablekit-cli copy <source> <dest> [<table>] [--filter <odata>] [--checkpoint <dir>]
       tablekit-cli <store> infer <table> [--sample <n>]   (a #[derive(TableEntity)] type)
       tablekit-cli <file> check                 (verify an embedded store file)
       tablekit-cli <file> compact               (give deleted entities' space back)
       tablekit-cli serve [<file>] [--host <ip>] [--blob-port <n>] [--queue-port <n>]
                          [--table-port <n>] [--account <name>:<base64 key>]...
                          [--bearer-hs256-secret-file <file> | --bearer-rs256-key-file <pem>] ...
                                         (an emulator: tablekit-cli serve --help)
       tablekit-cli --help
<store>: a connection string (contains '=') or the path of an embedded store file";

const HELP: &str = "
<store> is a connection string if it contains '=' (Azure, Azurite, or
UseEmbeddedStorage=true;Path=<file>), else the path of an embedded store file.
Only import creates a missing file (and table).

query prints entities as a table (--json: one entity per line, the service's JSON).
Values print as OData literals, so each shows its type: 'text', 40 (Int32),
40L (Int64), 2.5 (Double), true, datetime'2026-11-25T22:02:10.5157354Z',
guid'...', X'0a1b' (Binary). Timestamps print as the service writes them.

--filter takes OData, as the service does: \"PartitionKey eq 'Sales' and Age gt 40\".
A comparison holds only when the literal has the property's type: Age gt 40L
(an Int64 literal) matches no entity whose Age is an Int32, and the service says
nothing about it (Azurite is laxer, or answers 500). When the entities read show
such a mismatch (those found, or the first 100 of the table when none is found or
the query fails), tablekit-cli warns on standard error.

export writes the table as JSON lines; import reads them back and upserts each
(an entity of the same keys is replaced). A bad line stops the import with the
line's number and what is wrong; the lines before it are imported, so fix the
line and run it again.

import reads JSON lines or CSV: --format csv|jsonl, else the file's name
(.csv; .jsonl, .ndjson, .json), else the first line ('{' starts JSON lines, a
header naming PartitionKey or RowKey starts CSV); an input that is neither is
refused before anything is written. A CSV has a header row with PartitionKey
and RowKey columns (a Timestamp column is read past); every other column is a
property, whose type comes, cell by cell, from
  - its Name@type column when the cell there is not empty (Azure Storage
    Explorer's typed CSV export: PartitionKey,RowKey,Timestamp,Age,Age@type),
  - else --schema Name:Type,... (Age:Int32,Photo:Binary; the types are String,
    Int32, Int64, Double, Boolean, DateTime, Guid and Binary, with or without
    Edm.; entries may also be separated by spaces or newlines),
  - else the column's cells: the narrowest of Boolean, Int32, Int64, Double,
    DateTime, Guid that all fit (from every row of a file, or the first 1,000
    rows of standard input), else String. 007 and +1 stay text; Binary (Base64)
    is never inferred. The inferred types are listed on standard error.
An empty cell is no property (an empty string when its @type cell says
String). A cell that does not fit its type stops the import with its line and
column, after the rows before it. export --format csv (or --out <file>.csv)
writes PartitionKey,RowKey,Timestamp and a Name,Name@type pair per property,
which import reads back with every type; it reads the whole table before
writing, to know its columns, and does not continue an existing file.

import writes with the bulk writer (transactions of up to 100 entities of one
partition, under the service's throughput targets, slowing down when throttled)
and prints a summary; reading a file (or a file on standard input), its progress
line shows how much is done and the time left. With --checkpoint <file>, a run stopped early resumes
where it stopped when run again on the same input (the lines already settled are
skipped). export --out <file> writes to the file and, when the file exists
already, resumes after its last complete line.

copy streams every entity of <table> (or of every table, without one; --filter
selects) from <source> to <dest>, upserting, with the bulk writer, a progress
line on standard error and a summary per table. With --checkpoint <dir>, an
interrupted copy run again with the same directory resumes after what it
settled. Types (Int64, Guid, Binary, DateTime to 100 ns) are copied exactly.

infer reads the first --sample entities (1,000 by default) and prints a
#[derive(TableEntity)] struct for them (an enum of structs when an EntityType,
Kind or Type property, or a RowKey prefix such as EMPLOYEE_, tells several
entity types apart): Rust types from the stored Edm types, Option for
properties some entities lack, key templates it recognises (a prefix, then a
fixed-width number), and comments with the counts behind each choice.

serve is a storage emulator: the Table, Queue and Blob REST APIs over HTTP from
the embedded store, in memory or durable in <file>, on Azurite's ports
(10000, 10001, 10002; 0 picks a free one) for the official SDKs and any other
client, with the service's strict rules. It prints its addresses and the
connection string when ready, and stops gracefully on SIGTERM or Ctrl-C;
tablekit-cli serve --help says the rest.";

/// How many entities `infer` reads unless told.
const INFER_SAMPLE: usize = 1_000;

/// How many entities a query that found nothing reads to learn the
/// properties' types (one request).
const TYPE_SAMPLE: usize = 100;

/// What the command line asks for, checked before the store is opened.
#[derive(Debug, PartialEq)]
enum Command {
    Help,
    Tables,
    Query {
        table: String,
        filter: Option<String>,
        top: Option<usize>,
        json: bool,
    },
    Export {
        table: String,
        out: Option<std::path::PathBuf>,
        format: import::Format,
    },
    Import(import::ImportArgs),
    Copy(copy::CopyArgs),
    Infer {
        table: String,
        sample: usize,
    },
    Check,
    Compact,
}

fn parse(args: &[String]) -> Result<(String, Command), String> {
    if let [flag] = args {
        if ["--help", "-h", "help"].contains(&flag.as_str()) {
            return Ok((String::new(), Command::Help));
        }
    }
    if let [c, rest @ ..] = args {
        if c == "copy" {
            return Ok((String::new(), Command::Copy(copy::parse(rest)?)));
        }
    }
    let (store, rest) = match args {
        [store, rest @ ..] if !rest.is_empty() => (store.clone(), rest),
        _ => return Err(USAGE.into()),
    };
    let command = match rest {
        [c] if c == "tables" => Command::Tables,
        [c] if c == "check" => Command::Check,
        [c] if c == "compact" => Command::Compact,
        [c, table, options @ ..] if c == "export" => {
            let (mut out, mut format) = (None, None);
            let mut options = options.iter();
            while let Some(o) = options.next() {
                match o.as_str() {
                    "--out" => {
                        out = Some(std::path::PathBuf::from(
                            options.next().ok_or("--out needs a file")?,
                        ))
                    }
                    "--format" => {
                        format = Some(import::Format::parse(
                            options.next().ok_or("--format needs csv or jsonl")?,
                        )?)
                    }
                    other => return Err(format!("unknown option {other:?}\n{USAGE}")),
                }
            }
            // An --out file named .csv says CSV; any other name keeps JSON lines.
            let format = format
                .or_else(|| out.as_deref().and_then(import::Format::of_path))
                .unwrap_or(import::Format::Jsonl);
            Command::Export {
                table: table.clone(),
                out,
                format,
            }
        }
        [c, rest @ ..] if c == "import" => Command::Import(import::parse(rest)?),
        [c, table] if c == "infer" => Command::Infer {
            table: table.clone(),
            sample: INFER_SAMPLE,
        },
        [c, table, o, n] if c == "infer" && o == "--sample" => Command::Infer {
            table: table.clone(),
            sample: n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("--sample needs a positive number, not {n:?}"))?,
        },
        [c, table, options @ ..] if c == "query" => {
            let (mut filter, mut top, mut json) = (None, None, false);
            let mut options = options.iter();
            while let Some(o) = options.next() {
                match o.as_str() {
                    "--json" => json = true,
                    "--filter" => {
                        filter = Some(
                            options
                                .next()
                                .ok_or("--filter needs an OData filter")?
                                .clone(),
                        )
                    }
                    "--top" => {
                        let n = options.next().ok_or("--top needs a number")?;
                        top = Some(
                            n.parse()
                                .map_err(|_| format!("--top needs a number, not {n:?}"))?,
                        );
                    }
                    other => return Err(format!("unknown option {other:?}\n{USAGE}")),
                }
            }
            Command::Query {
                table: table.clone(),
                filter,
                top,
                json,
            }
        }
        _ => return Err(USAGE.into()),
    };
    Ok((store, command))
}

fn open(store: &str, create: bool) -> Result<TableServiceClient, String> {
    if store.contains('=') {
        return TableServiceClient::from_connection_string(store).map_err(|e| e.to_string());
    }
    if !create && !std::path::Path::new(store).exists() {
        return Err(format!("no store file at {store}"));
    }
    TableServiceClient::embedded_at(store).map_err(|e| e.to_string())
}

/// `check` and `compact`, on the store file named by `store` (a path, or
/// `UseEmbeddedStorage=true;Path=<file>`), which must be closed.
fn file_command(store: &str, command: &Command, out: &mut impl Write) -> Result<(), String> {
    let path = if store.contains('=') {
        match store
            .split(';')
            .filter_map(|s| s.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("Path"))
        {
            Some((_, p)) if store.to_ascii_lowercase().contains("useembeddedstorage") => {
                std::path::PathBuf::from(p.trim())
            }
            _ => return Err("check and compact work on an embedded store file".into()),
        }
    } else {
        std::path::PathBuf::from(store)
    };
    let err = |e: tablekit::Error| e.to_string();
    let w = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    if *command == Command::Compact {
        let (before, after) = tablekit::storage::compact_file(&path).map_err(err)?;
        return w(writeln!(
            out,
            "compacted {}: {before} bytes before, {after} after",
            path.display()
        ));
    }
    let report = tablekit::storage::check_file(&path).map_err(err)?;
    for (name, count) in &report.tables {
        w(writeln!(
            out,
            "{name}: {}",
            progress::count(*count, "entity", "entities")
        ))?;
    }
    w(writeln!(
        out,
        "{}: ok ({} tables, {} bytes)",
        path.display(),
        report.tables.len(),
        report.file_bytes
    ))
}

/// Prints entities as a table: the keys, the Timestamp, then every property
/// name in the order first seen.
fn print_table(entities: &[DynamicEntity], out: &mut impl Write) -> std::io::Result<()> {
    let mut columns: Vec<String> = vec!["PartitionKey".into(), "RowKey".into(), "Timestamp".into()];
    for e in entities {
        for (name, _) in e.properties.iter() {
            if !columns.iter().any(|c| c == name) {
                columns.push(name.to_owned());
            }
        }
    }
    let rows: Vec<Vec<String>> = entities
        .iter()
        .map(|e| {
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| match i {
                    0 => e.partition_key.clone(),
                    1 => e.row_key.clone(),
                    2 => e
                        .timestamp
                        .map(|t| tablekit::edm::format_datetime(&t))
                        .unwrap_or_default(),
                    _ => e.get(c).map(ToString::to_string).unwrap_or_default(),
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([columns[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String], out: &mut dyn Write| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        writeln!(out, "{}", padded.join("  ").trim_end())
    };
    line(&columns, out)?;
    for r in &rows {
        line(r, out)?;
    }
    let n = entities.len() as u64;
    writeln!(out, "({})", progress::count(n, "entity", "entities"))
}

fn json_line(e: &DynamicEntity, out: &mut impl Write) -> Result<(), String> {
    let json = entity_to_json(e).map_err(|e| e.to_string())?;
    out.write_all(&json).map_err(|e| e.to_string())?;
    writeln!(out).map_err(|e| e.to_string())
}

#[cfg(test)]
async fn run(
    args: &[String],
    input: impl BufRead + Send,
    out: &mut impl Write,
    warnings: &mut impl Write,
) -> Result<(), String> {
    run_sized(args, input, None, out, warnings).await
}

/// [`run`], told the size in bytes of `input` when it is known (a file on
/// standard input), for `import`'s progress line.
async fn run_sized(
    args: &[String],
    input: impl BufRead + Send,
    input_len: Option<u64>,
    out: &mut impl Write,
    warnings: &mut impl Write,
) -> Result<(), String> {
    let (store, command) = parse(args)?;
    if command == Command::Help {
        return writeln!(out, "{USAGE}\n{HELP}").map_err(|e| e.to_string());
    }
    if matches!(command, Command::Check | Command::Compact) {
        return file_command(&store, &command, out);
    }
    if let Command::Copy(args) = command {
        return copy::copy(args, open, out, warnings).await;
    }
    if let Command::Import(args) = command {
        // Everything the input can be refused for is found before the store is opened.
        tablekit::validate::table_name(&args.table).map_err(|e| e.to_string())?;
        let input = import::open_input(&args, input, input_len, warnings)?;
        let t = open(&store, true)?
            .table::<DynamicEntity>(&args.table)
            .map_err(|e| e.to_string())?;
        t.create_table_if_not_exists()
            .await
            .map_err(|e| e.to_string())?;
        return import::import(&t, &args, input, out, warnings).await;
    }
    let svc = open(&store, false)?;
    let table = |name: &str| svc.table::<DynamicEntity>(name).map_err(|e| e.to_string());
    match command {
        // Answered before the store is opened.
        Command::Help
        | Command::Check
        | Command::Compact
        | Command::Copy(_)
        | Command::Import(_) => {}
        Command::Tables => {
            for name in svc
                .list_tables()
                .fetch_all()
                .await
                .map_err(|e| e.to_string())?
            {
                writeln!(out, "{name}").map_err(|e| e.to_string())?;
            }
        }
        Command::Query {
            table: name,
            filter,
            top,
            json,
        } => {
            let mut query = table(&name)?.query();
            if let Some(f) = &filter {
                query = query.filter_raw(f.clone());
            }
            if let Some(n) = top {
                query = query.take(n);
            }
            let found: Result<Vec<DynamicEntity>, String> = query
                .stream()
                .try_collect()
                .await
                .map_err(|e| e.to_string());
            // Warned before the result, and also when the query failed (Azurite
            // answers 500 to some comparisons of mismatched types).
            if let Some(expr) = filter.and_then(|f| tablekit::filter::Filter::parse(&f).ok()) {
                let sample = match &found {
                    Ok(found) if !found.is_empty() => found.clone(),
                    // Only a hint: a failure to read the sample is not the query's.
                    _ => table(&name)?
                        .query()
                        .take(TYPE_SAMPLE)
                        .fetch_all()
                        .await
                        .unwrap_or_default(),
                };
                for w in literal_types::mismatches(&expr, &sample) {
                    writeln!(warnings, "tablekit-cli: warning: {w}").map_err(|e| e.to_string())?;
                }
            }
            let found = found?;
            if json {
                for e in &found {
                    json_line(e, out)?;
                }
            } else {
                print_table(&found, out).map_err(|e| e.to_string())?;
            }
        }
        Command::Infer {
            table: name,
            sample,
        } => {
            let entities = table(&name)?
                .query()
                .take(sample)
                .fetch_all()
                .await
                .map_err(|e| e.to_string())?;
            write!(out, "{}", infer::infer(&name, &entities)).map_err(|e| e.to_string())?;
        }
        Command::Export {
            table: name,
            out: file,
            format,
        } => {
            let t = table(&name)?;
            match (file, format) {
                (None, import::Format::Jsonl) => export::export(&t, None, out).await?,
                (Some(path), import::Format::Jsonl) => {
                    let (mut file, after) = export::open_for_resume(&path)?;
                    export::export(&t, after.as_ref(), &mut file).await?;
                }
                (None, import::Format::Csv) => export::export_csv(&t, out).await?,
                (Some(path), import::Format::Csv) => {
                    let mut file = export::create_new(&path)?;
                    export::export_csv(&t, &mut file).await?;
                }
            }
        }
    }
    Ok(())
}

/// The size of standard input when it is a file (`import T < big.csv`).
#[cfg(unix)]
fn stdin_len() -> Option<u64> {
    use std::os::fd::AsFd as _;
    let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let meta = std::fs::File::from(fd).metadata().ok()?;
    meta.is_file().then_some(meta.len())
}

/// The size of standard input when it is a file; not looked for here.
#[cfg(not(unix))]
fn stdin_len() -> Option<u64> {
    None
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `serve` runs on a multi-threaded runtime of its own; every other
    // command on one thread.
    if let [c, rest @ ..] = args.as_slice() {
        if c == "serve" {
            std::process::exit(serve::main(rest));
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("tablekit-cli: cannot start the runtime: {e}");
            std::process::exit(2);
        });
    let stdin = std::io::BufReader::with_capacity(1 << 16, std::io::stdin());
    let mut stdout = std::io::stdout().lock();
    let len = stdin_len();
    let done = runtime.block_on(run_sized(
        &args,
        stdin,
        len,
        &mut stdout,
        &mut std::io::stderr(),
    ));
    if let Err(e) = done {
        eprintln!("tablekit-cli: {e}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    async fn cli(a: &[&str], input: &str) -> Result<String, String> {
        Ok(cli_warning(a, input).await?.0)
    }

    /// The standard output and the standard error of a successful run.
    async fn cli_warning(a: &[&str], input: &str) -> Result<(String, String), String> {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run(&args(a), input.as_bytes(), &mut out, &mut err).await?;
        Ok((
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        ))
    }

    struct TempFile(std::path::PathBuf);
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    fn temp() -> TempFile {
        let id = uuid::Uuid::new_v4().simple();
        TempFile(std::env::temp_dir().join(format!("tablekit-cli-{id}.redb")))
    }

    #[tokio::test]
    async fn infer_prints_a_type_for_a_sample_of_the_table() {
        let file = temp();
        let path = file.0.to_str().unwrap();
        {
            let svc = TableServiceClient::embedded_at(&file.0).unwrap();
            let t = svc.table::<DynamicEntity>("Employees").unwrap();
            t.create_table().await.unwrap();
            for (id, age) in [(223, Some(34)), (224, None), (225, Some(29))] {
                let mut e =
                    DynamicEntity::new("Sales", format!("empid_{id:06}")).with("FirstName", "Jo");
                if let Some(age) = age {
                    e = e.with("Age", age);
                }
                t.insert(&e).await.unwrap();
            }
        }
        let src = cli(&[path, "infer", "Employees", "--sample", "2"], "")
            .await
            .unwrap();
        assert!(src.contains("from 2 entities"), "{src}");
        assert!(
            src.contains("#[tablekit(row_key = \"empid_{row:06}\")]"),
            "{src}"
        );
        assert!(src.contains("pub first_name: String,"), "{src}");
        assert!(
            src.contains("// Age: Int32 x1 in 1 of 2 entities, so optional"),
            "{src}"
        );
        assert!(src.contains("pub age: Option<i32>,"), "{src}");
        let all = cli(&[path, "infer", "Employees"], "").await.unwrap();
        assert!(all.contains("from 3 entities"), "{all}");
        let bad = cli(&[path, "infer", "Employees", "--sample", "0"], "")
            .await
            .unwrap_err();
        assert!(bad.contains("--sample needs a positive number"), "{bad}");
    }

    #[tokio::test]
    async fn check_verifies_a_closed_file_and_compact_gives_deleted_space_back() {
        let file = temp();
        let path = file.0.to_str().unwrap();
        let missing = cli(&[path, "check"], "").await.unwrap_err();
        assert!(missing.contains("no such file"), "{missing}");
        {
            let svc = TableServiceClient::embedded_at(&file.0).unwrap();
            let t = svc.table::<DynamicEntity>("Orders").unwrap();
            t.create_table().await.unwrap();
            svc.create_table("Empty").await.unwrap();
            // Ten partitions of 200, in transactions of 100.
            for p in 0..10 {
                for half in 0..2 {
                    let mut tx = t.transaction();
                    for k in 0..100 {
                        let i = p + 10 * (half * 100 + k);
                        let e = DynamicEntity::new(format!("p{p}"), format!("r{i:05}"))
                            .with("Note", "x".repeat(400));
                        tx.insert(&e).unwrap();
                    }
                    tx.send().await.unwrap();
                }
            }
            let in_use = cli(&[path, "check"], "").await.unwrap_err();
            assert!(in_use.contains("in use"), "{in_use}");
            // All but the last 200 rows (r01800..), in transactions.
            for p in 0..10 {
                for chunk in (0..180).collect::<Vec<_>>().chunks(90) {
                    let mut tx = t.transaction();
                    for k in chunk {
                        let i = p + 10 * k;
                        tx.delete(
                            (format!("p{p}").as_str(), format!("r{i:05}").as_str()),
                            tablekit::IfMatch::Any,
                        )
                        .unwrap();
                    }
                    tx.send().await.unwrap();
                }
            }
        }
        let checked = cli(&[path, "check"], "").await.unwrap();
        assert!(checked.contains("Orders: 200 entities"), "{checked}");
        assert!(checked.contains("Empty: 0 entities"), "{checked}");
        assert!(checked.contains(": ok (2 tables"), "{checked}");
        let before = std::fs::metadata(&file.0).unwrap().len();
        let compacted = cli(&[path, "compact"], "").await.unwrap();
        let after = std::fs::metadata(&file.0).unwrap().len();
        assert!(
            compacted.contains(&format!("{before} bytes before, {after} after")),
            "{compacted}"
        );
        assert!(after < before / 2, "{before} -> {after}");
        let checked = cli(&[path, "check"], "").await.unwrap();
        assert!(checked.contains("Orders: 200 entities"), "{checked}");
        let shown = cli(&[path, "query", "Orders", "--top", "1"], "")
            .await
            .unwrap();
        assert!(shown.contains("r01800"), "{shown}");
        // A damaged file is named, with what is wrong.
        let mut bytes = std::fs::read(&file.0).unwrap();
        let half = bytes.len() / 2;
        bytes.truncate(half);
        std::fs::write(&file.0, &bytes).unwrap();
        let damaged = cli(&[path, "check"], "").await.unwrap_err();
        assert!(
            damaged.contains(path) && damaged.contains("damaged"),
            "{damaged}"
        );
    }

    #[test]
    fn bad_command_lines_are_refused_before_the_store_is_opened() {
        assert!(parse(&args(&["x"])).is_err());
        assert!(parse(&args(&["x", "drop"])).is_err());
        assert!(parse(&args(&["x", "query", "T", "--top", "many"]))
            .unwrap_err()
            .contains("number"));
        assert!(parse(&args(&["x", "query", "T", "--filter"])).is_err());
        assert_eq!(
            parse(&args(&[
                "s", "query", "T", "--filter", "A eq 1", "--top", "2", "--json"
            ]))
            .unwrap(),
            (
                "s".into(),
                Command::Query {
                    table: "T".into(),
                    filter: Some("A eq 1".into()),
                    top: Some(2),
                    json: true
                }
            )
        );
    }

    #[tokio::test]
    async fn export_then_import_round_trips_a_table_and_queries_filter_it() {
        let from = temp();
        let to = temp();
        let path = from.0.to_str().unwrap();
        let missing = cli(&[path, "tables"], "").await.unwrap_err();
        assert!(missing.contains("no store file"), "{missing}");
        assert!(!from.0.exists(), "a read command creates no file");
        {
            let svc = TableServiceClient::embedded_at(&from.0).unwrap();
            let t = svc.table::<DynamicEntity>("Orders").unwrap();
            t.create_table().await.unwrap();
            for i in 0..5 {
                t.insert(
                    &DynamicEntity::new("p", format!("r{i}"))
                        .with("Amount", i64::from(i) << 33)
                        .with("Note", format!("n'{i}"))
                        .with("Ok", i % 2 == 0),
                )
                .await
                .unwrap();
            }
        }
        assert_eq!(cli(&[path, "tables"], "").await.unwrap(), "Orders\n");
        let shown = cli(
            &[
                path,
                "query",
                "Orders",
                "--filter",
                "Ok eq true and RowKey ne 'r0'",
            ],
            "",
        )
        .await
        .unwrap();
        let lines: Vec<&str> = shown.lines().collect();
        assert!(
            lines[0].starts_with("PartitionKey  RowKey  Timestamp"),
            "{shown}"
        );
        assert!(
            lines[1].contains("r2")
                && lines[1].contains("17179869184L")
                && lines[1].contains("'n''2'"),
            "{shown}"
        );
        assert!(lines[2].contains("r4"), "{shown}");
        assert_eq!(lines[3], "(2 entities)");
        let top = cli(&[path, "query", "Orders", "--top", "1", "--json"], "")
            .await
            .unwrap();
        assert_eq!(top.lines().count(), 1, "{top}");
        assert!(top.contains("\"Amount@odata.type\":\"Edm.Int64\""), "{top}");

        let exported = cli(&[path, "export", "Orders"], "").await.unwrap();
        assert_eq!(exported.lines().count(), 5);
        let to_path = to.0.to_str().unwrap();
        let done = cli(&[to_path, "import", "Orders"], &exported)
            .await
            .unwrap();
        // One summary, of one line.
        assert!(
            done.starts_with("imported Orders: 5 written, 0 refused, 0 ambiguous, 0 skipped (done before), 1 transaction, 0 throttled, in "),
            "{done}"
        );
        assert_eq!(done.lines().count(), 1, "{done}");
        let again = cli(&[to_path, "export", "Orders"], "").await.unwrap();
        assert_eq!(again, exported, "the imported table exports the same");

        let bad = cli(&[to_path, "import", "Orders"], "{\"PartitionKey\":\"p\"}\n")
            .await
            .unwrap_err();
        assert!(bad.starts_with("line 1:"), "{bad}");
        let conn = format!("UseEmbeddedStorage=true;Path={to_path}");
        assert_eq!(cli(&[&conn, "tables"], "").await.unwrap(), "Orders\n");
    }

    #[test]
    fn timestamps_print_as_the_service_writes_them() {
        let at = tablekit::edm::parse_datetime("2026-11-25T22:02:10.5157354Z").unwrap();
        let mut e = DynamicEntity::new("p", "r").with("When", at);
        e.timestamp = Some(at);
        let mut out = Vec::new();
        print_table(&[e], &mut out).unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert!(shown.contains("2026-11-25T22:02:10.5157354Z  "), "{shown}");
        assert!(
            shown.contains("datetime'2026-11-25T22:02:10.5157354Z'"),
            "{shown}"
        );
        assert!(!shown.contains("+00:00"), "{shown}");
    }

    #[tokio::test]
    async fn a_bad_import_line_is_named_with_what_is_wrong() {
        let store = temp();
        let path = store.0.to_str().unwrap();
        let good = r#"{"PartitionKey":"p","RowKey":"a"}"#;
        for (line, says) in [
            (
                r#"{"PartitionKey":"p","RowKey":"r","Ok":"true","Ok@odata.type":"Edm.Boolean"}"#,
                r#"property Ok: Edm.Boolean needs true or false, not the string "true""#,
            ),
            (
                r#"{"PartitionKey":"p","RowKey":"r","N":1.5,"N@odata.type":"Edm.Int32"}"#,
                "property N: Edm.Int32 needs a whole number",
            ),
            (
                r#"{"PartitionKey":"p","RowKey":"r","N":"12","N@odata.type":"Edm.Int64x"}"#,
                r#"property N: unknown type "Edm.Int64x""#,
            ),
            (
                r#"{"PartitionKey":"p","RowKey":"r","B":[1,2]}"#,
                "property B: a value is a string, a number, true or false (or null), not an array",
            ),
            (r#"{"PartitionKey":"p"}"#, "RowKey is missing"),
            (
                r#"{"PartitionKey":1,"RowKey":"r"}"#,
                "PartitionKey must be a string, not the number 1",
            ),
            (r#"{"PartitionKey":"#, "not JSON: EOF while parsing"),
            ("hello", "not JSON: expected value (column 1)"),
            ("[1]", "an entity is one JSON object"),
            (
                r#"{"PartitionKey":"p","RowKey":"r"} {}"#,
                "not JSON: trailing characters (column",
            ),
        ] {
            let input = format!("{good}\n\n{line}\n{good}\n");
            let err = cli(&[path, "import", "Orders"], &input).await.unwrap_err();
            assert!(err.starts_with("line 3: "), "{line}: {err}");
            assert!(err.contains(says), "{line}: {err}");
            assert!(
                !err.contains("response") && !err.contains("read as"),
                "{line}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn a_filter_literal_of_another_type_than_the_stored_property_warns() {
        let store = temp();
        let path = store.0.to_str().unwrap();
        let lines: String = (0..3)
            .map(|i| {
                format!(
                    "{{\"PartitionKey\":\"p\",\"RowKey\":\"r{i}\",\"Age\":{}}}\n",
                    39 + i
                )
            })
            .collect();
        cli(&[path, "import", "People"], &lines).await.unwrap();

        let (out, warning) = cli_warning(&[path, "query", "People", "--filter", "Age gt 40L"], "")
            .await
            .unwrap();
        assert!(out.ends_with("(0 entities)\n"), "{out}");
        assert!(
            warning.starts_with("tablekit-cli: warning: ")
                && warning.contains("Age is Edm.Int32 in the entities read")
                && warning.contains("40L is an Edm.Int64 literal"),
            "{warning}"
        );
        // The same filter with the stored type finds the entity, and says nothing.
        let (out, warning) = cli_warning(&[path, "query", "People", "--filter", "Age gt 40"], "")
            .await
            .unwrap();
        assert!(out.ends_with("(1 entity)\n"), "{out}");
        assert_eq!(warning, "");
        // A property no entity read holds is no mismatch.
        let (_, warning) = cli_warning(&[path, "query", "People", "--filter", "Height gt 2L"], "")
            .await
            .unwrap();
        assert_eq!(warning, "");
    }

    #[tokio::test]
    async fn help_says_how_filters_compare_types() {
        for flag in ["--help", "-h", "help"] {
            let help = cli(&[flag], "").await.unwrap();
            assert!(help.starts_with("usage: tablekit-cli "), "{help}");
            assert!(
                help.contains("Age gt 40L") && help.contains("Int32"),
                "{help}"
            );
        }
    }
}
