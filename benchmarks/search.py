"""Search over many finished executions on `cairn dev`'s store (issue 13: "a search over 100,000
finished executions answers in under 100 ms").

Fills a fresh SQLite state file with N finished executions of a few workflow types (committed
through the store port, as the decider commits them, in batches), then starts `cairn dev` on it
and times each query form through `GET /api/workflow/search` (HTTP, JSON, the api's whole path):
the median and worst of R calls each, with the exact totalHits it answered.

    .venv/bin/python -m benchmarks.search --executions 100000 --repeat 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.cli import write_results
from shared.adapters.sqlite_store import SqliteStore
from shared.models.documents import WorkflowDocument
from shared.models.runtime import WorkflowState, WorkflowStatus
from shared.ports.store import Commit
from tests.devserver import DevServer

T0 = 1_700_000_000_000
TYPES = ("orders", "refunds", "shipments", "invoices")
ENDINGS = (WorkflowStatus.COMPLETED,) * 8 + (WorkflowStatus.FAILED, WorkflowStatus.TERMINATED)


def execution(n: int) -> WorkflowDocument:
    workflow_id = f"wf-{n:07d}"
    status = ENDINGS[n % len(ENDINGS)]
    state = WorkflowState(
        workflow_id=workflow_id,
        workflow_name=TYPES[n % len(TYPES)],
        workflow_version=1 + n % 3,
        status=status,
        input={"orderId": f"order-{n}", "amount": n % 500},
        output={"receipt": f"r-{n}"},
        correlation_id=f"customer-{n % 5000}",
        create_time=T0 + n * 1000,
        start_time=T0 + n * 1000,
        end_time=T0 + n * 1000 + 700,
        update_time=T0 + n * 1000 + 700,
    )
    return WorkflowDocument(workflow_id=workflow_id, version=1, state=state, updated_at=state.end_time)


async def fill(path: Path, executions: int, batch: int = 1000) -> float:
    store = SqliteStore(str(path))
    await store.open()
    started = time.perf_counter()
    try:
        for first in range(0, executions, batch):
            commits = [Commit(execution(n), 0) for n in range(first, min(first + batch, executions))]
            assert all(await store.commit_workflows(commits))
    finally:
        await store.close()
    return time.perf_counter() - started


def queries(executions: int) -> dict[str, dict[str, str]]:
    recent = T0 + (executions - 2000) * 1000
    return {
        "type and status": {"query": "workflowType = orders AND status = FAILED"},
        "types IN, status IN, start after": {
            "query": "workflowType IN (orders, refunds) AND status IN (FAILED, TERMINATED)"
            f" AND startTime > {recent}"
        },
        "correlation id": {"query": "correlationId = 'customer-42'"},
        "workflow id": {"query": f"workflowId = 'wf-{executions // 2:07d}'"},
        "everything, newest first": {},
        "status, oldest first, page 50": {
            "query": "status = COMPLETED",
            "sort": "startTime:ASC",
            "start": "5000",
        },
        "free text": {
            "freeText": "order-4242",
            "query": "workflowType = invoices OR workflowType = shipments",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-search-") as directory:
        db = Path(directory) / "cairn-dev.db"
        fill_s = asyncio.run(fill(db, args.executions))
        print(f"filled {args.executions} finished executions in {fill_s:.1f} s", file=sys.stderr)
        server = DevServer(Path(directory), db, CAIRN_RETENTION_DAYS="0")  # keep them all
        server.start()
        results: dict[str, Any] = {"executions": args.executions, "fill_s": round(fill_s, 1), "queries": {}}
        try:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                for name, params in queries(args.executions).items():
                    http.get("/api/workflow/search", params=params).raise_for_status()  # warm
                    took, total = [], 0
                    for _ in range(args.repeat):
                        t0 = time.perf_counter()
                        answer = http.get("/api/workflow/search", params=params)
                        took.append((time.perf_counter() - t0) * 1000)
                        answer.raise_for_status()
                        total = answer.json()["totalHits"]
                    results["queries"][name] = {
                        "params": params,
                        "totalHits": total,
                        "median_ms": round(statistics.median(took), 1),
                        "max_ms": round(max(took), 1),
                    }
        finally:
            server.process.stop()
    print(f"{'query':36} {'totalHits':>9} {'median ms':>10} {'max ms':>8}")
    for name, row in results["queries"].items():
        print(f"{name:36} {row['totalHits']:>9} {row['median_ms']:>10} {row['max_ms']:>8}")
    if args.json:
        write_results(args.json, results)


if __name__ == "__main__":
    main()
