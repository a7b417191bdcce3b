#!/usr/bin/env bash
# Cairn on its production adapters, from a fresh clone: install, start real Kafka + FerretDB,
# run the four services and the example workers as separate processes, register the example
# workflow, start a handful of orders and watch them complete. Everything stops at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
export PATH="$root/.venv/bin:$PATH"

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/cairn-demo.XXXXXX")"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    CAIRN_LOCAL_STATE="$run_dir/state.env" bash deploy/local/down.sh || true
}
trap cleanup EXIT

echo "== starting Kafka and FerretDB (first run installs them: a few minutes)"
exports="$(CAIRN_LOCAL_STATE="$run_dir/state.env" CAIRN_LOCAL_RUN_DIR="$run_dir" bash deploy/local/up.sh)"
eval "$exports"
export CAIRN_KAFKA_BOOTSTRAP CAIRN_MONGO_URL CAIRN_LOG_LEVEL=WARNING

echo "== starting services: decider scheduler timer sweeper + example workers (logs in $run_dir)"
for service in decider scheduler timer sweeper; do
    cairn run "$service" >"$run_dir/$service.log" 2>&1 &
    pids+=($!)
done
cairn worker examples.workers >"$run_dir/worker.log" 2>&1 &
pids+=($!)

source scripts/demo_orders.sh
