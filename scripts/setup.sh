#!/usr/bin/env bash
# Create .venv (if missing) and install Cairn with its test tools into it. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
if [[ ! -x "$root/.venv/bin/python" ]]; then
    "$python" -m venv "$root/.venv"
fi
# pip's and setuptools' chatter goes to a log, shown only when the install fails.
log="$root/.venv/setup.log"
if ! { "$root/.venv/bin/python" -m pip install -q --upgrade pip &&
    "$root/.venv/bin/python" -m pip install -q -e "$root[test]"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup failed: the install log is above (and in $log)" >&2
    exit 1
fi
# docker-compose (Debian's v1) validates docker-compose*.yml offline for tests/deploy: `config -q`
# needs no Docker engine. Installed only when missing; apt-get needs root (as in CI).
if ! command -v docker-compose >/dev/null 2>&1; then
    if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "setup: docker-compose is missing; installing it needs root and apt-get: run" \
            "'sudo apt-get install docker-compose' (tests/deploy skip the compose check without it," \
            "and fail with CI=true)" >&2
    elif ! { apt-get update && apt-get install -y --no-install-recommends docker-compose; } >>"$log" 2>&1; then
        cat "$log" >&2
        echo "setup failed: could not install docker-compose (log above, and in $log)" >&2
        exit 1
    fi
fi
# PostgreSQL's server binaries, for tests/contract/test_ferretdb_postgresql.py (FerretDB on its
# PostgreSQL backend, in a throwaway cluster). Installed only when missing, as docker-compose is.
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "setup: PostgreSQL's server is missing; installing it needs root and apt-get: run" \
            "'sudo apt-get install postgresql' (tests of FerretDB on PostgreSQL skip without it," \
            "and fail with CI=true)" >&2
    elif ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql; } >>"$log" 2>&1; then
        cat "$log" >&2
        echo "setup failed: could not install postgresql (log above, and in $log)" >&2
        exit 1
    else
        # Debian's package creates a cluster and may start it on 5432: the tests start their own.
        pg_lsclusters -h 2>/dev/null | while read -r version name _; do
            pg_ctlcluster "$version" "$name" stop >>"$log" 2>&1 || true
        done
    fi
fi
