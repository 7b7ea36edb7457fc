//! The migration guide (`docs/guide/`, an mdBook), compiled: each chapter is the
//! documentation of an item below, so rustdoc compiles and runs every Rust
//! snippet of the book as a doctest (`cargo test -p tablekit-tests --doc`), on
//! the embedded backend. A snippet that drifts from the API fails the suite.
//!
//! The items exist only when rustdoc collects doctests; the library is empty
//! otherwise.

/// The guide's introduction.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/README.md")]
pub struct Introduction;

/// Chapter 1: Azure tables in ten minutes.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch01-tables-in-ten-minutes.md")]
pub struct Chapter1TablesInTenMinutes;

/// Chapter 2: migrating from DataServiceContext.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch02-from-dataservicecontext.md")]
pub struct Chapter2FromDataServiceContext;

/// Chapter 3: migrating from the official SDKs.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch03-from-the-official-sdks.md")]
pub struct Chapter3FromTheOfficialSdks;

/// Chapter 4: design patterns.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch04-design-patterns.md")]
pub struct Chapter4DesignPatterns;

/// Chapter 5: testing your code.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch05-testing.md")]
pub struct Chapter5Testing;

/// Chapter 6: running at scale.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch06-running-at-scale.md")]
pub struct Chapter6RunningAtScale;

/// Chapter 7: across partitions, queues and workers.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch07-across-partitions.md")]
pub struct Chapter7AcrossPartitions;

/// Chapter 8: large data (large entities and log data in blobs).
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch08-large-data.md")]
pub struct Chapter8LargeData;

/// Chapter 9: client-side encryption.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/src/ch09-client-side-encryption.md")]
pub struct Chapter9ClientSideEncryption;
