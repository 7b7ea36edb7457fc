#!/usr/bin/env bash
# tablekit next to a peer SDK (the Azure SDK for Rust's azure_data_tables 0.21,
# benches/peer) and next to the floors (benches/benches/floor.rs) on the
# standard workload, against ONE Azurite on loopback (issue 23):
#
#   scripts/bench-peer.sh            # ROUNDS=5 PEER_BENCH_N=5000 by default (< 10 min)
#
# Every round runs, for each tokio runtime (current_thread, and multi_thread
# driven from the main thread as under #[tokio::main]), in an order rotated
# every round:
#   tk          tablekit's workload bench (typed entity, its hyper transport)
#   peer-pool   azure_data_tables with a keep-alive reqwest::Client given
#               through TransportOptions (what a user who benchmarks does)
#   peer-dflt   azure_data_tables on its default transport (no idle
#               connections kept: a new TCP connection per request)
#   floor       a bare hyper conn::http1 loop polled inline sending the same
#               requests (Shared Key signed), bodies by serde_json from plain
#               structs, answers decoded by serde_json into a plain
#               #[derive(Deserialize)] struct; and, in memory, the bare
#               serde_json encoder/decoder next to tablekit's codec (enc, dec);
#               and, in one process, K point reads, inserts and upsert-merges
#               by tablekit alternating with the bare loop (get, insert, merge).
# Figures are client CPU (getrusage of the client process only). Ratios are
# taken inside each round (tk / floor of the same runtime; tk / the cheapest
# peer run of the round, over both peer transports and both runtimes), then
# the median over the rounds is printed, with the load average of the rounds.
#
# Settings: ROUNDS (>= 5 for the note), PEER_BENCH_N (N of every run),
# TK_REQWEST=1 (tablekit on reqwest too, as tk-reqw), TABLEKIT_BASELINE_BIN (a
# workload bench binary built from an older commit, run as tk-base, so "before"
# and "after" come from one run: `git worktree add ../base <rev>`, then
# `cargo bench -p tablekit-benches --bench workload --no-run` there). The JSON
# lines of every run are kept in $OUT (default: a temporary directory).
#
# Needs what the tests need (bash, Node.js for Azurite and the table); builds
# the two benches (cargo bench profile) and the peer (--release, its own
# Cargo.lock and target directory).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${ROUNDS:-5}"
N="${PEER_BENCH_N:-5000}"
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tablekit-bench-peer.XXXXXX")}"
mkdir -p "$OUT"

log() { printf 'bench-peer.sh: %s\n' "$*" >&2; }

# The executable cargo built for a bench target.
bench_bin() { # name
    cargo bench -p tablekit-benches --bench "$1" --no-run 2>&1 |
        sed -n "s/.*Executable benches\/$1\.rs (\(.*\))$/\1/p" | tail -1
}

log "building tablekit's workload and floor benches and the peer (release)"
cargo bench -p tablekit-benches --bench workload --bench floor --no-run >&2
WORKLOAD_BIN="$ROOT/$(bench_bin workload)"
FLOOR_BIN="$ROOT/$(bench_bin floor)"
cargo build --release --manifest-path benches/peer/Cargo.toml >&2
PEER_BIN="$ROOT/benches/peer/target/release/tablekit-peer-bench"
for b in "$WORKLOAD_BIN" "$FLOOR_BIN" "$PEER_BIN"; do
    [[ -x "$b" ]] || { log "no executable at $b"; exit 1; }
done

export AZURITE_STATE_DIR="${AZURITE_STATE_DIR:-$OUT/azurite}"
eval "$(bash scripts/azurite.sh start)"
trap 'bash scripts/azurite.sh stop' EXIT

BASE_BIN="${TABLEKIT_BASELINE_BIN:-}"
VARIANTS=(tk peer_pooled peer_default floor)
[[ "${TK_REQWEST:-0}" == 1 ]] && VARIANTS+=(tk_reqwest)
[[ -n "$BASE_BIN" ]] && VARIANTS+=(tk_base)

tag() { # sdk runtime round: prefixes each JSON line
    grep '^{' | sed "s/^{/{\"sdk\":\"$1\",\"runtime\":\"$2\",\"round\":$3,/" >>"$OUT/lines.jsonl"
}

run() { # variant runtime round
    local v="$1" rt="$2" r="$3"
    case "$v" in
    tk | tk_reqwest | tk_base)
        local transport=hyper bin="$WORKLOAD_BIN"
        [[ "$v" == tk_reqwest ]] && transport=reqwest
        [[ "$v" == tk_base ]] && bin="$BASE_BIN"
        TABLEKIT_BENCH_BACKEND=azurite TABLEKIT_BENCH_ENTITY=typed TABLEKIT_BENCH_N="$N" \
            TABLEKIT_BENCH_RUNTIME="$rt" TABLEKIT_BENCH_TRANSPORT="$transport" \
            "$bin" --bench 2>>"$OUT/stderr.log" | tag "$v" "$rt" "$r"
        ;;
    peer_pooled | peer_default)
        PEER_BENCH_N="$N" PEER_RUNTIME="$rt" PEER_TRANSPORT="${v#peer_}" \
            "$PEER_BIN" 2>>"$OUT/stderr.log" | tag "$v" "$rt" "$r"
        ;;
    floor)
        TABLEKIT_BENCH_N="$N" TABLEKIT_BENCH_RUNTIME="$rt" \
            "$FLOOR_BIN" --bench 2>>"$OUT/stderr.log" | tag "$v" "$rt" "$r"
        ;;
    esac
}

: >"$OUT/lines.jsonl"
: >"$OUT/load.txt"
start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
    read -r l1 _ </proc/loadavg
    echo "$l1" >>"$OUT/load.txt"
    for runtime in current_thread multi_thread; do
        # Rotate the order every round (and between the runtimes).
        k=$(((round * 2 + ${#runtime}) % ${#VARIANTS[@]}))
        order=("${VARIANTS[@]:k}" "${VARIANTS[@]:0:k}")
        log "round $round/$ROUNDS, $runtime: ${order[*]} (load $l1)"
        for v in "${order[@]}"; do
            run "$v" "$runtime" "$round"
        done
    done
done
read -r l1 _ </proc/loadavg
echo "$l1" >>"$OUT/load.txt"
log "measured in $(($(date +%s) - start)) s"

node - "$OUT/lines.jsonl" "$OUT/load.txt" "$N" "$ROUNDS" "$(nproc)" "${VARIANTS[@]}" <<'EOF'
const fs = require("fs");
const [file, loadFile, n, rounds, cpus, ...variants] = process.argv.slice(2);
const lines = fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map(JSON.parse);
const loads = fs.readFileSync(loadFile, "utf8").split("\n").filter(Boolean).map(Number);
const median = (xs) => {
  const s = xs.filter((x) => x !== null && x !== undefined && !Number.isNaN(x)).sort((a, b) => a - b);
  if (!s.length) return null;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (v, d) => (v === null || v === undefined ? "-" : v.toFixed(d));
const short = { tk: "tk", tk_reqwest: "tk-reqw", tk_base: "tk-base", peer_pooled: "peer-pool", peer_default: "peer-dflt", floor: "floor" };
const perEntity = (id) => ["W3", "W4", "W5", "enc", "dec"].includes(id);
const value = (l) => (perEntity(l.workload) ? l.cpu_us_per_entity : l.cpu_us_per_request);
// The figure of one run: sdk, runtime, round, workload (the tablekit lines of
// the codec figures come from the floor run, as backend "tablekit").
const fig = (sdk, runtime, round, id, backend) => {
  const l = lines.find((l) => l.sdk === sdk && l.runtime === runtime && l.round === round && l.workload === id && (!backend || l.backend === backend));
  return l ? value(l) : null;
};
const figs = (sdk, runtime, round, id, backend) => {
  const ls = lines.filter((l) => l.sdk === sdk && l.runtime === runtime && l.round === round && l.workload === id && (!backend || l.backend === backend));
  return median(ls.map(value));
};
const R = [...new Set(lines.map((l) => l.round))].sort((a, b) => a - b);
const runtimes = ["current_thread", "multi_thread"];
const peers = variants.filter((v) => v.startsWith("peer_"));
const cheapestPeer = (round, id) => {
  const all = [];
  for (const p of peers) for (const rt of runtimes) all.push(fig(p, rt, round, id));
  const s = all.filter((x) => x !== null);
  return s.length ? Math.min(...s) : null;
};
const ratio = (a, b) => (a === null || b === null || b === 0 ? null : a / b);
console.log(`\nN = ${n}; ${R.length} rounds (order rotated every round) against one Azurite on loopback; ${cpus} CPUs.`);
console.log(`load average (1 min) at the start of each round and at the end: ${loads.map((l) => l.toFixed(2)).join(" ")}`);
console.log("Client CPU (getrusage, the client process only), medians over the rounds.");
console.log("W1, W2, W6, W7: us per request; W3, W4, W5: us per entity. tk = tablekit (typed entity, hyper transport);");
console.log("peer-pool / peer-dflt = azure_data_tables 0.21 with a keep-alive reqwest client / its default transport;");
console.log("floor = bare hyper conn::http1 + serde_json plain structs (benches/benches/floor.rs).");
console.log("tk/floor and tk/peer* are medians of the ratios inside each round; peer* = the cheapest peer run of");
console.log("the round (both transports, both runtimes). Targets: tk/floor <= 1.15 (W2, W6, W7), <= 1.2 (W3, W4);");
console.log("tk/peer* <= 0.5. peer*/floor: the cheapest peer over this runtime's floor; where it is under 2, tk/peer* <= 0.5");
console.log("would need tablekit under half the floor, which no client reaches.");
for (const runtime of runtimes) {
  console.log(`\nruntime ${runtime}`);
  const cols = variants.map((v) => short[v]).concat(["tk/floor", "tk/peer*", "peer*/floor"]);
  console.log(["id  ", ...cols.map((c) => c.padStart(10))].join(" "));
  for (const id of ["W1", "W2", "W3", "W4", "W5", "W6", "W7"]) {
    const d = perEntity(id) ? 2 : 1;
    const cells = variants.map((v) => fmt(median(R.map((r) => fig(v, runtime, r, id))), d));
    const vsFloor = median(R.map((r) => ratio(fig("tk", runtime, r, id), fig("floor", runtime, r, id))));
    const vsPeer = median(R.map((r) => ratio(fig("tk", runtime, r, id), cheapestPeer(r, id))));
    const peerVsFloor = median(R.map((r) => ratio(cheapestPeer(r, id), fig("floor", runtime, r, id))));
    console.log([id.padEnd(4), ...cells.map((c) => c.padStart(10)), fmt(vsFloor, 2).padStart(10), fmt(vsPeer, 2).padStart(10), fmt(peerVsFloor, 2).padStart(11)].join(" "));
  }
  console.log("codec alone, in memory, us per entity (tablekit's codec vs bare serde_json, same entities and page):");
  for (const [id, what] of [["enc", "encode one entity"], ["dec", "decode a page   "]]) {
    const tk = median(R.map((r) => figs("floor", runtime, r, id, "tablekit")));
    const fl = median(R.map((r) => figs("floor", runtime, r, id, "floor")));
    const q = median(R.map((r) => ratio(figs("floor", runtime, r, id, "tablekit"), figs("floor", runtime, r, id, "floor"))));
    console.log(`  ${id} (${what}): tk ${fmt(tk, 3)}, floor ${fmt(fl, 3)}, tk/floor ${fmt(q, 2)}`);
  }
  console.log("one process, tablekit and the bare loop alternating on one table, us per request (floor.rs pair):");
  for (const id of ["get", "insert", "merge"]) {
    const tk = median(R.map((r) => figs("floor", runtime, r, id, "tablekit")));
    const fl = median(R.map((r) => figs("floor", runtime, r, id, "floor")));
    const q = median(R.map((r) => ratio(figs("floor", runtime, r, id, "tablekit"), figs("floor", runtime, r, id, "floor"))));
    console.log(`  ${id.padEnd(6)}: tk ${fmt(tk, 1)}, floor ${fmt(fl, 1)}, tk/floor ${fmt(q, 2)}`);
  }
}
const bad = lines.filter((l) => !l.ok);
if (bad.length) {
  console.log(`\n${bad.length} line(s) failed their checks: see ${file}`);
  process.exitCode = 1;
}
EOF
log "JSON lines in $OUT/lines.jsonl"
