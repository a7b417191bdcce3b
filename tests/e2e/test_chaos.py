"""The chaos soak's short form (benchmarks/chaos.py): services SIGKILLed and restarted at random
while a mix of workflows runs, then every workflow checked for its exact outcome.

Bounded for CI on a 2-core machine: 40 workflows started over ~22 s, a kill every ~2.5 s for 28 s
(every service killed at least twice: victims are drawn in shuffled rounds), then the drain, which
ends as soon as every workflow has finished: 75-90 s in all on an otherwise idle machine. The
drain's deadline is generous (90 s) so that "stuck" means stuck, not slow: on a machine loaded by
other work the test takes longer rather than failing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos import PROBLEMS, VICTIMS, ChaosConfig, render, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SHORT = ChaosConfig(workflows=40, duration_s=28, kill_every_s=2.5, seed=7, drain_s=90)


async def test_short_chaos_soak_loses_nothing(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> None:
    report = await run_chaos(SHORT, kafka_bootstrap, mongo_url, tmp_path, unique)
    print(render(report))  # the figures, with `pytest -s`
    explain = f"{render(report)}\n{json.dumps(report['crashes'], indent=1)}\n{report['diagnostics']}"
    counts = report["workflows"]

    assert {problem: counts[problem] for problem in PROBLEMS} == dict.fromkeys(PROBLEMS, 0), explain
    assert counts["started"] == counts["completed"] == SHORT.workflows, explain
    assert report["crashes"] == [], explain
    # Not vacuous: the kills happened, to every service, and the retry, timeout and signal
    # paths were taken under them.
    assert sum(report["kills"].values()) >= 8, explain
    assert set(report["kills"]) == set(VICTIMS), explain
    assert report["retries"]["failed_executions"] >= SHORT.workflows // 4, explain
    assert report["retries"]["timed_out_by"].get("responseTimeoutSeconds", 0) >= SHORT.workflows // 4, explain
    assert report["signals_sent"] == SHORT.workflows // 4, explain
