"""How a MongoDB-protocol server answers the lookups on Cairn's hot path, and whether their cost
grows with the collection: for each server, the query plan of a find by `_id` and by an indexed
field, and the time of find / replace / update / delete by `_id` of the newest documents (the ones
a running workflow touches) at 1,000, 10,000 and 40,000 documents, beside the insert that is the
commit point (issue 16, point 4; docs/research/ferretdb-backends.md).

    .venv/bin/python -m benchmarks.ferretdb_plans [--mongo URL ...] [--sizes 1000,10000,40000]

Each server gets a scratch database `cairn_plan_probe`, dropped at the end. Without --mongo, the
server named by CAIRN_MONGO_URL is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

from pymongo import ASCENDING, MongoClient
from pymongo.collection import Collection

DATABASE = "cairn_plan_probe"
SAMPLES = 30


def record(i: int) -> dict[str, Any]:
    """A task record's shape and size (about 400 bytes)."""
    return {
        "_id": f"task-{i:09d}",
        "workflowInstanceId": f"wf-{i // 10:08d}",
        "seq": i % 10,
        "status": "COMPLETED",
        "outputData": {"text": "x" * 300},
    }


def plan_of(collection: Collection[dict[str, Any]], query: dict[str, Any]) -> str:
    """The server's own words for how it runs `query` (FerretDB: the backend's SQL plan)."""
    explained = collection.database.command(
        "explain", {"find": collection.name, "filter": query}, verbosity="queryPlanner"
    )
    planner = explained.get("queryPlanner", {})
    if "winningPlan" in planner:  # MongoDB
        return json.dumps(planner["winningPlan"])[:160]
    plan = planner.get("Plan", planner)
    # FerretDB on SQLite: EXPLAIN QUERY PLAN lines; on PostgreSQL: EXPLAIN's JSON tree.
    shown = "; ".join(plan) if isinstance(plan, list) else " > ".join(_node_types(plan))
    return shown + f" (filterPushdown={explained.get('filterPushdown')})"


def _node_types(node: dict[str, Any]) -> list[str]:
    """PostgreSQL plan nodes, outermost first: "Gather > Seq Scan" or "Index Scan"."""
    kinds = [str(node.get("Node Type"))]
    for child in node.get("Plans", []):
        kinds += _node_types(child)
    return kinds


def timed(operation: Callable[[str], object], keys: list[str]) -> float:
    started = time.perf_counter()
    for key in keys:
        operation(key)
    return (time.perf_counter() - started) / len(keys) * 1000


def probe(url: str, sizes: list[int]) -> list[str]:
    client: MongoClient[dict[str, Any]] = MongoClient(url)
    info = client.server_info()
    lines = [f"== {url} ({info.get('ferretdbVersion') or 'MongoDB ' + info['version']})"]
    try:
        client.drop_database(DATABASE)
        tasks = client[DATABASE]["tasks"]
        tasks.create_index([("workflowInstanceId", ASCENDING), ("seq", ASCENDING)])
        present = 0
        for size in sizes:
            for start in range(present, size, 5_000):
                tasks.insert_many([record(i) for i in range(start, min(size, start + 5_000))])
            present = size
            newest = [f"task-{size - 1 - i:09d}" for i in range(SAMPLES)]
            costs = {
                "find _id": timed(lambda k: tasks.find_one({"_id": k}), newest),
                "replace _id": timed(lambda k: tasks.replace_one({"_id": k}, record(int(k[5:]))), newest),
                "update _id": timed(lambda k: tasks.update_one({"_id": k}, {"$set": {"seen": 1}}), newest),
                "delete _id": timed(lambda k: tasks.delete_one({"_id": k}), newest),
            }
            tasks.insert_many([record(int(k[5:])) for k in newest])  # back to `size` documents
            extra = [f"task-{10**8 + size + i:09d}" for i in range(SAMPLES)]
            costs["insert"] = timed(lambda k: tasks.insert_one({**record(0), "_id": k}), extra)
            tasks.delete_many({"_id": {"$in": extra}})
            lines.append(f"{size:>7} documents: " + ", ".join(f"{n} {ms:.2f} ms" for n, ms in costs.items()))
        lines.append("plan, find by _id:                " + plan_of(tasks, {"_id": "task-000000001"}))
        lines.append(
            "plan, find by workflowInstanceId: " + plan_of(tasks, {"workflowInstanceId": "wf-00000001"})
        )
    finally:
        client.drop_database(DATABASE)
        client.close()
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mongo", action="append", help="a MongoDB URL (repeatable)")
    parser.add_argument(
        "--sizes", type=lambda s: [int(n) for n in s.split(",")], default=[1_000, 10_000, 40_000]
    )
    args = parser.parse_args()
    urls = args.mongo or [os.environ.get("CAIRN_MONGO_URL", "mongodb://127.0.0.1:27017/")]
    for url in urls:
        print("\n".join(probe(url, args.sizes)), flush=True)
