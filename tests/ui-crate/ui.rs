//! Compile-time errors of tablekit's macros: `#[derive(TableEntity)]`
//! (topics attrs, enums, generics, keys, names, projection, types, version) and
//! `filter!`/`odata!` (topic filter) and `tablekit::testing::conformance!`
//! (topic testing). Each case in `ui/<topic>/fail_*.rs`
//! must fail to compile with the messages in the `.stderr` beside it.
//! Regenerate with `UI_TESTS=overwrite cargo test -p tablekit-ui-tests --test ui`
//! and read every diff. The `pass_*.rs` cases beside them, which must
//! compile, are built and run by `pass.rs`.
//!
//! # Why not trybuild
//!
//! trybuild checks its cases in a cargo project of its own, so it compiles
//! tablekit and every dependency again, twice (its two cargo runs differ in
//! their rustflags): 80 CPU-seconds, the longest test of the suite and a
//! quarter of CI. This harness runs `rustc` once per case against the
//! libraries cargo already built for this test (`target/debug/deps`): each
//! case costs a type check, about a second for all of them.
//!
//! The libraries are found through this package's own library, which
//! re-exports the crates the cases name (`lib.rs`): it is the newest
//! `libtablekit_ui_tests-*.rlib` no newer than this test binary (cargo builds
//! both in one run), and for each crate the case names, the build of it that
//! this library was compiled against is the candidate whose types are the
//! library's (a one-line probe), whatever other builds of the crate an
//! earlier `cargo` run with other features left in the directory.
//!
//! The compiler's output is normalised as trybuild does, so that an edit of
//! tablekit's sources does not change a snapshot: paths become `$WORKSPACE`,
//! `$CARGO` (the registry) and `$RUST` (the standard library), and the line
//! numbers of files other than the case are dropped (the gutter is as wide as
//! the case's own line numbers need).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

/// The edition the cases are written in: the workspace's.
const EDITION: &str = "2024";

/// The crates the cases name, each with a probe that compiles only when
/// `--extern NAME=<candidate>` is the build the library re-exports.
const CRATES: [(&str, &str); 4] = [
    (
        "tablekit",
        "fn same(x: tablekit::ETag) -> tablekit_ui_tests::tablekit::ETag { x }",
    ),
    (
        "chrono",
        "fn same(x: chrono::Utc) -> tablekit_ui_tests::chrono::Utc { x }",
    ),
    (
        "uuid",
        "fn same(x: uuid::Uuid) -> tablekit_ui_tests::uuid::Uuid { x }",
    ),
    (
        "bytes",
        "fn same(x: bytes::Bytes) -> tablekit_ui_tests::bytes::Bytes { x }",
    ),
];

#[test]
fn ui() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = root
        .parent()
        .and_then(Path::parent)
        .expect("tests/ui-crate");
    let compiler = Compiler::find(workspace);

    let mut cases = Vec::new();
    for topic in read_dir(&root.join("ui")) {
        for file in read_dir(&topic) {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("fail_") && name.ends_with(".rs") {
                cases.push(file);
            }
        }
    }
    cases.sort();
    assert!(!cases.is_empty(), "no ui/*/fail_*.rs case found");

    let overwrite = std::env::var("UI_TESTS").is_ok_and(|v| v == "overwrite");
    let failures = Mutex::new(Vec::new());
    let next = Mutex::new(cases.iter());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let Some(case) = next.lock().unwrap().next() else {
                    break;
                };
                if let Err(why) = check(&compiler, root, workspace, case, overwrite) {
                    failures.lock().unwrap().push(why);
                }
            });
        }
    });

    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    assert!(
        failures.is_empty(),
        "{} of {} ui cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// One case: compiled, normalised, compared with (or written to) its `.stderr`.
fn check(
    compiler: &Compiler,
    root: &Path,
    workspace: &Path,
    case: &Path,
    overwrite: bool,
) -> Result<(), String> {
    let shown = case
        .strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (success, stderr) = compiler.compile(case);
    if success {
        return Err(format!("{shown}: compiled, and it must fail\n"));
    }
    let actual = normalize(&stderr, root, workspace, &shown);
    let snapshot = case.with_extension("stderr");
    let expected = std::fs::read_to_string(&snapshot).ok();
    if expected.as_deref() == Some(actual.as_str()) {
        return Ok(());
    }
    if overwrite || expected.is_none() {
        std::fs::write(&snapshot, &actual).unwrap();
        if overwrite {
            return Ok(());
        }
        return Err(format!(
            "{shown}: no .stderr yet; wrote {} (read it, then run again)\n",
            snapshot.display()
        ));
    }
    let mut why = format!(
        "{shown}: the errors differ from {}\n--- expected\n",
        snapshot.strip_prefix(root).unwrap().display()
    );
    why.push_str(expected.as_deref().unwrap_or(""));
    why.push_str("\n--- actual\n");
    why.push_str(&actual);
    why.push_str("\n(UI_TESTS=overwrite rewrites the snapshots)\n");
    Err(why)
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    entries
}

/// rustc and the `--extern` flags of the libraries this test was built with.
struct Compiler {
    rustc: OsString,
    /// The workspace root: cargo gives rustc the paths of the workspace's
    /// sources relative to it, and rustc reads them again from there to show
    /// the lines of tablekit a message points to.
    workspace: PathBuf,
    deps: PathBuf,
    externs: Vec<OsString>,
    out_dir: PathBuf,
}

impl Compiler {
    fn find(workspace: &Path) -> Compiler {
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let exe = std::env::current_exe().unwrap();
        let deps = exe.parent().unwrap().to_path_buf();
        let built = modified(&exe);

        // The library cargo built with this binary: the newest one not newer.
        let mut libraries = candidates(&deps, "tablekit_ui_tests");
        libraries.retain(|(time, _)| *time <= built);
        let library = libraries
            .first()
            .map(|(_, path)| path.clone())
            .unwrap_or_else(|| {
                panic!(
                    "no libtablekit_ui_tests-*.rlib beside {} (cargo builds it with this test)",
                    exe.display()
                )
            });

        let out_dir = std::env::temp_dir().join(format!("tablekit-ui-{}", std::process::id()));
        std::fs::create_dir_all(&out_dir).unwrap();
        let mut compiler = Compiler {
            rustc,
            workspace: workspace.to_path_buf(),
            deps,
            externs: vec![extern_flag("tablekit_ui_tests", &library)],
            out_dir,
        };
        for (name, probe) in CRATES {
            let found = candidates(&compiler.deps, name)
                .into_iter()
                .find_map(|(_, path)| {
                    let flag = extern_flag(name, &path);
                    compiler.probe(name, probe, &flag).then_some(flag)
                });
            let flag = found.unwrap_or_else(|| {
                panic!(
                    "none of the lib{name}-*.rlib in {} is the one {} was built with \
                     (is `{}` the compiler cargo used?)",
                    compiler.deps.display(),
                    library.display(),
                    compiler.rustc.to_string_lossy()
                )
            });
            compiler.externs.push(flag);
        }
        compiler
    }

    /// rustc with the flags every compilation here shares: a fixed width,
    /// and `--verbose` for full type paths (`std::string::String`).
    fn command(&self, crate_name: &str) -> Command {
        let mut command = Command::new(&self.rustc);
        command
            .current_dir(&self.workspace)
            .arg("--edition")
            .arg(EDITION)
            .args([
                "--crate-type",
                "bin",
                "--emit=metadata",
                "--crate-name",
                crate_name,
            ])
            .arg("--out-dir")
            .arg(&self.out_dir)
            .arg("-L")
            .arg({
                let mut flag = OsString::from("dependency=");
                flag.push(&self.deps);
                flag
            })
            .args([
                "--verbose",
                "-A",
                "dead_code",
                "--diagnostic-width=140",
                "--color=never",
            ])
            .env_remove("RUSTFLAGS");
        for flag in &self.externs {
            command.arg("--extern").arg(flag);
        }
        command
    }

    fn probe(&self, name: &str, probe: &str, flag: &OsString) -> bool {
        let source = self.out_dir.join(format!("probe_{name}.rs"));
        std::fs::write(&source, format!("{probe}\nfn main() {{ let _ = same; }}\n")).unwrap();
        let mut command = self.command(&format!("probe_{name}"));
        command.arg("--extern").arg(flag).arg(&source);
        command.output().is_ok_and(|out| out.status.success())
    }

    /// Compiles one case; whether it compiled, and what rustc wrote.
    fn compile(&self, case: &Path) -> (bool, String) {
        let name = case.file_stem().unwrap().to_string_lossy().into_owned();
        let topic = case
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let crate_name = format!("{topic}_{name}");
        let output = self
            .command(&crate_name)
            .arg(case)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.rustc.to_string_lossy()));
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

impl Drop for Compiler {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.out_dir);
    }
}

fn extern_flag(name: &str, path: &Path) -> OsString {
    let mut flag = OsString::from(format!("{name}="));
    flag.push(path);
    flag
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path).and_then(|m| m.modified()).unwrap()
}

/// The `lib<name>-<hash>.rlib` files in `deps`, newest first.
fn candidates(deps: &Path, name: &str) -> Vec<(SystemTime, PathBuf)> {
    let prefix = format!("lib{name}-");
    let mut found: Vec<(SystemTime, PathBuf)> = read_dir(deps)
        .into_iter()
        .filter(|path| {
            let file = path.file_name().unwrap().to_string_lossy();
            file.starts_with(&prefix) && file.ends_with(".rlib")
        })
        .map(|path| (modified(&path), path))
        .collect();
    found.sort_by_key(|(time, _)| std::cmp::Reverse(*time));
    found
}

/// The lines rustc closes with, which say nothing about the case.
fn is_trailer(line: &str) -> bool {
    line.starts_with("error: aborting due to")
        || line.starts_with("For more information about")
        || line.starts_with("Some errors have detailed explanations")
        || (line.starts_with("warning: ") && line.ends_with(" emitted"))
}

/// rustc's output made independent of this machine's paths and of the line
/// numbers of any file but the case.
fn normalize(stderr: &str, root: &Path, workspace: &Path, case: &str) -> String {
    let case_abs = root.join(case).to_string_lossy().into_owned();
    let workspace = format!("{}/", workspace.to_string_lossy());
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo")
        });
    let registry = format!("{}/registry/src/", cargo_home.to_string_lossy());

    // Paths first, line by line.
    let lines: Vec<String> = stderr
        .lines()
        .filter(|line| !is_trailer(line))
        .map(|line| {
            let line = line.replace(&case_abs, case);
            let line = line.replace(&workspace, "$WORKSPACE/");
            let line = replace_registry(&line, &registry);
            replace_std(&line)
        })
        .collect();

    let lines = cut_long_lists(lines);

    // Then each diagnostic's gutter.
    let mut out = String::new();
    let mut block = Vec::new();
    for line in lines {
        let starts =
            (line.starts_with("error") || line.starts_with("warning")) && !line.starts_with(' ');
        if starts && !block.is_empty() {
            regutter(&block, case, &mut out);
            block.clear();
        }
        block.push(line);
    }
    regutter(&block, case, &mut out);
    let trimmed = out.trim_end();
    let mut result = trimmed
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n");
    result.push('\n');
    result
}

/// `--verbose` lists every implementation of a trait a message names: the
/// list is cut after eight (`and $N others`), so that adding an
/// implementation does not change a snapshot.
fn cut_long_lists(lines: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(lines.len());
    let mut items: Option<usize> = None;
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.starts_with("= help: the following types implement trait ")
            || trimmed.starts_with("= help: the following other types implement trait ")
        {
            items = Some(0);
        } else if let Some(count) = &mut items {
            if indent >= 12 {
                *count += 1;
                if *count == 9 {
                    let more = lines
                        .get(index + 1)
                        .is_some_and(|next| next.len() - next.trim_start().len() == indent);
                    if more {
                        out.push(format!("{}and $N others", &line[..indent - 2]));
                        continue;
                    }
                } else if *count > 9 {
                    continue;
                }
            } else {
                items = None;
            }
        }
        out.push(line.clone());
    }
    out
}

/// `<registry>/<index>/<crate>-<version>/` becomes `$CARGO/<crate>-<version>/`
/// without the version (a lockfile update must not change a snapshot).
fn replace_registry(line: &str, registry: &str) -> String {
    let Some(at) = line.find(registry) else {
        return line.to_string();
    };
    let rest = &line[at + registry.len()..];
    let rest = rest.split_once('/').map_or(rest, |(_index, rest)| rest);
    let (krate, path) = rest.split_once('/').unwrap_or((rest, ""));
    let name = match krate.rfind('-') {
        Some(dash) if krate[dash + 1..].starts_with(|c: char| c.is_ascii_digit()) => &krate[..dash],
        _ => krate,
    };
    format!("{}$CARGO/{name}/{path}", &line[..at])
}

/// The standard library's sources (`/rustc/<hash>/library/` or the
/// toolchain's `lib/rustlib/src/rust/library/`) become `$RUST/`.
fn replace_std(line: &str) -> String {
    for marker in ["/lib/rustlib/src/rust/library/", "/library/"] {
        if let Some(at) = line.find(marker) {
            let start = line[..at].rfind(' ').map_or(0, |space| space + 1);
            let path = &line[start..at];
            if marker.starts_with("/lib/") || path.starts_with("/rustc/") {
                return format!("{}$RUST/{}", &line[..start], &line[at + marker.len()..]);
            }
        }
    }
    line.to_string()
}

/// Rewrites one diagnostic (a header and its lines) with the line numbers of
/// other files dropped, and the gutter as wide as the case's numbers need.
fn regutter(block: &[String], case: &str, out: &mut String) {
    // rustc's gutter width: the spaces before the first `-->`.
    let width = block
        .iter()
        .find_map(|line| {
            let trimmed = line.trim_start_matches(' ');
            (trimmed.starts_with("-->") || trimmed.starts_with(":::"))
                .then(|| line.len() - trimmed.len())
        })
        .unwrap_or(0);
    if width == 0 {
        for line in block {
            let _ = writeln!(out, "{line}");
        }
        return;
    }

    // Which lines are the case's (numbers kept) and which another file's.
    let mut in_case = false;
    let mut parsed = Vec::with_capacity(block.len());
    let mut widest = 1;
    for line in block {
        match gutter(line, width) {
            Some(Gutter::Location(rest)) => {
                let path = rest[3..].trim_start();
                in_case = path.starts_with(case);
                let rest = if in_case {
                    rest.to_string()
                } else {
                    // A workspace source is named relative to the workspace.
                    let mut kept = if path.starts_with(['/', '$', '<']) {
                        rest.to_string()
                    } else {
                        format!("{} $WORKSPACE/{path}", &rest[..3])
                    };
                    // `--> path:line:column` loses its line and column.
                    for _ in 0..2 {
                        if let Some(colon) = kept.rfind(':') {
                            if kept[colon + 1..].chars().all(|c| c.is_ascii_digit())
                                && colon + 1 < kept.len()
                            {
                                kept.truncate(colon);
                            }
                        }
                    }
                    kept
                };
                parsed.push(Line::Location(rest));
            }
            Some(Gutter::Numbered(number, rest)) => {
                if in_case {
                    widest = widest.max(number.len());
                    parsed.push(Line::Numbered(number.to_string(), rest.to_string()));
                } else {
                    parsed.push(Line::Plain(rest.to_string()));
                }
            }
            Some(Gutter::Blank(rest)) => parsed.push(Line::Plain(rest.to_string())),
            // `...` stands for elided source lines, in place of a number.
            None if line.starts_with("...") && line[3..].trim_start().starts_with('|') => {
                parsed.push(Line::Elided(line[3..].trim_start().to_string()))
            }
            None => parsed.push(Line::Verbatim(line.clone())),
        }
    }
    for line in parsed {
        let _ = match line {
            Line::Location(rest) => writeln!(out, "{:widest$}{rest}", ""),
            Line::Numbered(number, rest) => writeln!(out, "{number:>widest$}{rest}"),
            Line::Plain(rest) => writeln!(out, "{:widest$}{rest}", ""),
            Line::Elided(rest) => writeln!(out, "... {rest}"),
            Line::Verbatim(line) => writeln!(out, "{line}"),
        };
    }
}

enum Gutter<'a> {
    /// `-->` or `:::` and what follows.
    Location(&'a str),
    /// A source line's number, and the rest from the space after the gutter.
    Numbered(&'a str, &'a str),
    /// An empty gutter, and the rest from the space after it.
    Blank(&'a str),
}

enum Line {
    Location(String),
    Numbered(String, String),
    Plain(String),
    Elided(String),
    Verbatim(String),
}

fn gutter(line: &str, width: usize) -> Option<Gutter<'_>> {
    if line.len() < width + 2 || !line.is_char_boundary(width) {
        return None;
    }
    let (head, rest) = line.split_at(width);
    if head.bytes().all(|b| b == b' ') && (rest.starts_with("-->") || rest.starts_with(":::")) {
        return Some(Gutter::Location(rest));
    }
    let mark = rest.as_bytes();
    if mark[0] != b' ' || !matches!(mark[1], b'|' | b'=' | b'+' | b'~' | b'-') {
        return None;
    }
    let number = head.trim_start_matches(' ');
    if number.is_empty() {
        Some(Gutter::Blank(rest))
    } else if number.bytes().all(|b| b.is_ascii_digit()) {
        Some(Gutter::Numbered(number, rest))
    } else {
        None
    }
}
