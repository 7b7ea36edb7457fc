//! The table design patterns of the Azure guides as tested building blocks over
//! tablekit's public API. This crate is a skeleton; the patterns land in later releases.
#![warn(missing_docs)]
