#!/usr/bin/env bash
# Checks that tablekit compiles, without warnings, in each feature set a user
# may choose (the default; nothing; tables over HTTP only; the store file
# alone; one service alone; the table store in memory alone; the stores
# without a file), and prints how many crates the default and the
# tables-only builds carry.
#
# `cargo check` of the library only: no tests, no examples. About 4 minutes
# on a cold 2-core machine (each set compiles tablekit again; the dependencies
# are shared), under a minute when only tablekit changed. Not part of
# scripts/test.sh, which builds the default set.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

SETS=(
    ""
    "--no-default-features"
    "--no-default-features --features derive"
    "--no-default-features --features durable"
    "--no-default-features --features queue"
    "--no-default-features --features blob"
    "--no-default-features --features embedded"
    "--no-default-features --features embedded,queue,blob"
    "--no-default-features --features derive,entra"
)

failed=0
for set in "${SETS[@]}"; do
    start=$SECONDS
    printf '==> cargo check -p tablekit %s\n' "${set:-(default features)}"
    # shellcheck disable=SC2086 # one word per flag
    if ! out=$(cargo check -p tablekit --lib $set 2>&1); then
        printf '%s\n' "$out"
        failed=1
    elif grep -q '^warning' <<<"$out"; then
        # A warning here is dead code in this feature set: gate it too.
        printf '%s\n' "$out"
        failed=1
    fi
    printf '    %d s\n' $((SECONDS - start))
done

crates() {
    # shellcheck disable=SC2086
    cargo tree -e normal --prefix none -p tablekit $1 | sed 's/ (\*)//' | sort -u | wc -l
}
printf '\ncrates (tablekit included): default %s, tables only (derive) %s, default + entra %s\n' \
    "$(crates "")" "$(crates "--no-default-features --features derive")" \
    "$(crates "--features entra")"

if [[ $failed -ne 0 ]]; then
    echo "check-features: FAILED" >&2
    exit 1
fi
echo "check-features: ok"
