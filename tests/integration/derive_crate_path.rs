//! `#[tablekit(crate = "...")]`: a crate that re-exports tablekit under another
//! path derives through that path (the expansion names no `::tablekit`; the
//! derive's unit tests check that token by token).

#![allow(dead_code)]

mod reexport {
    pub use tablekit as tk;
}

use reexport::tk::entity::RawEntity;
use reexport::tk::filter::EntityColumns;
use reexport::tk::{TableEntity, TableProperties};

#[derive(TableProperties, Debug, PartialEq)]
#[tablekit(crate = "reexport::tk")]
struct Address {
    city: String,
    zip: Option<u32>,
}

#[derive(TableEntity, Debug, PartialEq)]
#[tablekit(
    crate = "reexport::tk",
    partition_key = "{region}",
    row_key = "c_{id:04}",
    version = 1
)]
struct Customer {
    region: String,
    id: u32,
    name: String,
    #[tablekit(edm = "Int64")]
    visits: i32,
    #[tablekit(flatten)]
    home: Address,
    #[tablekit(etag)]
    etag: Option<reexport::tk::ETag>,
}

#[derive(TableEntity, Debug, PartialEq)]
#[tablekit(crate = "reexport::tk")]
enum Row {
    Customer(Customer),
}

fn customer() -> Customer {
    Customer {
        region: "EU".into(),
        id: 7,
        name: "Ada".into(),
        visits: 3,
        home: Address {
            city: "Lyon".into(),
            zip: None,
        },
        etag: None,
    }
}

#[test]
fn a_reexported_crate_path_derives_entities_that_round_trip() {
    let c = customer();
    let json = String::from_utf8(reexport::tk::codec::entity_to_json(&c).unwrap()).unwrap();
    assert_eq!(
        json,
        concat!(
            r#"{"PartitionKey":"EU","RowKey":"c_0007","Name":"Ada","#,
            r#""Visits@odata.type":"Edm.Int64","Visits":"3","Home_City":"Lyon","SchemaVersion":1}"#
        )
    );
    assert_eq!(Customer::key("EU", 7).unwrap(), c.key());

    let bag = reexport::tk::codec::to_dynamic(&c).unwrap();
    let back = Customer::decode(&RawEntity::from_dynamic(&bag)).unwrap();
    assert_eq!(back, c);

    let row = Row::decode(&RawEntity::from_dynamic(
        &reexport::tk::codec::to_dynamic(&Row::Customer(c)).unwrap(),
    ))
    .unwrap();
    assert_eq!(row.discriminator(), Some("Customer"));
    assert_eq!(
        <Customer as EntityColumns>::columns().visits.name(),
        "Visits"
    );
}
