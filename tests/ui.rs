//! Compile-time errors of tablekit's macros (trybuild): `#[derive(TableEntity)]`
//! (topics attrs, enums, generics, keys, names, projection, types, version) and
//! `filter!`/`odata!` (topic filter). Each case in `tests/ui/<topic>/fail_*.rs`
//! has its expected output beside it in a `.stderr`; `pass_*.rs` cases must
//! compile. Regenerate with
//! `TRYBUILD=overwrite cargo test -p tablekit-tests --test ui` and read every diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/*/pass_*.rs");
    t.compile_fail("ui/*/fail_*.rs");
}
