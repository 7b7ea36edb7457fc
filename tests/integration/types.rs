//! Every Edm type and awkward key round-trips through Azurite exactly; every
//! validation rule rejects before I/O with a message naming the field and limit.

use crate::common;

use chrono::{DateTime, TimeZone, Utc};
use futures::TryStreamExt;
use tablekit::{edm, edm::EdmType, DynamicEntity, EdmValue, IfMatch, TableClient, UpdateMode};

fn datetime(s: &str) -> DateTime<Utc> {
    edm::parse_datetime(s).unwrap()
}

/// One property per case: (name, value).
fn all_types() -> Vec<(&'static str, EdmValue)> {
    vec![
        ("I32Min", EdmValue::Int32(i32::MIN)),
        ("I32Max", EdmValue::Int32(i32::MAX)),
        ("I32Zero", EdmValue::Int32(0)),
        ("I32Neg", EdmValue::Int32(-1)),
        ("I64Min", EdmValue::Int64(i64::MIN)),
        ("I64Max", EdmValue::Int64(i64::MAX)),
        ("I64Big", EdmValue::Int64(9_000_000_000)),
        ("I64Small", EdmValue::Int64(5)),
        ("DTenth", EdmValue::Double(0.1)),
        ("DHuge", EdmValue::Double(1e300)),
        ("DMax", EdmValue::Double(f64::MAX)),
        ("DTiny", EdmValue::Double(5e-324)),
        ("DFrac", EdmValue::Double(30000.37)),
        ("DTwo", EdmValue::Double(2.0)),
        ("DZero", EdmValue::Double(0.0)),
        ("DPosInf", EdmValue::Double(f64::INFINITY)),
        ("DNegInf", EdmValue::Double(f64::NEG_INFINITY)),
        ("DNeg", EdmValue::Double(-12.5)),
        (
            "DtPrecise",
            EdmValue::DateTime(datetime("2020-07-23T21:20:41.6667782Z")),
        ),
        ("DtMin", EdmValue::DateTime(edm::min_datetime())),
        (
            "DtMax",
            EdmValue::DateTime(datetime("9999-12-31T23:59:59.9999999Z")),
        ),
        (
            "DtWhole",
            EdmValue::DateTime(Utc.with_ymd_and_hms(2008, 10, 1, 15, 27, 34).unwrap()),
        ),
        (
            "Guid",
            EdmValue::Guid(uuid::Uuid::from_u128(
                0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            )),
        ),
        ("GuidNil", EdmValue::Guid(uuid::Uuid::nil())),
        (
            "BinFull",
            EdmValue::Binary((0..65_536u32).map(|i| (i % 251) as u8).collect()),
        ),
        ("BinEmpty", EdmValue::Binary(Vec::new())),
        ("True", EdmValue::Boolean(true)),
        ("False", EdmValue::Boolean(false)),
        (
            "StrAwkward",
            EdmValue::from("quotes \" ' '' backslash \\ \\\\ newline \n cr \r tab \t"),
        ),
        (
            "StrUnicode",
            EdmValue::from("é 😀 中文 日本語 한국어 \u{10FFFF}"),
        ),
        ("StrEmpty", EdmValue::from("")),
        (
            "StrJsonish",
            EdmValue::from("{\"a\":[1,2]} <xml attr='x'/> &amp;"),
        ),
        ("StrNumeric", EdmValue::from("12345")),
        ("StrBoolish", EdmValue::from("true")),
        // 32,768 chars: exactly 64 KiB as UTF-16.
        ("StrMax", EdmValue::String("s".repeat(32_768))),
        // 16,384 emoji are 32,768 UTF-16 units: also exactly 64 KiB.
        ("StrMaxEmoji", EdmValue::String("😀".repeat(16_384))),
    ]
}

/// Values are compared exactly: doubles by bits, except NaN (any NaN) and zero.
#[track_caller]
fn assert_same(name: &str, got: Option<&EdmValue>, want: &EdmValue) {
    let got = got.unwrap_or_else(|| panic!("{name} is missing"));
    assert_eq!(got.edm_type(), want.edm_type(), "{name}: {got:?}");
    match (got, want) {
        (EdmValue::Double(g), EdmValue::Double(w)) => {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}: {g:e} != {w:e}")
        }
        _ => assert!(got == want, "{name}: {got:?} != {want:?}"),
    }
}

async fn insert_and_read_both_ways(
    t: &TableClient<DynamicEntity>,
    e: &DynamicEntity,
) -> (DynamicEntity, DynamicEntity) {
    t.insert(e).await.unwrap();
    let got = t
        .get((e.partition_key.as_str(), e.row_key.as_str()))
        .await
        .unwrap()
        .expect("inserted");
    let filter = format!(
        "PartitionKey eq '{}' and RowKey eq '{}'",
        e.partition_key.replace('\'', "''"),
        e.row_key.replace('\'', "''")
    );
    let queried = t
        .query()
        .filter_raw(filter)
        .fetch_optional()
        .await
        .unwrap()
        .expect("found by query");
    (got, queried)
}

tablekit::testing::conformance! {
    async fn every_edm_type_round_trips_exactly_through_dynamic_entity(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Types").await;

        let cases = all_types();
        let mut e = DynamicEntity::new("types", "all");
        for (name, value) in &cases {
            e.set(*name, value.clone());
        }
        let (got, queried) = insert_and_read_both_ways(&t, &e).await;
        for read in [&got, &queried] {
            assert_eq!(read.properties.len(), cases.len());
            for (name, want) in &cases {
                assert_same(name, read.get(name), want);
            }
        }
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn integral_double_reads_back_as_double(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Types").await;

        // Azurite answers `"D":2.0` without a type annotation; a reader that took
        // the JSON number for an integer would turn it into Int32(2).
        let e = DynamicEntity::new("p", "r")
            .with("D", 2.0)
            .with("Big", 9_007_199_254_740_992.0)
            .with("Neg", -3.0);
        let (got, queried) = insert_and_read_both_ways(&t, &e).await;
        for read in [got, queried] {
            assert_eq!(read.get("D"), Some(&EdmValue::Double(2.0)));
            assert_eq!(
                read.get("Big"),
                Some(&EdmValue::Double(9_007_199_254_740_992.0))
            );
            assert_eq!(read.get("Neg"), Some(&EdmValue::Double(-3.0)));
        }
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn nan_and_negative_zero_read_back_as_doubles(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Types").await;

        let e = DynamicEntity::new("p", "r")
            .with("NaN", f64::NAN)
            .with("NegZero", -0.0);
        let (got, queried) = insert_and_read_both_ways(&t, &e).await;
        for read in [got, queried] {
            let nan = read
                .get("NaN")
                .and_then(EdmValue::as_f64)
                .expect("a Double");
            assert!(nan.is_nan());
            let zero = read
                .get("NegZero")
                .and_then(EdmValue::as_f64)
                .expect("a Double");
            assert_eq!(zero, 0.0);
            // The service keeps the sign bit; Azurite answers `0.0` (a listed deviation).
            assert_eq!(zero.is_sign_negative(), !backend.is_azurite(), "{backend:?}");
        }
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn datetime_keeps_100_ns_precision_and_truncates_finer(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Types").await;

        let fine = Utc.timestamp_opt(1_595_539_241, 666_778_299).unwrap();
        let e = DynamicEntity::new("p", "r").with("Fine", fine);
        let (got, _) = insert_and_read_both_ways(&t, &e).await;
        let read = got.get("Fine").and_then(EdmValue::as_datetime).unwrap();
        assert_eq!(edm::format_datetime(&read), "2020-07-23T21:20:41.6667782Z");
        assert_eq!(read, datetime("2020-07-23T21:20:41.6667782Z"));
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn properties_of_one_name_may_have_different_types_in_different_entities(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Types").await;

        t.insert(&DynamicEntity::new("p", "a").with("Rating", 2))
            .await
            .unwrap();
        t.insert(&DynamicEntity::new("p", "b").with("Rating", 2.5))
            .await
            .unwrap();
        t.insert(&DynamicEntity::new("p", "c").with("Rating", "high"))
            .await
            .unwrap();
        let all = t.query().fetch_all().await.unwrap();
        let types: Vec<EdmType> = all
            .iter()
            .map(|e| e.get("Rating").unwrap().edm_type())
            .collect();
        assert_eq!(types, [EdmType::Int32, EdmType::Double, EdmType::String]);
        common::drop_table(&t).await;
    }
}

const AWKWARD_KEYS: &[&str] = &[
    "O'Brien",
    "''",
    "100%",
    "%2F%27",
    "a+b",
    "with space",
    " leading and trailing ",
    "a&b=c",
    "key=value;x",
    "(parens),comma",
    "é😀中文",
    "Examples Doc",
    "Oct-29",
    "Channel_19",
    "~!@$^*[]{}|`",
];

fn pk_filter(pk: &str) -> String {
    format!("PartitionKey eq '{}'", pk.replace('\'', "''"))
}

tablekit::testing::conformance! {
    async fn awkward_keys_round_trip_through_every_single_entity_operation(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Keys").await;

        for &k in AWKWARD_KEYS {
            let w = t
                .insert(&DynamicEntity::new(k, k).with("V", 1))
                .await
                .unwrap_or_else(|e| panic!("insert {k:?}: {e}"));
            let got = t
                .get((k, k))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("get {k:?}"));
            assert_eq!((got.partition_key.as_str(), got.row_key.as_str()), (k, k));

            let patch = DynamicEntity::new(k, k).with("V", 2);
            t.update(&patch, UpdateMode::Merge, w.etag())
                .await
                .unwrap_or_else(|e| panic!("update {k:?}: {e}"));
            t.upsert(&patch.clone().with("W", 3), UpdateMode::Merge)
                .await
                .unwrap_or_else(|e| panic!("upsert {k:?}: {e}"));

            let found = t
                .query()
                .filter_raw(pk_filter(k))
                .fetch_all()
                .await
                .unwrap();
            assert_eq!(found.len(), 1, "query by {k:?}");
            assert_eq!(found[0].row_key, k);
            assert_eq!(found[0].get("V"), Some(&EdmValue::Int32(2)));
            assert_eq!(found[0].get("W"), Some(&EdmValue::Int32(3)));

            let etag = found[0].etag.clone().unwrap();
            t.delete((k, k), etag)
                .await
                .unwrap_or_else(|e| panic!("delete {k:?}: {e}"));
            assert!(t.get((k, k)).await.unwrap().is_none(), "{k:?} deleted");
        }
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn empty_row_key_round_trips(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Keys").await;

        t.insert(&DynamicEntity::new("Channels", "").with("Owner", "joe"))
            .await
            .unwrap();
        let got = t.get(("Channels", "")).await.unwrap().expect("exists");
        assert_eq!(got.row_key, "");
        assert_eq!(got.get("Owner"), Some(&EdmValue::from("joe")));
        t.delete(("Channels", ""), IfMatch::Any).await.unwrap();
        assert!(t.get(("Channels", "")).await.unwrap().is_none());
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn awkward_keys_round_trip_through_a_transaction(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Keys").await;
        let pk = "O'Brien & Co = 100% + é😀";

        let mut tx = t.transaction();
        for &rk in AWKWARD_KEYS {
            tx.insert(&DynamicEntity::new(pk, rk).with("V", 1)).unwrap();
        }
        tx.send().await.unwrap();

        let mut tx = t.transaction();
        for &rk in AWKWARD_KEYS {
            tx.update(
                &DynamicEntity::new(pk, rk).with("V", 2),
                UpdateMode::Merge,
                IfMatch::Any,
            )
            .unwrap();
        }
        tx.send().await.unwrap();

        let found: Vec<DynamicEntity> = t
            .query()
            .filter_raw(pk_filter(pk))
            .stream()
            .try_collect()
            .await
            .unwrap();
        let mut want: Vec<&str> = AWKWARD_KEYS.to_vec();
        want.sort();
        let got: Vec<&str> = found.iter().map(|e| e.row_key.as_str()).collect();
        assert_eq!(got, want);
        assert!(found.iter().all(|e| e.partition_key == pk));
        assert!(found
            .iter()
            .all(|e| e.get("V") == Some(&EdmValue::Int32(2))));

        let mut tx = t.transaction();
        for e in &found {
            tx.delete((pk, e.row_key.as_str()), e.etag.clone().unwrap())
                .unwrap();
        }
        tx.send().await.unwrap();
        assert!(t.query().fetch_all().await.unwrap().is_empty());
        common::drop_table(&t).await;
    }
}

/// Tries the entity through every write of the offline client (each must fail
/// before I/O) and returns the message.
async fn rejected(e: &DynamicEntity) -> String {
    let t = common::offline_table::<DynamicEntity>();
    let errors = [
        t.insert(e).await.unwrap_err(),
        t.upsert(e, UpdateMode::Merge).await.unwrap_err(),
        t.update(e, UpdateMode::Replace, IfMatch::Any)
            .await
            .unwrap_err(),
        tablekit::codec::to_dynamic(e).unwrap_err(),
        tablekit::codec::entity_to_json(e).unwrap_err(),
    ];
    let msg = common::assert_invalid(&errors[0]);
    for err in &errors {
        assert_eq!(common::assert_invalid(err), msg);
    }
    let mut tx = t.transaction();
    let err = tx.insert(e).unwrap_err();
    assert_eq!(err.batch_index(), Some(0));
    assert_eq!(
        common::assert_invalid(&err),
        msg.replace(
            "invalid input: ",
            "invalid input: transaction operation 0: "
        )
    );
    msg
}

#[tokio::test]
async fn keys_with_forbidden_characters_are_rejected_before_io() {
    let t = common::offline_table::<DynamicEntity>();
    for (key, ch, index) in [
        ("a/b", '/', 1),
        ("a\\b", '\\', 1),
        ("a#b", '#', 1),
        ("a?b", '?', 1),
        ("a\tb", '\t', 1),
        ("\u{7f}", '\u{7f}', 0),
        ("\u{9f}", '\u{9f}', 0),
        ("é\n", '\n', 1),
        ("10/29/2008 10:00:00 AM", '/', 2),
    ] {
        let tail = format!(
            "contains the forbidden character {ch:?} at character {index} {}",
            r"(keys may not contain '/', '\', '#', '?' or control characters)"
        );
        let msg = rejected(&DynamicEntity::new(key, "r")).await;
        assert_eq!(msg, format!("invalid input: PartitionKey {tail}"));
        let msg = rejected(&DynamicEntity::new("p", key)).await;
        assert_eq!(msg, format!("invalid input: RowKey {tail}"));

        for err in [
            t.get(("p", key)).await.unwrap_err(),
            t.delete((key, "r"), IfMatch::Any).await.unwrap_err(),
            t.delete_if_exists(("p", key), IfMatch::Any)
                .await
                .unwrap_err(),
        ] {
            assert!(common::assert_invalid(&err).contains("forbidden character"));
        }
    }
}

#[tokio::test]
async fn keys_over_1024_characters_are_rejected_before_io() {
    let t = common::offline_table::<DynamicEntity>();
    let long = "k".repeat(1025);
    let msg = rejected(&DynamicEntity::new("p", long.as_str())).await;
    assert_eq!(
        msg,
        "invalid input: RowKey is 1025 characters long; the limit is 1024"
    );
    let msg = rejected(&DynamicEntity::new("é".repeat(1025), "r")).await;
    assert_eq!(
        msg,
        "invalid input: PartitionKey is 1025 characters long; the limit is 1024"
    );
    let err = t.get((long.as_str(), "r")).await.unwrap_err();
    assert!(common::assert_invalid(&err).contains("1024"));

    // 1024 characters, even multi-byte ones, are fine as far as validation goes.
    assert!(
        tablekit::codec::to_dynamic(&DynamicEntity::new("é".repeat(1024), "k".repeat(1024)))
            .is_ok()
    );
}

#[tokio::test]
async fn invalid_property_names_are_rejected_before_io() {
    let long = "a".repeat(256);
    for (name, reason) in [
        (
            "my-prop",
            "a property name has only ASCII letters, digits and '_' (no '-')",
        ),
        ("1abc", "a property name starts with a letter or '_'"),
        ("", "a property name is not empty"),
        (
            "PartitionKey",
            "PartitionKey, RowKey and Timestamp are system properties",
        ),
        (
            "RowKey",
            "PartitionKey, RowKey and Timestamp are system properties",
        ),
        (
            "Timestamp",
            "PartitionKey, RowKey and Timestamp are system properties",
        ),
        (long.as_str(), "a property name has at most 255 characters"),
    ] {
        let msg = rejected(&DynamicEntity::new("p", "r").with(name, 1)).await;
        assert_eq!(
            msg,
            format!("invalid input: property name {name:?} is invalid: {reason}")
        );
    }
    // The longest allowed name is fine.
    assert!(
        tablekit::codec::to_dynamic(&DynamicEntity::new("p", "r").with("a".repeat(255), 1)).is_ok()
    );
}

#[tokio::test]
async fn more_than_252_properties_are_rejected_before_io() {
    let mut e = DynamicEntity::new("p", "r");
    for i in 0..252 {
        e.set(format!("P{i}"), i);
    }
    assert!(
        tablekit::codec::to_dynamic(&e).is_ok(),
        "252 custom properties are allowed"
    );
    e.set("P252", 252);
    let msg = rejected(&e).await;
    assert_eq!(
        msg,
        "invalid input: entity has 253 custom properties; the limit is 252 (255 including PartitionKey, RowKey and Timestamp)"
    );
}

#[tokio::test]
async fn oversized_values_are_rejected_before_io() {
    let msg = rejected(&DynamicEntity::new("p", "r").with("S", "s".repeat(32_769))).await;
    assert_eq!(
        msg,
        "invalid input: property \"S\" is 65538 bytes; a Edm.String value may be at most 65536 bytes"
    );
    // Counted in UTF-16: 16,385 emoji are 32,770 units.
    let msg = rejected(&DynamicEntity::new("p", "r").with("E", "😀".repeat(16_385))).await;
    assert!(
        msg.contains("\"E\" is 65540 bytes") && msg.contains("65536"),
        "{msg}"
    );
    let msg = rejected(&DynamicEntity::new("p", "r").with("B", vec![0u8; 65_537])).await;
    assert_eq!(
        msg,
        "invalid input: property \"B\" is 65537 bytes; a Edm.Binary value may be at most 65536 bytes"
    );
}

#[tokio::test]
async fn entity_over_1_mib_is_rejected_before_io() {
    // 17 strings of 32,000 chars: 64,000 bytes each as UTF-16, over 1 MiB in all.
    let mut e = DynamicEntity::new("p", "r");
    for i in 0..17 {
        e.set(format!("S{i}"), "x".repeat(32_000));
    }
    let msg = rejected(&e).await;
    assert!(
        msg.starts_with("invalid input: entity (\"p\", \"r\") is about "),
        "{msg}"
    );
    assert!(msg.ends_with("bytes; the limit is 1048576 bytes"), "{msg}");
}

#[tokio::test]
async fn datetime_before_1601_is_rejected_before_io() {
    let old = Utc.with_ymd_and_hms(1600, 12, 31, 23, 59, 59).unwrap();
    let msg = rejected(&DynamicEntity::new("p", "r").with("D", old)).await;
    assert_eq!(
        msg,
        "invalid input: property \"D\" holds 1600-12-31T23:59:59+00:00, outside 1601-01-01T00:00:00Z ..= 9999-12-31T23:59:59.9999999Z, the DateTime range the service stores"
    );
    assert!(tablekit::codec::to_dynamic(
        &DynamicEntity::new("p", "r").with("D", edm::min_datetime())
    )
    .is_ok());
}

#[tokio::test]
async fn datetime_after_9999_is_rejected_before_io() {
    // The service stores 1601-01-01 to 9999-12-31 (spec §2.3). Azurite accepts
    // `+10000-01-01T00:00:00.0000000Z` and the entity then fails to decode on
    // every read, so the client must refuse it.
    let late = Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap();
    let t = common::offline_table::<DynamicEntity>();
    let err = t
        .insert(&DynamicEntity::new("p", "r").with("D", late))
        .await
        .unwrap_err();
    let msg = common::assert_invalid(&err);
    assert!(msg.contains("\"D\"") && msg.contains("9999"), "{msg}");
    let last = datetime("9999-12-31T23:59:59.9999999Z");
    assert!(tablekit::codec::to_dynamic(&DynamicEntity::new("p", "r").with("D", last)).is_ok());
}
