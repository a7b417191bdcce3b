"""What a test does when something it needs is missing: skip on a developer's machine, fail in
CI (CI=true), so a broken install can never pass as a green run."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(message: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)
