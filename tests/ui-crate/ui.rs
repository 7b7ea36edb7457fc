//! Compile-time errors of tablekit's macros (trybuild): `#[derive(TableEntity)]`
//! (topics attrs, enums, generics, keys, names, projection, types, version) and
//! `filter!`/`odata!` (topic filter). Each case in `ui/<topic>/fail_*.rs`
//! has its expected output beside it in a `.stderr`. Regenerate with
//! `TRYBUILD=overwrite cargo test -p tablekit-ui-tests --test ui` and read every diff.
//! The `pass_*.rs` cases beside them, which must compile, are built and run
//! by `pass.rs`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*/fail_*.rs");
}
