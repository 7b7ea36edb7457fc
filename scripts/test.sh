#!/usr/bin/env bash
# The one test command for a fresh clone: fmt, clippy, and the full test suite
# against a throwaway Azurite (installed from tools/azurite on first use).
# Extra arguments are passed to the test runner (cargo nextest, or cargo test
# where nextest is missing), e.g. scripts/test.sh -- --nocapture.
# Each stage prints its wall time, and a summary closes the run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

STAGES=()
STAGE_NAME=""
STAGE_START=0
RUN_START=$SECONDS

banner() { printf '\n==> %s\n' "$*"; }

# Starts a timed stage (and closes the one before).
stage() {
    end_stage
    STAGE_NAME="$*"
    STAGE_START=$SECONDS
    banner "$*"
}

end_stage() {
    if [[ -n "$STAGE_NAME" ]]; then
        local took=$((SECONDS - STAGE_START))
        STAGES+=("$(printf '%5d s  %s' "$took" "$STAGE_NAME")")
        printf '    (%d s)\n' "$took"
        STAGE_NAME=""
    fi
}

print_stages() {
    end_stage
    if ((${#STAGES[@]})); then
        printf '\n==> stage times\n'
        printf '%s\n' "${STAGES[@]}"
        printf '%5d s  total\n' "$((SECONDS - RUN_START))"
    fi
}

# rustfmt and clippy are needed; add them only when missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    banner "rustup component add rustfmt clippy"
    rustup component add rustfmt clippy
fi

# nextest runs the tests of every binary side by side; cargo test is the
# fallback (one binary after another).
if cargo nextest --version >/dev/null 2>&1; then
    NEXTEST=1
else
    NEXTEST=0
    echo "test.sh: cargo-nextest not found; running the tests with cargo test" >&2
fi

stage "cargo fmt --all --check"
cargo fmt --all --check

TMP_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/tablekit-test.XXXXXX")"
export AZURITE_STATE_DIR="$TMP_ROOT/azurite"
cleanup() {
    local rc=$?
    trap - EXIT
    trap '' INT TERM # finish cleaning up even if signalled again
    bash scripts/azurite.sh stop || true
    rm -rf "$TMP_ROOT"
    print_stages
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stage "starting Azurite (scripts/azurite.sh start)"
if ! AZURITE_ENV="$(bash scripts/azurite.sh start)"; then
    echo "test.sh: error: Azurite failed to start; the integration tests need it" >&2
    exit 1
fi
eval "$AZURITE_ENV"
echo "Azurite pid $AZURITE_PID, table endpoint http://127.0.0.1:$AZURITE_TABLE_PORT/devstoreaccount1"

stage "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

if ((NEXTEST)); then
    stage "cargo nextest run --workspace $*"
    cargo nextest run --workspace "$@"
    # nextest does not run doctests.
    stage "cargo test --workspace --doc"
    cargo test --workspace --doc
else
    stage "cargo test --workspace $*"
    cargo test --workspace "$@"
fi

# The wire cases again on the reqwest transport (the default is tablekit's
# own hyper transport; reqwest is the optional `reqwest` feature, chosen here
# through the suite's TABLEKIT_TRANSPORT switch): every case that talks to
# Azurite, none of those that run on the embedded store or never send a
# request (they do not depend on the transport).
HTTP_CASES='not (test(/::embedded$/) | test(/::embedded_file$/) | test(/^derive_/) | test(/^filter_macros::/) | test(/^durable::/) | test(/^readme::/))'
if ((NEXTEST)); then
    stage "the integration tests' wire cases on reqwest (TABLEKIT_TRANSPORT=reqwest)"
    TABLEKIT_TRANSPORT=reqwest cargo nextest run -p tablekit-tests --test integration -E "$HTTP_CASES" "$@"
else
    stage "cargo test -p tablekit-tests --test integration (TABLEKIT_TRANSPORT=reqwest)"
    TABLEKIT_TRANSPORT=reqwest cargo test -p tablekit-tests --test integration "$@"
fi

# The examples that check what they do, each on the embedded store and on
# Azurite: built once, then run. They exit non-zero if a step fails.
stage "the examples, on the embedded store and on Azurite"
cargo build --quiet --examples
EXAMPLES_DIR="${CARGO_TARGET_DIR:-target}/debug/examples"
run_example() {
    local name="$1"
    shift
    echo "--- $name $* (embedded)"
    env -u TABLEKIT_CONNECTION_STRING "$EXAMPLES_DIR/$name" "$@" >/dev/null
    echo "--- $name $* (Azurite)"
    TABLEKIT_CONNECTION_STRING="$TABLEKIT_TEST_CONNECTION_STRING" "$EXAMPLES_DIR/$name" "$@" >/dev/null
}
# The bounded-memory transfer exits non-zero if the peak RSS goes over budget
# (50 MiB over HTTP; embedded adds the blob it holds).
run_example blob_transfer 20
for example in archive_worker employee_email_index employee_photo queue_logs department_counts; do
    run_example "$example"
done
end_stage
