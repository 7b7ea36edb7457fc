#!/usr/bin/env bash
# tablekit next to a peer SDK (the Azure SDK for Rust's azure_data_tables 0.21,
# benches/peer) on the standard workload, against ONE Azurite on loopback:
#
#   scripts/bench-peer.sh            # ROUNDS=3 PEER_BENCH_N=10000 by default
#
# For each tokio runtime (current_thread, multi_thread) it runs tablekit's
# workload bench (typed entity, Azurite backend) and the peer alternately,
# ROUNDS times, the order rotated every round, and prints the median of each
# figure side by side: client CPU µs per request and per entity (getrusage of
# the client process only) and wall seconds. The JSON lines of every run are
# kept in $OUT (default: a temporary directory, printed at the end).
#
# tablekit runs twice per round, on its own hyper transport (`tablekit`) and
# on reqwest (`tablekit_reqwest`). With TABLEKIT_BASELINE_BIN set to a workload
# bench binary built from an older commit (for instance the last commit before
# a transport change: `git worktree add ../base <rev>`, then
# `cargo bench -p tablekit-benches --bench workload --no-run` there), it runs
# too, as `tablekit_base`, so "before" and "after" come from the same run.
#
# Needs what the tests need (bash, Node.js for Azurite and the table) and
# builds both in release mode (cargo bench profile for tablekit, --release
# for the peer, which has its own Cargo.lock and target directory).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${ROUNDS:-3}"
N="${PEER_BENCH_N:-10000}"
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tablekit-bench-peer.XXXXXX")}"
mkdir -p "$OUT"

log() { printf 'bench-peer.sh: %s\n' "$*" >&2; }

log "building tablekit's workload bench and the peer (release)"
cargo bench -p tablekit-benches --bench workload --no-run >&2
cargo build --release --manifest-path benches/peer/Cargo.toml >&2
PEER_BIN="$ROOT/benches/peer/target/release/tablekit-peer-bench"

export AZURITE_STATE_DIR="${AZURITE_STATE_DIR:-$OUT/azurite}"
eval "$(bash scripts/azurite.sh start)"
trap 'bash scripts/azurite.sh stop' EXIT

BASE_BIN="${TABLEKIT_BASELINE_BIN:-}"
SDKS=(tablekit tablekit_reqwest)
[[ -n "$BASE_BIN" ]] && SDKS+=(tablekit_base)

run_workload() { # sdk runtime round command...
    local sdk="$1" runtime="$2" round="$3"
    shift 3
    TABLEKIT_BENCH_BACKEND=azurite TABLEKIT_BENCH_ENTITY=typed TABLEKIT_BENCH_N="$N" \
        TABLEKIT_BENCH_RUNTIME="$runtime" "$@" 2>>"$OUT/stderr.log" |
        grep '^{' | sed "s/^{/{\"sdk\":\"$sdk\",\"runtime\":\"$runtime\",\"round\":$round,/" >>"$OUT/lines.jsonl"
}

run_tablekit() { # runtime round
    TABLEKIT_BENCH_TRANSPORT=hyper run_workload tablekit "$1" "$2" \
        cargo bench -q -p tablekit-benches --bench workload
    TABLEKIT_BENCH_TRANSPORT=reqwest run_workload tablekit_reqwest "$1" "$2" \
        cargo bench -q -p tablekit-benches --bench workload
    if [[ -n "$BASE_BIN" ]]; then
        run_workload tablekit_base "$1" "$2" "$BASE_BIN" --bench
    fi
}

run_peer() { # runtime round
    PEER_BENCH_N="$N" PEER_RUNTIME="$1" "$PEER_BIN" 2>>"$OUT/stderr.log" |
        grep '^{' | sed "s/^{/{\"sdk\":\"azure_data_tables\",\"runtime\":\"$1\",\"round\":$2,/" >>"$OUT/lines.jsonl"
}

: >"$OUT/lines.jsonl"
for runtime in current_thread multi_thread; do
    for round in $(seq 1 "$ROUNDS"); do
        if ((round % 2)); then
            log "$runtime round $round: tablekit, then the peer"
            run_tablekit "$runtime" "$round"
            run_peer "$runtime" "$round"
        else
            log "$runtime round $round: the peer, then tablekit"
            run_peer "$runtime" "$round"
            run_tablekit "$runtime" "$round"
        fi
    done
done

node - "$OUT/lines.jsonl" "$N" "$ROUNDS" "${SDKS[@]}" azure_data_tables <<'EOF'
const fs = require("fs");
const [file, n, rounds, ...sdks] = process.argv.slice(2);
const lines = fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map(JSON.parse);
const bad = lines.filter((l) => !l.ok);
const median = (xs) => {
  const s = xs.filter((x) => x !== null && x !== undefined).sort((a, b) => a - b);
  if (!s.length) return null;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (v, d) => (v === null ? "-" : v.toFixed(d));
const short = { tablekit: "tk", tablekit_reqwest: "tk-reqw", tablekit_base: "tk-base", azure_data_tables: "peer" };
console.log(`\nN = ${n}, medians of ${rounds} alternating rounds against one Azurite; client CPU only.`);
console.log("tk = tablekit on its hyper transport, tk-reqw = on reqwest, tk-base = TABLEKIT_BASELINE_BIN, peer = azure_data_tables 0.21");
console.log("W1, W2, W6, W7: us per request; W3, W4, W5: us per entity; wall in s.");
const pick = (runtime, sdk, id, key) =>
  median(lines.filter((l) => l.runtime === runtime && l.sdk === sdk && l.workload === id).map((l) => l[key]));
for (const runtime of ["current_thread", "multi_thread"]) {
  console.log(`\nruntime ${runtime}`);
  const head = ["id"];
  for (const s of sdks) head.push(`${short[s]} cpu`);
  for (const s of sdks) head.push(`${short[s]} wall`);
  console.log(head.map((h, i) => (i ? h.padStart(13) : h.padEnd(4))).join(" "));
  for (const id of ["W1", "W2", "W3", "W4", "W5", "W6", "W7"]) {
    const perEntity = ["W3", "W4", "W5"].includes(id);
    const key = perEntity ? "cpu_us_per_entity" : "cpu_us_per_request";
    const cpu = sdks.map((s) => fmt(pick(runtime, s, id, key), perEntity ? 2 : 1));
    const wall = sdks.map((s) => fmt(pick(runtime, s, id, "wall_s"), 3));
    console.log([id.padEnd(4), ...cpu.map((v) => v.padStart(13)), ...wall.map((v) => v.padStart(13))].join(" "));
  }
}
if (bad.length) {
  console.log(`\n${bad.length} workload line(s) failed their checks: see ${file}`);
  process.exitCode = 1;
}
EOF
log "JSON lines in $OUT/lines.jsonl"
