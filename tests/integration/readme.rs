//! The README's examples that rustdoc cannot run: the `#[tokio::test]` of "Unit
//! tests without an emulator" runs here, from a copy that is checked against the
//! README's text, so a broken or drifted example fails the suite.

mod unit_test_example;

/// The README's code block that follows `heading`, without rustdoc's hidden
/// (`# `) lines.
fn readme_block(heading: &str) -> String {
    let readme = include_str!("../../README.md");
    let after = &readme[readme.find(heading).expect("the README has the heading")..];
    let start = after.find("```rust\n").expect("a Rust block follows") + "```rust\n".len();
    let body = &after[start..];
    let body = &body[..body.find("```\n").expect("the block ends")];
    body.lines()
        .filter(|l| !(l.starts_with("# ") || l.trim_end() == "#"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_unit_test_example_is_the_readmes() {
    let copy: String = include_str!("readme/unit_test_example.rs")
        .lines()
        .skip_while(|l| l.starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        copy,
        readme_block("## Unit tests without an emulator"),
        "tests/integration/readme/unit_test_example.rs must repeat the README's example"
    );
}
