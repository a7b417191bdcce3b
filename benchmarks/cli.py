"""What every benchmark's command line does after parsing: run, keep the raw figures, print."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any


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
        json_path.write_text(json.dumps(outcome, indent=2))
    print(summarise(outcome))
    return outcome
