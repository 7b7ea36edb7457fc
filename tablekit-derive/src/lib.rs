//! Procedural macros of tablekit. Use them through `tablekit` (its `derive` feature,
//! on by default): `#[derive(tablekit::TableEntity)]`.
//!
//! This crate is a skeleton until the derive lands; it exports nothing yet.
