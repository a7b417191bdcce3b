#!/usr/bin/env bash
# Cairn's main job on its embedded default, from a fresh clone: install, start `cairn dev` (one
# process, state in one SQLite file, no Kafka or MongoDB needed), run the example workers over
# HTTP, register the example workflow, start a handful of orders and watch them complete.
# Everything it started stops at the end. (scripts/demo_kafka.sh runs the same on Kafka + FerretDB.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
export PATH="$root/.venv/bin:$PATH"
unset CAIRN_KAFKA_BOOTSTRAP CAIRN_MONGO_URL

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/cairn-demo.XXXXXX")"
port="${CAIRN_API_PORT:-$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export CAIRN_SERVER="http://127.0.0.1:$port" CAIRN_LOG_LEVEL=WARNING
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "== cairn dev --db $run_dir/cairn-dev.db --port $port"
cairn dev --db "$run_dir/cairn-dev.db" --port "$port" 2>"$run_dir/dev.log" &
pids+=($!)
healthy() { python -c 'import sys, httpx; httpx.get(sys.argv[1] + "/health").raise_for_status()' "$CAIRN_SERVER" 2>/dev/null; }
for _ in $(seq 100); do healthy && break; sleep 0.1; done
healthy || { echo "cairn dev did not start:"; cat "$run_dir/dev.log"; exit 1; }
cat "$run_dir/dev.log"

echo "== cairn worker examples.workers (HTTP long polling; log in $run_dir/worker.log)"
cairn worker examples.workers >"$run_dir/worker.log" 2>&1 &
pids+=($!)

source scripts/demo_orders.sh
