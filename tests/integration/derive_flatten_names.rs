//! Flattened properties get their names (`Outer_Inner`) at run time, so the
//! writer checks them there: a clash with an ordinary property is refused
//! before any request, and the names still follow the service's rules.

use tablekit::{codec::entity_to_json, error::ValidationError, TableEntity, TableProperties};

#[derive(TableProperties, Debug, Clone, PartialEq)]
struct Address {
    city: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{id}", row_key = "{id}")]
struct Clash {
    id: String,
    #[tablekit(flatten)]
    address: Address,
    #[tablekit(rename = "Address_City")]
    city_copy: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{id}", row_key = "{id}")]
struct NoClash {
    id: String,
    #[tablekit(flatten)]
    address: Address,
    city: String,
}

#[test]
fn a_flattened_name_that_clashes_with_a_field_is_refused() {
    let e = Clash {
        id: "x".into(),
        address: Address {
            city: "Oslo".into(),
        },
        city_copy: "Oslo".into(),
    };
    let err = entity_to_json(&e).unwrap_err();
    assert!(err.is_invalid_input());
    assert_eq!(
        err.validation(),
        Some(&ValidationError::duplicate_property("Address_City"))
    );
}

#[test]
fn flattened_names_without_a_clash_are_written() {
    let e = NoClash {
        id: "x".into(),
        address: Address {
            city: "Oslo".into(),
        },
        city: "Bergen".into(),
    };
    let json = String::from_utf8(entity_to_json(&e).unwrap()).unwrap();
    assert!(json.contains(r#""Address_City":"Oslo""#), "{json}");
    assert!(json.contains(r#""City":"Bergen""#), "{json}");
    assert!(!NoClash::property_names_checked());
}
