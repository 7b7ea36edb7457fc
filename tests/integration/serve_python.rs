//! The official Python SDKs (azure-data-tables, azure-storage-queue,
//! azure-storage-blob) against `tablekit::server`, the emulator
//! `tablekit-cli serve` runs: `python/serve_conformance.py` drives tables
//! (CRUD with ETags, every Edm type, queries with continuation, batches,
//! SAS), queues (visibility, pop receipts, metadata, SAS) and blobs (blocks,
//! listings, properties, leases, SAS), each case checking its results, and
//! this test fails on any case that does not pass, but for the emulator's
//! known gaps (`SERVE_GAPS`, each with why it fails). The same script against
//! Azurite shows its expectations are the emulators' common ground (where
//! Azurite deviates from the service, the script follows the service and
//! says so).
//!
//! The interpreter is the one named by `TABLEKIT_SERVE_PYTHON` (a venv with
//! `tools/python/serve-requirements.txt`, which `scripts/test.sh` makes under
//! the target directory). Without it the tests are skipped with a banner,
//! and fail when `CI=true`.

use std::path::PathBuf;

use crate::common;

/// The interpreter of the venv with the official SDKs.
const PYTHON_VAR: &str = "TABLEKIT_SERVE_PYTHON";

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/integration/python/serve_conformance.py"
);

fn python() -> Option<PathBuf> {
    match std::env::var(PYTHON_VAR) {
        Ok(p) if !p.trim().is_empty() => Some(PathBuf::from(p)),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
                panic!(
                    "{PYTHON_VAR} is not set but CI=true: the conformance run of the official \
                     Python SDKs against the emulator needs their venv (scripts/test.sh makes it)"
                );
            }
            eprintln!(
                "\n================ Python SDKs against serve SKIPPED ================\n\
                 {PYTHON_VAR} is not set: the official SDKs did not run against the emulator.\n\
                 Make the venv: python3 -m venv target/serve-venv && \\\n  \
                 target/serve-venv/bin/pip install --no-deps -r tools/python/serve-requirements.txt\n\
                 and set {PYTHON_VAR}=target/serve-venv/bin/python\n\
                 ===================================================================\n"
            );
            None
        }
    }
}

/// What a run of the script printed about one case.
#[derive(Debug, PartialEq)]
enum Outcome<'a> {
    Ok,
    Fail(&'a str),
}

/// Runs every case of the script against `connection_string` and panics
/// unless each case the script lists printed `ok`, but for the `known_gaps`
/// of `target` (a case and why it fails there), which may fail: each of
/// those that passes is named, to be taken off the list.
async fn conformance(
    python: PathBuf,
    connection_string: String,
    target: &str,
    known_gaps: &[(&str, &str)],
) {
    // The server answers on this test's runtime: Python waits on a thread of
    // its own.
    let (listed, out) = tokio::task::spawn_blocking(move || {
        let listed = std::process::Command::new(&python)
            .arg(SCRIPT)
            .arg("--list")
            .output()?;
        let out = std::process::Command::new(&python)
            .arg(SCRIPT)
            .arg(&connection_string)
            .stdin(std::process::Stdio::null())
            .output()?;
        Ok::<_, std::io::Error>((listed, out))
    })
    .await
    .expect("the Python run's thread")
    .expect("start the Python interpreter");
    let cases = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.status.success() && !cases.trim().is_empty(),
        "the script lists its cases: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Shown with --nocapture (and by nextest on failure): which cases passed.
    println!("{target}:\n{stdout}");
    let outcome = |case: &str| {
        stdout.lines().find_map(|l| {
            if l == format!("ok {case}") {
                Some(Outcome::Ok)
            } else {
                l.strip_prefix(&format!("FAIL {case}: ")).map(Outcome::Fail)
            }
        })
    };
    let mut wrong = Vec::new();
    let mut now_passing = Vec::new();
    for case in cases.lines() {
        let gap = known_gaps.iter().find(|(c, _)| *c == case);
        match (outcome(case), gap) {
            (Some(Outcome::Ok), None) => {}
            (Some(Outcome::Ok), Some(_)) => now_passing.push(case),
            (Some(Outcome::Fail(_)), Some(_)) => {}
            (Some(Outcome::Fail(why)), None) => wrong.push(format!("FAIL {case}: {why}")),
            (None, _) => wrong.push(format!("{case}: no outcome printed")),
        }
    }
    for (case, _) in known_gaps {
        assert!(
            cases.lines().any(|c| c == *case),
            "known gap {case} is no case of the script"
        );
    }
    if !now_passing.is_empty() {
        eprintln!(
            "\n==== {target}: known gaps that pass now (take them off the list): {} ====\n",
            now_passing.join(", ")
        );
    }
    assert!(
        wrong.is_empty(),
        "the official Python SDKs against {target} ({}): {} of {} cases wrong:\n{}\n\
         standard error:\n{stderr}",
        out.status,
        wrong.len(),
        cases.lines().count(),
        wrong.join("\n"),
    );
}

/// The cases serve fails, each with why: the known gaps of the emulator,
/// named so that any other failure fails the test.
const SERVE_GAPS: &[(&str, &str)] = &[(
    "blob_commit_keeps_committed_blocks",
    "the embedded blob store keeps a committed block's id and size, not its bytes: \
         Put Block List naming a committed block is answered 400 InvalidBlockList",
)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdks_pass_the_conformance_cases_on_serve() {
    let Some(python) = python() else { return };
    let server = tablekit::server::Server::builder()
        .ports(0, 0, 0)
        .start()
        .await
        .expect("the server starts");
    conformance(python, server.connection_string(), "serve", SERVE_GAPS).await;
    server.shutdown().await.expect("the server stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_cases_hold_on_azurite_too() {
    let Some(connection_string) = common::connection_string() else {
        return;
    };
    let Some(python) = python() else { return };
    conformance(python, connection_string, "Azurite", &[]).await;
}
