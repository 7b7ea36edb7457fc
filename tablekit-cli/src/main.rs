//! A look inside a store, as Azure Storage Explorer gives one for the service:
//! list tables, query with an OData filter, print entities as a table or JSON,
//! export a table to JSON lines and import it back. The store is an embedded
//! store file or a connection string.
//!
//! ```text
//! cargo install tablekit-cli            # or, in tablekit's repository: cargo install --path tablekit-cli
//! tablekit-cli <store> tables
//! tablekit-cli <store> query <table> [--filter <odata>] [--top <n>] [--json]
//! tablekit-cli <store> export <table> > table.jsonl
//! tablekit-cli <store> import <table> < table.jsonl
//! ```
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
//! replaced).

mod import;

use std::io::{BufRead, Write};

use futures::TryStreamExt as _;
use tablekit::{entity_from_json, entity_to_json, DynamicEntity, TableServiceClient, UpdateMode};

const USAGE: &str = "\
usage: tablekit-cli <store> tables
       tablekit-cli <store> query <table> [--filter <odata>] [--top <n>] [--json]
       tablekit-cli <store> export <table>
       tablekit-cli <store> import <table>       (JSON lines on standard input)
<store>: a connection string (contains '=') or the path of an embedded store file";

/// What the command line asks for, checked before the store is opened.
#[derive(Debug, PartialEq)]
enum Command {
    Tables,
    Query {
        table: String,
        filter: Option<String>,
        top: Option<usize>,
        json: bool,
    },
    Export(String),
    Import(String),
}

fn parse(args: &[String]) -> Result<(String, Command), String> {
    let (store, rest) = match args {
        [store, rest @ ..] if !rest.is_empty() => (store.clone(), rest),
        _ => return Err(USAGE.into()),
    };
    let command = match rest {
        [c] if c == "tables" => Command::Tables,
        [c, table] if c == "export" => Command::Export(table.clone()),
        [c, table] if c == "import" => Command::Import(table.clone()),
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
    writeln!(out, "({} entities)", entities.len())
}

fn json_line(e: &DynamicEntity, out: &mut impl Write) -> Result<(), String> {
    let json = entity_to_json(e).map_err(|e| e.to_string())?;
    out.write_all(&json).map_err(|e| e.to_string())?;
    writeln!(out).map_err(|e| e.to_string())
}

async fn run(args: &[String], input: impl BufRead, out: &mut impl Write) -> Result<(), String> {
    let (store, command) = parse(args)?;
    let svc = open(&store, matches!(command, Command::Import(_)))?;
    let table = |name: &str| svc.table::<DynamicEntity>(name).map_err(|e| e.to_string());
    match command {
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
            if let Some(f) = filter {
                query = query.filter_raw(f);
            }
            if let Some(n) = top {
                query = query.take(n);
            }
            let found: Vec<DynamicEntity> = query
                .stream()
                .try_collect()
                .await
                .map_err(|e| e.to_string())?;
            if json {
                for e in &found {
                    json_line(e, out)?;
                }
            } else {
                print_table(&found, out).map_err(|e| e.to_string())?;
            }
        }
        Command::Export(name) => {
            let mut stream = table(&name)?.query().stream();
            while let Some(e) = stream.try_next().await.map_err(|e| e.to_string())? {
                json_line(&e, out)?;
            }
        }
        Command::Import(name) => {
            let t = table(&name)?;
            t.create_table_if_not_exists()
                .await
                .map_err(|e| e.to_string())?;
            let mut n = 0;
            for (i, line) in input.lines().enumerate() {
                let line = line.map_err(|e| e.to_string())?;
                if line.trim().is_empty() {
                    continue;
                }
                let e: DynamicEntity = entity_from_json(line.as_bytes()).map_err(|e| {
                    let why = import::explain(&line).unwrap_or_else(|| {
                        // The decoder's words are a response's: say "line".
                        e.to_string().replace("cannot decode response: ", "")
                    });
                    format!("line {}: {why}", i + 1)
                })?;
                t.upsert(&e, UpdateMode::Replace)
                    .await
                    .map_err(|e| format!("line {}: {e}", i + 1))?;
                n += 1;
            }
            writeln!(out, "imported {n} entities into {name}").map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = run(&args, stdin.lock(), &mut stdout).await {
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
        let mut out = Vec::new();
        run(&args(a), input.as_bytes(), &mut out).await?;
        Ok(String::from_utf8(out).unwrap())
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
        assert_eq!(done, "imported 5 entities into Orders\n");
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
}
