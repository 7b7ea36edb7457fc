//! `#[derive(TableEntity)]` against Azurite: a struct using every mapping is
//! written and read back field by field; what it stores reads as a
//! `DynamicEntity` with the expected Edm types, and a `DynamicEntity` with those
//! types reads as the struct.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use futures::TryStreamExt;
use tablekit::{
    codec::{entity_to_json, to_dynamic},
    edm::EdmType,
    entity::{PropertyValue, RawEntity},
    DynamicEntity, ETag, EdmValue, IfMatch, TableEntity, TableProperties, UpdateMode,
};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Meta {
    source: String,
    score: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Level {
    Junior,
    Senior,
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Level::Junior => "Junior",
            Level::Senior => "Senior",
        })
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "Junior" => Ok(Level::Junior),
            "Senior" => Ok(Level::Senior),
            other => Err(format!("unknown level {other}")),
        }
    }
}

/// A `TimeSpan`-like converter: a duration stored as Int64 ticks (100 ns).
mod ticks {
    use std::time::Duration;
    use tablekit::{
        entity::{PropertyValue, PropertyWriter},
        Result,
    };

    pub fn write<W: PropertyWriter + ?Sized>(d: &Duration, name: &str, out: &mut W) -> Result<()> {
        out.int64(name, (d.as_nanos() / 100) as i64)
    }

    pub fn read(v: PropertyValue<'_>) -> Result<Duration> {
        Ok(Duration::from_nanos(v.to_i64()? as u64 * 100))
    }
}

#[derive(TableProperties, Debug, Clone, PartialEq)]
struct Geo {
    lat: f64,
    lon: f64,
}

#[derive(TableProperties, Debug, Clone, PartialEq)]
struct Address {
    city: String,
    zip: Option<u32>,
    #[tablekit(flatten)]
    geo: Geo,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{group}", row_key = "item_{id:04}")]
struct Everything {
    group: String,
    id: u32,
    text: String,
    flag: bool,
    tiny: i8,
    small: i16,
    medium: i32,
    byte: u8,
    word: u16,
    big: i64,
    unsigned: u32,
    huge: u64,
    single: f32,
    double: f64,
    at: DateTime<Utc>,
    at_offset: DateTime<FixedOffset>,
    guid: Uuid,
    blob: Vec<u8>,
    shared: Bytes,
    maybe_some: Option<i64>,
    maybe_none: Option<String>,
    #[tablekit(edm = "Int64")]
    widened: i32,
    #[tablekit(edm = "String")]
    guid_text: Uuid,
    #[tablekit(json)]
    tags: Vec<String>,
    #[tablekit(json)]
    meta: Option<Meta>,
    #[tablekit(flatten)]
    home: Address,
    #[tablekit(with = "ticks")]
    elapsed: Duration,
    #[tablekit(as_str)]
    level: Level,
    #[tablekit(rename = "Mail")]
    email: String,
    #[tablekit(skip)]
    cache: Option<String>,
    #[tablekit(etag)]
    etag: Option<ETag>,
    #[tablekit(timestamp)]
    timestamp: Option<DateTime<Utc>>,
}

fn everything(id: u32) -> Everything {
    let at = Utc.with_ymd_and_hms(2020, 7, 23, 21, 20, 41).unwrap()
        + chrono::Duration::microseconds(666_778);
    Everything {
        group: "g1".into(),
        id,
        text: "O'Brien \"quoted\" é".into(),
        flag: true,
        tiny: -8,
        small: -1600,
        medium: -2_000_000_000,
        byte: 255,
        word: 65535,
        big: -9_000_000_000,
        unsigned: u32::MAX,
        huge: i64::MAX as u64,
        single: 0.1,
        double: 30000.37,
        at,
        at_offset: FixedOffset::east_opt(2 * 3600)
            .unwrap()
            .with_ymd_and_hms(2021, 1, 1, 2, 0, 0)
            .unwrap(),
        guid: Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
        blob: vec![0, 1, 2, 255],
        shared: Bytes::from_static(b"shared bytes"),
        maybe_some: Some(1 << 40),
        maybe_none: None,
        widened: 7,
        guid_text: Uuid::from_u128(42),
        tags: vec!["a".into(), "b".into()],
        meta: Some(Meta {
            source: "hr".into(),
            score: 2.5,
        }),
        home: Address {
            city: "Seattle".into(),
            zip: Some(98101),
            geo: Geo {
                lat: 47.6,
                lon: -122.3,
            },
        },
        elapsed: Duration::from_millis(1500),
        level: Level::Senior,
        email: "jonesj@contoso.com".into(),
        cache: None,
        etag: None,
        timestamp: None,
    }
}

/// The stored property names and Edm types of `everything`.
const EXPECTED_TYPES: &[(&str, EdmType)] = &[
    ("Text", EdmType::String),
    ("Flag", EdmType::Boolean),
    ("Tiny", EdmType::Int32),
    ("Small", EdmType::Int32),
    ("Medium", EdmType::Int32),
    ("Byte", EdmType::Int32),
    ("Word", EdmType::Int32),
    ("Big", EdmType::Int64),
    ("Unsigned", EdmType::Int64),
    ("Huge", EdmType::Int64),
    ("Single", EdmType::Double),
    ("Double", EdmType::Double),
    ("At", EdmType::DateTime),
    ("AtOffset", EdmType::DateTime),
    ("Guid", EdmType::Guid),
    ("Blob", EdmType::Binary),
    ("Shared", EdmType::Binary),
    ("MaybeSome", EdmType::Int64),
    ("Widened", EdmType::Int64),
    ("GuidText", EdmType::String),
    ("Tags", EdmType::String),
    ("Meta", EdmType::String),
    ("Home_City", EdmType::String),
    ("Home_Zip", EdmType::Int64),
    ("Home_Geo_Lat", EdmType::Double),
    ("Home_Geo_Lon", EdmType::Double),
    ("Elapsed", EdmType::Int64),
    ("Level", EdmType::String),
    ("Mail", EdmType::String),
];

fn assert_same_fields(got: &Everything, want: &Everything) {
    // Field by field, so a failure names the field.
    macro_rules! same {
        ($($f:ident),*) => {$( assert_eq!(got.$f, want.$f, stringify!($f)); )*};
    }
    same!(
        group, id, text, flag, tiny, small, medium, byte, word, big, unsigned, huge, single,
        double, at, at_offset, guid, blob, shared, maybe_some, maybe_none, widened, guid_text,
        tags, meta, home, elapsed, level, email
    );
    assert_eq!(got.cache, None, "skipped fields read as their default");
}

#[test]
fn property_bag_round_trip_needs_no_service() {
    let e = everything(1);
    let bag = to_dynamic(&e).unwrap();
    let names: Vec<(&str, EdmType)> = bag
        .properties
        .iter()
        .map(|(n, v)| (n, v.edm_type()))
        .collect();
    assert_eq!(names, EXPECTED_TYPES);
    let back = Everything::decode(&RawEntity::from_dynamic(&bag)).unwrap();
    assert_same_fields(&back, &e);
    assert_eq!(bag.row_key, "item_0001");
}

#[test]
fn u64_above_int64_is_an_error_not_a_wrap() {
    let mut e = everything(1);
    e.huge = u64::MAX;
    let err = entity_to_json(&e).unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("\"Huge\""), "{err}");
}

#[test]
fn stored_values_of_the_wrong_type_name_the_property() {
    let bag = to_dynamic(&everything(1))
        .unwrap()
        .with("Medium", "not a number");
    let err = Everything::decode(&RawEntity::from_dynamic(&bag)).unwrap_err();
    assert!(err.to_string().contains("\"Medium\""), "{err}");
    let mut missing = to_dynamic(&everything(1)).unwrap();
    missing.properties.remove("Text");
    let err = Everything::decode(&RawEntity::from_dynamic(&missing)).unwrap_err();
    assert!(err.to_string().contains("\"Text\""), "{err}");
    let mut missing_nested = to_dynamic(&everything(1)).unwrap();
    missing_nested.properties.remove("Home_Geo_Lat");
    let err = Everything::decode(&RawEntity::from_dynamic(&missing_nested)).unwrap_err();
    assert!(err.to_string().contains("\"Home_Geo_Lat\""), "{err}");
}

#[tokio::test]
async fn every_mapping_round_trips_through_azurite() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<Everything>(&svc, "DeriveRt").await;

    let mut e = everything(1);
    let written = t.insert(&mut e).await.unwrap();
    assert_eq!(
        e.etag.as_ref(),
        Some(written.etag()),
        "insert fills the ETag field"
    );
    assert!(e.timestamp.is_some(), "and the Timestamp field");

    let got = t
        .get(Everything::key("g1", 1).unwrap())
        .await
        .unwrap()
        .expect("stored");
    assert_same_fields(&got, &e);
    assert_eq!(got.etag.as_ref(), Some(written.etag()));
    assert_eq!(got.timestamp, e.timestamp);

    // A query returns the same, ETag included.
    let rows: Vec<Everything> = t.query().stream().try_collect().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_same_fields(&rows[0], &e);
    assert_eq!(rows[0].etag.as_ref(), Some(written.etag()));

    // The stored entity, read untyped, has the expected Edm types.
    let raw = t
        .with_type::<DynamicEntity>()
        .get(("g1", "item_0001"))
        .await
        .unwrap()
        .expect("stored");
    for (name, edm) in EXPECTED_TYPES {
        let v = raw.get(name).unwrap_or_else(|| panic!("{name} is stored"));
        assert_eq!(v.edm_type(), *edm, "{name}");
    }
    assert_eq!(raw.properties.len(), EXPECTED_TYPES.len(), "{raw:?}");
    assert_eq!(raw.get("Huge"), Some(&EdmValue::Int64(i64::MAX)));
    assert_eq!(raw.get("Tags"), Some(&EdmValue::from(r#"["a","b"]"#)));
    assert_eq!(raw.get("Elapsed"), Some(&EdmValue::Int64(15_000_000)));

    // An update with the ETag it holds succeeds; a stale one is refused.
    let stale = e.etag.clone().unwrap();
    e.text = "changed".into();
    t.update(&mut e, UpdateMode::Replace, IfMatch::ETag(stale.clone()))
        .await
        .unwrap();
    assert_ne!(e.etag.as_ref(), Some(&stale));
    let err = t
        .update(&e, UpdateMode::Replace, IfMatch::ETag(stale))
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    common::drop_table(&t).await;
}

#[tokio::test]
async fn a_dynamic_entity_with_the_right_types_reads_as_the_struct() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<DynamicEntity>(&svc, "DeriveRev").await;
    let want = everything(2);
    let bag = to_dynamic(&want).unwrap();
    t.insert(&bag).await.unwrap();
    let got = t
        .with_type::<Everything>()
        .get(("g1", "item_0002"))
        .await
        .unwrap()
        .expect("stored");
    assert_same_fields(&got, &want);
    common::drop_table(&t).await;
}

/// Decodes nothing but records whether the entity came with an ETag, asking
/// for no type annotations (`odata=nometadata`).
struct EtagProbe(Option<ETag>);

impl TableEntity for EtagProbe {
    fn partition_key(&self) -> std::borrow::Cow<'_, str> {
        "p".into()
    }
    fn row_key(&self) -> std::borrow::Cow<'_, str> {
        "r".into()
    }
    fn write_properties<W: tablekit::entity::PropertyWriter + ?Sized>(
        &self,
        _: &mut W,
    ) -> tablekit::Result<()> {
        Ok(())
    }
    fn decode(e: &RawEntity<'_>) -> tablekit::Result<Self> {
        let _: Option<PropertyValue<'_>> = e.get("X");
        Ok(EtagProbe(e.etag()))
    }
    fn needs_type_annotations() -> bool {
        false
    }
}

/// Why a derived type with an ETag field asks for annotations: without
/// metadata, query answers carry no `odata.etag` (observed on Azurite 3.35).
#[tokio::test]
async fn nometadata_query_answers_carry_no_etag() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<DynamicEntity>(&svc, "DeriveEtag").await;
    t.insert(&DynamicEntity::new("p", "r").with("X", 1))
        .await
        .unwrap();
    let rows: Vec<EtagProbe> = t
        .with_type::<EtagProbe>()
        .query()
        .stream()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].0.is_none(),
        "nometadata query results carried an ETag"
    );
    // A point read gets it from the ETag header either way.
    let one = t
        .with_type::<EtagProbe>()
        .get(("p", "r"))
        .await
        .unwrap()
        .unwrap();
    assert!(one.0.is_some());
    common::drop_table(&t).await;
}
