//! The table design patterns of the Azure guides as tested building blocks over
//! tablekit's public API.
//!
//! Each pattern is a type, generic over your `#[derive(TableEntity)]` types,
//! that makes the requests the guide describes and no others:
//!
//! | module | pattern (design guide §) | the type |
//! |---|---|---|
//! | [`index`] | intra-partition secondary index (§3.1) | [`index::IndexedTable`] with [`index::Index`]es |
//! | [`index_entity`] | index entities, option 2 (§3.4) | [`index_entity::IndexEntities`] |
//! | [`compound`] | compound keys (§3.6) | [`compound::family`], [`compound::children`] ranges |
//! | [`log_tail`] | log tail (§3.7) | [`log_tail::LogTail`], newest-first keys [`log_tail::NewestFirst`] |
//! | [`wide`] | wide entities (§3.10) | [`wide::WideTable`] |
//! | [`periodic`] | high-volume delete (§3.8): one table per period | [`periodic::PeriodicTables`] |
//! | [`series`] | data series (§3.9) with daily rollover | [`series::DataSeries`], [`series::HourlyCounters`] |
//! | [`range`] | the range queries all patterns read with | [`range::KeyRange`] |
//! | [`keys`] | key encodings: inverted ticks, padding | functions |
//!
//! Every write a pattern makes to keep several entities in step is one entity
//! group transaction, so a failed request leaves them as they were; what
//! cannot fit one transaction is refused before any request.
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
pub mod index;
pub mod index_entity;
pub mod keys;
pub mod log_tail;
pub mod periodic;
pub mod range;
pub mod series;
pub mod wide;
