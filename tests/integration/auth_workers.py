"""A worker for the auth tests' `cairn worker` process: one task type, the one the limited
worker key of tests/authkeys.py may work on."""

from typing import Any

from cairn import worker
from tests.authkeys import LIMITED_TYPE


@worker(LIMITED_TYPE)
def add_one(task_input: dict[str, Any]) -> dict[str, Any]:
    return {"n": task_input["n"] + 1}
