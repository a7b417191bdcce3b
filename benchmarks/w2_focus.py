"""W2 alone, with enough workflows to tell a few percent apart: `cairn dev` (plain, no SQLite
counters) and one HTTP worker, a warm-up, then W2 K=3 and W2 K=1 at concurrency 1.

    .venv/bin/python -m benchmarks.w2_focus [--workflows 150]

Why: `w1_w2`'s W2 figures rest on 20 workflows each, whose p50 scatters by ±15% between two
runs of the same code; a change worth 1-5% of W2 needs more samples. Run it from each tree
(`cd TREE && PYTHONPATH=TREE TREE/.venv/bin/python -m benchmarks.w2_focus`), alternating the
trees, as benchmarks/README.md's thirteenth part does. Prints one JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json

from benchmarks.w1_w2 import embedded_driver, window


async def measure(workflows: int) -> dict[str, float]:
    async with embedded_driver(count_sqlite=False) as driver:
        await driver.run_one("bench_k1", 0)
        await window(driver, 3, 20, 1)  # warm-up: connections, caches, the worker's first polls
        k3 = await window(driver, 3, workflows, 1)
        k1 = await window(driver, 1, workflows, 1)
    return {"w2k3_p50_ms": round(k3["p50_ms"], 2), "w2k1_p50_ms": round(k1["p50_ms"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=150, help="workflows per figure (default 150)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.workflows))))


if __name__ == "__main__":
    main()
