//! The fuzz targets, one function per target, shared by the cargo-fuzz
//! binaries (`fuzz/fuzz_targets/*.rs`, nightly) and the stable replay in the
//! test suite (`tests/integration/fuzz_replay.rs`: every file of
//! `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`, then a bounded
//! proptest run). Each takes arbitrary bytes and panics only on a bug: a parser
//! that panics, or a property (printed filters parse back to themselves, a
//! continuation round-trips) that does not hold.

#![allow(dead_code)]

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use tablekit::account::{AccountKey, SasToken, TableSas, TableSasPermissions};
use tablekit::codec::{entity_from_json, entity_to_json};
use tablekit::entity::RawEntity;
use tablekit::filter::Filter;
use tablekit::{__fuzz, Account, Continuation, DynamicEntity, TableProperties};
use uuid::Uuid;

/// A target: arbitrary bytes in, a panic only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by the name of its corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("filter", filter),
    ("odata_literal", odata_literal),
    ("json_dynamic", json_dynamic),
    ("json_derived", json_derived),
    ("batch_response", batch_response),
    ("queue_xml", queue_xml),
    ("blob_xml", blob_xml),
    ("connection_string", connection_string),
    ("sas", sas),
    ("continuation", continuation),
    ("durable_store", durable_store),
];

fn text(data: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Entities the filter target evaluates parsed filters against.
fn sample_entities() -> Vec<DynamicEntity> {
    let at = DateTime::parse_from_rfc3339("2020-07-23T21:20:41.6667780Z")
        .unwrap()
        .with_timezone(&Utc);
    vec![
        DynamicEntity::new("", ""),
        DynamicEntity::new("p", "r")
            .with("S", "text")
            .with("I", 7_i32)
            .with("L", 1_i64 << 40)
            .with("D", f64::NAN)
            .with("Z", -0.0_f64)
            .with("B", true)
            .with("T", at)
            .with("G", Uuid::nil())
            .with("X", vec![0_u8, 255]),
        DynamicEntity::new("\u{10000}", "é")
            .with("D", f64::INFINITY)
            .with("I", i32::MIN)
            .with("S", ""),
    ]
}

/// The filter parser and evaluator: parse → print → parse gives the same tree
/// (compared by its printed form, NaN included); evaluation never panics.
pub fn filter(data: &[u8]) {
    let text = text(data);
    let Ok(filter) = Filter::parse(&text) else {
        return;
    };
    let printed = filter.to_string();
    let again = Filter::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which does not parse: {e}"));
    assert_eq!(
        again.to_string(),
        printed,
        "{text:?}: printing is not stable"
    );
    for entity in sample_entities() {
        let _ = __fuzz::filter_matches(&filter, &entity);
    }
}

/// OData literals (`datetime'..'`, `guid'..'`, `X'..'`, `12L`, `1.5e3`, `'..'`,
/// `true`), as the right-hand side of a comparison: a literal that parses
/// prints as one that parses back to the same value. Also the wire form of
/// DateTime (printed at 100 ns, it reads back as printed) and Edm type names.
pub fn odata_literal(data: &[u8]) {
    let text = text(data);
    if let Ok(filter) = Filter::parse(&format!("P eq {text}")) {
        let printed = filter.to_string();
        let again = Filter::parse(&printed).unwrap_or_else(|e| {
            panic!("{text:?} printed as {printed:?}, which does not parse: {e}")
        });
        assert_eq!(again.to_string(), printed);
    }
    if let Ok(t) = tablekit::edm::parse_datetime(&text) {
        // Printing keeps 100 ns (finer digits are truncated, a leap second
        // folds into the second before): what it prints parses back to itself.
        let printed = tablekit::edm::format_datetime(&t);
        let back = tablekit::edm::parse_datetime(&printed).unwrap_or_else(|e| {
            panic!("{text:?} printed as {printed:?}, which does not parse: {e}")
        });
        assert_eq!(tablekit::edm::format_datetime(&back), printed);
    }
    let _ = tablekit::edm::EdmType::from_wire(&text);
}

/// JSON entity decoding into a dynamic entity (point read and query page), and
/// the table list. A decoded entity encodes and decodes again.
pub fn json_dynamic(data: &[u8]) {
    if let Ok(e) = entity_from_json::<DynamicEntity>(data) {
        if let Ok(json) = entity_to_json(&e) {
            entity_from_json::<DynamicEntity>(&json)
                .unwrap_or_else(|err| panic!("{e:?} encoded as JSON that does not decode: {err}"));
        }
    }
    let _ = __fuzz::decode_entity::<DynamicEntity>(
        data,
        Some("W/\"datetime'2020-01-01T00%3A00%3A00Z'\""),
    );
    let _ = __fuzz::decode_page::<DynamicEntity>(data);
    let _ = __fuzz::decode_table_names(data);
}

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

mod ticks {
    use std::time::Duration;
    use tablekit::entity::{PropertyValue, PropertyWriter};

    pub fn write<W: PropertyWriter + ?Sized>(
        d: &Duration,
        name: &str,
        out: &mut W,
    ) -> tablekit::Result<()> {
        out.int64(name, i64::try_from(d.as_nanos() / 100).unwrap_or(i64::MAX))
    }

    pub fn read(v: PropertyValue<'_>) -> tablekit::Result<Duration> {
        let ticks = u64::try_from(v.to_i64()?).unwrap_or(0);
        Ok(Duration::from_nanos(ticks.saturating_mul(100)))
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

/// Every mapping of the derive: template keys with a fixed width, every Edm
/// type, `json`, `flatten`, `with`, `as_str` enums, `rename`, `skip`, `etag`,
/// `timestamp`.
#[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{group}", row_key = "item_{id:04}_{kind}")]
struct Everything {
    group: String,
    id: u32,
    kind: String,
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
    guid: Uuid,
    blob: Vec<u8>,
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
    elapsed: std::time::Duration,
    #[tablekit(as_str)]
    level: Level,
    #[tablekit(rename = "Mail")]
    email: String,
    #[tablekit(skip)]
    cache: Option<String>,
    #[tablekit(etag)]
    etag: Option<tablekit::ETag>,
    #[tablekit(timestamp)]
    timestamp: Option<DateTime<Utc>>,
}

/// A versioned type whose upgrade hook reads the old schema's property.
#[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
#[tablekit(version = 2, upgrade = "Versioned::upgrade")]
struct Versioned {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    #[tablekit(default)]
    stars: i64,
}

impl Versioned {
    fn upgrade(raw: &RawEntity<'_>, _stored_version: i32) -> tablekit::Result<Self> {
        let mut v = Self::decode_current_schema(raw)?;
        if let Some(rating) = raw.get("Rating") {
            v.stars = i64::from(rating.to_i32()?).saturating_mul(2);
        }
        Ok(v)
    }
}

/// JSON entity decoding into derived types (template keys, `flatten`, `json`,
/// enums, upgrades); a decoded entity encodes and decodes again.
pub fn json_derived(data: &[u8]) {
    if let Ok(e) = entity_from_json::<Everything>(data) {
        if let Ok(json) = entity_to_json(&e) {
            entity_from_json::<Everything>(&json)
                .unwrap_or_else(|err| panic!("{e:?} encoded as JSON that does not decode: {err}"));
        }
    }
    let _ = __fuzz::decode_page::<Everything>(data);
    let _ = entity_from_json::<Versioned>(data);
    let _ = __fuzz::decode_page::<Versioned>(data);
}

/// The transaction (multipart/mixed) answer parser. The first line of the
/// input is the Content-Type, its first byte also the number of operations.
pub fn batch_response(data: &[u8]) {
    let (head, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let content_type = text(head);
    let operations = usize::from(data.first().copied().unwrap_or(0) % 101);
    let _ = __fuzz::batch_response(&content_type, body, operations);
}

/// The queue service's `QueueMessagesList` XML.
pub fn queue_xml(data: &[u8]) {
    let _ = __fuzz::queue_messages(data);
}

/// The blob service's `EnumerationResults` XML.
pub fn blob_xml(data: &[u8]) {
    let _ = __fuzz::blob_listing(data);
}

/// Connection strings into an account (never a client: `UseEmbeddedStorage`
/// would open a file). An account parsed once parses again from its own
/// settings.
pub fn connection_string(data: &[u8]) {
    let text = text(data);
    if let Ok(account) = Account::from_connection_string(&text) {
        let _ = format!("{account:?}");
        let _ = account.table_endpoint();
    }
}

/// SAS tokens and account keys as configuration gives them, and a table SAS
/// signed over arbitrary key ranges.
pub fn sas(data: &[u8]) {
    let text = text(data);
    let token = SasToken::new(text.as_ref());
    let _ = token.as_query();
    let _ = format!("{token:?}");
    let _ = AccountKey::from_base64(&text);
    let _ = Account::from_connection_string(&format!(
        "AccountName=a;SharedAccessSignature={text};TableEndpoint=http://127.0.0.1:10002/a"
    ));
    if let Ok(account) = Account::from_connection_string(
        "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:10002/a",
    ) {
        let mid = (0..=text.len() / 2)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        let (start, end) = text.split_at(mid);
        let expiry = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let _ = TableSas::new(text.as_ref())
            .permissions(TableSasPermissions::READ_ONLY)
            .partition_key_range(Some(start), Some(end))
            .row_key_range(Some(end), None)
            .expiry(expiry)
            .sign(&account);
    }
}

/// Continuation tokens from text (users' URLs) and from serde: a parsed one
/// prints as text that parses back to it.
pub fn continuation(data: &[u8]) {
    let text = text(data);
    if let Ok(c) = text.parse::<Continuation>() {
        let printed = c.to_string();
        let back: Continuation = printed.parse().unwrap_or_else(|e| {
            panic!("{text:?} printed as {printed:?}, which does not parse: {e}")
        });
        assert_eq!(back, c);
    }
    let _ = serde_json::from_slice::<Continuation>(data);
}

static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// The durable store opened from arbitrary bytes (a temporary file): opening
/// its tables, listing and reading them, and opening its queues and blobs give
/// data or an error.
pub fn durable_store(data: &[u8]) {
    let n = NEXT_FILE.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("tablekit-fuzz-{}-{n}.redb", std::process::id()));
    std::fs::write(&path, data).expect("write the store file");
    let opened = tablekit::TableServiceClient::embedded_at(&path);
    if let Ok(svc) = opened {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            if let Ok(names) = svc.list_tables().fetch_all().await {
                for name in names.iter().take(8) {
                    if let Ok(t) = svc.table::<DynamicEntity>(name) {
                        let _ = t.query().take(100).fetch_all().await;
                    }
                }
            }
        });
        drop(svc);
    }
    // The queues and the blobs of the same file load on their own open.
    let queues = tablekit::QueueServiceClient::embedded_at(&path);
    let blobs = tablekit::BlobServiceClient::embedded_at(&path);
    drop((queues, blobs));
    let _ = std::fs::remove_file(&path);
}
