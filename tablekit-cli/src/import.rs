//! What is wrong with an import line that did not decode, said in the terms
//! of the input (its JSON values and columns), not of a service response.

use serde_json::Value;
use tablekit::edm::EdmType;

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
