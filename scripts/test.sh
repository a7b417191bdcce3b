#!/usr/bin/env bash
# The whole test suite from a fresh machine: install, start real Kafka + FerretDB, lint, type-check,
# run every test (unit, contract, integration, e2e), stop the servers. .ci/run calls exactly this.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/unit`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh

started_servers=""
cleanup() {
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

echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy
echo "== pytest (Kafka $CAIRN_KAFKA_BOOTSTRAP, MongoDB protocol $CAIRN_MONGO_URL)" >&2
.venv/bin/pytest -p no:cacheprovider -rfEs "$@"
