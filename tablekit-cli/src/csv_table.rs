//! CSV in and out. A CSV of entities has a header row naming its columns,
//! `PartitionKey` and `RowKey` among them; every other column is a property.
//! A property's type comes, cell by cell, from the first of:
//!
//! - its `Name@type` column, as Azure Storage Explorer exports
//!   (`PartitionKey,RowKey,Timestamp,Age,Age@type`), when the cell there is
//!   not empty (`Edm.Int32` or `Int32`);
//! - `--schema Name:Type,...` (`Age:Int32,Photo:Binary`);
//! - the type inferred from the column's cells: the narrowest of Boolean,
//!   Int32, Int64, Double, DateTime and Guid that all of them fit, else
//!   String. A number with a leading zero (`007`) or a `+` is text, so codes
//!   keep their form; Binary is never inferred (Base64 looks like text).
//!
//! An empty cell is no property, except that an empty cell whose `@type` cell
//! says `Edm.String` is the empty string (an export writes an entity that
//! lacks a property as two empty cells). `Timestamp` is the service's, so
//! its column is read past.

use base64::Engine as _;
use csv::StringRecord;
use tablekit::edm::{format_datetime, max_datetime, min_datetime, parse_datetime, EdmType};
use tablekit::{DynamicEntity, EdmValue};

/// The types a cell can have, as `--schema` and `@type` cells name them.
const TYPES: &str =
    "String, Int32, Int64, Double, Boolean, DateTime, Guid and Binary (with or without Edm.)";

/// The service's types, for an `@type` cell or a `--schema` entry: `Int32`
/// or `Edm.Int32`, in any case.
pub(crate) fn parse_type(name: &str) -> Option<EdmType> {
    let short = name
        .get(..4)
        .filter(|p| p.eq_ignore_ascii_case("edm."))
        .map_or(name, |_| &name[4..]);
    [
        EdmType::String,
        EdmType::Int32,
        EdmType::Int64,
        EdmType::Double,
        EdmType::Boolean,
        EdmType::DateTime,
        EdmType::Guid,
        EdmType::Binary,
    ]
    .into_iter()
    .find(|t| t.as_str()[4..].eq_ignore_ascii_case(short))
}

/// Parses `--schema`: `Name:Type` entries separated by commas, spaces or
/// newlines (so `--schema "$(cat schema.txt)"` reads one per line).
pub(crate) fn parse_schema(text: &str) -> Result<Vec<(String, EdmType)>, String> {
    let mut schema: Vec<(String, EdmType)> = Vec::new();
    for entry in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|e| !e.is_empty())
    {
        let Some((name, ty)) = entry.split_once(':') else {
            return Err(format!(
                "--schema: {entry:?} is not Name:Type (such as Age:Int32,Photo:Binary)"
            ));
        };
        let ty = parse_type(ty).ok_or_else(|| {
            format!("--schema: {name}: unknown type {ty:?}; the types are {TYPES}")
        })?;
        if schema.iter().any(|(n, _)| n == name) {
            return Err(format!("--schema names {name} twice"));
        }
        schema.push((name.to_owned(), ty));
    }
    Ok(schema)
}

/// What the cells of one column have been seen to fit.
#[derive(Debug, Clone, Copy)]
struct Seen {
    cells: u64,
    boolean: bool,
    int32: bool,
    int64: bool,
    double: bool,
    datetime: bool,
    guid: bool,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            cells: 0,
            boolean: true,
            int32: true,
            int64: true,
            double: true,
            datetime: true,
            guid: true,
        }
    }
}

impl Seen {
    fn add(&mut self, s: &str) {
        self.cells += 1;
        self.boolean &= s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false");
        let number = number_shape(s);
        let whole = number == Some(Number::Whole);
        self.int32 &= whole && s.parse::<i32>().is_ok();
        self.int64 &= whole && s.parse::<i64>().is_ok();
        // A whole number past i64 stays text rather than losing digits.
        self.double &= number == Some(Number::Fraction) || (whole && s.parse::<i64>().is_ok());
        // A date alone (2026-11-25) is left as text: which instant it means is the user's call.
        self.datetime &= self.datetime && s.len() >= 19 && s.as_bytes()[10] == b'T' && {
            parse_datetime(s).is_ok_and(|d| (min_datetime()..=max_datetime()).contains(&d))
        };
        self.guid &= self.guid
            && s.len() == 36
            && [8, 13, 18, 23].iter().all(|&i| s.as_bytes()[i] == b'-')
            && uuid::Uuid::try_parse(s).is_ok();
    }

    fn edm(&self) -> EdmType {
        match *self {
            Seen { cells: 0, .. } => EdmType::String,
            Seen { boolean: true, .. } => EdmType::Boolean,
            Seen { int32: true, .. } => EdmType::Int32,
            Seen { int64: true, .. } => EdmType::Int64,
            Seen { double: true, .. } => EdmType::Double,
            Seen { datetime: true, .. } => EdmType::DateTime,
            Seen { guid: true, .. } => EdmType::Guid,
            _ => EdmType::String,
        }
    }
}

#[derive(Debug, PartialEq)]
enum Number {
    Whole,
    Fraction,
}

/// Whether `s` is written as a number: `-12`, `0.5`, `1e-7`, `-2.5E+3`; not
/// `007`, `+1`, `.5`, `1.` or `NaN` (which the CSV writer meant as text, or
/// which only a declared Double reads).
fn number_shape(s: &str) -> Option<Number> {
    let b = s.strip_prefix('-').unwrap_or(s).as_bytes();
    let digits = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
    let int = digits(b);
    if int == 0 || (int > 1 && b[0] == b'0') {
        return None;
    }
    let mut rest = &b[int..];
    let mut shape = Number::Whole;
    if let [b'.', tail @ ..] = rest {
        let n = digits(tail);
        if n == 0 {
            return None;
        }
        rest = &tail[n..];
        shape = Number::Fraction;
    }
    if let [b'e' | b'E', tail @ ..] = rest {
        let tail = tail
            .strip_prefix(b"-")
            .or(tail.strip_prefix(b"+"))
            .unwrap_or(tail);
        let n = digits(tail);
        if n == 0 {
            return None;
        }
        rest = &tail[n..];
        shape = Number::Fraction;
    }
    rest.is_empty().then_some(shape)
}

/// `text` read as a value of type `edm`, or why not.
pub(crate) fn cell(text: &str, edm: EdmType) -> Result<EdmValue, String> {
    let not = |what: &str| format!("{text:?} is not an {edm} ({what})");
    Ok(match edm {
        EdmType::String => EdmValue::String(text.to_owned()),
        EdmType::Int32 => EdmValue::Int32(
            text.parse()
                .map_err(|_| not("a whole number from -2147483648 to 2147483647"))?,
        ),
        EdmType::Int64 => {
            EdmValue::Int64(text.parse().map_err(|_| {
                not("a whole number from -9223372036854775808 to 9223372036854775807")
            })?)
        }
        EdmType::Double => EdmValue::Double(match text {
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            _ => text
                .parse()
                .map_err(|_| not("a number such as 2.5 or 1e-7, or NaN, Infinity, -Infinity"))?,
        }),
        EdmType::Boolean if text.eq_ignore_ascii_case("true") => EdmValue::Boolean(true),
        EdmType::Boolean if text.eq_ignore_ascii_case("false") => EdmValue::Boolean(false),
        EdmType::Boolean => return Err(not("true or false")),
        EdmType::DateTime => {
            let at = parse_datetime(text)
                .map_err(|_| not("a date and time such as 2026-11-25T22:02:10.5157354Z"))?;
            if !(min_datetime()..=max_datetime()).contains(&at) {
                return Err(not("an instant from 1601-01-01 to 9999-12-31, UTC"));
            }
            EdmValue::DateTime(at)
        }
        EdmType::Guid => EdmValue::Guid(
            uuid::Uuid::try_parse(text)
                .map_err(|_| not("such as c9da6455-213d-42c9-9a79-3e9149a57833"))?,
        ),
        EdmType::Binary => EdmValue::Binary(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| not("Base64 text"))?,
        ),
        other => return Err(format!("{other} is not a type a CSV cell holds")),
    })
}

/// `value` as a CSV cell: the text [`cell`] reads back as the same value.
pub(crate) fn text(value: &EdmValue) -> String {
    match value {
        EdmValue::String(s) => s.clone(),
        EdmValue::Int32(i) => i.to_string(),
        EdmValue::Int64(i) => i.to_string(),
        EdmValue::Double(d) if d.is_nan() => "NaN".into(),
        EdmValue::Double(d) if d.is_infinite() => {
            if *d > 0.0 { "Infinity" } else { "-Infinity" }.into()
        }
        // Debug is the shortest text that parses back to the same bits (2.0, 1e-7).
        EdmValue::Double(d) => format!("{d:?}"),
        EdmValue::Boolean(b) => b.to_string(),
        EdmValue::DateTime(d) => format_datetime(d),
        EdmValue::Guid(g) => g.hyphenated().to_string(),
        EdmValue::Binary(b) => base64::engine::general_purpose::STANDARD.encode(b),
        other => other.to_string(),
    }
}

/// A property column.
#[derive(Debug)]
struct Property {
    name: String,
    index: usize,
    /// Its `Name@type` column.
    type_column: Option<usize>,
    /// The type `--schema` gives it.
    given: Option<EdmType>,
    seen: Seen,
}

/// The columns of a CSV, from its header row, and what their cells showed.
#[derive(Debug)]
pub(crate) struct Columns {
    partition_key: usize,
    row_key: usize,
    properties: Vec<Property>,
    width: usize,
}

impl Columns {
    /// Reads the header row; refuses one without `PartitionKey` and `RowKey`,
    /// with a column named twice, or a `--schema` entry for no column.
    pub(crate) fn new(header: &StringRecord, schema: &[(String, EdmType)]) -> Result<Self, String> {
        let names: Vec<&str> = header
            .iter()
            .enumerate()
            // Spreadsheet programs start a UTF-8 file with a byte order mark.
            .map(|(i, n)| {
                if i == 0 {
                    n.trim_start_matches('\u{feff}')
                } else {
                    n
                }
            })
            .collect();
        let find = |name: &str| names.iter().position(|n| *n == name);
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() {
                return Err(format!(
                    "the header (line 1) has no name for column {}",
                    i + 1
                ));
            }
            if let Some(j) = names[i + 1..].iter().position(|n| n == name) {
                return Err(format!(
                    "the header (line 1) names column {name} twice (columns {} and {})",
                    i + 1,
                    i + j + 2
                ));
            }
        }
        let (partition_key, row_key) = match (find("PartitionKey"), find("RowKey")) {
            (Some(p), Some(r)) => (p, r),
            (p, _) => {
                let missing = match (p, find("RowKey")) {
                    (None, None) => "PartitionKey and RowKey columns",
                    (None, _) => "PartitionKey column",
                    _ => "RowKey column",
                };
                return Err(format!(
                    "the header (line 1) has no {missing}, which every entity needs; its columns are {}",
                    names.join(", ")
                ));
            }
        };
        for (name, ty) in schema {
            match find(name) {
                None => {
                    return Err(format!(
                        "--schema names {name}, which is no column of the header (line 1): {}",
                        names.join(", ")
                    ))
                }
                Some(i) if (i == partition_key || i == row_key) && *ty != EdmType::String => {
                    return Err(format!("--schema: {name} is a key, always an Edm.String"))
                }
                Some(_) => {}
            }
        }
        let mut properties = Vec::new();
        for (index, name) in names.iter().enumerate() {
            if let Some(property) = name.strip_suffix("@type") {
                if find(property).is_none() {
                    return Err(format!(
                        "the header (line 1) has a column {name} but no column {property} whose type it would give"
                    ));
                }
                continue;
            }
            if index == partition_key || index == row_key || *name == "Timestamp" {
                continue;
            }
            properties.push(Property {
                name: (*name).to_owned(),
                index,
                type_column: find(&format!("{name}@type")),
                given: schema.iter().find(|(n, _)| n == name).map(|(_, t)| *t),
                seen: Seen::default(),
            });
        }
        Ok(Columns {
            partition_key,
            row_key,
            properties,
            width: names.len(),
        })
    }

    /// Learns from `record`'s cells the types of the columns whose type is
    /// neither given by `--schema` nor by the record's `@type` cell.
    pub(crate) fn learn(&mut self, record: &StringRecord) {
        for p in &mut self.properties {
            let typed = p
                .type_column
                .and_then(|i| record.get(i))
                .is_some_and(|t| !t.is_empty());
            match record.get(p.index) {
                Some(cell) if !cell.is_empty() && p.given.is_none() && !typed => p.seen.add(cell),
                _ => {}
            }
        }
    }

    /// The columns whose type was inferred from at least one cell, as
    /// `Name Type`, for a note on standard error.
    pub(crate) fn inferred(&self) -> Vec<String> {
        self.properties
            .iter()
            .filter(|p| p.given.is_none() && p.seen.cells > 0)
            .map(|p| format!("{} {}", p.name, &p.seen.edm().as_str()[4..]))
            .collect()
    }

    /// The entity of `record`, or what is wrong with which cell.
    pub(crate) fn entity(&self, record: &StringRecord) -> Result<DynamicEntity, String> {
        if record.len() != self.width {
            return Err(format!(
                "{} fields where the header has {}",
                record.len(),
                self.width
            ));
        }
        let mut e = DynamicEntity::new(&record[self.partition_key], &record[self.row_key]);
        for p in &self.properties {
            let typed = p
                .type_column
                .map(|i| (i, &record[i]))
                .filter(|(_, t)| !t.is_empty());
            let edm = match typed {
                Some((i, t)) => parse_type(t).ok_or_else(|| {
                    format!(
                        "column {} ({}@type): unknown type {t:?}; the types are {TYPES}",
                        i + 1,
                        p.name
                    )
                })?,
                None => p.given.unwrap_or_else(|| p.seen.edm()),
            };
            let text = &record[p.index];
            if text.is_empty() {
                if typed.is_some() && edm == EdmType::String {
                    e.set(p.name.as_str(), "");
                }
                continue;
            }
            let value = cell(text, edm).map_err(|why| {
                let whence = match (typed, p.given) {
                    (Some(_), _) => " (its @type cell)",
                    (None, Some(_)) => " (--schema)",
                    (None, None) => " (inferred from the column's cells; --schema sets it)",
                };
                format!("column {} ({}): {why}{whence}", p.index + 1, p.name)
            })?;
            e.set(p.name.as_str(), value);
        }
        Ok(e)
    }
}

/// The header and the rows of `entities` in the form [`Columns`] reads back:
/// `PartitionKey,RowKey,Timestamp`, then `Name,Name@type` for each property
/// in the order first seen.
pub(crate) fn write(
    entities: &[DynamicEntity],
    out: &mut impl std::io::Write,
) -> Result<(), String> {
    let mut names: Vec<&str> = Vec::new();
    for e in entities {
        for (name, _) in e.properties.iter() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let mut w = csv::Writer::from_writer(out);
    let err = |e: csv::Error| e.to_string();
    let mut header = vec![
        "PartitionKey".to_owned(),
        "RowKey".into(),
        "Timestamp".into(),
    ];
    for n in &names {
        header.push((*n).to_owned());
        header.push(format!("{n}@type"));
    }
    w.write_record(&header).map_err(err)?;
    let mut row: Vec<String> = Vec::with_capacity(header.len());
    for e in entities {
        row.clear();
        row.push(e.partition_key.clone());
        row.push(e.row_key.clone());
        row.push(
            e.timestamp
                .as_ref()
                .map(format_datetime)
                .unwrap_or_default(),
        );
        for n in &names {
            match e.get(n) {
                Some(v) => {
                    row.push(text(v));
                    row.push(v.edm_type().as_str().to_owned());
                }
                None => row.extend([String::new(), String::new()]),
            }
        }
        w.write_record(&row).map_err(err)?;
    }
    w.flush().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(header: &str, schema: &str) -> Result<Columns, String> {
        let header = StringRecord::from(header.split(',').collect::<Vec<_>>());
        Columns::new(&header, &parse_schema(schema)?)
    }

    fn infer(cells: &[&str]) -> EdmType {
        let mut seen = Seen::default();
        for c in cells {
            seen.add(c);
        }
        seen.edm()
    }

    #[test]
    fn a_column_gets_the_narrowest_type_all_its_cells_fit() {
        assert_eq!(infer(&["true", "FALSE"]), EdmType::Boolean);
        assert_eq!(infer(&["1", "-2147483648"]), EdmType::Int32);
        assert_eq!(infer(&["1", "2147483648"]), EdmType::Int64);
        assert_eq!(infer(&["1", "2.5", "1e-7", "-2.5E+3"]), EdmType::Double);
        assert_eq!(
            infer(&["2026-11-25T22:02:10.5157354Z", "2026-01-01T00:00:00+01:00"]),
            EdmType::DateTime
        );
        assert_eq!(
            infer(&["c9da6455-213d-42c9-9a79-3e9149a57833"]),
            EdmType::Guid
        );
        // Text that only looks like a number, a date or a type keeps its form.
        for cells in [
            &["007"][..],
            &["+1"],
            &[".5"],
            &["1."],
            &["NaN"],
            &["1", "x"],
            &["9223372036854775808"],
            &["2026-11-25"],
            &["1", "true"],
            &["c9da6455213d42c99a793e9149a57833"],
            &[],
        ] {
            assert_eq!(infer(cells), EdmType::String, "{cells:?}");
        }
    }

    #[test]
    fn every_value_written_as_a_cell_reads_back_the_same() {
        let at = parse_datetime("1601-01-01T00:00:00.0000001Z").unwrap();
        for v in [
            EdmValue::String("a,\"b\"\nc".into()),
            EdmValue::Int32(i32::MIN),
            EdmValue::Int64(i64::MAX),
            EdmValue::Double(0.1 + 0.2),
            EdmValue::Double(2.0),
            EdmValue::Double(1e-300),
            EdmValue::Double(f64::NEG_INFINITY),
            EdmValue::Boolean(false),
            EdmValue::DateTime(at),
            EdmValue::Guid(uuid::Uuid::from_u128(u128::MAX - 1)),
            EdmValue::Binary((0..=255).collect()),
        ] {
            assert_eq!(cell(&text(&v), v.edm_type()).unwrap(), v);
        }
        let nan = cell(&text(&EdmValue::Double(f64::NAN)), EdmType::Double).unwrap();
        assert!(nan.as_f64().unwrap().is_nan());
    }

    #[test]
    fn types_are_named_with_or_without_edm_in_any_case() {
        assert_eq!(parse_type("Edm.Int64"), Some(EdmType::Int64));
        assert_eq!(parse_type("int64"), Some(EdmType::Int64));
        assert_eq!(parse_type("EDM.guid"), Some(EdmType::Guid));
        assert_eq!(parse_type("Edm.Int16"), None);
        assert_eq!(parse_type(""), None);
        assert_eq!(
            parse_schema("Age:Int32, Photo:Edm.Binary\nZip:string").unwrap(),
            [
                ("Age".to_owned(), EdmType::Int32),
                ("Photo".into(), EdmType::Binary),
                ("Zip".into(), EdmType::String)
            ]
        );
        let bad = parse_schema("Age=Int32").unwrap_err();
        assert!(bad.contains("is not Name:Type"), "{bad}");
        let bad = parse_schema("Age:Int16").unwrap_err();
        assert!(
            bad.contains("unknown type \"Int16\"") && bad.contains("Binary"),
            "{bad}"
        );
        let bad = parse_schema("Age:Int32,Age:Int64").unwrap_err();
        assert!(bad.contains("twice"), "{bad}");
    }

    #[test]
    fn a_header_is_refused_for_what_it_lacks_or_repeats() {
        let bad = columns("RowKey,Name", "").unwrap_err();
        assert!(
            bad.contains("no PartitionKey column") && bad.contains("RowKey, Name"),
            "{bad}"
        );
        let bad = columns("Name", "").unwrap_err();
        assert!(bad.contains("no PartitionKey and RowKey columns"), "{bad}");
        let bad = columns("PartitionKey,Name", "").unwrap_err();
        assert!(bad.contains("no RowKey column"), "{bad}");
        let bad = columns("PartitionKey,RowKey,A,B,A", "").unwrap_err();
        assert!(
            bad.contains("names column A twice (columns 3 and 5)"),
            "{bad}"
        );
        let bad = columns("PartitionKey,RowKey,,B", "").unwrap_err();
        assert!(bad.contains("no name for column 3"), "{bad}");
        let bad = columns("PartitionKey,RowKey,A@type", "").unwrap_err();
        assert!(bad.contains("no column A whose type"), "{bad}");
        let bad = columns("PartitionKey,RowKey,A", "B:Int32").unwrap_err();
        assert!(
            bad.contains("--schema names B, which is no column"),
            "{bad}"
        );
        let bad = columns("PartitionKey,RowKey,A", "RowKey:Int32").unwrap_err();
        assert!(bad.contains("always an Edm.String"), "{bad}");
        // A byte order mark before the first name is not part of it.
        assert!(columns("\u{feff}PartitionKey,RowKey", "").is_ok());
    }
}
