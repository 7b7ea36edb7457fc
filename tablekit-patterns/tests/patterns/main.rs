//! The pattern tests, in one binary (one link instead of one per file).
//!
//! Every case of the behaviour suites runs on the three backends a user can
//! pick, through the library's harness (`tablekit::testing::conformance!`):
//! Azurite (or Azure) named by
//! `TABLEKIT_TEST_CONNECTION_STRING`, which `scripts/test.sh` starts and
//! sets; the embedded store in memory; and the durable embedded store in a
//! scratch file. The `*_model` modules are model-based property tests:
//! random operation sequences checked against a plain in-memory model, many
//! cases on the embedded store and a few on Azurite.

mod common;

mod composition;
mod data_series;
mod denormalized_counts;
mod eventual_crash;
mod eventual_model;
mod eventual_poison;
mod eventual_steps;
mod eventual_tracing;
mod high_volume_delete;
mod index_entities;
mod index_entities_etags;
mod index_entities_model;
mod inter_index_claims;
mod inter_index_exhaustive;
mod inter_index_model;
mod inter_partition_index;
mod large_entities;
mod large_model;
mod log_data;
mod log_tail;
mod partition_model;
mod plans;
mod relationships;
mod request_counts;
mod schema_upgrade;
mod secondary_index;
mod series_model;
mod spans;
mod wide_entity;
mod wide_model;
mod write_model;
