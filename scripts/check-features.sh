#!/usr/bin/env bash
# Checks that tablekit compiles, without warnings, in each feature set a user
# may choose (the default; nothing; tables over HTTP only; the store file
# alone; one service alone; access policies and service settings alone; the
# table store in memory alone; the stores without a file; the optional
# transport and credentials), that each set's dependencies are what its
# features say (`cargo tree -e normal`: quick-xml only with `queue`, `blob` or
# `admin`, redb only with `durable`, tablekit-derive only with `derive`,
# reqwest only with `reqwest`, azure_core only with `entra`, the RustCrypto
# crates only with `encryption`), and prints how
# many crates each set carries (tablekit included).
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
    "--no-default-features --features admin"
    "--no-default-features --features embedded,queue,blob"
    "--no-default-features --features derive,entra"
    "--no-default-features --features derive,reqwest"
    "--no-default-features --features encryption"
    "--no-default-features --features derive,opentelemetry"
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

# The features a set turns on (the default ones unless it says otherwise).
features_of() {
    local set="$1" features="derive,embedded,durable,queue,blob,admin"
    if [[ "$set" == *--no-default-features* ]]; then
        features=""
    fi
    if [[ "$set" =~ --features[[:space:]]+([^[:space:]]+) ]]; then
        features="$features,${BASH_REMATCH[1]}"
    fi
    # `durable` implies `embedded`.
    [[ ",$features," == *,durable,* ]] && features="$features,embedded"
    echo ",$features,"
}

# Whether a set's normal dependencies hold `crate` exactly when one of the
# features (a regex of names) is on.
expect() {
    local set="$1" tree="$2" crate="$3" when="$4" on=0 has=0
    [[ "$(features_of "$set")" =~ ,($when), ]] && on=1
    grep -qx "$crate" <<<"$tree" && has=1
    if ((on != has)); then
        printf '  %s: %s is %s, but the features (%s) say it should %s\n' "${set:-(default features)}" \
            "$crate" "$( ((has)) && echo compiled || echo absent)" "$(features_of "$set")" \
            "$( ((on)) && echo be || echo not be)"
        failed=1
    fi
}

printf '\n==> crates per set (cargo tree -p tablekit -e normal, tablekit included)\n'
for set in "${SETS[@]}"; do
    # shellcheck disable=SC2086 # one word per flag
    crates=$(cargo tree -e normal --prefix none -p tablekit $set | sed -e 's/ (\*)//' | sort -u)
    printf '%4d  %s\n' "$(wc -l <<<"$crates")" "${set:-(default features)}"
    tree=$(cut -d' ' -f1 <<<"$crates")
    expect "$set" "$tree" quick-xml 'queue|blob|admin'
    expect "$set" "$tree" redb durable
    expect "$set" "$tree" tablekit-derive derive
    expect "$set" "$tree" reqwest reqwest
    expect "$set" "$tree" azure_core entra
    expect "$set" "$tree" rsa 'encryption|server'
    expect "$set" "$tree" aes encryption
done

if [[ $failed -ne 0 ]]; then
    echo "check-features: FAILED" >&2
    exit 1
fi
echo "check-features: ok"
