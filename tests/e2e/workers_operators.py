"""Workers for the operator end-to-end tests: the examples' workers, plus a slow one that keeps a
fork open long enough to kill the decider while it is."""

import asyncio
from typing import Any

from cairn import worker
from examples import operator_workers  # noqa: F401  (registers the examples' workers)
from examples.operator_workers import PRICES


@worker("slow_price")
async def slow_price(item: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(float(item.get("delay_s", 0.5)))
    return {"sku": item["sku"], "amount": PRICES.get(item["sku"], 5.0) * int(item.get("qty", 1))}


@worker("echo_branch")
def echo_branch(branch: dict[str, Any]) -> dict[str, Any]:
    return {"index": branch["__index"], "doubled": 2 * int(branch["n"])}
