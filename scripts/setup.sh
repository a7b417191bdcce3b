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
