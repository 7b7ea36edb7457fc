//! Key builders and key templates of `#[derive(TableEntity)]`: the design
//! guide's examples produce the exact strings, and keys are read back into
//! their fields.

use tablekit::{codec::entity_to_json, entity::RawEntity, DynamicEntity, EntityKey, TableEntity};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct EmployeeById {
    department: String,
    employee_id: u32,
    first_name: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "email_{email}")]
struct EmployeeByEmail {
    department: String,
    email: String,
    employee_id: u32,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}_{year}")]
struct Review {
    department: String,
    employee_id: u32,
    year: u16,
    comments: String,
}

#[test]
fn guide_examples_produce_the_exact_keys() {
    assert_eq!(EmployeeById::row_key(223).unwrap(), "empid_000223");
    assert_eq!(EmployeeById::partition_key("Sales").unwrap(), "Sales");
    assert_eq!(
        EmployeeByEmail::row_key("jonesj@contoso.com").unwrap(),
        "email_jonesj@contoso.com"
    );
    assert_eq!(Review::row_key(123, 2012).unwrap(), "000123_2012");
    assert_eq!(
        Review::key("Sales", 123, 2012).unwrap(),
        EntityKey::new("Sales", "000123_2012")
    );
}

#[test]
fn padding_is_a_fixed_width() {
    assert_eq!(EmployeeById::row_key(0).unwrap(), "empid_000000");
    assert_eq!(EmployeeById::row_key(999_999).unwrap(), "empid_999999");
    let err = EmployeeById::row_key(1_000_000).unwrap_err();
    assert!(err.is_invalid_input());
    assert_eq!(
        err.to_string(),
        "invalid input: property \"employee_id\": cannot be part of the RowKey: 1000000 has 7 digits; the key template gives it a fixed width of 6"
    );
}

#[test]
fn forbidden_characters_are_reported_with_the_field() {
    let err = EmployeeById::partition_key("Sales/EU").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("\"department\""), "{msg}");
    assert!(msg.contains("'/'"), "{msg}");
    assert!(EmployeeByEmail::row_key("a#b").is_err());
    assert!(EmployeeById::partition_key(&"x".repeat(1025)).is_err());
}

#[test]
fn a_separator_inside_a_field_is_refused() {
    #[derive(TableEntity, Debug)]
    #[tablekit(partition_key = "p", row_key = "{a}_{b}")]
    struct Pair {
        a: String,
        b: String,
    }
    assert_eq!(Pair::row_key("x", "y_z").unwrap(), "x_y_z");
    assert!(Pair::row_key("x_y", "z").is_err());
    assert_eq!(Pair::partition_key().unwrap(), "p");
}

#[test]
fn the_key_of_a_value_matches_the_builders() {
    let e = EmployeeById {
        department: "Sales".into(),
        employee_id: 223,
        first_name: "Jo".into(),
    };
    assert_eq!(e.partition_key(), "Sales");
    assert_eq!(e.row_key(), "empid_000223");
    assert_eq!(e.key(), EntityKey::new("Sales", "empid_000223"));
    // Key fields are not stored again as properties.
    assert_eq!(
        String::from_utf8(entity_to_json(&e).unwrap()).unwrap(),
        r#"{"PartitionKey":"Sales","RowKey":"empid_000223","FirstName":"Jo"}"#
    );
}

#[test]
fn writing_a_value_with_a_bad_key_field_fails_before_any_io() {
    let mut e = EmployeeById {
        department: "a?b".into(),
        employee_id: 223,
        first_name: "Jo".into(),
    };
    let err = entity_to_json(&e).unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("'?'"), "{err}");

    // A number wider than its fixed width would sort wrongly and not read back.
    e.department = "Sales".into();
    e.employee_id = 1_000_000;
    let err = entity_to_json(&e).unwrap_err();
    assert!(err.to_string().contains("\"employee_id\""), "{err}");
}

#[test]
fn template_fields_are_read_back_from_the_keys() {
    let stored = DynamicEntity::new("Sales", "000123_2012").with("Comments", "good");
    let r = Review::decode(&RawEntity::from_dynamic(&stored)).unwrap();
    assert_eq!(
        r,
        Review {
            department: "Sales".into(),
            employee_id: 123,
            year: 2012,
            comments: "good".into()
        }
    );
    let e = EmployeeByEmail::decode(&RawEntity::from_dynamic(
        &DynamicEntity::new("Sales", "email_jonesj@contoso.com").with("EmployeeId", 223_i64),
    ))
    .unwrap();
    assert_eq!(e.email, "jonesj@contoso.com");
    assert_eq!(e.employee_id, 223);

    let wrong = DynamicEntity::new("Sales", "empid_000123_2012").with("Comments", "x");
    let err = Review::decode(&RawEntity::from_dynamic(&wrong)).unwrap_err();
    assert!(err.to_string().contains("000123"), "{err}");
}

#[test]
fn a_marked_field_is_the_key() {
    #[derive(TableEntity, Debug, PartialEq)]
    struct Blog {
        #[tablekit(partition_key)]
        channel: String,
        #[tablekit(row_key)]
        posted: String,
        text: String,
        rating: i32,
    }
    let b = Blog {
        channel: "Channel9".into(),
        posted: "Oct-29".into(),
        text: "Hello".into(),
        rating: 3,
    };
    assert_eq!(Blog::key("Channel9", "Oct-29").unwrap(), b.key());
    let json = String::from_utf8(entity_to_json(&b).unwrap()).unwrap();
    assert_eq!(
        json,
        r#"{"PartitionKey":"Channel9","RowKey":"Oct-29","Text":"Hello","Rating":3}"#
    );
    let back = Blog::decode(&RawEntity::from_dynamic(
        &tablekit::codec::to_dynamic(&b).unwrap(),
    ))
    .unwrap();
    assert_eq!(back, b);
}
