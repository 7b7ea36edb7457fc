//! The README's examples beyond what `scripts/readme-blocks.sh` checks (every
//! block compiled and run as pasted into a new crate, its tests included):
//! "A typed example" on a store file its connection string names (it reads
//! the environment, so it runs in a child process whose environment the test
//! chooses), from a copy checked against the README's text. And, within
//! `cargo test`: every block reads as it is pasted (no rustdoc hidden lines),
//! and the Install section lists every crate the README's examples use.

use std::process::Command;

/// The typed example, included rather than a module file so that rustfmt
/// leaves it as the README prints it (aligned comments), and its `main`
/// (private to it) can be called.
mod typed_example {
    include!("readme/typed_example.rs");

    pub(super) fn run() -> tablekit::Result<()> {
        main()
    }
}

/// The README's code block that follows `heading`, as it reads.
fn readme_block(heading: &str) -> String {
    let readme = include_str!("../../README.md");
    let after = &readme[readme.find(heading).expect("the README has the heading")..];
    let fence = after.find("```rust").expect("a Rust block follows");
    let start = fence + after[fence..].find('\n').expect("the fence line ends") + 1;
    let body = &after[start..];
    body[..body.find("```\n").expect("the block ends")].to_owned()
}

/// The README's Rust blocks, in order.
fn readme_rust_blocks() -> Vec<&'static str> {
    let mut rest = include_str!("../../README.md");
    let mut blocks = Vec::new();
    while let Some(fence) = rest.find("```rust") {
        let body = &rest[fence..];
        let body = &body[body.find('\n').expect("the fence line ends") + 1..];
        let end = body.find("```\n").expect("the block ends");
        blocks.push(&body[..end]);
        rest = &body[end..];
    }
    blocks
}

/// Markdown viewers show rustdoc's hidden lines (`# ...`) as text, and a
/// user pastes them: every block is whole as it reads.
#[test]
fn no_readme_block_has_rustdoc_hidden_lines() {
    let blocks = readme_rust_blocks();
    assert!(blocks.len() >= 4, "the README's Rust blocks were found");
    for block in blocks {
        for line in block.lines() {
            assert!(
                !(line.starts_with("# ") || line.trim_end() == "#" || line.starts_with("##")),
                "a README block has a rustdoc hidden line, `{line}`:\n{block}"
            );
        }
    }
}

/// The copy in `tests/integration/readme/`, without its leading comment.
fn copy_of(file: &str) -> String {
    file.lines()
        .skip_while(|l| l.starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_typed_example_is_the_readmes() {
    assert_eq!(
        copy_of(include_str!("readme/typed_example.rs")),
        readme_block("## A typed example"),
        "tests/integration/readme/typed_example.rs must repeat the README's example"
    );
}

/// The variable that makes [`typed_example_in_a_child`] run the example.
const CHILD: &str = "TABLEKIT_README_TYPED_EXAMPLE_CHILD";

/// Runs the typed example's `main` when this test binary is started by
/// [`run_the_typed_example`] (and does nothing otherwise): the example reads
/// `TABLEKIT_CONNECTION_STRING`, which a test must not change in its own
/// process, where other tests run in parallel.
#[test]
fn typed_example_in_a_child() {
    if std::env::var_os(CHILD).is_some() {
        typed_example::run().expect("the typed example runs");
    }
}

/// The typed example run in a child process with `connection` as
/// `TABLEKIT_CONNECTION_STRING` (unset when `None`): its standard output.
fn run_the_typed_example(connection: Option<&str>) -> String {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"));
    child
        .args([
            "readme::typed_example_in_a_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1");
    match connection {
        Some(c) => child.env("TABLEKIT_CONNECTION_STRING", c),
        None => child.env_remove("TABLEKIT_CONNECTION_STRING"),
    };
    let out = child.output().expect("the test binary starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the typed example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_typed_example_runs_on_the_embedded_store_without_a_connection_string() {
    let out = run_the_typed_example(None);
    assert!(
        out.contains("storage: the embedded store in memory")
            && out.contains("1 seniors, Some(\"Jon\")"),
        "{out}"
    );
}

#[tokio::test]
async fn the_typed_example_runs_on_the_store_its_connection_string_names() {
    let dir =
        std::env::temp_dir().join(format!("tablekit-readme-{}", uuid::Uuid::new_v4().simple()));
    // A folder that does not exist yet, as on a fresh checkout.
    let path = dir.join("data").join("app.redb");
    let connection = format!("UseEmbeddedStorage=true;Path={}", path.display());
    for run in 1..=2 {
        let out = run_the_typed_example(Some(&connection));
        assert!(
            out.contains(&format!(
                "storage: the embedded store file {}",
                path.display()
            )) && out.contains("1 seniors"),
            "run {run}: {out}"
        );
    }
    let staff = tablekit::Storage::embedded_at(&path)
        .unwrap()
        .table::<tablekit::DynamicEntity>("Employees")
        .unwrap();
    let jon = staff
        .get(("Sales", "empid_000223"))
        .await
        .unwrap()
        .expect("written");
    assert_eq!(jon.get("Age").and_then(|v| v.as_i32()), Some(35));
    drop(staff);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The crates a Rust block names (`chrono::`, `#[tokio::main]`, ...).
fn crates_named(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in code.match_indices("::") {
        let before = &code[..i];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let name = &before[start..];
        // Not `a::b` (b is no crate) nor `x.method::<T>` (a turbofish).
        let is_path_start = !(before[..start].ends_with("::") || before[..start].ends_with('.'));
        if is_path_start
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !found.iter().any(|f| f == name)
        {
            found.push(name.to_owned());
        }
    }
    found
}

#[test]
fn the_install_section_lists_every_crate_the_readme_examples_use() {
    let readme = include_str!("../../README.md");
    let install = &readme[readme.find("## Install").expect("an Install section")..];
    let install = &install[install.find("```toml\n").expect("a toml block") + 8..];
    let install = &install[..install.find("```").expect("the block ends")];
    let listed: Vec<&str> = install
        .lines()
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim()))
        .collect();
    let blocks = readme_rust_blocks();
    for block in &blocks {
        for name in crates_named(block) {
            assert!(
                ["std", "core", "alloc", "crate", "self", "super"].contains(&name.as_str())
                    || listed.contains(&name.as_str()),
                "a README example uses the crate `{name}`, which the Install section does not list ({listed:?}):\n{block}"
            );
        }
    }
    assert!(
        blocks.len() >= 4,
        "the README's Rust blocks were found ({})",
        blocks.len()
    );
}
