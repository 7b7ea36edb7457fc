#!/usr/bin/env bash
# Start/stop a throwaway Azurite (Azure Storage emulator) for tablekit's tests.
#
#   scripts/azurite.sh start   # install if needed, start on free loopback ports,
#                              # print `export ...` lines (eval them)
#   scripts/azurite.sh stop    # stop the recorded process (idempotent)
#   scripts/azurite.sh env     # re-print the export lines of a running instance
#
# State (pid, ports, log, env file, scratch cwd) lives in $AZURITE_STATE_DIR,
# default: ${TMPDIR:-/tmp}/tablekit-azurite-<uid>-<hash of repo path>.
# Only the export lines go to stdout; everything else goes to stderr.
#
# Needs only bash, Node.js >= 20 and npm (what the README lists): the readiness
# probe and the port picking run in Node, and stopping uses the recorded PID.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AZ_DIR="$ROOT/tools/azurite"
AZ_JS="$AZ_DIR/node_modules/azurite/dist/src/azurite.js"

default_state_dir() {
    local key
    key="$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)"
    printf '%s/tablekit-azurite-%s-%s' "${TMPDIR:-/tmp}" "$(id -u)" "$key"
}
STATE="${AZURITE_STATE_DIR:-$(default_state_dir)}"
PID_FILE="$STATE/pid"
ENV_FILE="$STATE/env"
LOG_FILE="$STATE/azurite.log"
WORK_DIR="$STATE/work"

START_TIMEOUT="${AZURITE_START_TIMEOUT:-60}" # seconds to wait for the table port
STOP_TIMEOUT=10                               # seconds before SIGKILL
ACCOUNT=devstoreaccount1
# Well-known Azurite/emulator development key (see node_modules/azurite/README.md).
ACCOUNT_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

log() { printf 'azurite.sh: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# True if $1 is a live process running our azurite.js. Where /proc exists the
# command line is checked too (guards against PID reuse); elsewhere the PID
# file, which only this script writes, is trusted.
is_our_azurite() {
    local pid="$1" args
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/cmdline" ]]; then
        args="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
        [[ "$args" == *azurite.js* ]]
    fi
}

recorded_pid() {
    if [[ -f "$PID_FILE" ]]; then cat "$PID_FILE" 2>/dev/null || true; fi
}

# Azurite 3.35 needs Node.js 20 or newer; say so before npm or node fail obscurely.
check_node() {
    command -v node >/dev/null 2>&1 ||
        die "node is not installed: Azurite needs Node.js >= 20 with npm (https://nodejs.org, or your package manager)"
    local version
    version="$(node -p 'process.versions.node' 2>/dev/null || echo unknown)"
    node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2>/dev/null ||
        die "Node.js $version is too old: Azurite needs Node.js >= 20"
}

ensure_installed() {
    check_node
    if [[ ! -f "$AZ_JS" ]]; then
        command -v npm >/dev/null 2>&1 || die "npm is not installed"
        log "installing Azurite (npm ci in tools/azurite)..."
        (cd "$AZ_DIR" && npm ci --no-audit --no-fund --loglevel=error) >&2 ||
            die "npm ci failed in $AZ_DIR"
        [[ -f "$AZ_JS" ]] || die "npm ci succeeded but $AZ_JS is missing"
    fi
}

# Print three distinct free loopback ports (bound together on port 0, then released).
free_ports() {
    node -e '
        const net = require("net");
        const servers = [0, 1, 2].map(() => net.createServer());
        let pending = servers.length;
        for (const s of servers) {
            s.listen(0, "127.0.0.1", () => {
                if (--pending === 0) {
                    console.log(servers.map((x) => x.address().port).join(" "));
                    servers.forEach((x) => x.close());
                }
            });
        }'
}

# Prints an HTTP status code, or 000 when nothing answers (within 2 s).
table_status() {
    node -e '
        const req = require("http").get(
            { host: "127.0.0.1", port: Number(process.argv[1]), path: process.argv[2], timeout: 2000 },
            (res) => { console.log(res.statusCode); res.resume(); });
        req.on("timeout", () => { req.destroy(); });
        req.on("error", () => console.log("000"));
    ' "$1" "/$ACCOUNT/Tables" 2>/dev/null || echo 000
}

stop_pid() {
    local pid="$1" waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null; do
        if ((waited >= STOP_TIMEOUT * 10)); then
            log "pid $pid did not exit after ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    # Reap it if it is our child; otherwise just wait for it to disappear.
    wait "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    return 0
}

# One start attempt; returns 0 when the table port answers, 2 if the process
# exited early (e.g. a port was taken meanwhile: worth a retry), 1 on timeout.
try_start() {
    local blob_port queue_port table_port pid waited=0 code
    read -r blob_port queue_port table_port < <(free_ports)
    [[ -n "${table_port:-}" ]] || die "could not pick free ports"

    mkdir -p "$WORK_DIR"
    : >"$LOG_FILE"
    # cd into a scratch dir so nothing Azurite writes lands in the repo;
    # `exec` keeps $! equal to the node server's PID.
    (
        cd "$WORK_DIR"
        exec node "$AZ_JS" \
            --blobHost 127.0.0.1 --blobPort "$blob_port" \
            --queueHost 127.0.0.1 --queuePort "$queue_port" \
            --tableHost 127.0.0.1 --tablePort "$table_port" \
            --inMemoryPersistence --disableTelemetry --skipApiVersionCheck --loose
    ) </dev/null >>"$LOG_FILE" 2>&1 &
    pid=$!
    echo "$pid" >"$PID_FILE"
    printf '%s %s %s\n' "$blob_port" "$queue_port" "$table_port" >"$STATE/ports"

    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "Azurite (pid $pid) exited during startup; log tail:"
            tail -n 30 "$LOG_FILE" >&2 || true
            rm -f "$PID_FILE"
            return 2
        fi
        code="$(table_status "$table_port")"
        if [[ -n "$code" && "$code" != 000 ]]; then
            break
        fi
        if ((waited >= START_TIMEOUT * 5)); then
            log "Azurite did not answer on 127.0.0.1:$table_port within ${START_TIMEOUT}s; log tail:"
            tail -n 30 "$LOG_FILE" >&2 || true
            stop_pid "$pid"
            rm -f "$PID_FILE"
            return 1
        fi
        sleep 0.2
        waited=$((waited + 1))
    done

    local conn
    conn="DefaultEndpointsProtocol=http;AccountName=$ACCOUNT;AccountKey=$ACCOUNT_KEY"
    conn+=";TableEndpoint=http://127.0.0.1:$table_port/$ACCOUNT"
    conn+=";QueueEndpoint=http://127.0.0.1:$queue_port/$ACCOUNT"
    conn+=";BlobEndpoint=http://127.0.0.1:$blob_port/$ACCOUNT;"
    {
        # The tests read the first, the examples the second.
        printf "export TABLEKIT_TEST_CONNECTION_STRING='%s'\n" "$conn"
        printf "export TABLEKIT_CONNECTION_STRING='%s'\n" "$conn"
        printf "export AZURITE_PID=%s\n" "$pid"
        printf "export AZURITE_TABLE_PORT=%s\n" "$table_port"
    } >"$ENV_FILE"
    log "Azurite ready: pid $pid, table port $table_port (state: $STATE)"
    return 0
}

cmd_start() {
    mkdir -p "$STATE"
    local pid
    pid="$(recorded_pid)"
    if [[ -n "$pid" ]] && is_our_azurite "$pid" && [[ -f "$ENV_FILE" ]]; then
        log "already running (pid $pid); reusing it"
        cat "$ENV_FILE"
        return 0
    fi
    rm -f "$PID_FILE" "$ENV_FILE"
    ensure_installed

    # Ports are picked then released, so another process could grab one in
    # between; retry with fresh ports a couple of times.
    local attempt rc
    for attempt in 1 2 3; do
        rc=0
        try_start || rc=$?
        if ((rc == 0)); then
            cat "$ENV_FILE"
            return 0
        fi
        ((rc == 2)) || break
        log "start attempt $attempt failed; retrying with new ports"
    done
    die "Azurite failed to start (log: $LOG_FILE)"
}

cmd_stop() {
    local pid
    pid="$(recorded_pid)"
    if [[ -z "$pid" ]]; then
        log "not running (no pid file in $STATE)"
        return 0
    fi
    if is_our_azurite "$pid"; then
        stop_pid "$pid"
        if kill -0 "$pid" 2>/dev/null; then
            die "pid $pid is still alive"
        fi
        log "stopped (pid $pid)"
    else
        log "pid $pid is not a running Azurite; clearing stale state"
    fi
    rm -f "$PID_FILE" "$ENV_FILE"
}

cmd_env() {
    local pid
    pid="$(recorded_pid)"
    if [[ -n "$pid" ]] && is_our_azurite "$pid" && [[ -f "$ENV_FILE" ]]; then
        cat "$ENV_FILE"
    else
        die "Azurite is not running (state: $STATE)"
    fi
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
env) cmd_env ;;
*)
    echo "usage: $0 start|stop|env" >&2
    exit 2
    ;;
esac
