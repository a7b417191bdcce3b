"""Where a step's time goes in `cairn dev` (embedded mode), for the W2 latency workload.

    .venv/bin/python -m benchmarks.profile_embedded [--workflows 20] [--k 10] [--concurrency 1]

Starts `cairn dev` and one HTTP worker as the benchmark does (benchmarks.w1_w2.EmbeddedDriver),
runs `--workflows` workflows of `--k` no-op steps at `--concurrency`, and reports:

1. The hops of each step, from timestamps the engine already writes to the state file (no engine
   change, millisecond resolution, medians over all steps):
   decision -> dispatch published  (decider: decide, store commit, bus append: `tasks.<type>`)
   -> handed to the poller         (bus wake-up of the api's dispatcher, long-poll hand-out:
                                    workflow load + claim write; the claim row's lease start)
   -> result published             (HTTP response to the worker, the worker's POST /api/tasks:
                                    workflow load, checks, bus append: `task.result`; the
                                    api's "started" report on that topic is not counted)
   -> next decision                (bus wake-up of the decider: the round's clock reading)
2. With py-spy on PATH or beside this Python (`pip install py-spy`): the dev process's on-CPU samples,
   grouped by the innermost recognisable layer (HTTP stack, OpenTelemetry, pydantic, SQLite,
   asyncio and thread hand-offs, Cairn code), plus inclusive shares of the main entry points.
3. The SQLite counters of benchmarks.instrumented_dev per step (lock waits, COMMIT time).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.instrumented_dev import read_counters
from benchmarks.w1_w2 import INLINE_PREFIX, EmbeddedDriver, inline_chains
from tests.e2e.cluster import _die_with_parent

HOPS = (
    "decide+commit+publish dispatch",
    "dispatcher hand-out",
    "worker round trip + result publish",
    "decider pickup",
)


def step_hops(db: Path, name_prefix: str) -> dict[str, list[int]]:
    """Per task execution of workflows named `name_prefix*`: the five hop durations in ms."""
    connection = sqlite3.connect(db)
    try:
        published: dict[tuple[str, str], int] = {}
        rows = connection.execute(
            "SELECT topic, value, published_at FROM bus_messages"
            " WHERE topic = 'cairn.task.result' OR topic LIKE 'cairn.tasks.%'"
        ).fetchall()
        lease_of: dict[str, int] = {}
        for topic, value, published_at in rows:
            message = json.loads(value)
            if message.get("status") == "IN_PROGRESS":
                continue  # the api's "started" report (and heartbeats): not the result
            kind = "result" if topic == "cairn.task.result" else "tasks"
            published.setdefault((kind, message["taskId"]), published_at)
            if "responseTimeoutSeconds" in message:
                lease_of[message["taskId"]] = message["responseTimeoutSeconds"] * 1000 or 3_600_000
        claims = {
            claim_id.split(":")[0]: until
            for claim_id, until in connection.execute("SELECT task_id, claim_until FROM store_task_claims")
        }
        tasks = [
            json.loads(body)
            for (body,) in connection.execute(
                "SELECT t.body FROM store_tasks t JOIN store_workflows w ON w.id = t.workflow_id"
                " WHERE w.name LIKE ?",
                (name_prefix + "%",),
            )
        ]
    finally:
        connection.close()
    hops: dict[str, list[int]] = {hop: [] for hop in HOPS}
    for task in tasks:
        task_id = task["taskId"]
        try:
            marks = [
                task["scheduledTime"],
                published[("tasks", task_id)],
                claims[task_id] - lease_of[task_id],
                published[("result", task_id)],
                task["endTime"],
            ]
        except KeyError:
            continue
        for hop, start, end in zip(HOPS, marks, marks[1:], strict=False):
            hops[hop].append(end - start)
    return hops


# ---------------------------------------------------------------- py-spy -----------------------

# py-spy names files relative to their sys.path entry; opentelemetry's namespace packages show
# up without the "opentelemetry/" part.
OTEL = ("opentelemetry", "(trace/", "(context/", "(attributes/", "(util/", "(propagate/", "(metrics/",
        "(baggage/", "(_logs/", "(sdk/", "fastapi/telemetry/")  # fmt: skip
IDLE_LEAVES = ("Condition.wait", "EpollSelector.select", "Queue.get", "_worker (concurrent")
LAYERS = (  # innermost match wins
    ("SQLite (C, incl. lock waits)", ("CountingConnection.execute", "sqlite3")),
    ("OpenTelemetry spans", OTEL),
    ("pydantic / json", ("pydantic", "json/")),
    (
        "HTTP stack (uvicorn h11, Starlette, FastAPI)",
        ("h11/", "uvicorn/", "starlette/", "fastapi/", "anyio/"),
    ),
    ("decision core (shared/core)", ("shared/core/",)),
    ("asyncio loop, thread hand-offs", ("asyncio/", "concurrent/futures", "threading.py", "selectors.py")),
    ("Cairn services and adapters", ("services/", "shared/", "cairn/")),
)
ENTRY_POINTS = {
    "HTTP requests (all)": "RequestResponseCycle.run_asgi",
    "  POST /api/workflow (start, incl. wait until readable)": "start_workflow (services/api/executions.py",
    "    of it _until_visible polling": "_until_visible",
    "  POST /api/tasks (report)": "update_task (services/api/tasks.py",
    "  GET /api/tasks/poll/batch (long poll)": "batch_poll (services/api/tasks.py",
    "  FastAPI sync dependency in threadpool (run_in_threadpool)": "run_in_threadpool",
    "decider batches": "DeciderHandler.handle_batch",
    "scheduler batches": "SchedulerHandler.handle_batch",
    "dispatcher: bus batch handler": "TaskDispatcher._handler.<locals>.handle",
    "bus consume loops (fetch, deliver, commit)": "_Member._consume",
    "bus heartbeats": "_Member._heartbeats",
}


def classify(path: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    layers: collections.Counter[str] = collections.Counter()
    entries: collections.Counter[str] = collections.Counter()
    active = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():  # blank, or a line py-spy wrote garbled (seen once)
            continue
        frames = stack.split(";")
        if any(frames[-1].startswith(leaf) for leaf in IDLE_LEAVES):
            continue
        active += int(count)
        layer = next(
            (name for frame in reversed(frames) for name, marks in LAYERS if any(m in frame for m in marks)),
            "other",
        )
        layers[layer] += int(count)
        for name, mark in ENTRY_POINTS.items():
            if any(mark in frame for frame in frames):
                entries[name] += int(count)

    return active, dict(layers), dict(entries)


async def main(args: argparse.Namespace) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="cairn-profile."))
    dev_env = dict(item.split("=", 1) for item in args.dev_env)
    worker_env = dict(item.split("=", 1) for item in args.worker_env)
    driver = EmbeddedDriver(run_dir, args.worker_concurrency, "events", True, dev_env, worker_env)
    profile = run_dir / "dev.pyspy"
    spy: asyncio.subprocess.Process | None = None
    try:
        await driver.start(*(inline_chains() if args.inline else []))
        await driver.run_one("bench_k1", 0)  # warm-up (another definition: not in the hop figures)
        if args.prefill:  # history first: 1-step workflows at concurrency 100, as W1 K=1 runs them
            fill = asyncio.Semaphore(100)

            async def prefill(i: int) -> None:
                async with fill:
                    await driver.run_one("bench_k1", i)

            await asyncio.gather(*(prefill(i) for i in range(args.prefill)))
            await asyncio.sleep(args.settle)
        dev = driver.pids()["dev"]
        spy_path = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if spy_path:
            argv = ["record", "--nonblocking", "-r", "200", "-f", "raw", "-o", str(profile), "-p", str(dev)]
            spy = await asyncio.create_subprocess_exec(
                spy_path,
                *argv,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
            await asyncio.sleep(1)
        work0 = await driver.work()
        cpu0 = driver.cpu()
        semaphore = asyncio.Semaphore(args.concurrency)
        workflow_prefix = INLINE_PREFIX if args.inline else "bench_k"
        latencies: list[float] = []

        async def one(i: int) -> None:
            async with semaphore:
                latencies.append(await driver.run_one(f"{workflow_prefix}{args.k}", i))

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(args.workflows)))
        elapsed = time.perf_counter() - started
        cpu1 = driver.cpu()
        work1 = await driver.work()
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes the profile and exits
            await asyncio.wait_for(spy.wait(), 30)
    finally:
        await driver.stop()
    steps = args.workflows * args.k
    print(
        f"{args.workflows} x {args.k} steps @ concurrency {args.concurrency}: {steps / elapsed:.1f} steps/s"
    )
    print(f"  end-to-end p50 {statistics.median(latencies) * 1000:.1f} ms")
    print("  CPU ms per step: " + ", ".join(f"{n} {(cpu1[n] - cpu0[n]) * 1000 / steps:.2f}" for n in cpu1))
    print(f"  dev busy: {(cpu1['dev'] - cpu0['dev']) / elapsed * 100:.0f}% of a core")
    print("\nhops per step (ms, from the state file; median / mean / p90):")
    hops = step_hops(driver.db, f"bench_k{args.k}")
    for hop, values in hops.items():
        if values:
            ordered = sorted(values)
            p90 = ordered[int(0.9 * (len(ordered) - 1))]
            print(f"  {hop:38} {statistics.median(values):6.1f} {statistics.mean(values):6.1f} {p90:6d}")
    totals = [sum(v) for v in zip(*hops.values(), strict=True)]
    if totals:
        print(f"  {'step total':38} {statistics.median(totals):6.1f} {statistics.mean(totals):6.1f}")
    counters = {n: (work1[n] - work0[n]) / steps for n in read_counters(driver.counters_path or Path())}
    print("\nSQLite per step (ms):")
    for owner in ("store", "bus"):
        print(
            f"  {owner}: {counters[f'{owner} write txns']:.2f} write txns, "
            f"{counters[f'{owner} sqlite us'] / 1000:.2f} ms in SQLite, of which "
            f"{counters[f'{owner} begin us'] / 1000:.2f} waiting for the write lock "
            f"({counters[f'{owner} begins over 1 ms']:.2f} waits > 1 ms) and "
            f"{counters[f'{owner} commit us'] / 1000:.2f} in COMMIT"
        )
    if spy is not None and profile.exists():
        active, layers, entries = classify(profile)
        print(f"\ndev process on-CPU samples by layer ({active} samples at 200 Hz, all threads):")
        for name, count in sorted(layers.items(), key=lambda item: -item[1]):
            print(f"  {count / active * 100:5.1f}%  {name}")
        print("inclusive:")
        for name in ENTRY_POINTS:
            print(f"  {entries.get(name, 0) / active * 100:5.1f}%  {name}")
    print(f"\nstate file, logs and profile: {run_dir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=20)
    parser.add_argument("--k", type=int, choices=(1, 3, 10), default=10)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument(
        "--inline", action="store_true", help="chained INLINE tasks (W1-engine) instead of SIMPLE ones"
    )
    parser.add_argument("--worker-concurrency", type=int, default=20)
    parser.add_argument("--prefill", type=int, default=0, help="1-step workflows run before measuring")
    parser.add_argument("--settle", type=float, default=0.0, help="seconds to wait after the prefill")
    parser.add_argument(
        "--dev-env", action="append", default=[], metavar="K=V", help="extra env for cairn dev"
    )
    parser.add_argument("--worker-env", action="append", default=[], metavar="K=V", help="extra env, worker")
    asyncio.run(main(parser.parse_args()))
