"""Finding the command-line checkers tests/deploy run: outside CI a missing one skips its test;
with CI=true it fails, so a broken install can never pass as a green run (as tests/conftest.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.needs import unavailable

ROOT = Path(__file__).resolve().parents[2]


def require_tool(name: str, install: str) -> str:
    """The path of `name`: in the test interpreter's bin directory (the venv) or on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found:
        return found
    unavailable(f"{name} is needed for this check: {install}")
