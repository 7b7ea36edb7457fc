//! tablekit: a typed Rust SDK for Azure Table Storage, the Azurite emulator and
//! anything else that speaks the Table service's REST protocol.
//!
//! # A tour
//!
//! A **table** holds **entities**: typed properties under a two-part primary key,
//! the **PartitionKey** (which entities live together and can change together
//! atomically) and the **RowKey** (unique within a partition). Entities come back
//! in (PartitionKey, RowKey) order; there are no other indexes. Every entity has
//! an **ETag**, its version: a write can be made conditional on it, which is how
//! two writers avoid overwriting each other.
//!
//! * [`TableServiceClient`] reaches an account ([`Account`], from a connection
//!   string) and gives [`TableClient`]s for its tables.
//! * [`TableClient<T>`] reads and writes entities typed as `T`, any type that
//!   implements [`TableEntity`]. [`DynamicEntity`] is the untyped property bag.
//! * Writes: [`insert`](TableClient::insert), [`upsert`](TableClient::upsert)
//!   with an [`UpdateMode`], [`update`](TableClient::update) and
//!   [`delete`](TableClient::delete) with an explicit [`IfMatch`].
//! * Reads: [`get`](TableClient::get) gives `Option<T>`; [`query`](TableClient::query)
//!   streams entities across continuation tokens, or pages with a resumable
//!   [`Continuation`].
//! * [`transaction`](TableClient::transaction): up to 100 operations in one
//!   partition, applied all or none.
//! * Every failure is an [`Error`]; input the service would refuse is refused
//!   before any request is sent.
//! * Access: [`account`] signs SAS tokens (account SAS, and service SAS for a
//!   table, queue, container or blob, optionally tied to one of the stored
//!   access policies of [`acl`]); [`service_properties`] reads and sets each
//!   service's logging, metrics and CORS rules.
//!
//! # Guide
//!
//! The repository's `docs/guide/` is an mdBook whose every Rust snippet runs as
//! a test (the links below are to its chapters in the repository, as seen from
//! docs built there with `cargo doc`):
//!
//! 1. [Azure tables in ten minutes](../../../docs/guide/src/ch01-tables-in-ten-minutes.md):
//!    the data model, keys, partitions, and the query plans from point read to table scan.
//! 2. [Migrating from DataServiceContext](../../../docs/guide/src/ch02-from-dataservicecontext.md):
//!    every call of the .NET programming model beside its wire request and the tablekit call.
//! 3. [Migrating from the official SDKs](../../../docs/guide/src/ch03-from-the-official-sdks.md):
//!    `TableClient` of `Azure.Data.Tables` and the Python and JavaScript SDKs, call by call.
//! 4. [Design patterns](../../../docs/guide/src/ch04-design-patterns.md): the
//!    `tablekit-patterns` types, their requests, costs and failure behaviour.
//! 5. [Testing your code](../../../docs/guide/src/ch05-testing.md): the embedded
//!    backend in unit tests, Azurite in integration tests.
//! 6. [Running at scale](../../../docs/guide/src/ch06-running-at-scale.md):
//!    partitions and targets, choosing keys, the Cosmos DB Table API, retries and
//!    ambiguous outcomes, the durable embedded store.
//!
//! ```no_run
//! use futures::TryStreamExt;
//! use tablekit::{DynamicEntity, IfMatch, TableServiceClient, UpdateMode};
//!
//! # async fn run() -> tablekit::Result<()> {
//! let service = TableServiceClient::from_connection_string("UseDevelopmentStorage=true")?;
//! let blogs = service.table::<DynamicEntity>("Blogs")?;
//! blogs.create_table_if_not_exists().await?;
//!
//! let mut post = DynamicEntity::new("Channel9", "Oct-29").with("Text", "Hello").with("Rating", 3);
//! blogs.insert(&mut post).await?;               // fills post.etag
//!
//! post.set("Text", "Hi there");
//! let etag = post.etag.clone().unwrap();
//! blogs.update(&mut post, UpdateMode::Merge, IfMatch::ETag(etag)).await?;
//!
//! let top_rated: Vec<DynamicEntity> = blogs
//!     .query()
//!     .filter(|e| e.partition_key.eq("Channel9") & e.col::<i32>("Rating").ge(3))
//!     .stream()
//!     .try_collect()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Building and reading entities needs no service:
//!
//! ```
//! use tablekit::{DynamicEntity, codec::entity_to_json};
//!
//! let e = DynamicEntity::new("p1", "r1").with("Views", 9_000_000_000_i64);
//! let json = String::from_utf8(entity_to_json(&e)?).unwrap();
//! // Int64 travels as an annotated string, as the service requires.
//! assert_eq!(json, r#"{"PartitionKey":"p1","RowKey":"r1","Views@odata.type":"Edm.Int64","Views":"9000000000"}"#);
//!
//! // Keys the service would refuse are refused before any request.
//! assert!(entity_to_json(&DynamicEntity::new("a/b", "r")).is_err());
//! # Ok::<(), tablekit::Error>(())
//! ```
//!
//! # Cargo features
//!
//! Each feature compiles in what it names, and its dependencies; without it
//! neither is compiled.
//!
//! | feature | what it adds | dependencies it adds | on by default |
//! |---|---|---|---|
//! | `derive` | `#[derive(TableEntity)]`, `#[derive(TableProperties)]`, `filter!`, `odata!` | tablekit-derive (syn) | yes |
//! | `embedded` | the embedded store in memory: `TableServiceClient::embedded`, `Storage::embedded`, and `Storage::from_env`'s fallback to it when `TABLEKIT_CONNECTION_STRING` is not set (without the feature, that is an error) | | yes |
//! | `durable` | the embedded store kept in a file: `embedded_at(path)`, `UseEmbeddedStorage=true;Path=<file>`, `storage::check_file`; implies `embedded` | redb | yes |
//! | `queue` | the Queue service: `QueueServiceClient` | quick-xml | yes |
//! | `blob` | the Blob service: `BlobServiceClient` | quick-xml | yes |
//! | `admin` | stored access policies ([`acl`]: `access_policies`, `set_access_policies`) and service settings ([`service_properties`]: `service_properties`, `set_service_properties`, `service_stats`) of each service compiled in | quick-xml | yes |
//! | `reqwest` | a second transport, reqwest's client: `Transport::Reqwest` (the default transport is tablekit's own, on hyper) | reqwest and its dependencies | no |
//! | `entra` | Microsoft Entra ID through the official identity crates: `Credential::entra` takes any `azure_identity` credential | azure_core (its `TokenCredential` trait; no HTTP client of its own) | no |
//! | `encryption` | client-side encryption of chosen string properties in the wire format of the .NET storage library and the legacy Python table library (`encryption`: `TableClient::encrypted`, `#[tablekit(encrypt)]`, A256KW and RSA-OAEP key-encryption keys, key rotation) | RustCrypto's aes, cbc, aes-kw, rsa, sha1, rand_core, zeroize | no |
//! | `opentelemetry` | trace context on the wire (each attempt sends the W3C `traceparent` and `tracestate` of its span) and metrics through the OpenTelemetry API (request durations, retries, throttled answers, ambiguous writes and their settlement, the counts of [`Stats`](table::Stats)); the spans themselves are `tracing`'s with or without it (see "Traces and metrics" in the guide's chapter 6) | opentelemetry (the API, no SDK), tracing-opentelemetry | no |
//! | `test-support` | for tests of code built on tablekit: the conformance harness (`testing`: one test on the in-memory store, the store file and Azurite), proptest strategies (`filter::strategies`) and `Filter::matches` (the service's filter rules, as a model); turns on `durable` | proptest | no |
//! | `fuzzing` | hidden entry points to internal parsers, for tablekit's own fuzz targets: unstable, not for use outside tablekit | | no |
//!
//! Code that only talks to Azure tables over HTTP needs
//! `tablekit = { version = "0.1", default-features = false, features = ["derive"] }`,
//! and compiles no store, no redb and no XML parser (the table's access
//! policies and the service's settings then need `admin` too).
#![warn(missing_docs, missing_debug_implementations)]
// The docs link across features (Storage to the store file, a client to the
// embedded store): every link resolves with all of them, as docs.rs builds.
#![cfg_attr(
    all(
        feature = "embedded",
        feature = "durable",
        feature = "queue",
        feature = "blob",
        feature = "admin"
    ),
    deny(rustdoc::broken_intra_doc_links)
)]
#![cfg_attr(
    not(all(
        feature = "embedded",
        feature = "durable",
        feature = "queue",
        feature = "blob",
        feature = "admin"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz;
pub mod account;
#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub mod acl;
mod backend;
#[cfg(feature = "blob")]
#[cfg_attr(docsrs, doc(cfg(feature = "blob")))]
pub mod blob;
pub mod clock;
pub mod codec;
mod columns;
mod continuation;
pub mod edm;
#[cfg(feature = "encryption")]
#[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
pub mod encryption;
pub mod entity;
pub mod error;
pub mod filter;
#[cfg(test)]
mod layering;
pub mod observe;
pub mod options;
#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub mod queue;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub mod server;
#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub mod service_properties;
#[cfg(feature = "embedded")]
#[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
pub mod simulation;
pub mod storage;
pub mod table;
#[cfg(feature = "test-support")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-support")))]
pub mod testing;
pub mod validate;

pub mod transport {
    //! The transport seam: the HTTP client under every service client.
    //!
    //! tablekit sends requests with its own HTTP/1.1 client on hyper
    //! ([`HyperConnector`], the default). To send them through another
    //! (a company client with its proxy and middleware, a recording or failing
    //! transport in tests), implement [`HttpConnector`] and [`HttpService`] and
    //! pass the connector in [`HttpOptions::connector`](crate::options::HttpOptions::connector).
    pub use crate::backend::http::transport::{
        failure, Failure, HttpConnector, HttpResponse, HttpService, HyperConnector, Proxy,
        RequestHook, RootCertificate,
    };
}

// The everyday types: the clients, the entity vocabulary, the conditions,
// errors and filters. Everything else has one path, in its module.
pub use account::{Account, Credential};
pub use backend::http::API_VERSION;
#[cfg(feature = "blob")]
pub use blob::{BlobClient, BlobServiceClient, ContainerClient};
pub use continuation::Continuation;
pub use edm::EdmValue;
pub use entity::{
    DynamicEntity, ETag, EntityKey, IfMatch, IfNoneMatch, Properties, TableEntity, UpdateMode,
};
pub use error::{Error, Result};
pub use filter::Filter;
#[cfg(feature = "queue")]
pub use queue::{QueueClient, QueueServiceClient};
pub use storage::Storage;
pub use table::{TableClient, TableServiceClient};

/// The `chrono` crate tablekit's public types use: an `Edm.DateTime` is a
/// [`chrono::DateTime<Utc>`](chrono::DateTime) ([`EdmValue::DateTime`], the
/// derive's `DateTime<Utc>` and `DateTime<FixedOffset>` fields, Timestamps).
///
/// Re-exported so that code can name these types at the version tablekit
/// was built with, without a dependency of its own: `tablekit::chrono::Utc`.
/// It has the features tablekit needs (`std`, and `now` for `Utc::now()`),
/// not `clock` (`Local`): a crate that wants more adds `chrono = "0.4"` itself,
/// and Cargo builds one chrono with the features of both.
///
/// ```
/// use tablekit::chrono::{DateTime, TimeZone, Utc};
/// use tablekit::uuid::Uuid;
/// use tablekit::{ETag, TableEntity, codec::entity_to_json};
///
/// #[derive(TableEntity)]
/// struct Login {
///     #[tablekit(partition_key)]
///     user: String,
///     #[tablekit(row_key)]
///     id: String,
///     at: DateTime<Utc>,
///     session: Uuid,
///     #[tablekit(etag)]
///     etag: Option<ETag>,
/// }
///
/// let login = Login {
///     user: "jon".into(),
///     id: "1".into(),
///     at: Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap(),
///     session: Uuid::nil(),
///     etag: None,
/// };
/// let json = String::from_utf8(entity_to_json(&login)?).unwrap();
/// assert_eq!(
///     json,
///     concat!(
///         r#"{"PartitionKey":"jon","RowKey":"1","#,
///         r#""At@odata.type":"Edm.DateTime","At":"2026-11-29T12:00:00.0000000Z","#,
///         r#""Session@odata.type":"Edm.Guid","Session":"00000000-0000-0000-0000-000000000000"}"#
///     )
/// );
/// # Ok::<(), tablekit::Error>(())
/// ```
pub use chrono;

/// The `uuid` crate tablekit's public types use: an `Edm.Guid` is a
/// [`uuid::Uuid`] ([`EdmValue::Guid`], the derive's `Uuid` fields, the
/// field type `tablekit-cli infer` prints for a Guid property).
///
/// Re-exported, as [`chrono`](mod@chrono) is, so that code can name `Uuid` at the
/// version tablekit was built with, without a dependency of its own:
/// `tablekit::uuid::Uuid` (with `v4`, so `Uuid::new_v4()`).
pub use uuid;

// The HTTP backend's tests name `crate::ErrorKind`.
#[cfg(test)]
pub(crate) use error::ErrorKind;

/// `#[derive(TableEntity)]`: a plain struct becomes an entity type.
///
/// The derive implements [`TableEntity`] (encoding straight to the wire JSON,
/// decoding straight from it, and the property-bag form) and [`EntityColumns`](crate::filter::EntityColumns)
/// (a generated `{Name}Columns` struct of typed [`Column`](crate::filter::Column) handles), and adds key
/// builders to the type. From then on no property name, `@odata.type`
/// annotation, key string or ETag is written by hand.
///
/// ```
/// use tablekit::{ETag, TableEntity, codec::entity_to_json};
///
/// #[derive(TableEntity, Debug, Clone, PartialEq)]
/// #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
/// struct Employee {
///     department: String,
///     employee_id: u32,
///     first_name: String,
///     #[tablekit(rename = "EmailAddress")]
///     email: String,
///     age: i32,
///     salary: f64,
///     views: Option<i64>,
///     #[tablekit(etag)]
///     etag: Option<ETag>,
/// }
///
/// let e = Employee {
///     department: "Sales".into(),
///     employee_id: 223,
///     first_name: "Jonathan".into(),
///     email: "jonesj@contoso.com".into(),
///     age: 34,
///     salary: 30000.5,
///     views: Some(9_000_000_000),
///     etag: None,
/// };
/// let json = String::from_utf8(entity_to_json(&e)?).unwrap();
/// assert_eq!(
///     json,
///     concat!(
///         r#"{"PartitionKey":"Sales","RowKey":"empid_000223","FirstName":"Jonathan","#,
///         r#""EmailAddress":"jonesj@contoso.com","Age":34,"#,
///         r#""Salary@odata.type":"Edm.Double","Salary":30000.5,"#,
///         r#""Views@odata.type":"Edm.Int64","Views":"9000000000"}"#
///     )
/// );
///
/// // Typed key builders, checked against the service's key rules.
/// assert_eq!(Employee::row_key(223)?, "empid_000223");
/// assert_eq!(Employee::key("Sales", 223)?, e.key());
/// assert!(Employee::partition_key("Sales/EU").is_err());
/// # Ok::<(), tablekit::Error>(())
/// ```
///
/// # Types
///
/// | Rust | stored as |
/// |---|---|
/// | `String` | `Edm.String` |
/// | `bool` | `Edm.Boolean` |
/// | `i8`, `i16`, `i32`, `u8`, `u16` | `Edm.Int32` (or `Edm.Int64` with `edm = "Int64"`) |
/// | `i64`, `u32` | `Edm.Int64` |
/// | `u64` | `Edm.Int64`; a value above `i64::MAX` is an error, never a wrap |
/// | `f32`, `f64` | `Edm.Double` |
/// | `chrono::DateTime<Utc>`, `DateTime<FixedOffset>` | `Edm.DateTime` (UTC; the offset is not kept) |
/// | `uuid::Uuid` | `Edm.Guid` (or `Edm.String` with `edm = "String"`) |
/// | `Vec<u8>`, `bytes::Bytes` | `Edm.Binary` |
/// | `Option<T>` of these | `None` is not written; a missing property reads as `None` |
///
/// Type aliases work: the mapping is checked by the compiler, and an unsupported
/// type is a compile error at the field naming the ways out (`json`, `flatten`,
/// `with`, `as_str`).
///
/// # Container attributes `#[tablekit(...)]`
///
/// | key | meaning |
/// |---|---|
/// | `partition_key = "{field}"`, `row_key = "empid_{id:06}"` | key templates: literal text and fields; `{field:0N}` zero-pads an integer to a fixed width N (a wider value is an error); `{{`/`}}` are braces |
/// | `rename_all = "..."` | `PascalCase` (the default: `first_name` → `FirstName`), `camelCase`, `snake_case`, `SCREAMING_SNAKE_CASE`, `lowercase`, `UPPERCASE` |
/// | `deny_unknown` | a stored property the type does not know is a decode error (by default it is ignored) |
/// | `version = N` | writes the schema version `N` as an Int32 property (`SchemaVersion`, or `version_property = "..."`); adds `SCHEMA_VERSION` and `VERSION_PROPERTY` consts |
/// | `upgrade = "path"` | with `version`: entities stored with an older version (a missing version property is version 0) are read by `fn(&RawEntity<'_>, stored_version: i32) -> tablekit::Result<Self>`, which can call the generated `Self::decode_current_schema` for the unchanged parts; writing always stores the current version |
/// | `projection_of = "Type"` | a projection of another derived type: each stored field must exist there with the same value type and property name (checked at compile time), and reads send `$select` of its properties |
/// | `table = "Employees"` | the table's name, checked at compile time, as the const `TABLE_NAME` |
/// | `crate = "path"` | where the generated code finds tablekit (by default `::tablekit`), for a crate that re-exports it: `#[tablekit(crate = "my_sdk::tablekit")]`; also on enums and on `TableProperties` structs |
///
/// # Field attributes
///
/// | key | meaning |
/// |---|---|
/// | `partition_key`, `row_key` | this `String` (or `Display + FromStr`) field is the key |
/// | `stored` | a key field is also stored as its own property (by default key fields live only in the key and are read back from it) |
/// | `rename = "Name"` | the property name |
/// | `skip` | not stored; reads as `Default::default()` |
/// | `default`, `default = "path"` | a missing property reads as the default instead of failing |
/// | `edm = "Int64"` | the Edm type where there is a choice (small integers as Int64, `Uuid` as String) |
/// | `json` | any serde type, stored as a JSON string |
/// | `flatten` | a struct deriving [`TableProperties`](macro@TableProperties), stored as `Outer_Inner` properties, to any depth |
/// | `with = "module"` | a converter: `module::write(&T, name, &mut W) -> Result<()>` (`W: PropertyWriter + ?Sized`) and `module::read(PropertyValue<'_>) -> Result<T>` |
/// | `as_str` | stored as the `Display` text, read with `FromStr` (unit enums) |
/// | `encrypt` | a `String` or `Option<String>` field stored encrypted by client-side encryption (feature `encryption`: the `tablekit::encryption` module, written through `TableClient::encrypted`); its column has no comparisons, and a plain client refuses to write the type |
/// | `etag` | an `Option<ETag>` filled on read and after every write through `&mut` |
/// | `timestamp` | an `Option<DateTime<Utc>>` filled with the service's Timestamp |
///
/// # Keys
///
/// The generated `Type::partition_key(..)`, `Type::row_key(..)` and
/// `Type::key(..)` take the template's fields in order (a `String` field as
/// `&str`) and return `Result<String>` / `Result<EntityKey>`: an error names
/// the field (forbidden character, too wide for its fixed width, or holding the
/// separator that follows it). The key of a value is `TableEntity::partition_key(&value)`
/// / `value.key()`; writes check the same rules before any I/O. Keys built from
/// templates are parsed back into their fields on read.
///
/// # Enums: heterogeneous tables
///
/// On an enum whose variants each wrap a `TableEntity` type, the derive writes
/// the variant's name (or `rename`) in an `EntityType` property
/// (`discriminator = "Kind"` to change it) and dispatches on it when reading.
/// With `row_key_prefix`, the variant names are RowKey prefixes instead. An
/// unknown discriminator is a decode error, or goes to the variant marked
/// `#[tablekit(unknown)]` (for example `Other(DynamicEntity)`).
///
/// # Errors at compile time
///
/// Missing or duplicate key sources, templates naming unknown fields or with a
/// bad format spec, two fields stored under one name, reserved or invalid
/// property names, more than 252 properties, unsupported types, an `etag` field
/// of the wrong type, unknown or repeated attribute keys (the message lists the
/// valid ones), generics and lifetimes: each is an error at the offending token,
/// all of them are reported at once, and none cascades into "trait not implemented".
#[cfg(feature = "derive")]
pub use tablekit_derive::TableEntity;

/// `#[derive(TableProperties)]`: lets a struct be stored inside an entity with
/// `#[tablekit(flatten)]`, its fields as `Outer_Inner` properties.
///
/// It takes the field attributes of [`TableEntity`](macro@TableEntity) other than
/// the key, ETag and Timestamp ones, and `rename_all` and `crate` on the struct.
///
/// ```
/// use tablekit::{TableEntity, TableProperties, codec::entity_to_json};
///
/// #[derive(TableProperties)]
/// struct Address {
///     city: String,
///     zip: Option<u32>,
/// }
///
/// #[derive(TableEntity)]
/// struct Customer {
///     #[tablekit(partition_key)]
///     region: String,
///     #[tablekit(row_key)]
///     id: String,
///     #[tablekit(flatten)]
///     home: Address,
/// }
///
/// let c = Customer {
///     region: "EU".into(),
///     id: "c1".into(),
///     home: Address { city: "Lyon".into(), zip: None },
/// };
/// let json = String::from_utf8(entity_to_json(&c)?).unwrap();
/// assert_eq!(json, r#"{"PartitionKey":"EU","RowKey":"c1","Home_City":"Lyon"}"#);
/// # Ok::<(), tablekit::Error>(())
/// ```
#[cfg(feature = "derive")]
pub use tablekit_derive::TableProperties;

/// The query macros: `filter!` (Rust operators over typed columns) and `odata!`
/// (hand-written OData with escaped values). See [`Query::filter`](crate::table::Query::filter) and [`Query::filter_raw`](crate::table::Query::filter_raw).
///
/// Their expansions name `::tablekit` (they take no `crate = "..."` option): the
/// crate that calls them depends on tablekit itself, a re-export is not enough.
#[cfg(feature = "derive")]
pub use tablekit_derive::{filter, odata};

/// What the derive's expansions name: not an API. Its name carries the
/// version of the contract between `tablekit-derive` and `tablekit`, so a
/// derive of another minor version fails to compile with a message that
/// names the module, instead of misbehaving.
#[doc(hidden)]
#[path = "__private.rs"]
pub mod __private_0_1;

/// The README's example, compiled as a doctest so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
