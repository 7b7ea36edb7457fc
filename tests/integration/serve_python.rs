//! The official Python SDKs (azure-data-tables, azure-storage-queue,
//! azure-storage-blob) against `tablekit::server`, the emulator
//! `tablekit-cli serve` runs: `python/serve_conformance.py` drives tables
//! (CRUD with ETags, every Edm type, queries with continuation, batches,
//! SAS), queues (visibility, pop receipts, metadata, SAS) and blobs (blocks,
//! listings, properties, leases, SAS), each case checking its results, and
//! this test fails on any case that does not pass. The same script against
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

/// Runs every case of the script against `connection_string`; panics with
/// the failed cases (and the whole output) unless all pass.
async fn conformance(python: PathBuf, connection_string: String, target: &str) {
    // The server answers on this test's runtime: Python waits on a thread of
    // its own.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(SCRIPT)
            .arg(&connection_string)
            .stdin(std::process::Stdio::null())
            .output()
    })
    .await
    .expect("the Python run's thread")
    .expect("start the Python interpreter");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Shown with --nocapture (and by nextest on failure): which cases passed.
    println!("{target}:\n{stdout}");
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
    let passed = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(
        out.status.success() && failed.is_empty() && passed > 0,
        "the official Python SDKs against {target}: {passed} cases ok, {} failed ({}):\n{}\n\
         standard error:\n{stderr}",
        failed.len(),
        out.status,
        failed.join("\n"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_cases_hold_on_azurite_too() {
    let Some(connection_string) = common::connection_string() else {
        return;
    };
    let Some(python) = python() else { return };
    conformance(python, connection_string, "Azurite").await;
}
