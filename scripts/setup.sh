#!/usr/bin/env bash
# Create .venv (if missing) and install Cairn with its test tools into it. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
if [[ ! -x "$root/.venv/bin/python" ]]; then
    "$python" -m venv "$root/.venv"
fi
"$root/.venv/bin/python" -m pip install -q --upgrade pip >&2
"$root/.venv/bin/python" -m pip install -q -e "$root[test]" >&2
