//! `tablekit-cli infer`: the type it prints for a table compiles and reads
//! and writes the sampled entities unchanged.
//!
//! The samples are the seeds' entity shapes (the data model's employees and
//! blogs, the guide's heterogeneous tables told apart by `EntityType` or by a
//! RowKey prefix) and the Edm types' edge cases. What `infer` prints for
//! them is committed in `infer_generated.rs` and compiled into this binary
//! (one compilation, no crate built at test time);
//! `inferred_source_is_the_committed_one` proves the file is exactly what
//! `infer` prints today (run it with `TABLEKIT_BLESS=1` to rewrite the file
//! after changing `infer`), and the round trips use the compiled types.

use chrono::{DateTime, Utc};
use tablekit::codec::{entity_from_json, entity_to_json};
use tablekit::{DynamicEntity, EdmValue, TableEntity};

#[path = "../../tablekit-cli/src/infer.rs"]
#[allow(dead_code)]
mod infer_source;

#[allow(clippy::all, dead_code)]
mod generated {
    include!("infer_generated.rs");
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn employees() -> Vec<DynamicEntity> {
    let e = |dept: &str, id: u32, first: &str, age: i32| {
        DynamicEntity::new(dept, format!("empid_{id:06}"))
            .with("FirstName", first)
            .with("LastName", "Jones")
            .with("Age", age)
            .with("EmailAddress", format!("{first}@contoso.com"))
    };
    vec![
        e("Sales", 223, "Jonathan", 34).with("Salary", 30000.5),
        e("Sales", 224, "Mary", 41).with("Salary", 42000.0),
        e("Marketing", 12, "Ana", 29),
    ]
}

fn blogs() -> Vec<DynamicEntity> {
    vec![
        DynamicEntity::new("Channel9", "Oct-29")
            .with("Rating", 3)
            .with("Text", "Pretty good"),
        DynamicEntity::new("Channel9", "Nov-02").with("Text", "Unrated"),
        DynamicEntity::new("MSDN", "Oct-30")
            .with("Rating", 5)
            .with("Text", "Great"),
    ]
}

fn social() -> Vec<DynamicEntity> {
    vec![
        DynamicEntity::new("alice", "2014-07-31_Blog")
            .with("EntityType", "Blog")
            .with("Text", "Hello"),
        DynamicEntity::new("alice", "2014-08-01_Photo")
            .with("EntityType", "Photo")
            .with("Uri", "https://example.org/a.png")
            .with("Width", 640),
        DynamicEntity::new("bob", "2014-08-02_Photo")
            .with("EntityType", "Photo")
            .with("Uri", "https://example.org/b.png")
            .with("Width", 800)
            .with("Caption", "Sunset"),
    ]
}

fn org() -> Vec<DynamicEntity> {
    vec![
        DynamicEntity::new("Sales", "EMPLOYEE_000223")
            .with("Name", "Jonathan")
            .with("Age", 34),
        DynamicEntity::new("Sales", "EMPLOYEE_000224")
            .with("Name", "Mary")
            .with("Age", 41),
        DynamicEntity::new("Sales", "DEPARTMENT_Sales").with("Manager", "Mary"),
    ]
}

fn edge_types() -> Vec<DynamicEntity> {
    let guid = uuid::Uuid::parse_str("c9da6455-213d-42c9-9a79-3e9149a57833").unwrap();
    vec![
        DynamicEntity::new("2024", "r_0000000001")
            .with("Text", "")
            .with("Bytes", Vec::<u8>::new())
            .with("Flag", false)
            .with("When", at("1601-01-01T00:00:00Z"))
            .with("Ratio", -0.0)
            .with("Id", uuid::Uuid::nil())
            .with("Small", i32::MIN)
            .with("Big", i64::MIN),
        DynamicEntity::new("2025", "r_9999999999")
            .with("Text", "O'Brien \u{e9}\u{1f600} \"quoted\"")
            .with("Bytes", vec![0u8, 255, 10])
            .with("Flag", true)
            .with("When", at("2009-05-01T12:34:56.1234567Z"))
            .with("Ratio", 0.1 + 0.2)
            .with("Id", guid)
            .with("Small", i32::MAX)
            .with("Big", i64::MAX)
            .with("Sometimes", 9_000_000_000i64),
        DynamicEntity::new("2026", "r_0000000002")
            .with("Text", "x".repeat(100))
            .with("Bytes", vec![1u8; 64])
            .with("Flag", true)
            .with("When", at("9999-12-31T23:59:59.9999999Z"))
            .with("Ratio", f64::MAX)
            .with("Id", guid)
            .with("Small", 0)
            .with("Big", 0i64),
    ]
}

/// Each sample: the module its type goes in, the table name, the entities.
fn samples() -> Vec<(&'static str, &'static str, Vec<DynamicEntity>)> {
    vec![
        ("employees", "Employees", employees()),
        ("blogs", "Blogs", blogs()),
        ("social", "SocialNetwork", social()),
        ("org", "Org", org()),
        ("edge_types", "EdgeTypes", edge_types()),
    ]
}

fn generated_source() -> String {
    let mut out = String::from(
        "// What `tablekit-cli infer` prints for the samples of tests/integration/infer.rs.\n\
         // Rewritten by `TABLEKIT_BLESS=1 cargo nextest run -p tablekit-tests --test integration -E 'test(/infer::/)'`.\n",
    );
    for (module, table, entities) in samples() {
        out.push_str(&format!("\npub mod {module} {{\n"));
        for line in infer_source::infer(table, &entities).lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out.push_str("}\n");
    }
    out
}

#[test]
fn inferred_source_is_the_committed_one() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/infer_generated.rs"
    );
    let now = generated_source();
    if std::env::var_os("TABLEKIT_BLESS").is_some() {
        std::fs::write(path, &now).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        committed, now,
        "infer prints something else now: rerun with TABLEKIT_BLESS=1 and review the diff"
    );
}

/// The printed types name no crate but tablekit (`tablekit::chrono`,
/// `tablekit::uuid`, never `chrono::` or `uuid::`), so that they compile in a
/// crate whose one dependency is tablekit: every path outside the comments
/// starts at `tablekit` (this package has chrono and uuid too, so compiling
/// the types here does not show it).
#[test]
fn inferred_types_need_no_crate_but_tablekit() {
    let source = generated_source();
    let mut roots = std::collections::BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let bytes = code.as_bytes();
        for (at, _) in code.match_indices("::") {
            // The first segment of a path: an identifier not itself after `::`.
            let start = code[..at]
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let after_colons = start >= 2 && &bytes[start - 2..start] == b"::";
            if start < at && !after_colons {
                roots.insert(code[start..at].to_owned());
            }
        }
    }
    assert_eq!(
        roots.into_iter().collect::<Vec<_>>(),
        ["tablekit"],
        "paths of the inferred types"
    );
    assert!(source.contains("tablekit::uuid::Uuid"));
    assert!(source.contains("tablekit::chrono::DateTime<tablekit::chrono::Utc>"));
}

/// Keys and properties, in name order (a struct writes its fields in its
/// own order).
fn normalised(e: &DynamicEntity) -> (String, String, Vec<(String, EdmValue)>) {
    let mut props: Vec<(String, EdmValue)> = e
        .properties
        .iter()
        .map(|(n, v)| (n.to_owned(), v.clone()))
        .collect();
    props.sort_by(|a, b| a.0.cmp(&b.0));
    (e.partition_key.clone(), e.row_key.clone(), props)
}

/// Reads each entity as `T` and writes it back: nothing may change.
#[track_caller]
fn round_trip<T: TableEntity + std::fmt::Debug>(entities: &[DynamicEntity]) -> Vec<T> {
    entities
        .iter()
        .map(|e| {
            let typed: T = entity_from_json(&entity_to_json(e).unwrap()).unwrap();
            let back: DynamicEntity = entity_from_json(&entity_to_json(&typed).unwrap()).unwrap();
            assert_eq!(normalised(&back), normalised(e), "{typed:?}");
            typed
        })
        .collect()
}

#[test]
fn the_employees_struct_reads_and_writes_the_sample_unchanged() {
    let typed = round_trip::<generated::employees::Employees>(&employees());
    assert_eq!(typed[0].row, 223, "the key template's number");
    assert_eq!(typed[2].salary, None);
    assert_eq!(
        generated::employees::Employees::row_key(12).unwrap(),
        "empid_000012"
    );
}

#[test]
fn the_blogs_struct_reads_and_writes_the_sample_unchanged() {
    let typed = round_trip::<generated::blogs::Blogs>(&blogs());
    assert_eq!(typed[1].rating, None);
}

#[test]
fn the_discriminated_enum_reads_and_writes_the_sample_unchanged() {
    use generated::social::SocialNetwork;
    let typed = round_trip::<SocialNetwork>(&social());
    assert!(matches!(typed[0], SocialNetwork::Blog(_)));
    assert!(matches!(&typed[2], SocialNetwork::Photo(p) if p.caption.as_deref() == Some("Sunset")));
}

#[test]
fn the_row_key_prefix_enum_reads_and_writes_the_sample_unchanged() {
    use generated::org::Org;
    let typed = round_trip::<Org>(&org());
    assert!(matches!(&typed[0], Org::Employee(e) if e.row == 223));
    assert!(matches!(typed[2], Org::Department(_)));
}

#[test]
fn the_edge_types_struct_reads_and_writes_the_sample_unchanged() {
    let typed = round_trip::<generated::edge_types::EdgeTypes>(&edge_types());
    assert_eq!(typed[1].big, i64::MAX);
    assert_eq!(typed[1].row, 9_999_999_999);
    assert_eq!(typed[0].ratio.to_bits(), (-0.0f64).to_bits());
}
