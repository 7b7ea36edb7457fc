#!/usr/bin/env bash
# tablekit's public API as its documentation shows it (all features, as
# docs.rs builds it), one line per item, sorted: every item (struct, enum,
# trait, function, type, constant, macro, derive, module), every member of
# one (inherent method, field, variant and variant field, trait method,
# associated type or constant) and every trait implementation a public type
# declares (not the auto and blanket ones, which the compiler derives).
# `#[doc(hidden)]` items are not in it: they are not part of the API.
#
#   scripts/public-api.sh          compares with tablekit/public-api.txt and
#                                  fails, with the difference, if it changed
#   scripts/public-api.sh --bless  rewrites tablekit/public-api.txt
#   scripts/public-api.sh --list   prints the list and the counts
#
# A change to the public surface is then a change to that file, seen in
# review: an item made public by accident shows up as a new line.
#
# It reads the HTML of `cargo doc -p tablekit --all-features --no-deps` (stable
# rustdoc; about 30 s once the dependencies are built), through the page ids
# rustdoc gives items and members. Another rustdoc version may spell a few of
# them differently: then the difference is only that, and --bless takes it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# One order of the lines, whatever the locale.
export LC_ALL=C

SNAPSHOT=tablekit/public-api.txt
mode="${1:-check}"
case "$mode" in
check | --bless | --list) ;;
*)
    echo "usage: scripts/public-api.sh [--bless | --list]" >&2
    exit 2
    ;;
esac

# Built with warnings as errors: a broken intra-doc link fails here, before
# the list is read.
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --quiet -p tablekit --all-features --no-deps
DOC="${CARGO_TARGET_DIR:-target}/doc/tablekit"

# `filter/struct.Column.html` -> `tablekit::filter::Column`.
item_path() {
    local page="$1" dir name
    dir="$(dirname "$page")"
    name="$(basename "$page" .html)"
    name="${name#*.}"
    if [[ "$dir" == . ]]; then
        echo "tablekit::$name"
    else
        echo "tablekit::${dir//\//::}::$name"
    fi
}

list() {
    local pages page kind path
    # The item pages all.html links to (it lists every item but the modules).
    pages="$(grep -o '<li><a href="[^"#]*\.html"' "$DOC/all.html" | sed 's/^<li><a href="//; s/"$//' | sort -u)"
    # The modules: every directory of an item, and its parents.
    while read -r page; do
        local dir
        dir="$(dirname "$page")"
        while [[ "$dir" != . ]]; do
            echo "module tablekit::${dir//\//::}"
            dir="$(dirname "$dir")"
        done
    done <<<"$pages" | sort -u
    while read -r page; do
        kind="$(basename "$page")"
        kind="${kind%%.*}"
        path="$(item_path "$page")"
        echo "$kind $path"
        # Members: everything before the trait implementations belongs to
        # the item itself; the trait implementations' own headings follow.
        awk '
            /id="(synthetic-implementations|blanket-implementations|implementors|foreign-impls|dyn-compatibility|object-safety)"/ { exit }
            /id="trait-implementations"/ { traits = 1 }
            { print traits ? "T " $0 : "M " $0 }
        ' "$DOC/$page" |
            grep -oE '^[MT] |id="(method|tymethod|structfield|variant|associatedtype|associatedconstant|impl)[.-][^"]*"' |
            awk -v path="$path" '
                /^M $/ { section = "M"; next }
                /^T $/ { section = "T"; next }
                {
                    id = substr($0, 5, length($0) - 5)
                    if (section == "M" && id !~ /^impl-/) {
                        kind = id; sub(/\..*/, "", kind)
                        member = substr(id, length(kind) + 2)
                        gsub(/\.fields?\./, "::", member)
                        if (member ~ /\.fields$/) next
                        print kind " " path "::" member
                    } else if (section == "T" && id ~ /^impl-/) {
                        # `impl-From%3CDynColumn%3Cbool%3E%3E-for-Filter%3CDynamicEntity%3E`
                        # -> `From<DynColumn<bool>> for Filter<DynamicEntity>`.
                        name = substr(id, 6)
                        sub(/-[0-9]+$/, "", name)
                        sub(/-for-/, " for ", name)
                        gsub(/\+/, " ", name)
                        gsub(/%3C/, "<", name); gsub(/%3E/, ">", name)
                        gsub(/%5B/, "[", name); gsub(/%5D/, "]", name)
                        gsub(/%28/, "(", name); gsub(/%29/, ")", name)
                        gsub(/%2C/, ",", name); gsub(/%3B/, ";", name)
                        gsub(/%3D/, "=", name); gsub(/%3A/, ":", name)
                        gsub(/%27/, "\047", name); gsub(/%20/, " ", name)
                        gsub(/%26/, "\\&", name)
                        print "impl " path ": " name
                    }
                }
            '
    done <<<"$pages"
}

LIST="$(list | sort -u)"

case "$mode" in
--bless)
    printf '%s\n' "$LIST" >"$SNAPSHOT"
    echo "public-api.sh: wrote $SNAPSHOT ($(wc -l <"$SNAPSHOT") lines)"
    ;;
--list)
    printf '%s\n' "$LIST"
    printf '%s\n' "$LIST" | awk '{ n[$1]++; t++ } END { for (k in n) printf "%6d %s\n", n[k], k; printf "%6d total\n", t }' | sort -k2 >&2
    ;;
check)
    if ! diff -u "$SNAPSHOT" <(printf '%s\n' "$LIST"); then
        echo "public-api.sh: tablekit's public API differs from $SNAPSHOT (above: - gone, + new)." >&2
        echo "If the change is meant, run scripts/public-api.sh --bless and commit the file." >&2
        exit 1
    fi
    echo "public-api.sh: the public API is as $SNAPSHOT says ($(wc -l <"$SNAPSHOT") lines)"
    ;;
esac
