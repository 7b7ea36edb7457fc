//! The integration tests, in one binary (one link instead of one per file).
//!
//! The behaviour suite (crud, batch, query, query_dsl, tables, types,
//! service_rules, differential) runs every case three times: against the Azurite
//! (or Azure) account named by `TABLEKIT_TEST_CONNECTION_STRING`, which
//! `scripts/test.sh` starts and sets, on the embedded backend, and on the
//! embedded backend kept in a file (see `tablekit::testing::conformance!`; `durable` tests the
//! file itself). auth, metadata and tracing are HTTP-only; the `derive_*`
//! offline ones and `retry` need no emulator.

mod common;

mod acl;
mod auth;
mod batch;
mod blob;
mod blob_manage;
mod bulk;
mod cosmos;
mod cosmos_rules;
mod crud;
mod derive_crate_path;
mod derive_flatten_names;
mod derive_hetero;
mod derive_hygiene;
mod derive_keys;
mod derive_proptest;
mod derive_roundtrip;
mod derive_schema;
mod differential;
mod doc_paths;
mod durable;
mod encryption;
mod encryption_interop;
mod entra;
mod entra_identity;
mod errors;
mod filter_macros;
mod fuzz_replay;
mod harness;
mod infer;
mod lost_answers;
mod lying_server;
mod metadata;
mod modify;
mod null_filters;
mod outcomes;
mod query;
mod query_dsl;
mod queue;
mod queue_interop;
mod readme;
mod retry;
mod sas_account;
mod scripted;
mod serve_auth;
mod serve_blob;
mod serve_python;
mod serve_queue;
mod serve_table;
mod service_properties;
mod service_rules;
mod simulated_limits;
mod stats;
mod tables;
mod tracing;
mod transport;
mod types;
mod unicode;
mod user_inputs;
