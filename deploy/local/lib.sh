# shellcheck shell=bash disable=SC2034  # variables are used by up.sh and down.sh
# Shared settings and helpers for deploy/local/up.sh and deploy/local/down.sh.
# Sourced, not executed.

CAIRN_LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CAIRN_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/cairn"
KAFKA_VERSION="${CAIRN_LOCAL_KAFKA_VERSION:-4.1.1}"
FERRETDB_VERSION="${CAIRN_LOCAL_FERRETDB_VERSION:-v1.24.2}"
KAFKA_HOME="$CAIRN_CACHE/kafka-$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_HOME/libs"
FERRETDB_BIN="$CAIRN_CACHE/ferretdb-$FERRETDB_VERSION/bin/ferretdb"
RUN_DIR="${CAIRN_LOCAL_RUN_DIR:-$CAIRN_CACHE/run}"
STATE_FILE="${CAIRN_LOCAL_STATE:-$RUN_DIR/state.env}"

log() { printf '[cairn-local] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# with_lock FILE CMD...: run CMD while holding an exclusive lock on FILE
# (no locking when flock(1) is missing).
with_lock() {
    local lock="$1"; shift
    mkdir -p "$(dirname "$lock")"
    if command -v flock >/dev/null 2>&1; then
        (
            flock -x 9
            "$@"
        ) 9>"$lock"
    else
        "$@"
    fi
}

# pid_matches PID PATTERN: PID is alive and its command line contains PATTERN
# (guards against signalling a recycled PID).
pid_matches() {
    local pid="$1" pattern="$2" cmdline
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmdline" == *"$pattern"* ]]
}

# wait_reaped PID: give init up to 2 s to reap an exited (zombie) PID, so
# that pgrep no longer lists it when we return.
wait_reaped() {
    local pid="$1" i
    for ((i = 0; i < 20; i++)); do
        [[ -e "/proc/$pid" ]] || return 0
        sleep 0.1
    done
}

# stop_pid NAME PID PATTERN: SIGTERM, wait up to 20 s, then SIGKILL.
stop_pid() {
    local name="$1" pid="$2" pattern="$3" i
    if ! pid_matches "$pid" "$pattern"; then
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 200; i++)); do
        pid_matches "$pid" "$pattern" || { wait_reaped "$pid"; return 0; }
        sleep 0.1
    done
    log "$name (pid $pid) did not stop after 20 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        pid_matches "$pid" "$pattern" || { wait_reaped "$pid"; return 0; }
        sleep 0.1
    done
    log "WARNING: $name (pid $pid) still alive after SIGKILL"
}

# stop_from_state FILE: stop the processes recorded in FILE (both servers, or the one
# a CAIRN_LOCAL_ONLY run recorded), remove the data directory if up.sh created it,
# then remove FILE.
stop_from_state() {
    local file="$1"
    local KAFKA_PID="" MONGO_PID="" DATA_DIR="" DATA_DIR_OWNED=0 ONLY=""
    [[ -f "$file" ]] || return 0
    # shellcheck disable=SC1090
    source "$file"
    stop_pid "FerretDB" "$MONGO_PID" "ferretdb"
    stop_pid "Kafka" "$KAFKA_PID" "kafka.Kafka"
    if [[ "$DATA_DIR_OWNED" == 1 && -n "$DATA_DIR" && -d "$DATA_DIR" ]]; then
        if [[ "${CAIRN_LOCAL_KEEP_DATA:-0}" == 1 ]]; then
            log "keeping data dir $DATA_DIR (CAIRN_LOCAL_KEEP_DATA=1)"
        else
            rm -rf -- "$DATA_DIR"
        fi
    fi
    rm -f -- "$file"
}

# ---- shared by up.sh and conductor-up.sh ----

port_in_use() {
    # true if something accepts TCP connections on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_ports N: print N distinct free TCP ports on 127.0.0.1, one per line
free_ports() {
    local n="$1"
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$n" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
for s in socks:
    s.close()
EOF
    else
        local -a got=()
        local p tries=0
        while ((${#got[@]} < n)); do
            ((tries++ < 1000)) || die "could not find free ports"
            p=$((20000 + RANDOM % 30000))
            [[ " ${got[*]} " == *" $p "* ]] && continue
            port_in_use "$p" && continue
            got+=("$p")
        done
        printf '%s\n' "${got[@]}"
    fi
}

# keep_old_log FILE: a server restarted on a kept data dir starts a fresh log; the previous
# one is kept as FILE.1, FILE.2, ... (readiness looks for a line of the new one).
keep_old_log() {
    local file="$1" n=1
    [[ -s "$file" ]] || return 0
    while [[ -e "$file.$n" ]]; do n=$((n + 1)); done
    mv -f -- "$file" "$file.$n"
}

# wait_exec PID: a server started with `nohup ... &` is at first a copy of this shell (same
# command line) until it execs; pid_matches would call it dead and cleanup would miss it, leaving
# the server to start orphaned. Wait (up to 30 s) until PID runs something else or is gone.
wait_exec() {
    local pid="$1" own i
    own="$(tr '\0' ' ' <"/proc/$$/cmdline")"
    for ((i = 0; i < 300; i++)); do
        [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == "$own" ]] || return 0
        sleep 0.1
    done
}

show_log_tail() {
    local name="$1" file="$2"
    log "---- last lines of $name log ($file) ----"
    tail -n 40 "$file" >&2 2>/dev/null || true
    log "---- end of $name log ----"
}
