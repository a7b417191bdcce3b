"""The benchmarks' results files: written where the README's commands say, on a fresh clone too
(benchmarks/results/ is not in the repository)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.cli import write_results


def test_results_are_written_into_a_folder_that_does_not_exist_yet(tmp_path: Path) -> None:
    target = tmp_path / "benchmarks" / "results" / "run.json"
    write_results(target, {"W1 K=10": {"steps_per_s": 812.5}})
    assert json.loads(target.read_text()) == {"W1 K=10": {"steps_per_s": 812.5}}
