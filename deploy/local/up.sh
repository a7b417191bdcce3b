#!/usr/bin/env bash
# Start a local Kafka broker (KRaft, single node) and FerretDB (SQLite backend)
# without Docker, installing them on first use under
# ${XDG_CACHE_HOME:-$HOME/.cache}/cairn/.
#
# Usage:   eval "$(bash deploy/local/up.sh)"
# Stdout:  exactly two `export ...` lines (CAIRN_KAFKA_BOOTSTRAP, CAIRN_MONGO_URL);
#          all progress goes to stderr. With CAIRN_LOCAL_ONLY, only that server's line.
#          With CAIRN_LOCAL_KAFKA_SECURITY=sasl_ssl, Kafka's line becomes six lines that point
#          Cairn at the secured listener: CAIRN_KAFKA_BOOTSTRAP, CAIRN_KAFKA_SECURITY_PROTOCOL,
#          CAIRN_KAFKA_SASL_MECHANISM, CAIRN_KAFKA_SASL_USERNAME, CAIRN_KAFKA_SASL_PASSWORD,
#          CAIRN_KAFKA_SSL_CAFILE. The mutual-TLS listener that mode also opens is not on stdout:
#          its address is KAFKA_MTLS_BOOTSTRAP in the state file, its client certificate and key
#          are <data dir>/tls/client.pem and client.key.
# Stop:    bash deploy/local/down.sh (stops what the state file records)
#
# Environment (all optional):
#   CAIRN_LOCAL_ONLY              kafka | ferretdb: start only that server and record only it
#                                 in the state file, so each can be stopped and restarted on
#                                 its own (give each its own CAIRN_LOCAL_STATE, the same
#                                 CAIRN_LOCAL_DATA_DIR and fixed ports to restart it in place)
#   CAIRN_LOCAL_KAFKA_PORT        Kafka client port          (default: a free port)
#   CAIRN_LOCAL_CONTROLLER_PORT   Kafka KRaft controller port (default: a free port)
#   CAIRN_LOCAL_MONGO_PORT        FerretDB port              (default: a free port)
#   CAIRN_LOCAL_KAFKA_SECURITY    unset/empty: Kafka has only its PLAINTEXT listener.
#                                 sasl_ssl: also a SASL_SSL listener (TLS with a CA generated
#                                 once per data dir into <data dir>/tls/, SASL mechanisms
#                                 SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN); stdout points at it.
#                                 And an SSL listener that requires a client certificate signed
#                                 by that CA (mutual TLS); one for CN=cairn is issued into
#                                 <data dir>/tls/client.pem + client.key (PEM, key unencrypted)
#   CAIRN_LOCAL_KAFKA_SECURE_PORT SASL_SSL listener port     (default: a free port)
#   CAIRN_LOCAL_KAFKA_MTLS_PORT   mutual-TLS (SSL) listener port (default: a free port)
#   CAIRN_LOCAL_KAFKA_USER        SASL user                  (default: cairn)
#   CAIRN_LOCAL_KAFKA_PASSWORD    SASL password (default: generated once per data dir and
#                                 kept in <data dir>/tls/kafka-password)
#   CAIRN_LOCAL_DATA_DIR          data dir, kept by down.sh  (default: a fresh temp
#                                 dir under the run dir, removed by down.sh)
#   CAIRN_LOCAL_RUN_DIR           run dir (default: <cache>/run)
#   CAIRN_LOCAL_STATE             state file (default: <run dir>/state.env)
#   CAIRN_LOCAL_TIMEOUT           readiness timeout in seconds (default: 90)
#   CAIRN_LOCAL_KAFKA_VERSION     default 4.1.1
#   CAIRN_LOCAL_KAFKA_HEAP        default "-Xms128m -Xmx512m"
#   CAIRN_LOCAL_FERRETDB_VERSION  default v1.24.2
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

TIMEOUT="${CAIRN_LOCAL_TIMEOUT:-90}"
ONLY_SERVER="${CAIRN_LOCAL_ONLY:-}"
case "$ONLY_SERVER" in
    "") WANT_KAFKA=1 WANT_MONGO=1 ;;
    kafka) WANT_KAFKA=1 WANT_MONGO=0 ;;
    ferretdb) WANT_KAFKA=0 WANT_MONGO=1 ;;
    *) die "CAIRN_LOCAL_ONLY must be kafka or ferretdb (or unset for both), not '$ONLY_SERVER'" ;;
esac
KAFKA_SECURITY="${CAIRN_LOCAL_KAFKA_SECURITY:-}"
case "$KAFKA_SECURITY" in
    "" | sasl_ssl) ;;
    *) die "CAIRN_LOCAL_KAFKA_SECURITY must be sasl_ssl (or unset/empty for PLAINTEXT only), not '$KAFKA_SECURITY'" ;;
esac
if [[ -n "$KAFKA_SECURITY" ]] && ((WANT_KAFKA == 0)); then
    log "CAIRN_LOCAL_KAFKA_SECURITY=$KAFKA_SECURITY ignored: Kafka is not started (CAIRN_LOCAL_ONLY=$ONLY_SERVER)"
    KAFKA_SECURITY=""
fi
KAFKA_SASL_USER="" KAFKA_SASL_PASSWORD=""
if [[ -n "$KAFKA_SECURITY" ]]; then
    KAFKA_SASL_USER="${CAIRN_LOCAL_KAFKA_USER:-cairn}"
    # The user and password go unescaped into JAAS strings, --add-scram '[name=..,password=..]'
    # and a properties file, so keep them to characters that need no quoting there.
    [[ "$KAFKA_SASL_USER" =~ ^[A-Za-z0-9._-]+$ ]] \
        || die "CAIRN_LOCAL_KAFKA_USER must be non-empty and use only A-Z a-z 0-9 . _ -, not '$KAFKA_SASL_USER'"
    if [[ -n "${CAIRN_LOCAL_KAFKA_PASSWORD:-}" ]]; then
        [[ "$CAIRN_LOCAL_KAFKA_PASSWORD" =~ ^[A-Za-z0-9._~+/:@%^*!?#-]+$ ]] \
            || die "CAIRN_LOCAL_KAFKA_PASSWORD may use only A-Z a-z 0-9 and . _ ~ + / : @ % ^ * ! ? # - (no spaces, quotes, backslashes, commas, brackets or '=')"
    fi
    command -v openssl >/dev/null 2>&1 || die "openssl not found (needed for CAIRN_LOCAL_KAFKA_SECURITY=sasl_ssl)"
fi

# ---------------------------------------------------------------- install ---

install_kafka_locked() {
    [[ -f "$KAFKA_HOME/.complete" ]] && return 0
    command -v mvn >/dev/null 2>&1 || die "mvn not found (needed once to fetch Kafka $KAFKA_VERSION)"
    local tmp
    tmp="$(mktemp -d "$CAIRN_CACHE/.kafka-install.XXXXXX")"
    log "installing Kafka $KAFKA_VERSION jars from Maven Central into $KAFKA_HOME (first run only)"
    cp "$CAIRN_LOCAL_DIR/pom.xml" "$tmp/pom.xml"
    if ! (cd "$tmp" && mvn -q -B -f pom.xml \
            -Dkafka.version="$KAFKA_VERSION" \
            -DincludeScope=runtime \
            -DoutputDirectory="$tmp/libs" \
            dependency:copy-dependencies >"$tmp/mvn.log" 2>&1); then
        tail -n 40 "$tmp/mvn.log" >&2 || true
        rm -rf -- "$tmp"
        die "maven could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION"
    fi
    [[ -f "$tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "kafka_2.13-$KAFKA_VERSION.jar missing after maven run"
    mkdir -p "$KAFKA_HOME/config"
    rm -rf -- "$KAFKA_LIBS"
    mv "$tmp/libs" "$KAFKA_LIBS"
    rm -rf -- "$tmp"
    cat >"$KAFKA_HOME/config/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
EOF
    # quiet logging for the CLI tools (to stderr so stdout stays clean)
    cat >"$KAFKA_HOME/config/tools-log4j2.properties" <<'EOF'
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
EOF
    touch "$KAFKA_HOME/.complete"
}

install_ferretdb_locked() {
    [[ -x "$FERRETDB_BIN" ]] && return 0
    command -v go >/dev/null 2>&1 || die "go not found (needed once to build FerretDB $FERRETDB_VERSION)"
    local bindir tmp moddir
    bindir="$(dirname "$FERRETDB_BIN")"
    tmp="$(mktemp -d "$CAIRN_CACHE/.ferretdb-install.XXXXXX")"
    log "building FerretDB $FERRETDB_VERSION from the Go module proxy into $bindir (first run only, takes a few minutes)"
    # Plain `go install ...@version` builds a binary that panics at start-up:
    # the module zip lacks the generated build/version/version.txt. So fetch
    # the module source, add that file, and `go build` the command from it.
    if ! moddir="$(cd "$tmp" && go mod download -json "github.com/FerretDB/FerretDB@$FERRETDB_VERSION" 2>"$tmp/go.log" \
            | sed -n 's/^[[:space:]]*"Dir":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p')" || [[ -z "$moddir" || ! -d "$moddir" ]]; then
        tail -n 40 "$tmp/go.log" >&2 || true
        rm -rf -- "$tmp"
        die "go mod download github.com/FerretDB/FerretDB@$FERRETDB_VERSION failed"
    fi
    cp -R "$moddir" "$tmp/src"
    chmod -R u+w "$tmp/src"
    printf '%s\n' "$FERRETDB_VERSION" >"$tmp/src/build/version/version.txt"
    printf 'cairn-local\n' >"$tmp/src/build/version/package.txt"
    if ! (cd "$tmp/src" && CGO_ENABLED=0 go build -buildvcs=false -trimpath \
            -o "$tmp/ferretdb" ./cmd/ferretdb >>"$tmp/go.log" 2>&1); then
        tail -n 40 "$tmp/go.log" >&2 || true
        rm -rf -- "$tmp"
        die "go build of FerretDB $FERRETDB_VERSION failed"
    fi
    if ! "$tmp/ferretdb" --version >"$tmp/version.out" 2>&1; then
        cat "$tmp/version.out" >&2 || true
        rm -rf -- "$tmp"
        die "the FerretDB binary just built does not run"
    fi
    mkdir -p "$bindir"
    mv -f "$tmp/ferretdb" "$FERRETDB_BIN"
    rm -rf -- "$tmp"
}

install_all() {
    mkdir -p "$CAIRN_CACHE"
    if ((WANT_KAFKA == 0)); then
        with_lock "$CAIRN_CACHE/.install-ferretdb.lock" install_ferretdb_locked
    elif ((WANT_MONGO == 0)); then
        with_lock "$CAIRN_CACHE/.install-kafka.lock" install_kafka_locked
    elif [[ ! -f "$KAFKA_HOME/.complete" && ! -x "$FERRETDB_BIN" ]]; then
        # both missing: fetch them in parallel
        with_lock "$CAIRN_CACHE/.install-kafka.lock" install_kafka_locked &
        local kpid=$!
        with_lock "$CAIRN_CACHE/.install-ferretdb.lock" install_ferretdb_locked || { wait "$kpid" || true; exit 1; }
        wait "$kpid" || exit 1
    else
        with_lock "$CAIRN_CACHE/.install-kafka.lock" install_kafka_locked
        with_lock "$CAIRN_CACHE/.install-ferretdb.lock" install_ferretdb_locked
    fi
}

# --------------------------------------------------------------- security ---
# CAIRN_LOCAL_KAFKA_SECURITY=sasl_ssl: TLS material and SASL credentials, kept in
# $DATA_DIR/tls/ and created once per data dir, so a restart on a kept data dir
# (CAIRN_LOCAL_DATA_DIR) serves the same CA and accepts the same password.

# random_secret: 32 hex characters
random_secret() {
    openssl rand -hex 16
}

# write_secret FILE VALUE: write VALUE to FILE (mode 600) atomically
write_secret() {
    local file="$1" value="$2"
    (umask 077 && printf '%s\n' "$value" >"$file.tmp") && mv -f -- "$file.tmp" "$file"
}

# ensure_kafka_tls: a CA (ca.key, ca.pem) and a server certificate signed by it for
# IP:127.0.0.1 and DNS:localhost, packaged as a PKCS12 keystore (server.p12, password in
# keystore-password); and a client certificate for CN=cairn signed by the same CA, for the
# mutual-TLS listener (client.pem, client.key: PEM, key unencrypted, mode 600), also packaged as
# a PKCS12 keystore for the Kafka CLI tools (client.p12, same password). Existing files are
# reused; a missing server keystore or client certificate is re-issued from the existing CA (with
# the existing keystore password); a missing CA key means a new CA and so new certificates.
ensure_kafka_tls() {
    local dir="$TLS_DIR" tmp new_ca=0 new_keystore_password=0 new_client=0
    mkdir -p "$dir"
    chmod 700 "$dir"
    tmp="$(mktemp -d "$dir/.new.XXXXXX")"
    cat >"$tmp/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
EOF
    if [[ ! -s "$dir/ca.key" || ! -s "$dir/ca.pem" ]]; then
        log "generating a CA for Kafka's SASL_SSL listener in $dir"
        if ! (umask 077 && openssl req -x509 -config "$tmp/openssl.cnf" -extensions ca_ext \
                -newkey rsa:2048 -nodes -sha256 -days 3650 \
                -subj "/O=Cairn local/CN=Cairn local Kafka CA $(openssl rand -hex 4)" \
                -keyout "$tmp/ca.key" -out "$tmp/ca.pem") >"$tmp/openssl.log" 2>&1; then
            cat "$tmp/openssl.log" >&2 || true
            rm -rf -- "$tmp"
            die "openssl could not create the CA"
        fi
        chmod 644 "$tmp/ca.pem"
        mv -f -- "$tmp/ca.key" "$dir/ca.key"
        mv -f -- "$tmp/ca.pem" "$dir/ca.pem"
        new_ca=1
    fi
    if ((new_ca == 1)) || [[ ! -s "$dir/server.p12" || ! -s "$dir/keystore-password" ]]; then
        log "issuing the server certificate (IP:127.0.0.1, DNS:localhost) for Kafka's SASL_SSL listener"
        # keep an existing keystore password, so keystore-password and server.p12 always match
        if [[ -s "$dir/keystore-password" ]]; then
            cp -- "$dir/keystore-password" "$tmp/keystore-password"
        else
            (umask 077 && random_secret >"$tmp/keystore-password")
            new_keystore_password=1
        fi
        if ! (umask 077 \
                && openssl req -new -config "$tmp/openssl.cnf" -newkey rsa:2048 -nodes -sha256 \
                    -subj "/O=Cairn local/CN=localhost" -keyout "$tmp/server.key" -out "$tmp/server.csr" \
                && openssl x509 -req -in "$tmp/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
                    -set_serial "0x$(openssl rand -hex 16)" -sha256 -days 3650 \
                    -extfile "$tmp/openssl.cnf" -extensions server_ext -out "$tmp/server.pem" \
                && openssl pkcs12 -export -name kafka -in "$tmp/server.pem" -inkey "$tmp/server.key" \
                    -certfile "$dir/ca.pem" -passout "file:$tmp/keystore-password" -out "$tmp/server.p12") \
                >"$tmp/openssl.log" 2>&1; then
            cat "$tmp/openssl.log" >&2 || true
            rm -rf -- "$tmp"
            die "openssl could not issue the server certificate"
        fi
        local f
        for f in keystore-password server.key server.pem server.p12; do
            mv -f -- "$tmp/$f" "$dir/$f"
        done
    fi
    if ((new_ca == 1)) || [[ ! -s "$dir/client.pem" || ! -s "$dir/client.key" ]]; then
        log "issuing the client certificate (CN=cairn) for Kafka's mutual-TLS listener into $dir/client.pem"
        if ! (umask 077 \
                && openssl req -new -config "$tmp/openssl.cnf" -newkey rsa:2048 -nodes -sha256 \
                    -subj "/CN=cairn" -keyout "$tmp/client.key" -out "$tmp/client.csr" \
                && openssl x509 -req -in "$tmp/client.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
                    -set_serial "0x$(openssl rand -hex 16)" -sha256 -days 3650 \
                    -extfile "$tmp/openssl.cnf" -extensions client_ext -out "$tmp/client.pem") \
                >"$tmp/openssl.log" 2>&1; then
            cat "$tmp/openssl.log" >&2 || true
            rm -rf -- "$tmp"
            die "openssl could not issue the client certificate"
        fi
        chmod 600 "$tmp/client.key" "$tmp/client.pem"
        mv -f -- "$tmp/client.key" "$dir/client.key"
        mv -f -- "$tmp/client.pem" "$dir/client.pem"
        new_client=1
    fi
    # the CLI tools' keystore, derived from client.pem/client.key with the keystore password
    if ((new_client == 1 || new_keystore_password == 1)) || [[ ! -s "$dir/client.p12" ]]; then
        if ! (umask 077 && openssl pkcs12 -export -name cairn -in "$dir/client.pem" -inkey "$dir/client.key" \
                -certfile "$dir/ca.pem" -passout "file:$dir/keystore-password" -out "$tmp/client.p12") \
                >"$tmp/openssl.log" 2>&1; then
            cat "$tmp/openssl.log" >&2 || true
            rm -rf -- "$tmp"
            die "openssl could not package the client certificate as $dir/client.p12"
        fi
        mv -f -- "$tmp/client.p12" "$dir/client.p12"
    fi
    rm -rf -- "$tmp"
}

# ensure_kafka_password: CAIRN_LOCAL_KAFKA_PASSWORD, or the one generated for this data dir
ensure_kafka_password() {
    if [[ -n "${CAIRN_LOCAL_KAFKA_PASSWORD:-}" ]]; then
        KAFKA_SASL_PASSWORD="$CAIRN_LOCAL_KAFKA_PASSWORD"
        return 0
    fi
    if [[ ! -s "$TLS_DIR/kafka-password" ]]; then
        log "generating the SASL password for user $KAFKA_SASL_USER into $TLS_DIR/kafka-password"
        write_secret "$TLS_DIR/kafka-password" "$(random_secret)"
    fi
    chmod 600 "$TLS_DIR/kafka-password"
    KAFKA_SASL_PASSWORD="$(head -n 1 "$TLS_DIR/kafka-password")"
    [[ "$KAFKA_SASL_PASSWORD" =~ ^[A-Za-z0-9._~+/:@%^*!?#-]+$ ]] \
        || die "$TLS_DIR/kafka-password holds an unusable password; delete it (a new one is generated) or set CAIRN_LOCAL_KAFKA_PASSWORD"
}

# scram_fingerprint: identifies the SCRAM user+password the broker's metadata holds (stored in
# $TLS_DIR/scram-applied, so a changed user/password, or storage formatted without them, is
# noticed and the credentials are (re)set through the PLAINTEXT listener once Kafka is up).
scram_fingerprint() {
    printf '%s\n%s\n' "$KAFKA_SASL_USER" "$KAFKA_SASL_PASSWORD" | openssl dgst -sha256 -r | cut -d' ' -f1
}

# set_scram_credentials: upsert both SCRAM credentials of the user through the PLAINTEXT listener
# (ConfigCommand's --add-config-file does not take SCRAM credentials, so the password is on
# its command line for the second or so it runs; one mechanism per call, as the broker refuses
# to alter one user's credentials twice in one request)
set_scram_credentials() {
    local mechanism
    log "setting the SCRAM credentials of user $KAFKA_SASL_USER (the storage has none for this user/password)"
    for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
        timeout 30 java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m \
            -Dlog4j2.configurationFile="$KAFKA_HOME/config/tools-log4j2.properties" \
            -cp "$KAFKA_LIBS/*" kafka.admin.ConfigCommand \
            --bootstrap-server "127.0.0.1:$KAFKA_PORT" --alter \
            --entity-type users --entity-name "$KAFKA_SASL_USER" \
            --add-config "$mechanism=[password=$KAFKA_SASL_PASSWORD]" \
            >>"$DATA_DIR/kafka-readiness.log" 2>&1 || return 1
    done
    write_secret "$TLS_DIR/scram-applied" "$(scram_fingerprint)"
}

# ------------------------------------------------------------- readiness ---

kafka_cli() {
    # kafka_cli CLASS ARGS...: run a Kafka CLI class from the cached jars
    java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m \
        -Dlog4j2.configurationFile="$KAFKA_HOME/config/tools-log4j2.properties" \
        -cp "$KAFKA_LIBS/*" "$@"
}

kafka_ready() {
    if ((KAFKA_PLAINTEXT_OK == 0)); then
        kafka_plaintext_ready || return 1
        KAFKA_PLAINTEXT_OK=1
    fi
    [[ -n "$KAFKA_SECURITY" ]] || return 0
    # secure mode: ready means TLS + SASL (SCRAM-SHA-512) work on the SASL_SSL listener too, and
    # TLS with the client certificate on the mutual-TLS listener
    if ((KAFKA_SCRAM_PENDING > 0)); then
        if ! set_scram_credentials; then
            # not a start-up race (the PLAINTEXT listener answered): give up after 3 tries
            if ((++KAFKA_SCRAM_PENDING > 3)); then
                show_log_tail "Kafka readiness check" "$DATA_DIR/kafka-readiness.log"
                die "could not set the SCRAM credentials of user $KAFKA_SASL_USER"
            fi
            return 1
        fi
        KAFKA_SCRAM_PENDING=0
    fi
    if ((KAFKA_SASL_SSL_OK == 0)); then
        port_in_use "$KAFKA_SECURE_PORT" || return 1
        kafka_lists_topics "$KAFKA_SECURE_PORT" "$KAFKA_SECURE_ADMIN_CONFIG" || return 1
        KAFKA_SASL_SSL_OK=1
    fi
    port_in_use "$KAFKA_MTLS_PORT" || return 1
    kafka_lists_topics "$KAFKA_MTLS_PORT" "$KAFKA_MTLS_ADMIN_CONFIG"
}

# kafka_lists_topics PORT CLIENT_CONFIG: the broker on PORT answers a topic listing, end to end.
kafka_lists_topics() {
    timeout 30 java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m \
        -Dlog4j2.configurationFile="$KAFKA_HOME/config/tools-log4j2.properties" \
        -cp "$KAFKA_LIBS/*" org.apache.kafka.tools.TopicCommand \
        --bootstrap-server "127.0.0.1:$1" --command-config "$2" --list \
        >/dev/null 2>>"$DATA_DIR/kafka-readiness.log"
}

kafka_plaintext_ready() {
    port_in_use "$KAFKA_PORT" || return 1
    grep -q 'Kafka Server started' "$KAFKA_LOG" 2>/dev/null || return 1
    local cfg="$DATA_DIR/kafka-admin.properties"
    printf 'request.timeout.ms=5000\ndefault.api.timeout.ms=10000\n' >"$cfg"
    kafka_lists_topics "$KAFKA_PORT" "$cfg"
}

mongo_ready() {
    port_in_use "$MONGO_PORT" || return 1
    command -v python3 >/dev/null 2>&1 || return 0
    # A wire-protocol round trip: OP_MSG {hello: 1, $db: "admin"} -> ok: 1.0
    # (stdlib only, pymongo not needed).
    timeout 10 python3 - "$MONGO_PORT" <<'EOF' 2>/dev/null
import socket, struct, sys

def cstr(s): return s.encode() + b"\x00"
def bson(elems):
    body = b"".join(elems) + b"\x00"
    return struct.pack("<i", len(body) + 4) + body
doc = bson([b"\x10" + cstr("hello") + struct.pack("<i", 1),
            b"\x02" + cstr("$db") + struct.pack("<i", 6) + cstr("admin")])
payload = struct.pack("<I", 0) + b"\x00" + doc
msg = struct.pack("<iiii", 16 + len(payload), 1, 0, 2013) + payload
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(msg)
buf = b""
while len(buf) < 4 or len(buf) < struct.unpack("<i", buf[:4])[0]:
    chunk = s.recv(65536)
    if not chunk:
        sys.exit(1)
    buf += chunk
_, _, _, opcode = struct.unpack("<iiii", buf[:16])
i = buf.find(b"\x01ok\x00", 21)
ok = i >= 0 and struct.unpack("<d", buf[i + 4:i + 12])[0] == 1.0
sys.exit(0 if opcode == 2013 and ok else 1)
EOF
}

# ------------------------------------------------------------------- main ---

STARTED_KAFKA_PID=""
STARTED_MONGO_PID=""
CREATED_DATA_DIR=""

cleanup_on_error() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        [[ -n "$STARTED_MONGO_PID" ]] && stop_pid "FerretDB" "$STARTED_MONGO_PID" "ferretdb"
        [[ -n "$STARTED_KAFKA_PID" ]] && stop_pid "Kafka" "$STARTED_KAFKA_PID" "kafka.Kafka"
        if [[ -n "$CREATED_DATA_DIR" && "${CAIRN_LOCAL_KEEP_DATA:-0}" != 1 ]]; then
            rm -rf -- "$CREATED_DATA_DIR"
        fi
        if [[ -n "$STARTED_KAFKA_PID$STARTED_MONGO_PID" ]]; then
            rm -f -- "$STATE_FILE"
        fi
    fi
    exit "$rc"
}

start_all() {
    # runs in the with_lock subshell, so the error trap must be set here
    trap cleanup_on_error EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    # Refuse to clobber a running set recorded in the same state file.
    if [[ -f "$STATE_FILE" ]]; then
        local KAFKA_PID="" MONGO_PID="" KAFKA_BOOTSTRAP="" MONGO_URL=""
        # shellcheck disable=SC1090
        source "$STATE_FILE"
        if pid_matches "$KAFKA_PID" "kafka.Kafka" || pid_matches "$MONGO_PID" "ferretdb"; then
            die "already running (Kafka $KAFKA_BOOTSTRAP pid $KAFKA_PID, FerretDB $MONGO_URL pid $MONGO_PID) per $STATE_FILE; run deploy/local/down.sh first, or set CAIRN_LOCAL_STATE to another file for a second set"
        fi
        log "removing stale state file $STATE_FILE (its processes are gone)"
        stop_from_state "$STATE_FILE"
    fi

    if ((WANT_KAFKA == 1)); then
        command -v java >/dev/null 2>&1 || die "java not found (Kafka $KAFKA_VERSION needs Java 17+)"
    fi
    install_all

    local -a ports
    if [[ -n "$KAFKA_SECURITY" ]]; then
        mapfile -t ports < <(free_ports 5)
    else
        mapfile -t ports < <(free_ports 3)
    fi
    KAFKA_PORT="" CONTROLLER_PORT="" MONGO_PORT="" KAFKA_SECURE_PORT="" KAFKA_MTLS_PORT=""
    if ((WANT_KAFKA == 1)); then
        KAFKA_PORT="${CAIRN_LOCAL_KAFKA_PORT:-${ports[0]}}"
        CONTROLLER_PORT="${CAIRN_LOCAL_CONTROLLER_PORT:-${ports[1]}}"
        if [[ -n "$KAFKA_SECURITY" ]]; then
            KAFKA_SECURE_PORT="${CAIRN_LOCAL_KAFKA_SECURE_PORT:-${ports[3]}}"
            KAFKA_MTLS_PORT="${CAIRN_LOCAL_KAFKA_MTLS_PORT:-${ports[4]}}"
        fi
    fi
    if ((WANT_MONGO == 1)); then
        MONGO_PORT="${CAIRN_LOCAL_MONGO_PORT:-${ports[2]}}"
    fi
    local p
    for p in $KAFKA_PORT $KAFKA_SECURE_PORT $KAFKA_MTLS_PORT $CONTROLLER_PORT $MONGO_PORT; do
        [[ "$p" =~ ^[0-9]+$ ]] || die "bad port '$p'"
        ! port_in_use "$p" || die "port $p on 127.0.0.1 is already in use"
    done
    [[ -z "$KAFKA_PORT" || ("$KAFKA_PORT" != "$CONTROLLER_PORT" && "$KAFKA_PORT" != "$MONGO_PORT" && "$CONTROLLER_PORT" != "$MONGO_PORT") ]] \
        || die "Kafka, controller and FerretDB ports must differ"
    [[ -z "$KAFKA_SECURE_PORT" || ("$KAFKA_SECURE_PORT" != "$KAFKA_PORT" && "$KAFKA_SECURE_PORT" != "$CONTROLLER_PORT" && "$KAFKA_SECURE_PORT" != "$MONGO_PORT") ]] \
        || die "the Kafka SASL_SSL port (CAIRN_LOCAL_KAFKA_SECURE_PORT) must differ from the Kafka, controller and FerretDB ports"
    [[ -z "$KAFKA_MTLS_PORT" || ("$KAFKA_MTLS_PORT" != "$KAFKA_PORT" && "$KAFKA_MTLS_PORT" != "$KAFKA_SECURE_PORT" && "$KAFKA_MTLS_PORT" != "$CONTROLLER_PORT" && "$KAFKA_MTLS_PORT" != "$MONGO_PORT") ]] \
        || die "the Kafka mutual-TLS port (CAIRN_LOCAL_KAFKA_MTLS_PORT) must differ from the Kafka, SASL_SSL, controller and FerretDB ports"

    mkdir -p "$RUN_DIR"
    if [[ -n "${CAIRN_LOCAL_DATA_DIR:-}" ]]; then
        mkdir -p "$CAIRN_LOCAL_DATA_DIR"
        DATA_DIR="$(cd "$CAIRN_LOCAL_DATA_DIR" && pwd)"
        DATA_DIR_OWNED=0
    else
        DATA_DIR="$(mktemp -d "$RUN_DIR/data.XXXXXX")"
        CREATED_DATA_DIR="$DATA_DIR"
        DATA_DIR_OWNED=1
    fi
    mkdir -p "$DATA_DIR/kafka" "$DATA_DIR/ferretdb"
    KAFKA_LOG="" MONGO_LOG=""
    TLS_DIR="$DATA_DIR/tls"
    KAFKA_PLAINTEXT_OK=0 KAFKA_SCRAM_PENDING=0 KAFKA_SASL_SSL_OK=0 KAFKA_SECURE_ADMIN_CONFIG="" KAFKA_MTLS_ADMIN_CONFIG=""
    if [[ -n "$KAFKA_SECURITY" ]]; then
        ensure_kafka_tls
        ensure_kafka_password
        # client settings for the readiness check; usable with the Kafka CLI tools (--command-config)
        KAFKA_SECURE_ADMIN_CONFIG="$TLS_DIR/kafka-client.properties"
        (umask 077 && cat >"$KAFKA_SECURE_ADMIN_CONFIG.tmp" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$KAFKA_SASL_USER" password="$KAFKA_SASL_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
request.timeout.ms=5000
default.api.timeout.ms=10000
EOF
        )
        mv -f -- "$KAFKA_SECURE_ADMIN_CONFIG.tmp" "$KAFKA_SECURE_ADMIN_CONFIG"
        # the same for the mutual-TLS listener: the client certificate from client.p12
        KAFKA_MTLS_ADMIN_CONFIG="$TLS_DIR/kafka-mtls-client.properties"
        (umask 077 && cat >"$KAFKA_MTLS_ADMIN_CONFIG.tmp" <<EOF
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/client.p12
ssl.keystore.password=$(head -n 1 "$TLS_DIR/keystore-password")
ssl.key.password=$(head -n 1 "$TLS_DIR/keystore-password")
request.timeout.ms=5000
default.api.timeout.ms=10000
EOF
        )
        mv -f -- "$KAFKA_MTLS_ADMIN_CONFIG.tmp" "$KAFKA_MTLS_ADMIN_CONFIG"
    fi

    # --- FerretDB (SQLite backend). _txlock=immediate: writers take the lock when their transaction
    # begins, so concurrent writers queue instead of failing with SQLITE_BUSY on upgrade.
    if ((WANT_MONGO == 1)); then
        MONGO_LOG="$DATA_DIR/ferretdb.log"
        keep_old_log "$MONGO_LOG"
        log "starting FerretDB $FERRETDB_VERSION on 127.0.0.1:$MONGO_PORT"
        nohup "$FERRETDB_BIN" \
            --handler=sqlite \
            --sqlite-url="file:$DATA_DIR/ferretdb/?_txlock=immediate" \
            --state-dir="$DATA_DIR/ferretdb" \
            --listen-addr="127.0.0.1:$MONGO_PORT" \
            --debug-addr=- \
            --telemetry=disable \
            --log-level=warn \
            </dev/null >"$MONGO_LOG" 2>&1 9>&- &
        STARTED_MONGO_PID=$!
        wait_exec "$STARTED_MONGO_PID"
    fi

    # --- Kafka (KRaft combined broker+controller, static single-voter quorum)
    if ((WANT_KAFKA == 1)); then
        KAFKA_LOG="$DATA_DIR/kafka.log"
        local props="$DATA_DIR/server.properties"
        local listeners="PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT"
        local advertised="PLAINTEXT://127.0.0.1:$KAFKA_PORT"
        local protocol_map="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        if [[ -n "$KAFKA_SECURITY" ]]; then
            listeners="PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT,SSL://127.0.0.1:$KAFKA_MTLS_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT"
            advertised="PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT,SSL://127.0.0.1:$KAFKA_MTLS_PORT"
            protocol_map="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL"
            # it holds the PLAIN password and the keystore password
            rm -f -- "$props"
            (umask 077 && : >"$props")
        fi
        cat >"$props" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocol_map
log.dirs=$DATA_DIR/kafka
num.partitions=4
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.coordinator.append.linger.ms=0
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
EOF
        if [[ -n "$KAFKA_SECURITY" ]]; then
            cat >>"$props" <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USER="$KAFKA_SASL_PASSWORD";
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/server.p12
listener.name.sasl_ssl.ssl.keystore.password=$(head -n 1 "$TLS_DIR/keystore-password")
listener.name.sasl_ssl.ssl.key.password=$(head -n 1 "$TLS_DIR/keystore-password")
listener.name.sasl_ssl.ssl.client.auth=none
listener.name.ssl.ssl.keystore.type=PKCS12
listener.name.ssl.ssl.keystore.location=$TLS_DIR/server.p12
listener.name.ssl.ssl.keystore.password=$(head -n 1 "$TLS_DIR/keystore-password")
listener.name.ssl.ssl.key.password=$(head -n 1 "$TLS_DIR/keystore-password")
listener.name.ssl.ssl.truststore.type=PEM
listener.name.ssl.ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
EOF
        fi
        if [[ ! -f "$DATA_DIR/kafka/meta.properties" ]]; then
            local cluster_id
            # --cluster-id=VALUE, not "-t VALUE": a random id may start with "-" and read as an option.
            if command -v python3 >/dev/null 2>&1; then
                cluster_id="$(python3 -c 'import base64,uuid;print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
            else
                cluster_id="$(kafka_cli kafka.tools.StorageTool random-uuid)"
            fi
            local -a scram_args=()
            if [[ -n "$KAFKA_SECURITY" ]]; then
                # SCRAM credentials go into the bootstrap metadata, so they exist from the first start
                scram_args=(--add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]"
                    --add-scram "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]")
                log "formatting Kafka storage in $DATA_DIR/kafka (cluster id $cluster_id, SCRAM user $KAFKA_SASL_USER)"
            else
                log "formatting Kafka storage in $DATA_DIR/kafka (cluster id $cluster_id)"
            fi
            if ! kafka_cli kafka.tools.StorageTool format --ignore-formatted \
                    "--cluster-id=$cluster_id" -c "$props" ${scram_args[@]+"${scram_args[@]}"} \
                    >"$DATA_DIR/kafka-format.log" 2>&1; then
                show_log_tail "kafka-storage-format" "$DATA_DIR/kafka-format.log"
                die "kafka storage format failed"
            fi
            if [[ -n "$KAFKA_SECURITY" ]]; then
                write_secret "$TLS_DIR/scram-applied" "$(scram_fingerprint)"
            fi
        fi
        if [[ -n "$KAFKA_SECURITY" ]] \
                && [[ "$(head -n 1 "$TLS_DIR/scram-applied" 2>/dev/null)" != "$(scram_fingerprint)" ]]; then
            KAFKA_SCRAM_PENDING=1
        fi

        keep_old_log "$KAFKA_LOG"
        if [[ -n "$KAFKA_SECURITY" ]]; then
            log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT (PLAINTEXT), 127.0.0.1:$KAFKA_SECURE_PORT (SASL_SSL) and 127.0.0.1:$KAFKA_MTLS_PORT (SSL with client certificates) (controller 127.0.0.1:$CONTROLLER_PORT)"
        else
            log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT (controller 127.0.0.1:$CONTROLLER_PORT)"
        fi
        # shellcheck disable=SC2086  # heap options are meant to be word-split
        nohup java ${CAIRN_LOCAL_KAFKA_HEAP:--Xms128m -Xmx512m} \
            -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
            -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="$KAFKA_HOME/config/log4j2.properties" \
            -Dkafka.logs.dir="$DATA_DIR" \
            -cp "$KAFKA_LIBS/*" kafka.Kafka "$props" \
            </dev/null >"$KAFKA_LOG" 2>&1 9>&- &
        STARTED_KAFKA_PID=$!
        wait_exec "$STARTED_KAFKA_PID"
    fi

    KAFKA_BOOTSTRAP="${KAFKA_PORT:+127.0.0.1:$KAFKA_PORT}"
    KAFKA_PLAINTEXT_BOOTSTRAP="$KAFKA_BOOTSTRAP"
    if [[ -n "$KAFKA_SECURITY" ]]; then
        KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_SECURE_PORT"
    fi
    MONGO_URL="${MONGO_PORT:+mongodb://127.0.0.1:$MONGO_PORT/}"
    {
        printf '# written by deploy/local/up.sh at %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'ONLY=%q\n' "$ONLY_SERVER"
        printf 'KAFKA_PID=%q\n' "$STARTED_KAFKA_PID"
        printf 'MONGO_PID=%q\n' "$STARTED_MONGO_PID"
        printf 'KAFKA_PORT=%q\n' "$KAFKA_PORT"
        printf 'CONTROLLER_PORT=%q\n' "$CONTROLLER_PORT"
        printf 'MONGO_PORT=%q\n' "$MONGO_PORT"
        printf 'KAFKA_BOOTSTRAP=%q\n' "$KAFKA_BOOTSTRAP"
        printf 'MONGO_URL=%q\n' "$MONGO_URL"
        printf 'DATA_DIR=%q\n' "$DATA_DIR"
        printf 'DATA_DIR_OWNED=%q\n' "$DATA_DIR_OWNED"
        printf 'KAFKA_LOG=%q\n' "$KAFKA_LOG"
        printf 'MONGO_LOG=%q\n' "$MONGO_LOG"
        if [[ -n "$KAFKA_SECURITY" ]]; then
            # KAFKA_BOOTSTRAP is the SASL_SSL listener (what stdout exports); the password is in
            # KAFKA_CLIENT_CONFIG (mode 600), not here
            printf 'KAFKA_SECURITY=%q\n' "$KAFKA_SECURITY"
            printf 'KAFKA_SECURE_PORT=%q\n' "$KAFKA_SECURE_PORT"
            printf 'KAFKA_PLAINTEXT_BOOTSTRAP=%q\n' "$KAFKA_PLAINTEXT_BOOTSTRAP"
            printf 'KAFKA_SASL_USERNAME=%q\n' "$KAFKA_SASL_USER"
            printf 'KAFKA_SSL_CAFILE=%q\n' "$TLS_DIR/ca.pem"
            printf 'KAFKA_CLIENT_CONFIG=%q\n' "$KAFKA_SECURE_ADMIN_CONFIG"
            # the mutual-TLS listener: protocol SSL, CA KAFKA_SSL_CAFILE, the client certificate
            printf 'KAFKA_MTLS_PORT=%q\n' "$KAFKA_MTLS_PORT"
            printf 'KAFKA_MTLS_BOOTSTRAP=%q\n' "127.0.0.1:$KAFKA_MTLS_PORT"
            printf 'KAFKA_SSL_CERTFILE=%q\n' "$TLS_DIR/client.pem"
            printf 'KAFKA_SSL_KEYFILE=%q\n' "$TLS_DIR/client.key"
            printf 'KAFKA_MTLS_CLIENT_CONFIG=%q\n' "$KAFKA_MTLS_ADMIN_CONFIG"
        fi
    } >"$STATE_FILE.tmp"
    mv -f "$STATE_FILE.tmp" "$STATE_FILE"

    # --- wait for what was started to answer at protocol level
    local deadline=$((SECONDS + TIMEOUT)) kafka_ok=$((1 - WANT_KAFKA)) mongo_ok=$((1 - WANT_MONGO))
    while ((kafka_ok == 0 || mongo_ok == 0)); do
        if ((kafka_ok == 0)); then
            pid_matches "$STARTED_KAFKA_PID" "kafka.Kafka" || { show_log_tail Kafka "$KAFKA_LOG"; die "Kafka exited during startup"; }
            if kafka_ready; then
                kafka_ok=1
                if [[ -n "$KAFKA_SECURITY" ]]; then
                    log "Kafka is ready at $KAFKA_BOOTSTRAP (SASL_SSL: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN as user $KAFKA_SASL_USER; CA $TLS_DIR/ca.pem), at 127.0.0.1:$KAFKA_MTLS_PORT (SSL, client certificate required: $TLS_DIR/client.pem + client.key) and at $KAFKA_PLAINTEXT_BOOTSTRAP (PLAINTEXT)"
                else
                    log "Kafka is ready at $KAFKA_BOOTSTRAP"
                fi
            fi
        fi
        if ((mongo_ok == 0)); then
            pid_matches "$STARTED_MONGO_PID" "ferretdb" || { show_log_tail FerretDB "$MONGO_LOG"; die "FerretDB exited during startup"; }
            if mongo_ready; then mongo_ok=1; log "FerretDB is ready at $MONGO_URL"; fi
        fi
        ((kafka_ok == 1 && mongo_ok == 1)) && break
        if ((SECONDS >= deadline)); then
            ((kafka_ok == 1)) || show_log_tail Kafka "$KAFKA_LOG"
            ((kafka_ok == 1)) || show_log_tail "Kafka readiness check" "$DATA_DIR/kafka-readiness.log"
            ((mongo_ok == 1)) || show_log_tail FerretDB "$MONGO_LOG"
            die "not ready after ${TIMEOUT}s (kafka_ok=$kafka_ok ferretdb_ok=$mongo_ok)"
        fi
        sleep 0.5
    done
    if [[ -n "${CAIRN_LOCAL_STATE:-}" ]]; then
        log "state: $STATE_FILE (stop with: CAIRN_LOCAL_STATE=$STATE_FILE bash $CAIRN_LOCAL_DIR/down.sh)"
    elif [[ -n "${CAIRN_LOCAL_RUN_DIR:-}" ]]; then
        log "state: $STATE_FILE (stop with: CAIRN_LOCAL_RUN_DIR=$RUN_DIR bash $CAIRN_LOCAL_DIR/down.sh)"
    else
        log "state: $STATE_FILE (stop with: bash $CAIRN_LOCAL_DIR/down.sh)"
    fi
    if ((WANT_KAFKA == 1)); then
        printf 'export CAIRN_KAFKA_BOOTSTRAP=%s\n' "$KAFKA_BOOTSTRAP"
        if [[ -n "$KAFKA_SECURITY" ]]; then
            printf 'export CAIRN_KAFKA_SECURITY_PROTOCOL=SASL_SSL\n'
            printf 'export CAIRN_KAFKA_SASL_MECHANISM=SCRAM-SHA-512\n'
            printf 'export CAIRN_KAFKA_SASL_USERNAME=%q\n' "$KAFKA_SASL_USER"
            printf 'export CAIRN_KAFKA_SASL_PASSWORD=%q\n' "$KAFKA_SASL_PASSWORD"
            printf 'export CAIRN_KAFKA_SSL_CAFILE=%q\n' "$TLS_DIR/ca.pem"
        fi
    fi
    if ((WANT_MONGO == 1)); then
        printf 'export CAIRN_MONGO_URL=%s\n' "$MONGO_URL"
    fi
}

mkdir -p "$(dirname "$STATE_FILE")"
with_lock "$STATE_FILE.lock" start_all
