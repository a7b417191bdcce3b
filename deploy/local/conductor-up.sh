#!/usr/bin/env bash
# Start a local Conductor OSS server (the conductor-server Spring Boot jar, SQLite persistence,
# queues and indexing; no Redis, Postgres or Elasticsearch) without Docker, for conformance tests.
# The jar is installed on first use from Maven Central under ${XDG_CACHE_HOME:-$HOME/.cache}/cairn/.
#
# Usage:   eval "$(bash deploy/local/conductor-up.sh)"
# Stdout:  exactly one line, export CAIRN_CONDUCTOR_URL=http://127.0.0.1:PORT/api
#          all progress goes to stderr.
# Stop:    bash deploy/local/conductor-down.sh (stops what the state file records)
#
# Environment (all optional):
#   CAIRN_LOCAL_CONDUCTOR_PORT       HTTP port on 127.0.0.1       (default: a free port)
#   CAIRN_LOCAL_CONDUCTOR_VERSION    default 3.32.3 (org.conductoross:conductor-server, classifier boot)
#   CAIRN_LOCAL_CONDUCTOR_JAVA       a java binary, version 21 or later (default: the newest
#                                    JDK >= 21 among $JAVA_HOME, /usr/lib/jvm/* and java on PATH)
#   CAIRN_LOCAL_CONDUCTOR_HEAP       default "-Xms256m -Xmx1g"
#   CAIRN_LOCAL_CONDUCTOR_DATA_DIR   data dir (SQLite database, log), kept by conductor-down.sh
#                                    (default: a fresh conductor.XXXXXX dir under the run dir,
#                                    removed by conductor-down.sh)
#   CAIRN_LOCAL_RUN_DIR              run dir (default: <cache>/run), as for up.sh
#   CAIRN_LOCAL_CONDUCTOR_STATE      state file (default: <run dir>/conductor.env)
#   CAIRN_LOCAL_CONDUCTOR_TIMEOUT    readiness timeout in seconds (default: 240)
#   CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP
#                                    host:port of a Kafka broker: enables Conductor's Kafka event
#                                    queues, so an EVENT task with sink "kafka:TOPIC" publishes there
#                                    (default: unset; such an EVENT task then FAILS with
#                                    "Unknown queue type kafka")
#   CAIRN_LOCAL_CONDUCTOR_PROPERTIES a properties file appended to the generated one (its settings win)
#   CAIRN_LOCAL_CONDUCTOR_WARMUP     1 (default): once up, run one throw-away workflow (INLINE graaljs,
#                                    SWITCH, JSON_JQ_TRANSFORM; no metadata registered) and remove it,
#                                    so the first test does not pay the ~2-5 s JavaScript engine warm-up.
#                                    0: skip it
#   CAIRN_LOCAL_CONDUCTOR_AOT        1 (default): on Java 25+, train a JVM AOT cache once per JDK
#                                    (about 1-2 minutes, cached) and start with it, which cuts the
#                                    boot time about threefold. 0: no AOT cache
#   CAIRN_LOCAL_KEEP_DATA=1          a failed start keeps the per-run data dir
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

CONDUCTOR_VERSION="${CAIRN_LOCAL_CONDUCTOR_VERSION:-3.32.3}"
[[ "$CONDUCTOR_VERSION" =~ ^[0-9A-Za-z.+_-]+$ ]] || die "bad CAIRN_LOCAL_CONDUCTOR_VERSION '$CONDUCTOR_VERSION'"
CONDUCTOR_HOME="$CAIRN_CACHE/conductor-$CONDUCTOR_VERSION"
CONDUCTOR_JAR="$CONDUCTOR_HOME/conductor-server-$CONDUCTOR_VERSION-boot.jar"
# the jar extracted (java -Djarmode=tools ... extract): starts faster than the nested boot jar,
# and an AOT cache needs a plain class path
CONDUCTOR_APP="$CONDUCTOR_HOME/app"
CONDUCTOR_APP_JAR="$CONDUCTOR_APP/conductor-server-$CONDUCTOR_VERSION-boot.jar"
CONDUCTOR_STATE_FILE="${CAIRN_LOCAL_CONDUCTOR_STATE:-$RUN_DIR/conductor.env}"
TIMEOUT="${CAIRN_LOCAL_CONDUCTOR_TIMEOUT:-240}"
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "CAIRN_LOCAL_CONDUCTOR_TIMEOUT must be a number of seconds, not '$TIMEOUT'"
HEAP="${CAIRN_LOCAL_CONDUCTOR_HEAP:--Xms256m -Xmx1g}"
WARMUP="${CAIRN_LOCAL_CONDUCTOR_WARMUP:-1}"
AOT="${CAIRN_LOCAL_CONDUCTOR_AOT:-1}"
KAFKA_BOOTSTRAP="${CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP:-}"
BOOTSTRAP_RE='^[][A-Za-z0-9._:,-]+$'  # host:port list; [ ] for IPv6 literals
[[ -z "$KAFKA_BOOTSTRAP" || "$KAFKA_BOOTSTRAP" =~ $BOOTSTRAP_RE ]] \
    || die "CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP must be host:port[,host:port...], not '$KAFKA_BOOTSTRAP'"
EXTRA_PROPERTIES="${CAIRN_LOCAL_CONDUCTOR_PROPERTIES:-}"
[[ -z "$EXTRA_PROPERTIES" || -r "$EXTRA_PROPERTIES" ]] || die "CAIRN_LOCAL_CONDUCTOR_PROPERTIES: cannot read '$EXTRA_PROPERTIES'"
if command -v curl >/dev/null 2>&1; then
    HTTP_CLIENT=curl
elif command -v python3 >/dev/null 2>&1; then
    HTTP_CLIENT=python3
else
    die "neither curl nor python3 found (needed for the readiness check)"
fi

# ------------------------------------------------------------------- java ---

# java_version JAVA: the full version (e.g. 25.0.3), from the JDK's release file or -XshowSettings
java_version() {
    local bin="$1" home v=""
    home="$(cd "$(dirname "$(readlink -f "$bin")")/.." 2>/dev/null && pwd)" || home=""
    if [[ -n "$home" && -f "$home/release" ]]; then
        v="$(sed -n 's/^JAVA_VERSION="\([^"]*\)".*/\1/p' "$home/release" | head -n 1)"
    fi
    if [[ -z "$v" ]]; then
        v="$("$bin" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.version = //p' | head -n 1)"
    fi
    printf '%s\n' "$v"
}

# java_major VERSION: 25.0.3 -> 25, 1.8.0_392 -> 8
java_major() {
    local v="${1#1.}"
    v="${v%%[!0-9]*}"
    printf '%s\n' "${v:-0}"
}

# find_java: set JAVA and JAVA_VERSION to CAIRN_LOCAL_CONDUCTOR_JAVA, or else the newest JDK >= 21
# among $JAVA_HOME, /usr/lib/jvm/* and java on PATH
find_java() {
    local cand v major best="" best_version="" best_major=0 seen=" " real
    if [[ -n "${CAIRN_LOCAL_CONDUCTOR_JAVA:-}" ]]; then
        [[ -x "$CAIRN_LOCAL_CONDUCTOR_JAVA" ]] || die "CAIRN_LOCAL_CONDUCTOR_JAVA=$CAIRN_LOCAL_CONDUCTOR_JAVA is not an executable"
        v="$(java_version "$CAIRN_LOCAL_CONDUCTOR_JAVA")"
        (($(java_major "$v") >= 21)) \
            || die "CAIRN_LOCAL_CONDUCTOR_JAVA=$CAIRN_LOCAL_CONDUCTOR_JAVA is Java '${v:-unknown}'; Conductor $CONDUCTOR_VERSION needs Java 21 or later"
        JAVA="$CAIRN_LOCAL_CONDUCTOR_JAVA" JAVA_VERSION="$v"
        return 0
    fi
    local -a cands=()
    [[ -n "${JAVA_HOME:-}" ]] && cands+=("$JAVA_HOME/bin/java")
    for cand in /usr/lib/jvm/*/bin/java; do cands+=("$cand"); done
    command -v java >/dev/null 2>&1 && cands+=("$(command -v java)")
    for cand in "${cands[@]}"; do
        [[ -x "$cand" ]] || continue
        real="$(readlink -f "$cand")"
        [[ "$seen" == *" $real "* ]] && continue
        seen+="$real "
        v="$(java_version "$cand")"
        major="$(java_major "$v")"
        if ((major >= 21 && major > best_major)); then
            best="$real" best_version="$v" best_major="$major"
        fi
    done
    [[ -n "$best" ]] || die "no Java 21+ found (looked at \$JAVA_HOME, /usr/lib/jvm/*/bin/java and java on PATH); Conductor $CONDUCTOR_VERSION needs Java 21 or later: install one (e.g. a Temurin 21 or 25 JDK under /usr/lib/jvm) or set CAIRN_LOCAL_CONDUCTOR_JAVA"
    JAVA="$best" JAVA_VERSION="$best_version"
}

# ---------------------------------------------------------------- install ---

# jar_ok JAR: JAR is a complete zip with Spring Boot's application classes (a truncated download
# has no readable central directory)
jar_ok() {
    [[ -s "$1" ]] || return 1
    local listing
    if command -v unzip >/dev/null 2>&1; then
        # not `unzip | grep -q`: under pipefail, grep quitting early fails the pipe
        listing="$(unzip -l "$1" 2>/dev/null)" || return 1
        [[ "$listing" == *BOOT-INF/classes/application.properties* ]]
    elif command -v python3 >/dev/null 2>&1; then
        python3 -c 'import sys, zipfile; sys.exit(0 if "BOOT-INF/classes/application.properties" in zipfile.ZipFile(sys.argv[1]).namelist() else 1)' "$1" 2>/dev/null
    fi
}

install_conductor_locked() {
    local tmp
    mkdir -p "$CONDUCTOR_HOME"
    if ! jar_ok "$CONDUCTOR_JAR"; then
        command -v mvn >/dev/null 2>&1 || die "mvn not found (needed once to fetch org.conductoross:conductor-server:$CONDUCTOR_VERSION:jar:boot)"
        tmp="$(mktemp -d "$CAIRN_CACHE/.conductor-install.XXXXXX")"
        log "installing Conductor $CONDUCTOR_VERSION (conductor-server boot jar, about 460 MB) from Maven Central into $CONDUCTOR_HOME (first run only)"
        if ! mvn -q -B dependency:copy \
                "-Dartifact=org.conductoross:conductor-server:$CONDUCTOR_VERSION:jar:boot" \
                "-DoutputDirectory=$tmp" >"$tmp/mvn.log" 2>&1; then
            tail -n 40 "$tmp/mvn.log" >&2 || true
            rm -rf -- "$tmp"
            die "maven could not fetch org.conductoross:conductor-server:$CONDUCTOR_VERSION:jar:boot"
        fi
        if ! jar_ok "$tmp/conductor-server-$CONDUCTOR_VERSION-boot.jar"; then
            rm -rf -- "$tmp"
            die "conductor-server-$CONDUCTOR_VERSION-boot.jar missing or damaged after the maven run"
        fi
        mv -f -- "$tmp/conductor-server-$CONDUCTOR_VERSION-boot.jar" "$CONDUCTOR_JAR"
        rm -rf -- "$tmp"
    fi
    # extract it once (and again whenever the jar is newer than the extracted copy)
    if [[ ! -f "$CONDUCTOR_APP/.complete" || "$CONDUCTOR_JAR" -nt "$CONDUCTOR_APP/.complete" ]]; then
        log "extracting $CONDUCTOR_JAR into $CONDUCTOR_APP"
        tmp="$(mktemp -d "$CAIRN_CACHE/.conductor-extract.XXXXXX")"
        if ! "$JAVA" -Djarmode=tools -jar "$CONDUCTOR_JAR" extract --destination "$tmp/app" >"$tmp/extract.log" 2>&1 \
                || [[ ! -f "$tmp/app/conductor-server-$CONDUCTOR_VERSION-boot.jar" ]]; then
            tail -n 40 "$tmp/extract.log" >&2 || true
            rm -rf -- "$tmp"
            die "could not extract $CONDUCTOR_JAR"
        fi
        rm -rf -- "$CONDUCTOR_APP"
        mv -- "$tmp/app" "$CONDUCTOR_APP"
        rm -rf -- "$tmp"
        touch "$CONDUCTOR_APP/.complete"
    fi
    if [[ -n "$AOT_CACHE" && ! -s "$AOT_CACHE" && ! -e "$AOT_CACHE.failed" ]]; then
        train_aot_cache
    fi
}

# train_aot_cache: one training run (the application context starts and the JVM exits,
# -Dspring.context.exit=onRefresh) writes the AOT cache (JEP 483/514, Java 25+). On failure,
# $AOT_CACHE.failed keeps later starts from trying again; delete it to retry.
train_aot_cache() {
    local tmp port
    tmp="$(mktemp -d "$CAIRN_CACHE/.conductor-aot.XXXXXX")"
    port="$(free_ports 1)"
    mkdir -p "$tmp/tmp"
    # the plain configuration: no Kafka broker to reach, no extra properties
    KAFKA_BOOTSTRAP="" EXTRA_PROPERTIES="" write_properties "$tmp" "$port" >"$tmp/conductor.properties"
    log "training a JVM AOT cache for Conductor $CONDUCTOR_VERSION on Java $JAVA_VERSION (once per JDK, takes 1-2 minutes)"
    # shellcheck disable=SC2086  # heap options are meant to be word-split
    if (cd "$tmp" && timeout 900 "$JAVA" $HEAP $JAVA_OPTS_COMMON \
            "-XX:AOTCacheOutput=$tmp/conductor.aot" \
            -Dspring.context.exit=onRefresh \
            "-Djava.io.tmpdir=$tmp/tmp" \
            -jar "$CONDUCTOR_APP_JAR" \
            "--spring.config.additional-location=file:$tmp/conductor.properties" \
            </dev/null >"$tmp/aot-training.log" 2>&1) && [[ -s "$tmp/conductor.aot" ]]; then
        mv -f -- "$tmp/conductor.aot" "$AOT_CACHE"
        log "AOT cache written: $AOT_CACHE"
    else
        show_log_tail "AOT training" "$tmp/aot-training.log"
        log "WARNING: AOT training failed; starting without an AOT cache (delete $AOT_CACHE.failed to retry)"
        cp -f -- "$tmp/aot-training.log" "$AOT_CACHE.failed" 2>/dev/null || touch "$AOT_CACHE.failed"
    fi
    rm -rf -- "$tmp"
}

# ------------------------------------------------------------- config ---

# prop_escape VALUE: VALUE with backslashes doubled (java.util.Properties escapes)
prop_escape() {
    printf '%s' "${1//\\/\\\\}"
}

# write_properties DIR PORT: the Spring Boot properties for a server keeping its data in DIR
write_properties() {
    local dir="$1" port="$2"
    cat <<EOF
# written by deploy/local/conductor-up.sh; passed as --spring.config.additional-location, so these
# override the jar's BOOT-INF/classes/application.properties
server.address=127.0.0.1
server.port=$port
# SQLite for everything (the jar's defaults, but with the database in the data dir instead of
# ./c123.db): no Redis, Postgres or Elasticsearch
spring.datasource.url=jdbc:sqlite:$(prop_escape "$dir")/conductor.db?busy_timeout=15000&journal_mode=WAL
conductor.db.type=sqlite
conductor.queue.type=sqlite
conductor.indexing.type=sqlite
conductor.indexing.enabled=true
conductor.workflow-execution-lock.type=local_only
conductor.grpc-server.enabled=false
# the LLM/vector-DB/MCP/agent system tasks: off. They add 17 system-task pollers, a third of the
# boot time, and would create ~/worker-payload/
conductor.integrations.ai.enabled=false
conductor.file-storage.parentDir=$(prop_escape "$dir")/files/
conductor.app.ownerEmailMandatory=false
EOF
    if [[ -n "$KAFKA_BOOTSTRAP" ]]; then
        cat <<EOF
# EVENT tasks with sink kafka:TOPIC publish to this broker
conductor.event-queues.kafka.enabled=true
conductor.event-queues.kafka.bootstrap-servers=$KAFKA_BOOTSTRAP
EOF
    fi
    if [[ -n "$EXTRA_PROPERTIES" ]]; then
        printf '# from CAIRN_LOCAL_CONDUCTOR_PROPERTIES=%s\n' "$EXTRA_PROPERTIES"
        cat -- "$EXTRA_PROPERTIES"
        printf '\n'
    fi
}

# ------------------------------------------------------------- readiness ---

# http METHOD URL [BODY]: print the response body; succeed on a 2xx answer
http() {
    local method="$1" url="$2" body="${3-}"
    if [[ "$HTTP_CLIENT" == curl ]]; then
        if [[ $# -ge 3 ]]; then
            printf '%s' "$body" | curl -fsS --max-time 30 -X "$method" -H 'Content-Type: application/json' \
                --data-binary @- "$url" 2>/dev/null
        else
            curl -fsS --max-time 30 -X "$method" "$url" 2>/dev/null
        fi
    else
        printf '%s' "$body" | python3 -c '
import sys, urllib.request
method, url, has_body = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
data = sys.stdin.buffer.read() if has_body else None
req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        sys.stdout.write(r.read().decode())
except Exception:
    sys.exit(1)
' "$method" "$url" "$([[ $# -ge 3 ]] && echo 1 || echo 0)" 2>/dev/null
    fi
}

conductor_ready() {
    port_in_use "$PORT" || return 1
    local health
    health="$(http GET "$BASE_URL/health")" || return 1
    [[ "$health" == *'"healthy":true'* ]] || return 1
    # the metadata API answers from the database
    http GET "$API_URL/metadata/taskdefs" >/dev/null
}

# warm_up: one throw-away workflow (definition inline, nothing registered), removed afterwards
warm_up() {
    local def wid status="" deadline=$((SECONDS + 60))
    # shellcheck disable=SC2016  # ${...} and $.n are Conductor's expressions, not the shell's
    def='{"name":"cairn_local_warmup","version":1,"schemaVersion":2,"ownerEmail":"cairn-local@localhost","tasks":[
{"name":"js","taskReferenceName":"js","type":"INLINE","inputParameters":{"evaluatorType":"graaljs","expression":"(function(){ return [1, 2].map(function (x) { return x * 2; }); })()"}},
{"name":"sw","taskReferenceName":"sw","type":"SWITCH","evaluatorType":"graaljs","expression":"$.n > 1 ? \"big\" : \"small\"","inputParameters":{"n":2},
 "decisionCases":{"big":[{"name":"jq","taskReferenceName":"jq","type":"JSON_JQ_TRANSFORM","inputParameters":{"v":"${js.output.result}","queryExpression":".v | add"}}]},"defaultCase":[]}]}'
    wid="$(http POST "$API_URL/workflow" "{\"name\":\"cairn_local_warmup\",\"version\":1,\"input\":{},\"workflowDef\":$def}")" \
        || { log "warm-up: could not start the warm-up workflow"; return 1; }
    [[ "$wid" =~ ^[0-9a-fA-F-]+$ ]] || { log "warm-up: unexpected answer '$wid'"; return 1; }
    while ((SECONDS < deadline)); do
        status="$(http GET "$API_URL/workflow/$wid?includeTasks=false" | grep -o '"status":"[A-Z_]*"' | head -n 1)" || status=""
        [[ "$status" == '"status":"RUNNING"' || -z "$status" ]] || break
        sleep 0.2
    done
    http DELETE "$API_URL/workflow/$wid/remove?archiveWorkflow=false" >/dev/null || log "warm-up: could not remove workflow $wid"
    [[ "$status" == '"status":"COMPLETED"' ]] || { log "warm-up workflow $wid ended ${status:-nowhere} (expected COMPLETED)"; return 1; }
}

# show_log_errors FILE: the error lines of a Spring Boot log, which the stack frames of a failed
# start push out of its last 40 lines
show_log_errors() {
    local file="$1"
    grep -qE '^(Caused by: |.* ERROR )|APPLICATION FAILED TO START' "$file" 2>/dev/null || return 0
    log "---- errors in $file ----"
    grep -E '^(Caused by: |.* ERROR )|APPLICATION FAILED TO START|^(Description|Reason|Action):' "$file" 2>/dev/null \
        | cut -c1-400 | tail -n 15 >&2 || true
    log "---- end of errors ----"
}

# ------------------------------------------------------------------- main ---

STARTED_PID=""
STARTED_MATCH=""
CREATED_DATA_DIR=""

cleanup_on_error() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        [[ -n "$STARTED_PID" ]] && stop_pid "Conductor" "$STARTED_PID" "$STARTED_MATCH"
        if [[ -n "$CREATED_DATA_DIR" && "${CAIRN_LOCAL_KEEP_DATA:-0}" != 1 ]]; then
            rm -rf -- "$CREATED_DATA_DIR"
        fi
        [[ -n "$STARTED_PID" ]] && rm -f -- "$CONDUCTOR_STATE_FILE"
    fi
    exit "$rc"
}

start_conductor() {
    # runs in the with_lock subshell, so the error trap must be set here
    trap cleanup_on_error EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    # Refuse to clobber a running server recorded in the same state file.
    if [[ -f "$CONDUCTOR_STATE_FILE" ]]; then
        local CONDUCTOR_PID="" CONDUCTOR_MATCH="" CONDUCTOR_URL="" DATA_DIR="" DATA_DIR_OWNED=0
        # shellcheck disable=SC1090
        source "$CONDUCTOR_STATE_FILE"
        if [[ -n "$CONDUCTOR_MATCH" ]] && pid_matches "$CONDUCTOR_PID" "$CONDUCTOR_MATCH"; then
            die "already running (Conductor $CONDUCTOR_URL pid $CONDUCTOR_PID) per $CONDUCTOR_STATE_FILE; run deploy/local/conductor-down.sh first, or set CAIRN_LOCAL_CONDUCTOR_STATE to another file for a second server"
        fi
        log "removing stale state file $CONDUCTOR_STATE_FILE (its server is gone)"
        if [[ "$DATA_DIR_OWNED" == 1 && -n "$DATA_DIR" && -d "$DATA_DIR" && "${CAIRN_LOCAL_KEEP_DATA:-0}" != 1 ]]; then
            rm -rf -- "$DATA_DIR"
        fi
        rm -f -- "$CONDUCTOR_STATE_FILE"
    fi

    find_java
    log "using Java $JAVA_VERSION ($JAVA)"
    JAVA_OPTS_COMMON="-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -Dpolyglot.engine.userResourceCache=$CONDUCTOR_HOME/polyglot"
    AOT_CACHE=""
    if [[ "$AOT" == 1 ]] && (($(java_major "$JAVA_VERSION") >= 25)); then
        # one cache per JDK build: the JVM refuses (and ignores) a cache made by another one
        AOT_CACHE="$CONDUCTOR_APP/conductor.$(basename "$(dirname "$(dirname "$JAVA")")")-$JAVA_VERSION.aot"
    fi
    mkdir -p "$CAIRN_CACHE"
    with_lock "$CAIRN_CACHE/.install-conductor-$CONDUCTOR_VERSION.lock" install_conductor_locked

    if [[ -n "${CAIRN_LOCAL_CONDUCTOR_PORT:-}" ]]; then
        PORT="$CAIRN_LOCAL_CONDUCTOR_PORT"
    else
        PORT="$(free_ports 1)"
    fi
    [[ "$PORT" =~ ^[0-9]+$ ]] || die "bad port '$PORT'"
    ! port_in_use "$PORT" || die "port $PORT on 127.0.0.1 is already in use"
    BASE_URL="http://127.0.0.1:$PORT"
    API_URL="$BASE_URL/api"

    mkdir -p "$RUN_DIR"
    if [[ -n "${CAIRN_LOCAL_CONDUCTOR_DATA_DIR:-}" ]]; then
        mkdir -p "$CAIRN_LOCAL_CONDUCTOR_DATA_DIR"
        DATA_DIR="$(cd "$CAIRN_LOCAL_CONDUCTOR_DATA_DIR" && pwd)"
        DATA_DIR_OWNED=0
    else
        DATA_DIR="$(mktemp -d "$RUN_DIR/conductor.XXXXXX")"
        CREATED_DATA_DIR="$DATA_DIR"
        DATA_DIR_OWNED=1
    fi
    # java.io.tmpdir: the SQLite native library, Tomcat's work dirs and the payload dir go there
    rm -rf -- "$DATA_DIR/tmp"
    mkdir -p "$DATA_DIR/tmp" "$DATA_DIR/files"
    local props="$DATA_DIR/conductor.properties"
    write_properties "$DATA_DIR" "$PORT" >"$props"
    CONDUCTOR_LOG="$DATA_DIR/conductor.log"
    keep_old_log "$CONDUCTOR_LOG"

    local -a aot_args=()
    if [[ -n "$AOT_CACHE" && -s "$AOT_CACHE" ]]; then
        aot_args=("-XX:AOTCache=$AOT_CACHE")
    fi
    log "starting Conductor $CONDUCTOR_VERSION on 127.0.0.1:$PORT (data dir $DATA_DIR${aot_args[*]:+, AOT cache})"
    local t0=$SECONDS
    # shellcheck disable=SC2086  # heap and common options are meant to be word-split
    (cd "$DATA_DIR" && exec nohup "$JAVA" $HEAP $JAVA_OPTS_COMMON ${aot_args[@]+"${aot_args[@]}"} \
        "-Djava.io.tmpdir=$DATA_DIR/tmp" \
        -jar "$CONDUCTOR_APP_JAR" \
        "--spring.config.additional-location=file:$props" \
        </dev/null >"$CONDUCTOR_LOG" 2>&1 9>&-) &
    STARTED_PID=$!
    # the properties path is unique to this server: conductor-down.sh signals only a PID whose
    # command line still has it
    STARTED_MATCH="--spring.config.additional-location=file:$props"
    wait_exec "$STARTED_PID"

    {
        printf '# written by deploy/local/conductor-up.sh at %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'CONDUCTOR_PID=%q\n' "$STARTED_PID"
        printf 'CONDUCTOR_MATCH=%q\n' "$STARTED_MATCH"
        printf 'CONDUCTOR_PORT=%q\n' "$PORT"
        printf 'CONDUCTOR_URL=%q\n' "$API_URL"
        printf 'CONDUCTOR_VERSION=%q\n' "$CONDUCTOR_VERSION"
        printf 'CONDUCTOR_JAVA=%q\n' "$JAVA"
        printf 'CONDUCTOR_LOG=%q\n' "$CONDUCTOR_LOG"
        printf 'CONDUCTOR_PROPERTIES=%q\n' "$props"
        printf 'CONDUCTOR_KAFKA_BOOTSTRAP=%q\n' "$KAFKA_BOOTSTRAP"
        printf 'DATA_DIR=%q\n' "$DATA_DIR"
        printf 'DATA_DIR_OWNED=%q\n' "$DATA_DIR_OWNED"
    } >"$CONDUCTOR_STATE_FILE.tmp"
    mv -f "$CONDUCTOR_STATE_FILE.tmp" "$CONDUCTOR_STATE_FILE"

    # --- wait until the REST API answers
    local deadline=$((t0 + TIMEOUT))
    while ! conductor_ready; do
        pid_matches "$STARTED_PID" "$STARTED_MATCH" || { show_log_tail Conductor "$CONDUCTOR_LOG"; show_log_errors "$CONDUCTOR_LOG"; die "Conductor exited during startup"; }
        if ((SECONDS >= deadline)); then
            show_log_tail Conductor "$CONDUCTOR_LOG"
            show_log_errors "$CONDUCTOR_LOG"
            die "Conductor not ready after ${TIMEOUT}s (CAIRN_LOCAL_CONDUCTOR_TIMEOUT)"
        fi
        sleep 0.5
    done
    log "Conductor is ready at $API_URL after $((SECONDS - t0))s"
    if [[ "$WARMUP" == 1 ]]; then
        if ! warm_up; then
            show_log_tail Conductor "$CONDUCTOR_LOG"
            show_log_errors "$CONDUCTOR_LOG"
            die "the warm-up workflow failed (CAIRN_LOCAL_CONDUCTOR_WARMUP=0 skips it)"
        fi
        log "warm-up workflow done after $((SECONDS - t0))s"
    fi
    if [[ -n "${CAIRN_LOCAL_CONDUCTOR_STATE:-}" ]]; then
        log "state: $CONDUCTOR_STATE_FILE (stop with: CAIRN_LOCAL_CONDUCTOR_STATE=$CONDUCTOR_STATE_FILE bash $CAIRN_LOCAL_DIR/conductor-down.sh)"
    elif [[ -n "${CAIRN_LOCAL_RUN_DIR:-}" ]]; then
        log "state: $CONDUCTOR_STATE_FILE (stop with: CAIRN_LOCAL_RUN_DIR=$RUN_DIR bash $CAIRN_LOCAL_DIR/conductor-down.sh)"
    else
        log "state: $CONDUCTOR_STATE_FILE (stop with: bash $CAIRN_LOCAL_DIR/conductor-down.sh)"
    fi
    printf 'export CAIRN_CONDUCTOR_URL=%s\n' "$API_URL"
}

mkdir -p "$(dirname "$CONDUCTOR_STATE_FILE")"
with_lock "$CONDUCTOR_STATE_FILE.lock" start_conductor
