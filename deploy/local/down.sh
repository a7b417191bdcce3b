#!/usr/bin/env bash
# Stop what deploy/local/up.sh started (the PIDs recorded in its state file:
# both servers, or only the one a CAIRN_LOCAL_ONLY=kafka|ferretdb run started),
# remove the per-run data directory it created, and remove the state file.
# Safe to run more than once.
#
# Environment: CAIRN_LOCAL_STATE / CAIRN_LOCAL_RUN_DIR as for up.sh;
# CAIRN_LOCAL_KEEP_DATA=1 keeps the per-run data dir (logs included).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

if [[ ! -f "$STATE_FILE" ]]; then
    log "nothing to stop (no state file $STATE_FILE)"
    exit 0
fi
with_lock "$STATE_FILE.lock" stop_from_state "$STATE_FILE"
log "stopped (state file $STATE_FILE removed)"
