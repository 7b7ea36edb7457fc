#!/usr/bin/env bash
# The one test command for a fresh clone: fmt, clippy, and the full test suite
# against a throwaway Azurite (installed from tools/azurite on first use).
# Extra arguments are passed to `cargo test`, e.g. scripts/test.sh -- --nocapture
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

banner() { printf '\n==> %s\n' "$*"; }

# rustfmt and clippy are needed; add them only when missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    banner "rustup component add rustfmt clippy"
    rustup component add rustfmt clippy
fi

banner "cargo fmt --all --check"
cargo fmt --all --check

TMP_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/tablekit-test.XXXXXX")"
export AZURITE_STATE_DIR="$TMP_ROOT/azurite"
cleanup() {
    local rc=$?
    trap - EXIT
    trap '' INT TERM # finish cleaning up even if signalled again
    bash scripts/azurite.sh stop || true
    rm -rf "$TMP_ROOT"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

banner "starting Azurite (scripts/azurite.sh start)"
if ! AZURITE_ENV="$(bash scripts/azurite.sh start)"; then
    echo "test.sh: error: Azurite failed to start; the integration tests need it" >&2
    exit 1
fi
eval "$AZURITE_ENV"
echo "Azurite pid $AZURITE_PID, table endpoint http://127.0.0.1:$AZURITE_TABLE_PORT/devstoreaccount1"

banner "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

banner "cargo test --workspace $*"
cargo test --workspace "$@"

# The whole integration suite again on the reqwest transport (the default is
# tablekit's own hyper transport; reqwest serves HTTP proxies and is the
# fallback), so every wire behaviour is proven on both.
banner "cargo test -p tablekit-tests --test integration (TABLEKIT_TRANSPORT=reqwest)"
TABLEKIT_TRANSPORT=reqwest cargo test -p tablekit-tests --test integration "$@"

# The bounded-memory transfer, small enough to be cheap: it exits non-zero if
# the peak RSS goes over budget (50 MiB over HTTP; embedded adds the blob it holds).
banner "cargo run --example blob_transfer -- 20 (embedded, then Azurite)"
env -u TABLEKIT_CONNECTION_STRING cargo run --quiet --example blob_transfer -- 20
TABLEKIT_CONNECTION_STRING="$TABLEKIT_TEST_CONNECTION_STRING" \
    cargo run --quiet --example blob_transfer -- 20

# The queue-worker examples, each on the embedded store and on Azurite: they
# exit non-zero if a step fails.
for example in archive_worker employee_email_index; do
    banner "cargo run --example $example (embedded, then Azurite)"
    env -u TABLEKIT_CONNECTION_STRING cargo run --quiet --example "$example" >/dev/null
    TABLEKIT_CONNECTION_STRING="$TABLEKIT_TEST_CONNECTION_STRING" \
        cargo run --quiet --example "$example" >/dev/null
done
# The large-entity example checks what it reads back and exits non-zero otherwise.
banner "cargo run --example employee_photo (embedded, then Azurite)"
env -u TABLEKIT_CONNECTION_STRING cargo run --quiet --example employee_photo
TABLEKIT_CONNECTION_STRING="$TABLEKIT_TEST_CONNECTION_STRING" \
    cargo run --quiet --example employee_photo

# The log data example reads the seed's window back and exits non-zero if it differs.
banner "cargo run --example queue_logs (embedded, then Azurite)"
env -u TABLEKIT_CONNECTION_STRING cargo run --quiet --example queue_logs
TABLEKIT_CONNECTION_STRING="$TABLEKIT_TEST_CONNECTION_STRING" \
    cargo run --quiet --example queue_logs
