"""Each case's workflow on Conductor OSS and on Cairn, normalised and compared.

All selected cases run once, concurrently, in the session fixture `conformance_run`; each test
here compares one case's two results. The result may differ only in the paths the case's
KNOWN_DIFFERENCES entry lists.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

from tests.conformance.cases import build_cases
from tests.conformance.differences import KNOWN_DIFFERENCES
from tests.conformance.normalise import differing_paths, normalise, report
from tests.conformance.runner import Run, plain_kafka_bootstrap
from tests.needs import unavailable

CASES_BY_NAME = build_cases("conf_")
CASES = sorted(CASES_BY_NAME)


def _no_kafka_queues(execution: dict[str, Any]) -> bool:
    return any(
        task.get("taskType") == "EVENT"
        and "Unknown queue type kafka" in (task.get("reasonForIncompletion") or "")
        for task in execution.get("tasks") or []
    )


def test_differences_name_real_cases() -> None:
    unknown = sorted(set(KNOWN_DIFFERENCES) - set(CASES))
    assert not unknown, f"KNOWN_DIFFERENCES has entries for no case: {unknown}"
    for name, entries in KNOWN_DIFFERENCES.items():
        assert entries, f"{name}: list at least one difference, or remove the case's key"
        paths = [path for entry in entries for path in entry.paths]
        assert len(set(paths)) == len(paths), f"{name}: a path is listed twice"
        for entry in entries:
            assert entry.paths, f"{name}: an entry must list the paths that differ"
            assert entry.reason.strip(), f"{name}: an entry needs a reason"
            assert entry.kind in ("bug", "deliberate"), f"{name}: kind is bug or deliberate"


@pytest.mark.timeout(900)  # the first test of a session also waits for both servers to start
@pytest.mark.parametrize("case", CASES)
def test_conformance(case: str, conformance_run: Run) -> None:
    outcomes = conformance_run.outcomes[case]
    errors = {server: o.error for server, o in outcomes.items() if o.error}
    if errors:
        worker_errors = {s: e[:5] for s, e in conformance_run.worker_errors.items() if e}
        pytest.fail(
            f"case {case!r} could not run:\n"
            + "\n".join(f"--- {server}:\n{error}" for server, error in errors.items())
            + (f"\nworker errors: {json.dumps(worker_errors, indent=1)}" if worker_errors else "")
        )
    conductor_execution = outcomes["conductor"].execution
    cairn_execution = outcomes["cairn"].execution
    assert conductor_execution is not None and cairn_execution is not None
    if CASES_BY_NAME[case].needs_conductor_kafka and _no_kafka_queues(conductor_execution):
        message = (
            "Conductor was started without Kafka event queues, so its EVENT task cannot publish to a "
            "kafka: sink (start it with CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP, as scripts/test.sh does)"
        )
        if plain_kafka_bootstrap():
            unavailable(message)  # Kafka is there, so the Conductor should have had it
        pytest.skip(message)
    conductor = normalise(conductor_execution, conformance_run.prefix)
    cairn = normalise(cairn_execution, conformance_run.prefix)
    found = differing_paths(conductor, cairn)
    reruns = outcomes["conductor"].reruns
    if reruns:
        warnings.warn(
            f"{case}: Conductor's run was made {reruns + 1} times (it lost an update: runner.lost_update)",
            stacklevel=1,
        )
    listed = {path for entry in KNOWN_DIFFERENCES.get(case, ()) for path in entry.paths}
    unexpected = {path: values for path, values in found.items() if path not in listed}
    fixed = sorted(listed - set(found))
    if unexpected or fixed:
        pytest.fail(report(case, conductor, cairn, unexpected, fixed), pytrace=False)
