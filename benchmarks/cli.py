"""What every benchmark's command line shares: the record a results file starts with, and running,
keeping the raw figures and printing them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def checked_out_commit() -> str | None:
    """The checked-out commit (None outside a git work tree, e.g. in an exported snapshot)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def settle_run_dir(run_dir: Path, succeeded: bool) -> None:
    """A run's directory (state file, logs) is removed after a run that went through, unless
    CAIRN_BENCH_KEEP_RUN_DIR is set; a failed run's is kept for its logs, and named. Each one
    holds tens of MB, and a sitting makes dozens."""
    if succeeded and not os.environ.get("CAIRN_BENCH_KEEP_RUN_DIR"):
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        print(f"run directory kept: {run_dir}", file=sys.stderr)


def run_record(module: str) -> dict[str, Any]:
    """What every results file starts with: the command that made it, the commit, and when."""
    return {
        "command": f"python -m {module} " + " ".join(sys.argv[1:]),
        "commit": checked_out_commit(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def run_and_report(
    main: Callable[[Any], Coroutine[Any, Any, dict[str, Any]]],
    args: Any,
    summarise: Callable[[dict[str, Any]], str],
    json_path: Path | None,
) -> dict[str, Any]:
    """Run `main(args)`, write its results to `json_path` (if given) before anything can fail in
    the summary, print the summary, and return the results."""
    outcome = asyncio.run(main(args))
    if json_path is not None:
        write_results(json_path, outcome)
    print(summarise(outcome))
    return outcome


def write_results(path: Path, results: Any) -> None:
    """Write a run's results as JSON, making the folder first: benchmarks/results/, where the
    README's commands write, is not in the repository (a fresh clone lost a whole run's figures
    to a missing folder, after the run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
