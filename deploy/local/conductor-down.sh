#!/usr/bin/env bash
# Stop the Conductor server deploy/local/conductor-up.sh started (the PID recorded in its state
# file), remove the per-run data directory it created, and remove the state file.
# Safe to run more than once.
#
# Environment: CAIRN_LOCAL_CONDUCTOR_STATE / CAIRN_LOCAL_RUN_DIR as for conductor-up.sh;
# CAIRN_LOCAL_KEEP_DATA=1 keeps the per-run data dir (database and log included).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

CONDUCTOR_STATE_FILE="${CAIRN_LOCAL_CONDUCTOR_STATE:-$RUN_DIR/conductor.env}"

# stop_conductor FILE: stop the server FILE records (only if its PID still runs the command line
# conductor-up.sh started), remove the data dir if conductor-up.sh created it, then remove FILE.
stop_conductor() {
    local file="$1"
    local CONDUCTOR_PID="" CONDUCTOR_MATCH="" DATA_DIR="" DATA_DIR_OWNED=0
    [[ -f "$file" ]] || return 0
    # shellcheck disable=SC1090
    source "$file"
    if [[ -n "$CONDUCTOR_MATCH" ]]; then
        stop_pid "Conductor" "$CONDUCTOR_PID" "$CONDUCTOR_MATCH"
    fi
    if [[ "$DATA_DIR_OWNED" == 1 && -n "$DATA_DIR" && -d "$DATA_DIR" ]]; then
        if [[ "${CAIRN_LOCAL_KEEP_DATA:-0}" == 1 ]]; then
            log "keeping data dir $DATA_DIR (CAIRN_LOCAL_KEEP_DATA=1)"
        else
            rm -rf -- "$DATA_DIR"
        fi
    fi
    rm -f -- "$file"
}

if [[ ! -f "$CONDUCTOR_STATE_FILE" ]]; then
    log "nothing to stop (no state file $CONDUCTOR_STATE_FILE)"
    exit 0
fi
with_lock "$CONDUCTOR_STATE_FILE.lock" stop_conductor "$CONDUCTOR_STATE_FILE"
log "stopped (state file $CONDUCTOR_STATE_FILE removed)"
