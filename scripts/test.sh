#!/usr/bin/env bash
# The whole test suite from a fresh machine: install, start real Kafka + FerretDB and a Conductor OSS
# server, lint, type-check, run every test (unit, contract, integration, e2e, conformance), stop the
# servers. .ci/run calls exactly this.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/unit`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh

# The small real model of tests/e2e/test_real_model_e2e.py builds from source for minutes the
# first time: in the background, while the servers start and the linters run.
model_log="$(mktemp "${TMPDIR:-/tmp}/cairn-model-setup.XXXXXX")"
setsid bash scripts/setup_model.sh >"$model_log" 2>&1 &
model_setup=$!  # its own process group: a stopped run stops the compilers too

started_servers=""
started_conductor=""
cleanup() {
    kill -- -"$model_setup" 2>/dev/null || true
    if [[ -n "$started_conductor" ]]; then
        CAIRN_LOCAL_CONDUCTOR_STATE="$started_conductor" bash deploy/local/conductor-down.sh || true
        rm -rf -- "$(dirname "$started_conductor")"
    fi
    if [[ -n "$started_servers" ]]; then
        CAIRN_LOCAL_STATE="$started_servers" bash deploy/local/down.sh || true
    fi
}
trap cleanup EXIT

if [[ -z "${CAIRN_KAFKA_BOOTSTRAP:-}" || -z "${CAIRN_MONGO_URL:-}" ]]; then
    state_dir="$(mktemp -d "${TMPDIR:-/tmp}/cairn-test.XXXXXX")"
    started_servers="$state_dir/state.env"
    # Assign first: a failing up.sh then stops this script (set -e does not see inside eval "$(...)").
    exports="$(CAIRN_LOCAL_STATE="$started_servers" CAIRN_LOCAL_RUN_DIR="$state_dir" bash deploy/local/up.sh)"
    eval "$exports"
fi
export CAIRN_KAFKA_BOOTSTRAP CAIRN_MONGO_URL

# A real Conductor OSS for tests/conformance (conductor-up.sh finds a Java 21+), with Kafka event
# queues on the broker above (plain listener only) so its EVENT tasks publish as Cairn's do.
if [[ -z "${CAIRN_CONDUCTOR_URL:-}" ]]; then
    started_conductor="$(mktemp -d "${TMPDIR:-/tmp}/cairn-conductor.XXXXXX")/conductor.env"
    conductor_kafka=""
    if [[ "${CAIRN_KAFKA_SECURITY_PROTOCOL:-PLAINTEXT}" == PLAINTEXT ]]; then
        conductor_kafka="$CAIRN_KAFKA_BOOTSTRAP"
    fi
    exports="$(CAIRN_LOCAL_CONDUCTOR_STATE="$started_conductor" \
        CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP="${CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP:-$conductor_kafka}" \
        bash deploy/local/conductor-up.sh)"
    eval "$exports"
fi
export CAIRN_CONDUCTOR_URL

echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy
if [[ $# -eq 0 ]] && ! wait "$model_setup"; then
    cat "$model_log" >&2
    echo "setup failed: the small model's server (scripts/setup_model.sh) did not install" >&2
    exit 1
fi
echo "== pytest (Kafka $CAIRN_KAFKA_BOOTSTRAP, MongoDB protocol $CAIRN_MONGO_URL, Conductor $CAIRN_CONDUCTOR_URL)" >&2
.venv/bin/pytest -p no:cacheprovider -rfEs "$@"
