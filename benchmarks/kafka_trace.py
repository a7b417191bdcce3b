"""Where a W2 step's time goes on Kafka + FerretDB: every message of a few workflows, in order,
with its Kafka timestamp (the producer's create time) relative to the workflow's start message,
then W2 K=3 and K=1 p50s over enough workflows to tell a few milliseconds apart.

    source <(CAIRN_LOCAL_STATE=/tmp/srv/state.env bash deploy/local/up.sh)   # or let it start them
    .venv/bin/python -m benchmarks.kafka_trace [--workflows 150] [--show 3]

A step is two hops: the decider's (a task's result to the next dispatch: fetch, decide, commit,
publish) and the worker's (dispatch to result). To compare two trees, run it from each, in turns
(`cd TREE && PYTHONPATH=TREE TREE/.venv/bin/python -m benchmarks.kafka_trace`), on the same
servers. benchmarks/README.md, fifteenth part, shows what it found. Prints the traces, then one
JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from benchmarks.w1_w2 import KafkaDriver, kafka_driver, window


async def messages_of(driver: KafkaDriver) -> list[tuple[int, str, str]]:
    """(timestamp ms, topic without the run's prefix, key and the value's first bytes) of every
    record on the run's topics."""
    bootstrap = driver.cluster.env["CAIRN_KAFKA_BOOTSTRAP"]
    prefix = driver.cluster.topics.prefix
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        topics = [t for t in await admin.list_topics() if t.startswith(prefix)]
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    partitions = [TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    found: list[tuple[int, str, str]] = []
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        while batch := await consumer.getmany(timeout_ms=500):
            for partition, records in batch.items():
                for record in records:
                    text = (
                        (record.key or b"").decode(errors="replace")
                        + " "
                        + (record.value or b"")[:400].decode(errors="replace")
                    )
                    found.append((record.timestamp, partition.topic.removeprefix(prefix), text))
    finally:
        await consumer.stop()
    return found


def print_trace(workflow_id: str, found: list[tuple[int, str, str]]) -> None:
    mine = sorted(m for m in found if workflow_id in m[2])
    if not mine:
        return
    print(f"== {workflow_id}")
    start = previous = mine[0][0]
    for timestamp, topic, _ in mine:
        print(f"  {timestamp - start:5d} ms (+{timestamp - previous:3d})  {topic}")
        previous = timestamp


async def trace(workflows: int, show: int) -> dict[str, Any]:
    async with kafka_driver() as driver:
        await window(driver, 3, 20, 1)  # warm-up
        first = len(driver.started)
        k3 = await window(driver, 3, workflows, 1)
        traced = driver.started[first : first + show]
        k1 = await window(driver, 1, workflows, 1)
        found = await messages_of(driver)
    for workflow_id in traced:
        print_trace(workflow_id, found)
    return {"w2k3_p50_ms": round(k3["p50_ms"], 1), "w2k1_p50_ms": round(k1["p50_ms"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=150, help="workflows per p50 (default 150)")
    parser.add_argument("--show", type=int, default=3, help="W2 K=3 workflows to trace (default 3)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(trace(args.workflows, args.show))))


if __name__ == "__main__":
    main()
