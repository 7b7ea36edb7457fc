//! The crates tablekit's UI cases (`ui.rs` and `ui/`) name, re-exported.
//!
//! The harness in `ui.rs` compiles each case with rustc against the builds
//! cargo made for this package: this library is how it finds them (the
//! build of each crate that this library was compiled against).

pub use bytes;
pub use chrono;
pub use tablekit;
pub use uuid;
