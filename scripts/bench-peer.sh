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

run_tablekit() { # runtime round
    TABLEKIT_BENCH_BACKEND=azurite TABLEKIT_BENCH_ENTITY=typed TABLEKIT_BENCH_N="$N" \
        TABLEKIT_BENCH_RUNTIME="$1" \
        cargo bench -q -p tablekit-benches --bench workload 2>>"$OUT/stderr.log" |
        grep '^{' | sed "s/^{/{\"sdk\":\"tablekit\",\"runtime\":\"$1\",\"round\":$2,/" >>"$OUT/lines.jsonl"
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

node - "$OUT/lines.jsonl" "$N" "$ROUNDS" <<'EOF'
const fs = require("fs");
const [file, n, rounds] = process.argv.slice(2);
const lines = fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map(JSON.parse);
const bad = lines.filter((l) => !l.ok);
const median = (xs) => {
  const s = xs.filter((x) => x !== null && x !== undefined).sort((a, b) => a - b);
  if (!s.length) return null;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (v, d) => (v === null ? "-" : v.toFixed(d));
console.log(`\nN = ${n}, medians of ${rounds} alternating rounds against one Azurite; client CPU only.`);
for (const runtime of ["current_thread", "multi_thread"]) {
  console.log(`\nruntime ${runtime}`);
  console.log(
    ["id", "tk us/req", "peer us/req", "tk us/ent", "peer us/ent", "tk wall s", "peer wall s"]
      .map((h, i) => (i ? h.padStart(12) : h.padEnd(4)))
      .join(" ")
  );
  for (const id of ["W1", "W2", "W3", "W4", "W5", "W6", "W7"]) {
    const pick = (sdk, key) =>
      median(lines.filter((l) => l.runtime === runtime && l.sdk === sdk && l.workload === id).map((l) => l[key]));
    const row = [
      pick("tablekit", "cpu_us_per_request"),
      pick("azure_data_tables", "cpu_us_per_request"),
      pick("tablekit", "cpu_us_per_entity"),
      pick("azure_data_tables", "cpu_us_per_entity"),
      pick("tablekit", "wall_s"),
      pick("azure_data_tables", "wall_s"),
    ];
    console.log(
      [id.padEnd(4), ...row.map((v, i) => fmt(v, i >= 4 ? 3 : 1).padStart(12))].join(" ")
    );
  }
}
if (bad.length) {
  console.log(`\n${bad.length} workload line(s) failed their checks: see ${file}`);
  process.exitCode = 1;
}
EOF
log "JSON lines in $OUT/lines.jsonl"
