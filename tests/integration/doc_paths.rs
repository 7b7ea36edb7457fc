//! Every repository path the docs cite exists: the Markdown files (the README,
//! the guide in `docs/guide/src/`, the others) and the rustdoc (`///`, `//!`)
//! of the four crates, so that a file moved or renamed fails the suite
//! instead of leaving the docs pointing at nothing.
//!
//! What counts as a citation: a code span (`` `tests/integration/readme.rs` ``)
//! or a link target whose text has no blank, holds a `/` and starts with a
//! top-level entry of the repository (`tablekit-patterns/...`, `tests/...`,
//! `docs/...`): it is a path from the repository's root. A Markdown link is
//! resolved from the file's folder, as viewers do; a rustdoc link from the
//! generated pages (`../../../docs/...`) from the root. `*` matches any part
//! of a name. Code blocks are left alone.

use std::path::{Path, PathBuf};

/// The repository's root (this package lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Folders never searched for docs: build output, dependencies, VCS.
const SKIPPED: &[&str] = &["target", "node_modules", ".git", "book"];

/// The files under `dir` whose names end with `ext`, sorted.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !SKIPPED.contains(&name) {
                files(&path, ext, out);
            }
        } else if name.ends_with(ext) {
            out.push(path);
        }
    }
}

/// How a citation was written, which says where it is resolved from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    Span,
    Link,
}

/// The candidates of one line of prose: code spans and link targets.
fn candidates(line: &str) -> Vec<(Form, &str)> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else { break };
        found.push((Form::Span, &after[..close]));
        rest = &after[close + 1..];
    }
    let mut rest = line;
    while let Some(open) = rest.find("](") {
        let after = &rest[open + 2..];
        let Some(close) = after.find(')') else { break };
        found.push((Form::Link, &after[..close]));
        rest = &after[close + 1..];
    }
    found
}

/// Whether `name` matches `pattern`, where `*` stands for any text.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (0..=name.len() - head.len()).any(|i| {
                    name.is_char_boundary(head.len() + i) && matches(tail, &name[head.len() + i..])
                })
        }
    }
}

/// Whether `path` (relative to `base`, `*` allowed in its parts) exists.
fn exists(base: &Path, path: &str) -> bool {
    let mut here = vec![base.to_path_buf()];
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        let mut next = Vec::new();
        for dir in &here {
            if part == ".." {
                next.push(dir.parent().unwrap_or(dir).to_path_buf());
            } else if part.contains('*') {
                if let Ok(entries) = std::fs::read_dir(dir) {
                    for e in entries.filter_map(|e| e.ok()) {
                        if matches(part, &e.file_name().to_string_lossy()) {
                            next.push(e.path());
                        }
                    }
                }
            } else if dir.join(part).exists() {
                next.push(dir.join(part));
            }
        }
        here = next;
    }
    !here.is_empty()
}

/// The repository paths cited in `text` (the prose of `file`: Markdown, or
/// rustdoc lines) that do not exist, as `line: path`, and how many were
/// checked.
fn missing_in(root: &Path, file: &Path, text: &str, markdown: bool) -> (Vec<String>, usize) {
    let top: Vec<String> = std::fs::read_dir(root)
        .expect("the repository's root")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !SKIPPED.contains(&n.as_str()))
        .collect();
    let folder = file.parent().unwrap_or(root);
    let mut missing = Vec::new();
    let mut checked = 0;
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        for (form, cited) in candidates(line) {
            let cited = cited.split('#').next().unwrap_or_default();
            let plain = cited
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-/*".contains(c));
            if !plain || !cited.contains('/') {
                continue;
            }
            if markdown && form == Form::Link {
                checked += 1;
                if !exists(folder, cited) {
                    missing.push(format!("{}: {cited}", n + 1));
                }
                continue;
            }
            let mut from_root = cited;
            while let Some(rest) = from_root.strip_prefix("../") {
                from_root = rest;
            }
            let from_root = from_root.strip_prefix("./").unwrap_or(from_root);
            let first = from_root.split('/').next().unwrap_or_default();
            if !top.iter().any(|t| t == first) {
                continue;
            }
            checked += 1;
            if !exists(root, from_root) {
                missing.push(format!("{}: {cited}", n + 1));
            }
        }
    }
    (missing, checked)
}

/// The rustdoc of a Rust file: its `///` and `//!` lines, others blank (so
/// that line numbers stay the file's).
fn rustdoc(source: &str) -> String {
    source
        .lines()
        .map(|l| {
            let t = l.trim_start();
            t.strip_prefix("///")
                .or_else(|| t.strip_prefix("//!"))
                .unwrap_or("")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_path_the_readme_the_guide_and_the_rustdoc_cite_exists() {
    let root = root();
    let mut markdown = Vec::new();
    files(&root, ".md", &mut markdown);
    let mut rust = Vec::new();
    for krate in [
        "tablekit",
        "tablekit-derive",
        "tablekit-patterns",
        "tablekit-cli",
    ] {
        files(&root.join(krate).join("src"), ".rs", &mut rust);
    }
    assert!(
        markdown.iter().any(|f| f.ends_with("README.md"))
            && markdown
                .iter()
                .any(|f| f.ends_with("ch04-design-patterns.md"))
            && rust.len() > 50,
        "the docs were found: {markdown:?}, {} Rust files",
        rust.len()
    );
    let mut missing = Vec::new();
    let mut checked = 0;
    for (file, is_markdown) in markdown
        .iter()
        .map(|f| (f, true))
        .chain(rust.iter().map(|f| (f, false)))
    {
        let source = std::fs::read_to_string(file).expect("a doc file reads");
        let text = if is_markdown {
            source
        } else {
            rustdoc(&source)
        };
        let (gone, n) = missing_in(&root, file, &text, is_markdown);
        checked += n;
        let shown = file.strip_prefix(&root).unwrap_or(file).display();
        missing.extend(gone.into_iter().map(|g| format!("{shown}:{g}")));
    }
    assert!(
        missing.is_empty(),
        "the docs cite paths the repository does not have (file:line: path):\n{}",
        missing.join("\n")
    );
    // The docs cite over sixty paths: far fewer means the search broke.
    assert!(checked > 40, "only {checked} cited paths were found");
}

#[test]
fn a_moved_file_is_reported_and_other_text_is_not_taken_for_a_path() {
    let root = root();
    let readme = root.join("README.md");
    let text = "\
See `tests/integration/readme.rs` and `tablekit-patterns/tests/patterns/*_model.rs`,
then `tests/request_counts.rs` (moved) and [the guide](docs/guide/src/nothing.md).
Not paths: `a/b`, `queue/2014/07/31/1800/000001.log`, `UseEmbeddedStorage=true;Path=./data/app.redb`,
`https://example.invalid/tests/x`, `tablekit-cli <file> check`.
```sh
cat tests/not_checked_in_code.rs
```
";
    let (missing, checked) = missing_in(&root, &readme, text, true);
    assert_eq!(
        missing,
        ["2: tests/request_counts.rs", "2: docs/guide/src/nothing.md"]
    );
    assert_eq!(checked, 4);
    // In rustdoc, a link is from the generated pages: `../` climbs out of them.
    let lib = root.join("tablekit/src/lib.rs");
    let (missing, _) = missing_in(
        &root,
        &lib,
        "[ch. 1](../../../docs/guide/src/ch01-tables-in-ten-minutes.md), [gone](../../../docs/gone.md)",
        false,
    );
    assert_eq!(missing, ["1: ../../../docs/gone.md"]);
}
