#!/usr/bin/env bash
# Compiles and runs every ```rust block of README.md as a user pastes it: the
# block's text, unchanged (rustdoc's hidden `# ` lines would be pasted too, so
# there must be none), as a program of a new crate whose [dependencies] are
# the README's Install block, with tablekit taken from this checkout.
#
# * Each block is a binary of one crate (one build); each runs with
#   TABLEKIT_CONNECTION_STRING unset (so on the embedded store), `no_run` ones
#   included (`no_run` is for rustdoc, which runs the README's blocks as
#   doctests with the environment of the test suite). A block with tests
#   (`#[cfg(test)]`) also runs them (`cargo test`). A warning from a block's
#   own code fails it too.
# * "A typed example" also builds in the tables-only set the README offers
#   (`default-features = false, features = ["derive"]`), where
#   `Storage::from_env` has no store to fall back to: run with the variable
#   unset it must fail saying which feature is missing, and, when
#   TABLEKIT_TEST_CONNECTION_STRING names an account (scripts/test.sh runs
#   this after starting Azurite), it runs against that account.
#
# The crates are written under the target dir and share it (CARGO_TARGET_DIR,
# else target/) with the workspace's profile and Cargo.lock, so whatever the
# workspace's builds compiled with the same features is reused. Dependencies
# are resolved offline when the local registry cache has them all, else
# online (chrono's default features, as a new crate gets them, pull in
# iana-time-zone, which the workspace does not use).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$TARGET"
TARGET=$(cd "$TARGET" && pwd)
export CARGO_TARGET_DIR="$TARGET"
WORK="$TARGET/readme-blocks"
# The crates (app/, tables-only/) stay from one run to the next, and a file
# is rewritten only when its text changed, so that cargo rebuilds only what
# did; the rest is made anew.
mkdir -p "$WORK"
find "$WORK" -mindepth 1 -maxdepth 1 ! -name app ! -name tables-only -exec rm -rf {} +

# Copies `$1` to `$2` unless `$2` holds the same text already.
put() {
    cmp -s "$1" "$2" || cp "$1" "$2"
}

# The README's Install block, tablekit taken from this checkout with the
# features `$1` names ("" for the default ones).
install_dependencies() {
    awk '/^## Install/ { inst = 1 } inst && /^```toml/ { on = 1; next } on && /^```/ { exit } on' README.md |
        sed -e 's/[[:space:]]*#.*$//' -e '/^[[:space:]]*$/d' -e '/^\[/d' |
        while IFS= read -r line; do
            if [[ "$line" =~ ^tablekit[[:space:]]*= ]]; then
                printf 'tablekit = { path = "%s/tablekit"%s }\n' "$ROOT" "$1"
            else
                printf '%s\n' "$line"
            fi
        done
}

# Writes the crate `$1` (dependencies: install_dependencies "$2"), one binary
# per block file in $WORK/blocks named in the rest of the arguments.
write_crate() {
    local dir="$WORK/$1" features="$2"
    shift 2
    mkdir -p "$dir/src"
    put Cargo.lock "$dir/Cargo.lock"
    # Blocks the README no longer has.
    for old in "$dir"/src/*.rs; do
        [[ -e "$old" ]] || continue
        [[ " $* " == *" $(basename "$old" .rs) "* ]] || rm -f "$old"
    done
    {
        printf '[package]\nname = "%s"\nversion = "0.0.0"\nedition = "2024"\npublish = false\nautobins = false\n\n' "$1"
        for block in "$@"; do
            put "$WORK/blocks/$block.rs" "$dir/src/$block.rs"
            printf '[[bin]]\nname = "%s"\npath = "src/%s.rs"\n\n' "$block" "$block"
        done
        printf '[dependencies]\n'
        install_dependencies "$features"
        # The workspace's dev profile (Cargo.toml), tablekit's crates as
        # members there, so that its builds' artifacts are reused.
        printf '\n[profile.dev]\ndebug = "line-tables-only"\n\n[profile.dev.package."*"]\ndebug = false\n\n'
        printf '[profile.dev.package.tablekit]\ndebug = "line-tables-only"\n\n'
        printf '[profile.dev.package.tablekit-derive]\ndebug = "line-tables-only"\n\n'
        printf '[workspace]\n'
    } >"$WORK/$1.Cargo.toml"
    put "$WORK/$1.Cargo.toml" "$dir/Cargo.toml"
}

# The blocks: block_NN.rs, their fence's info string in block_NN.info, and
# the block under "## A typed example" named in $WORK/typed.
mkdir -p "$WORK/blocks"
awk -v out="$WORK/blocks" '
    /^## / { heading = $0 }
    !inblock && /^```rust/ {
        inblock = 1; n++
        name = sprintf("block_%02d", n)
        print substr($0, 4) > (out "/" name ".info")
        if (heading == "## A typed example" && !typed) { typed = name; print name > (out "/../typed") }
        printf "" > (out "/" name ".rs")
        next
    }
    inblock && /^```/ { inblock = 0; next }
    inblock { print >> (out "/" name ".rs") }
' README.md
mapfile -t BLOCKS < <(cd "$WORK/blocks" && ls block_*.rs | sed 's/\.rs$//')
if ((${#BLOCKS[@]} == 0)); then
    echo "readme-blocks: no \`\`\`rust block in README.md" >&2
    exit 1
fi
TYPED=$(cat "$WORK/typed" 2>/dev/null || true)
if [[ -z "$TYPED" ]]; then
    echo "readme-blocks: no Rust block under '## A typed example' in README.md" >&2
    exit 1
fi

failed=0
fail() {
    echo "FAIL $*"
    failed=$((failed + 1))
}

for block in "${BLOCKS[@]}"; do
    if grep -nE '^#( |$)' "$WORK/blocks/$block.rs" >"$WORK/$block.hidden"; then
        fail "$block: rustdoc's hidden lines, pasted as text: $(head -1 "$WORK/$block.hidden")"
    fi
done

write_crate app "" "${BLOCKS[@]}"
# (Its binary has a name of its own: both crates build into one target dir.)
TABLES_ONLY=tables_only_$TYPED
cp "$WORK/blocks/$TYPED.rs" "$WORK/blocks/$TABLES_ONLY.rs"
write_crate tables-only ', default-features = false, features = ["derive"]' "$TABLES_ONLY"

# Offline when every crate the two need is in the local registry cache.
OFFLINE=(--offline)
for dir in app tables-only; do
    if ! (cd "$WORK/$dir" && cargo fetch --offline >/dev/null 2>&1); then
        echo "(resolving $dir online: its dependencies are not all in the local registry cache)"
        OFFLINE=()
        (cd "$WORK/$dir" && cargo fetch --quiet)
    fi
done

# One build per crate; a block that does not compile names itself in the
# compiler's messages (--keep-going builds the others).
build() {
    local dir="$1" log="$WORK/$1.build.log"
    shift
    (cd "$WORK/$dir" && cargo build "${OFFLINE[@]}" --keep-going --message-format short "$@") >"$log" 2>&1 || true
}
# (A block's binary is there after the build only if it built this time:
# cargo links again from what it kept when nothing changed.)
rm -f "${BLOCKS[@]/#/$TARGET/debug/}" "$TARGET/debug/$TABLES_ONLY"
build app --bins
build tables-only --bins
for block in "${BLOCKS[@]}"; do
    if [[ ! -x "$TARGET/debug/$block" ]] || grep -q "^src/$block\.rs:.*\(error\|warning\)" "$WORK/app.build.log"; then
        fail "$block: does not build as pasted (default features):"
        grep "^src/$block\.rs:\|^error" "$WORK/app.build.log" | sed 's/^/    /' | head -20
    fi
done
for block in "${BLOCKS[@]}"; do
    [[ -x "$TARGET/debug/$block" ]] || continue
    if ! (cd "$WORK" && env -u TABLEKIT_CONNECTION_STRING timeout 120 "$TARGET/debug/$block") >"$WORK/$block.run.log" 2>&1; then
        fail "$block: builds, but its run failed:"
        tail -5 "$WORK/$block.run.log" | sed 's/^/    /'
        continue
    fi
    if grep -qE '#\[(cfg\(test\)|test|tokio::test)' "$WORK/blocks/$block.rs"; then
        if ! (cd "$WORK/app" && env -u TABLEKIT_CONNECTION_STRING timeout 300 \
            cargo test "${OFFLINE[@]}" --quiet --bin "$block") >"$WORK/$block.test.log" 2>&1; then
            fail "$block: its tests failed (cargo test):"
            tail -20 "$WORK/$block.test.log" | sed 's/^/    /'
            continue
        fi
    fi
    echo "ok   $block ($(cat "$WORK/blocks/$block.info"))"
done

if [[ ! -x "$TARGET/debug/$TABLES_ONLY" ]] || grep -q "^src/$TABLES_ONLY\.rs:.*\(error\|warning\)" "$WORK/tables-only.build.log"; then
    fail "$TYPED (A typed example): does not build with features = [\"derive\"] only:"
    grep "^src/\|^error" "$WORK/tables-only.build.log" | sed 's/^/    /' | head -20
else
    # No connection string and no embedded store: an error that says so.
    if env -u TABLEKIT_CONNECTION_STRING timeout 60 "$TARGET/debug/$TABLES_ONLY" >"$WORK/tables-only.run.log" 2>&1; then
        fail "$TYPED (A typed example), tables only: ran without a connection string or a store to fall back to"
    elif ! grep -q 'feature `embedded`' "$WORK/tables-only.run.log"; then
        fail "$TYPED (A typed example), tables only: its error does not name the feature it lacks:"
        tail -3 "$WORK/tables-only.run.log" | sed 's/^/    /'
    else
        echo "ok   $TYPED, tables only, no connection string: $(tail -1 "$WORK/tables-only.run.log")"
    fi
    if [[ -n "${TABLEKIT_TEST_CONNECTION_STRING:-}" ]]; then
        if TABLEKIT_CONNECTION_STRING="$TABLEKIT_TEST_CONNECTION_STRING" timeout 120 "$TARGET/debug/$TABLES_ONLY" >"$WORK/tables-only.http.log" 2>&1; then
            echo "ok   $TYPED, tables only, on TABLEKIT_TEST_CONNECTION_STRING's account"
        else
            fail "$TYPED (A typed example), tables only, on TABLEKIT_TEST_CONNECTION_STRING's account:"
            tail -5 "$WORK/tables-only.http.log" | sed 's/^/    /'
        fi
    fi
fi

if ((failed)); then
    echo "readme-blocks: $failed failed (work files in $WORK)" >&2
    exit 1
fi
echo "readme-blocks: ${#BLOCKS[@]} blocks ok"
