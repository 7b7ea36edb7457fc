//! What is wrong with an import line that did not decode, said in the terms
//! of the input (its JSON values and columns), not of a service response.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tablekit::codec::entity_from_json;
use tablekit::edm::EdmType;
use tablekit::table::bulk::{BulkResult, Checkpoint};
use tablekit::{DynamicEntity, TableClient, UpdateMode};

use crate::progress::{summary, Progress};

/// Upserts the entities of `input` (JSON lines) into `table` with the bulk
/// writer; with `checkpoint`, resumes a run that stopped (the entities the
/// checkpoint settled are skipped). A bad line ends the input: what came
/// before it is written, then the line is reported.
pub(crate) async fn import(
    table: &TableClient<DynamicEntity>,
    name: &str,
    input: impl BufRead + Send,
    checkpoint: Option<&Path>,
    out: &mut impl Write,
    warnings: &mut impl Write,
) -> Result<(), String> {
    let checkpoint = checkpoint
        .map(Checkpoint::open)
        .transpose()
        .map_err(|e| e.to_string())?;
    let skip = checkpoint.as_ref().map_or(0, Checkpoint::position);
    let bad: Arc<Mutex<Option<String>>> = Arc::default();
    let kept = bad.clone();
    let mut entity = 0u64;
    let entities = input
        .lines()
        .enumerate()
        .filter(|(_, line)| line.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .filter(move |_| {
            entity += 1;
            entity > skip
        })
        .map_while(move |(i, line)| {
            let decoded = line.map_err(|e| e.to_string()).and_then(|line| {
                entity_from_json::<DynamicEntity>(line.as_bytes()).map_err(|e| {
                    explain(&line).unwrap_or_else(|| {
                        // The decoder's words are a response's: say "line".
                        e.to_string().replace("cannot decode response: ", "")
                    })
                })
            });
            match decoded {
                Ok(e) => Some(e),
                Err(why) => {
                    *kept.lock().unwrap() = Some(format!("line {}: {why}", i + 1));
                    None
                }
            }
        });
    let bar = Progress::new(&format!("import {name}"));
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
    w(writeln!(
        out,
        "imported {} entities into {name}",
        report.written
    ))?;
    w(writeln!(out, "{}", summary("imported", name, &report)))?;
    for r in refusals.lock().unwrap().iter() {
        w(writeln!(warnings, "tablekit-cli: not imported: {r}"))?;
    }
    if let Some(bad) = bad.lock().unwrap().take() {
        return Err(bad);
    }
    let failed = report.refused + report.ambiguous;
    if failed > 0 {
        return Err(format!("{failed} entities were not imported (see above)"));
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
