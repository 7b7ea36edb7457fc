#!/usr/bin/env bash
# Checks that the crates meant for crates.io package, and what each package
# holds:
#
# * the workspace's publishable members are exactly tablekit-derive,
#   tablekit, tablekit-patterns and tablekit-cli (every other member, the
#   test, bench and example packages, says `publish = false`);
# * `cargo package` assembles the four (tablekit-derive first: the others
#   depend on it through a local registry cargo makes of the packages);
# * no package holds test data, snapshots, fuzz corpora, store files or key
#   material, and no test target that needs an unpublished crate.
#
# `--no-verify` by default: verifying compiles each package and its whole
# dependency tree again in a target dir of its own (over 3 minutes on this
# 2-core machine), which scripts/test.sh does not pay on every run.
# VERIFY=1 scripts/check-package.sh verifies too (before a release).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
TARGET="${CARGO_TARGET_DIR:-target}"

EXPECTED="tablekit tablekit-cli tablekit-derive tablekit-patterns"

# Members whose `publish` is not `false` ([] in cargo metadata).
publishable=$(cargo metadata --no-deps --format-version 1 --offline 2>/dev/null ||
    cargo metadata --no-deps --format-version 1)
publishable=$(node -e '
    const m = JSON.parse(require("fs").readFileSync(0, "utf8"));
    const members = new Set(m.workspace_members);
    console.log(m.packages
        .filter(p => members.has(p.id) && !(Array.isArray(p.publish) && p.publish.length === 0))
        .map(p => p.name).sort().join(" "));
' <<<"$publishable")
if [[ "$publishable" != "$EXPECTED" ]]; then
    echo "check-package: the publishable members are \"$publishable\", expected \"$EXPECTED\"" >&2
    echo "  (a test, bench or example package needs publish = false; a new crate, a line here)" >&2
    exit 1
fi

PACKAGES=()
for p in $EXPECTED; do PACKAGES+=(-p "$p"); done
VERIFY_FLAG=(--no-verify)
[[ "${VERIFY:-0}" == 1 ]] && VERIFY_FLAG=()
# Offline when the local registry cache has what the packages' lockfiles
# need; --allow-dirty: the check is of the files, not of the VCS state.
if ! cargo package --offline --allow-dirty "${VERIFY_FLAG[@]}" "${PACKAGES[@]}" >"$TARGET/check-package.log" 2>&1; then
    if grep -q "offline" "$TARGET/check-package.log"; then
        cargo package --allow-dirty "${VERIFY_FLAG[@]}" "${PACKAGES[@]}" >"$TARGET/check-package.log" 2>&1 ||
            { cat "$TARGET/check-package.log" >&2; exit 1; }
    else
        cat "$TARGET/check-package.log" >&2
        exit 1
    fi
fi
grep -E '^\s*(Packaged|Verifying|warning)' "$TARGET/check-package.log" || true

# What no published crate carries: test data and snapshots, fuzz inputs,
# store files, keys and certificates, integration tests.
FORBIDDEN='(^|/)(tests|testdata|test-data|snapshots|fuzz|corpus|artifacts)/|\.(snap|der|pem|key|redb|seal|jsonl|profraw)$'
failed=0
version=$(cargo metadata --no-deps --format-version 1 --offline | node -e '
    const m = JSON.parse(require("fs").readFileSync(0, "utf8"));
    console.log(m.packages.find(p => p.name === "tablekit").version);')
for p in $EXPECTED; do
    crate="$TARGET/package/$p-$version.crate"
    files=$(tar tzf "$crate" | sed "s|^$p-$version/||")
    if bad=$(grep -E "$FORBIDDEN" <<<"$files"); then
        echo "check-package: $p would publish files that stay in the repository:" >&2
        sed 's/^/    /' <<<"$bad" >&2
        failed=1
    fi
    printf '%-18s %3d files, %s\n' "$p" "$(wc -l <<<"$files")" "$(du -h "$crate" | cut -f1)"
done
if ((failed)); then
    exit 1
fi
echo "check-package: ok${VERIFY_FLAG:+ (not verified: VERIFY=1 builds each package)}"
