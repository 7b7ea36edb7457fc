//! Empty: this package holds the trybuild cases of tablekit's macros
//! (`ui.rs` and `ui/`), apart from the integration tests so that trybuild's
//! project depends on the few crates the cases name.
