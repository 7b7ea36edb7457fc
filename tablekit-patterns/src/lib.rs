//! The table design patterns of the Azure guides as tested building blocks over
//! tablekit's public API.
//!
//! Each pattern is a type, generic over your `#[derive(TableEntity)]` types,
//! that makes the requests the guide describes and no others:
//!
//! | module | pattern (design guide §) | the type |
//! |---|---|---|
//! | [`index`] | intra-partition secondary index (§3.1) | [`index::IndexedTable`] with [`index::Index`]es |
//! | [`inter_index`] | inter-partition secondary index (§3.2), kept through a queue | [`inter_index::InterPartitionIndex`] with [`inter_index::InterIndex`]es |
//! | [`index_entity`] | index entities, options 2 and 3 (§3.4) | [`index_entity::IndexEntities`], [`index_entity::SeparateIndexEntities`] |
//! | [`summary`] | denormalised counts in a heterogeneous partition (§3.5, §4.8) | [`summary::CountedPartition`] |
//! | [`denormalize`] | denormalisation (§3.5): the department holds its manager's details | [`denormalize::Denormalized`] |
//! | [`plan`] | composing patterns and plain writes into one transaction | [`plan::Plan`] (tablekit's own) |
//! | [`compound`] | compound keys (§3.6) | [`compound::family`], [`compound::children`] ranges |
//! | [`log_tail`] | log tail (§3.7) | [`log_tail::LogTail`], newest-first keys [`log_tail::NewestFirst`] |
//! | [`wide`] | wide entities (§3.10) | [`wide::WideTable`] |
//! | [`large`] | large entities (§3.11): large properties in blobs, or split | [`large::LargeTable`], [`large::SplitTable`] |
//! | [`log_data`] | log data in blobs named by time (§3.13) | [`log_data::LogWriter`], [`log_data::LogReader`] |
//! | [`periodic`] | high-volume delete (§3.8): one table per period | [`periodic::PeriodicTables`] |
//! | [`series`] | data series (§3.9) with daily rollover | [`series::DataSeries`], [`series::HourlyCounters`] |
//! | [`eventual`] | eventually consistent transactions through a queue (§3.3) | [`eventual::Worker`] running [`eventual::Operation`]s such as [`eventual::Archive`] |
//! | [`relationships`] | modelling relationships (§5.7) and the materialized view (§3.14): one-to-many in one partition with moves, one-to-one links, join in the client, CQRS view | [`relationships::OneToMany`], [`relationships::Link`], [`relationships::KeyConvention`], [`relationships::LookupCache`], [`relationships::MaterializedView`] |
//! | [`upgrade`] | background schema upgrade | [`upgrade::SchemaUpgrade`] |
//! | [`range`] | the range queries all patterns read with | [`range::KeyRange`] |
//! | [`keys`] | key encodings: inverted ticks, padding | functions |
//!
//! # What is atomic, and what a reader can see
//!
//! The service makes one thing atomic: an entity group transaction, up to
//! 100 operations on entities of **one partition**, applied all or nothing.
//! Nothing spans two partitions, two tables, or a table and a blob. So the
//! patterns fall in two groups, and each module's docs say which, what a
//! reader can see between the steps, and what survives a crash at any step:
//!
//! | module | consistency | between the steps a reader can see |
//! |---|---|---|
//! | [`index`], [`summary`], [`denormalize`], [`wide`], [`index_entity`] (option 2, [`IndexEntities`](index_entity::IndexEntities)), [`compound`] | **atomic**: one transaction per write | nothing: every copy, count or part changes together |
//! | [`series`], [`log_tail`] | atomic per entity (one write each) | a series whose two entities were written by two writes |
//! | [`index_entity`] (option 3, [`SeparateIndexEntities`](index_entity::SeparateIndexEntities)) | two writes in an order that keeps a promise (see the module) | an index entity listing an id whose entity is gone or changed, which `find` leaves out; never an entity its index does not list |
//! | [`inter_index`] | **eventually consistent** through a queue: the client sends one message, a worker writes the primary and the copies | the primary changed and a copy not yet, or a copy under a value no longer current (`lookup_verified` checks it) |
//! | [`eventual`] | eventually consistent: at-least-once delivery, idempotent steps | any state between two steps of an operation |
//! | [`relationships`]: [`OneToMany`](relationships::OneToMany) insert and delete | **atomic**: the entity and its department's count in one transaction | nothing |
//! | [`relationships`]: [`move_to`](relationships::OneToMany::move_to) | eventually consistent through the worker: two transactions, each with its count | the employee in both departments, each counting it; counts always equal the entities |
//! | [`relationships`]: [`MaterializedView`](relationships::MaterializedView) | eventually consistent through the worker, rebuildable | view rows of a source state older than the current one while its change is pending |
//! | [`relationships`]: [`Link`](relationships::Link), [`LookupCache`](relationships::LookupCache) | no promise across entities: one point read; a copy as old as its time to live | a link naming a deleted entity; a department changed less than a TTL ago in its old version |
//! | [`large`] | a blob written before the entity that names it, deleted after | an orphan blob until a sweep; never an entity whose blob is missing |
//! | [`log_data`], [`periodic`], [`upgrade`] | one request each, no multi-entity promise | as each request leaves it |
//!
//! Writes that read first (to know which copies exist, to add to a count, to
//! copy a manager's details) are made conditional on the ETag read and start
//! again from a fresh read when another writer got there first; what cannot
//! fit one transaction is refused before any request. The atomic patterns
//! can also **plan** their writes instead of sending them, to join other
//! patterns' writes and plain writes of the same partition in one
//! transaction ([`plan`]). Each module's docs list the requests of each
//! operation; `tablekit-patterns/tests/patterns/request_counts.rs` counts them
//! against hand-written code.
//!
//! # Traces
//!
//! Each public async operation of a pattern is a `tracing` span like a
//! table call's ([`tablekit::observe`]): `tablekit.request`, named for
//! OpenTelemetry after its type and method (`IndexedTable.insert`,
//! `CountedPartition.insert`, `Denormalized.assign`, `LogTail.append`,
//! `OneToMany.move_to`, `MaterializedView.rebuild`, ...), kind internal,
//! with `az.namespace`, `tablekit.operation` (the method) and
//! `tablekit.table` (when it works on one table), and `error.type` and
//! `otel.status_code = "ERROR"` when it failed. The table calls it makes
//! (its `Transaction.send`, its `TableClient.get`, and the spans of the
//! operations it is made of) are its children. The worker's run of an
//! operation is a `Worker.run_operation` span in the message's
//! `eventual.message` span, and the spans of what it runs
//! (`OneToMany.apply_move`, `MaterializedView.apply`, a step's table calls)
//! are its children. The operations on queues and blobs (`Eventual.enqueue`
//! and `requeue`, `LogWriter.flush`, `LogReader.blobs`) are spans of the
//! same kind in `az.namespace = "Microsoft.Storage"`, and
//! [`compound::read`] one of `Microsoft.Tables`. No entity value is in them, and
//! with no subscriber they cost a check each.
//!
//! # One verb family
//!
//! The patterns use [`TableClient`](tablekit::TableClient)'s verbs where
//! they mean what they mean there: `insert`, `upsert`, `update` (with
//! [`UpdateMode`](tablekit::UpdateMode)), `delete`, `get`, `query`, and
//! `plan_*` for the same writes as a [`Plan`](tablekit::table::Plan). Another
//! word is kept only where the act is not one of those, and says what it is:
//!
//! | word | where | why not a `TableClient` verb |
//! |---|---|---|
//! | `assign` | [`denormalize`] | writes no entity of yours: makes one the holder of the target's copy |
//! | `count`, `plan_count` | [`summary`] | a read, and an addition to the summary, of a number no entity of yours holds |
//! | `lookup`, `list` | [`index`], [`inter_index`], [`index_entity`] | reads through an index: by indexed value, not by key |
//! | `append` | [`log_tail`] | an insert under a RowKey the pattern makes from the time |
//! | `add`, `set`, `record` | [`series`] | additions to and values of one slot of a series entity, not whole entities |
//! | `enqueue`, `requeue` | [`eventual`] | messages to a queue, not table writes |
//! | `move_to`, `changed` | [`relationships`] | messages to the worker: a move between partitions, "this source entity changed" |
//! | `resolve`, `join`, `refresh`, `rebuild`, `lag` | [`relationships`] | reads through a link or a cache, and the upkeep of a cache or a view |
//!
//! Refusals before any request are [`ValidationError::Pattern`](tablekit::error::ValidationError::Pattern)
//! (`is_invalid_input()`), and a value of a unique index held by another
//! entity is [`ErrorKind::Constraint`](tablekit::error::ErrorKind::Constraint)
//! (`is_constraint_violation()`).
//!
//! The guide's chapter [Design patterns](../../../docs/guide/src/ch04-design-patterns.md)
//! (in the repository's `docs/guide/`) takes the patterns one by one: the
//! problem, the type, its requests and its failure behaviour; [Running at
//! scale](../../../docs/guide/src/ch06-running-at-scale.md) covers choosing keys
//! and the Cosmos DB Table API.
//!
//! # Request costs
//!
//! Measured by `tablekit-patterns/tests/patterns/request_counts.rs` through a counting loopback proxy in
//! front of Azurite 3.35, next to hand-written code doing the same thing with
//! tablekit's table client: the combinator sends the same requests, byte for
//! byte (the test asserts both the request count and the bytes of every row).
//! Bytes are the requests' heads and bodies as sent; they vary with the table
//! and account names (here tables of 17 and 21 characters in
//! `devstoreaccount1`), the key and property values, and the ETags.
//!
//! | operation | requests | combinator | hand-written |
//! |---|---|---|---|
//! | [`IndexedTable::insert`](index::IndexedTable::insert), 2 indexes | 1 transaction of 3 inserts | 1 req, 2,201 B | 1 req, 2,201 B |
//! | [`update`](index::IndexedTable::update) changing 1 indexed value | 1 transaction of 4 (replace, delete, insert, upsert) | 1 req, 2,633 B | 1 req, 2,633 B |
//! | [`modify`](index::IndexedTable::modify) | 1 point read + 1 transaction of 3 | 2 req, 2,807 B | 2 req, 2,807 B |
//! | [`lookup`](index::IndexedTable::lookup) by email | 1 point read | 1 req, 495 B | 1 req, 495 B |
//! | [`list`](index::IndexedTable::list) `email_b`..`email_c` | 1 range query | 1 req, 555 B | 1 req, 555 B |
//! | [`delete`](index::IndexedTable::delete) | 1 transaction of 3 deletes | 1 req, 1,814 B | 1 req, 1,814 B |
//! | [`LogTail::latest`](log_tail::LogTail::latest)`(10)` of 14 | 1 query, `$top=10` | 1 req, 491 B | 1 req, 491 B |
//! | [`LogTail::between`](log_tail::LogTail::between), 3 of 14 | 1 range query | 1 req, 583 B | 1 req, 583 B |
//! | `latest(1001)` of 1,500 | `$top=1000`, then `$top=1` | 2 req, 1,049 B | |
//!
//! The large entities and log data patterns have no hand-written twin in the
//! test; their request sequences are asserted as measured through the same
//! proxy (table and blob endpoints), with a 100 KiB photo and log records of
//! about 75 bytes in batches of 5:
//!
//! | operation | requests, in order | measured |
//! |---|---|---|
//! | [`LargeTable::insert`](large::LargeTable::insert) | upload blob, insert | 2 req, 103,635 B |
//! | [`LargeTable::get`](large::LargeTable::get) | point read, download blob | 2 req, 907 B |
//! | [`get_without_blobs`](large::LargeTable::get_without_blobs) | point read | 1 req, 487 B |
//! | [`LargeTable::replace`](large::LargeTable::replace) | point read, upload, update, delete old blob | 4 req, 94,375 B |
//! | [`LargeTable::delete`](large::LargeTable::delete) | point read, delete entity, delete blob | 3 req, 1,458 B |
//! | [`sweep_orphans`](large::LargeTable::sweep_orphans), 3 live + 1 orphan | listing, 4 point reads, 1 delete | 6 req, 3,072 B |
//! | [`SplitTable::insert`](large::SplitTable::insert) / [`get`](large::SplitTable::get) | 1 insert / 1 point read | 1 req, 137,253 B / 1 req, 487 B |
//! | [`LogWriter::flush`](log_data::LogWriter::flush), first in an hour / next | listing + upload / upload | 2 req, 1,418 B / 1 req, 987 B |
//! | [`LogReader::read`](log_data::LogReader::read) 15:04–15:06, 24 blobs in 2 hours | 1 listing, 2 downloads | 3 req, 1,189 B |
//!
//! The other patterns list their requests per operation in their module
//! docs ([`index_entity`], [`summary`], [`series`], [`wide`], [`periodic`],
//! [`upgrade`]); each retry after a concurrent change repeats the read and
//! the write.
//!
//! # A tour
//!
//! Declare the access patterns once, next to your entity type, then use them
//! like a table client (each module has a full example; the `examples/`
//! directory of the repository has a runnable program per pattern):
//!
//! ```
//! use chrono::Utc;
//! use tablekit::{ETag, TableEntity, TableServiceClient};
//! use tablekit_patterns::index::{Index, IndexedTable};
//! use tablekit_patterns::log_tail::{LogTail, NewestFirst};
//! use tablekit_patterns::range::KeyRange;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     email: String,
//!     #[tablekit(etag)]
//!     etag: Option<ETag>,
//! }
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{employee}", row_key = "{key}")]
//! struct Expense {
//!     employee: String,
//!     key: NewestFirst,
//!     amount: f64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! # service.create_table("Employees").await?;
//! # service.create_table("EmployeeExpense").await?;
//!
//! // Employees by id and by email, both copies written in one transaction.
//! let by_email = Index::new("email", "email_", |e: &Employee| e.email.to_lowercase());
//! let employees = IndexedTable::new(service.table::<Employee>("Employees")?)?
//!     .with_index(&by_email)?;
//! let a_to_b = employees.list(&by_email, "Sales", KeyRange::prefix("a")).await?;
//!
//! // Expense claims newest first: the 10 latest are the top of the partition.
//! let expenses = LogTail::new(service.table::<Expense>("EmployeeExpense")?);
//! let latest = expenses.latest("000123", 10).await?;
//! # let _ = (a_to_b, latest, Utc::now());
//! # Ok(()) }
//! ```
//!
//! The key and range helpers need no service:
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use tablekit::DynamicEntity;
//! use tablekit_patterns::{compound, log_tail::NewestFirst, periodic::Period, range::KeyRange};
//!
//! let t = Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap();
//! assert_eq!(NewestFirst::new(t, "7").to_string(), "2519936321679999999_7");
//! assert_eq!(
//!     compound::family("empid_000123").filter::<DynamicEntity>("Sales", "").to_string(),
//!     "PartitionKey eq 'Sales' and RowKey ge 'empid_000123' and RowKey lt 'empid_000124'"
//! );
//! assert_eq!(
//!     KeyRange::prefix("a").filter::<DynamicEntity>("Sales", "email_").to_string(),
//!     "PartitionKey eq 'Sales' and RowKey ge 'email_a' and RowKey lt 'email_b'"
//! );
//! let july31 = Utc.with_ymd_and_hms(2014, 7, 31, 18, 0, 0).unwrap();
//! assert_eq!(Period::Day.table_name("LoginAttempts", july31), "LoginAttempts20140731");
//! ```
//!
//! # Service differences
//!
//! Log tail and every range read rely on Azure Table storage returning
//! entities in (PartitionKey, RowKey) order; the Cosmos DB Table API does not
//! sort, and these patterns do not work there. Azurite, which the tests run
//! against, accepts transactions over several partitions (the service does
//! not; every transaction here is built within one partition, and tablekit
//! refuses others before sending), caps keys at 512 characters (the service
//! allows 1 KiB) and does not enforce the 252-property limit (tablekit does,
//! before sending, which the wide entity tests rely on).
//!
//! # Newest first: inverted ticks
//!
//! Entities come back in (PartitionKey, RowKey) order, oldest first when the
//! RowKey is a time. Storing `MaxTicks - ticks(t)` as a fixed-width RowKey
//! reverses that: the newest entity sorts first (the "log tail" pattern).
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use tablekit_patterns::keys::{from_inverted_ticks, inverted_ticks};
//!
//! let b1 = Utc.with_ymd_and_hms(2008, 10, 1, 10, 0, 0).unwrap();
//! let b2 = Utc.with_ymd_and_hms(2008, 10, 2, 10, 0, 0).unwrap();
//! assert_eq!(inverted_ticks(b1), "2521794455999999999");
//! assert_eq!(inverted_ticks(b2), "2521793591999999999");
//! assert!(inverted_ticks(b2) < inverted_ticks(b1)); // the newer post sorts first
//! assert_eq!(from_inverted_ticks(&inverted_ticks(b1)), Some(b1));
//! ```
#![warn(missing_docs, missing_debug_implementations)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod compound;
pub mod denormalize;
mod error;
pub mod eventual;
mod hook;
pub mod index;
pub mod index_entity;
pub mod inter_index;
pub mod keys;
pub mod large;
pub mod log_data;
pub mod log_tail;
pub mod periodic;
pub mod plan;
mod props;
pub mod range;
pub mod relationships;
pub mod series;
pub mod summary;
mod trace;
pub mod upgrade;
pub mod wide;
