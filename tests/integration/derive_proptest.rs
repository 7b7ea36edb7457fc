//! Property test: any value of a derived type encodes to the service's JSON and
//! decodes back to an equal value, through both the wire form and the property bag.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use tablekit::{codec::entity_to_json, entity::RawEntity, TableEntity};
use uuid::Uuid;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "emp_{id:08}")]
struct Employee {
    department: String,
    id: u32,
    name: String,
    note: Option<String>,
    age: i32,
    small: u8,
    wide: u32,
    big: i64,
    salary: f64,
    active: bool,
    hired: DateTime<Utc>,
    badge: Uuid,
    photo: Vec<u8>,
    #[tablekit(edm = "Int64")]
    level: i32,
}

fn text() -> impl Strategy<Value = String> {
    // Quotes, backslashes, control characters, non-ASCII and astral characters.
    "[a-zA-Z0-9 '\"\\\\\\n\\té😀%+&=]{0,40}"
}

fn key_text() -> impl Strategy<Value = String> {
    // Key characters the service allows (no / \ # ? or controls).
    "[a-zA-Z0-9 '%+&=é_-]{0,30}"
}

fn employee() -> impl Strategy<Value = Employee> {
    (
        (
            key_text(),
            any::<u32>().prop_map(|v| v % 100_000_000),
            text(),
            proptest::option::of(text()),
        ),
        (any::<i32>(), any::<u8>(), any::<u32>(), any::<i64>()),
        (
            any::<f64>().prop_filter("finite or not, but not NaN (NaN != NaN)", |f| !f.is_nan()),
            any::<bool>(),
            // 1601-01-01 ..= 9999-12-31, whole 100 ns ticks.
            (-11_644_473_600_i64..253_402_300_799_i64, 0u32..10_000_000),
            any::<u128>(),
            proptest::collection::vec(any::<u8>(), 0..200),
            any::<i32>(),
        ),
    )
        .prop_map(
            |(
                (department, id, name, note),
                (age, small, wide, big),
                (salary, active, (secs, ticks), badge, photo, level),
            )| Employee {
                department,
                id,
                name,
                note,
                age,
                small,
                wide,
                big,
                salary,
                active,
                hired: Utc.timestamp_opt(secs, ticks * 100).unwrap(),
                badge: Uuid::from_u128(badge),
                photo,
                level,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn derived_values_survive_the_wire_format(e in employee()) {
        let json = entity_to_json(&e).unwrap();
        // A query page, as the service returns it without metadata.
        let mut page = b"{\"value\":[".to_vec();
        page.extend_from_slice(&json);
        page.extend_from_slice(b"]}");
        let back: Vec<Employee> = tablekit::__private_0_1::bench::decode_page(&page).unwrap();
        prop_assert_eq!(&back[0], &e);
    }

    #[test]
    fn derived_values_survive_the_property_bag(e in employee()) {
        let bag = tablekit::codec::to_dynamic(&e).unwrap();
        let back = Employee::decode(&RawEntity::from_dynamic(&bag)).unwrap();
        prop_assert_eq!(back, e);
    }
}
