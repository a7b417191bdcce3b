"""Chaos soak: Cairn's services SIGKILLed and restarted at random while workflows run, then every
workflow checked for its exact expected outcome.

    .venv/bin/python -m benchmarks.chaos --workflows 300 --duration 300 --kill-every 4 --seed 1

Runs the four services (decider, scheduler, timer, sweeper), one `cairn worker
benchmarks.chaos_workers` process and the protocol-level chaos_hang worker as real processes on
Kafka + a MongoDB-protocol server (CAIRN_KAFKA_BOOTSTRAP / CAIRN_MONGO_URL; started with
deploy/local/up.sh when unset), with an eager sweeper (stale scan after 5 s, every 2 s).

- Workflows of four kinds (chaos_definitions.py: plain pipeline, retried failure, response
  timeout, WAIT + signal) are started gradually over the first `start_fraction` of `duration`.
- Every ~`kill_every` seconds one service is SIGKILLed and restarted after ~`pause` seconds.
  The victim order is a seeded shuffle of the victims, reshuffled every round, so each service
  is killed once per round; intervals and pauses are seeded jitter (0.5-1.5x).
- The store is polled every ~100 ms (one `{_id}` read per unfinished workflow): that sees WAIT
  tasks to signal, and progress, the sum of every workflow's committed version (only the decider
  commits, so this stalls exactly when workflows stall). "Recovery" of a restart is the time from
  the restart until a poll begun after it shows the sum grown (resolution: one poll).
- After `duration` the kills stop and the run drains for up to `drain` seconds; then every
  workflow is checked (see `verify`), the ledger of worker executions is read for duplicate
  deliveries, and the exit code is 1 if any workflow is lost, stuck, wrong, or has dangling or
  doubly completed steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.chaos_definitions import FLOWS, TASK_DEFS, WAIT_REF, kind_of, signal_payload
from benchmarks.chaos_workers import LEDGER_ENV
from benchmarks.cli import write_results
from shared.adapters.mongo_store import MongoStore
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskState, TaskStatus, WorkflowStatus
from shared.ports.store import Store
from tests.e2e.cluster import ROOT, Cluster, Process

T = TypeVar("T")
VICTIMS = ("decider", "scheduler", "timer", "sweeper", "worker")
HARNESS_POOL = 8
PROBLEMS = ("lost", "stuck", "wrong", "dangling", "double_completed")


@dataclass(frozen=True)
class ChaosConfig:
    """One soak's shape. Times in seconds; `stale_after_s` / `stale_interval_s` are the sweeper's
    (eager, so a lost message is repaired within the run, not after the production 300 s)."""

    workflows: int = 300
    duration_s: float = 300.0
    kill_every_s: float = 4.0
    seed: int = 1
    pause_s: float = 1.0
    drain_s: float = 180.0
    start_fraction: float = 0.8
    victims: tuple[str, ...] = VICTIMS
    poll_s: float = 0.1
    stale_after_s: float = 5.0
    stale_interval_s: float = 2.0


class ChaosCluster(Cluster):
    """The e2e Cluster with the chaos workers, the eager sweeper, the ledger, and one more
    process: the protocol-level chaos_hang worker (chaos_workers.py says why)."""

    def __init__(self, kafka: str, mongo: str, unique: str, log_dir: Path, config: ChaosConfig) -> None:
        self.ledger = log_dir / "ledger.jsonl"
        super().__init__(
            kafka,
            mongo,
            unique,
            log_dir,
            workers="benchmarks.chaos_workers",
            CAIRN_SERVER="",  # `cairn worker` must consume Kafka, not poll an api
            CAIRN_SWEEPER_STALE_AFTER_S=str(config.stale_after_s),
            CAIRN_SWEEPER_STALE_INTERVAL_S=str(config.stale_interval_s),
            **{LEDGER_ENV: str(self.ledger)},
        )
        argv = [sys.executable, "-m", "benchmarks.chaos_workers"]
        self.processes["hang_worker"] = Process("hang_worker", argv, self.env, log_dir)
        # The harness's own reads on few connections: FerretDB on SQLite serialises them anyway,
        # and a hundred concurrent polls would compete with the services under test.
        self.store = MongoStore(with_pool_limit(mongo, HARNESS_POOL), self.database)

    async def stop(self) -> dict[str, int | None]:
        """SIGTERM every process at once and wait for all (the base class stops them one after
        another, which costs the short form's time budget several seconds)."""
        names = list(self.processes)
        codes = await asyncio.gather(*(asyncio.to_thread(self.processes[n].stop) for n in names))
        await self.bus.stop()
        await self.store.close()
        return dict(zip(names, codes, strict=True))


def with_pool_limit(url: str, size: int) -> str:
    return f"{url}{'&' if '?' in url else '?'}maxPoolSize={size}"


class Clock:
    """Seconds since the run began (monotonic): every recorded time is on this scale."""

    def __init__(self) -> None:
        self.origin = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.origin


# ------------------------------------------------------------------ tracking ----------------


@dataclass
class Tracked:
    workflow_id: str
    kind: str
    index: int
    started_at: float
    version: int = 0
    status: str | None = None
    signalled_at: float | None = None
    finished_at: float | None = None


class Tracker:
    """What the harness knows of each started workflow, refreshed by `poll`."""

    def __init__(self, cluster: Cluster, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock
        self.flows: dict[str, Tracked] = {}
        self.progress = 0
        self.poll_durations: list[float] = []
        self.poll_errors: list[str] = []

    def add(self, workflow_id: str, kind: str, index: int) -> None:
        self.flows[workflow_id] = Tracked(workflow_id, kind, index, self.clock())

    def unfinished(self) -> list[str]:
        return [t.workflow_id for t in self.flows.values() if t.finished_at is None]

    async def poll(self) -> int:
        """Read every unfinished workflow once; signal WAIT tasks that wait; return progress."""
        began = self.clock()
        documents = await self.cluster.store.load_workflows(self.unfinished())
        for workflow_id, document in documents.items():
            await self._observe(self.flows[workflow_id], document)
        self.progress = sum(t.version for t in self.flows.values())
        self.poll_durations.append(self.clock() - began)
        return self.progress

    async def _observe(self, tracked: Tracked, document: WorkflowDocument) -> None:
        # The max: FerretDB's read model can briefly show an older version (architecture.md).
        tracked.version = max(tracked.version, document.version)
        tracked.status = document.state.status.value
        if document.state.status.is_terminal and tracked.finished_at is None:
            tracked.finished_at = self.clock()
        if FLOWS[tracked.kind].signalled and tracked.signalled_at is None:
            waiting = document.state.tasks.get(WAIT_REF)
            if waiting is not None and waiting.status is TaskStatus.IN_PROGRESS:
                await self.cluster.client.signal(
                    tracked.workflow_id,
                    WAIT_REF,
                    signal_payload(tracked.index),
                    signal_id=f"chaos-signal:{tracked.workflow_id}",
                )
                tracked.signalled_at = self.clock()


async def start_workflows(cluster: Cluster, tracker: Tracker, config: ChaosConfig, clock: Clock) -> None:
    """Start the workflows at an even rate over the first `start_fraction` of the run: a gradual
    load the Kafka + FerretDB setup can sustain, with chaos around all of them."""
    spread = config.duration_s * config.start_fraction
    for i in range(config.workflows):
        await asyncio.sleep(max(0.0, i * spread / config.workflows - clock()))
        flow = FLOWS[kind_of(i)]
        # No '.' in the id: the deadline timer's id embeds it and becomes a key of the stored
        # document, which FerretDB rejects (reported separately; not what this soak is about).
        workflow_id = f"chaos-{flow.kind}-{i}"
        tracker.add(workflow_id, flow.kind, i)
        start = partial(cluster.client.start_workflow, flow.name, flow.make_input(i), workflow_id=workflow_id)
        await patiently(start)


# ------------------------------------------------------------------ chaos ------------------


@dataclass
class Kill:
    service: str
    killed_at: float
    restarted_at: float | None = None
    baseline: int = 0
    recovery_s: float | None = None


@dataclass
class Crash:
    """A process found dead that the monkey had not killed: always a finding."""

    service: str
    found_at: float
    exit_code: int | None
    log_tail: str


class Monkey:
    """Kills and restarts services, and keeps the record the report is made of: when each kill
    and restart happened and how long the system took to make progress after the restart."""

    def __init__(self, cluster: Cluster, config: ChaosConfig, clock: Clock, tracker: Tracker) -> None:
        self.cluster = cluster
        self.config = config
        self.clock = clock
        self.tracker = tracker
        self.rng = random.Random(config.seed)
        self.kills: list[Kill] = []
        self.crashes: list[Crash] = []
        self.down: set[str] = set()
        self._order: list[str] = []

    def _next_victim(self) -> str:
        if not self._order:
            self._order = list(self.config.victims)
            self.rng.shuffle(self._order)
        return self._order.pop()

    async def run(self, until: float) -> None:
        """Kill and restart one service every ~kill_every seconds until `until`."""
        next_kill = self.config.kill_every_s * self.rng.uniform(0.5, 1.5)
        while next_kill < until:
            await asyncio.sleep(max(0.0, next_kill - self.clock()))
            await self._kill_and_restart(self._next_victim())
            next_kill += self.config.kill_every_s * self.rng.uniform(0.5, 1.5)

    async def _kill_and_restart(self, victim: str) -> None:
        process = self.cluster[victim]
        self.down.add(victim)
        process.kill()
        kill = Kill(victim, self.clock())
        self.kills.append(kill)
        await asyncio.sleep(self.config.pause_s * self.rng.uniform(0.5, 1.5))
        process.start()
        kill.restarted_at = self.clock()
        kill.baseline = self.tracker.progress
        self.down.discard(victim)

    def observe(self, progress: int, poll_began: float, poll_ended: float) -> None:
        """Resolve the recovery time of every restart that this poll (begun after it) shows
        progress after."""
        for kill in self.kills:
            if kill.recovery_s is not None or kill.restarted_at is None or poll_began < kill.restarted_at:
                continue
            if progress > kill.baseline:
                kill.recovery_s = poll_ended - kill.restarted_at

    def revive_crashed(self) -> None:
        """Restart any process that died without being killed, recording it."""
        for name, process in self.cluster.processes.items():
            if name in self.down or process.alive():
                continue
            code = process.popen.returncode if process.popen is not None else None
            self.crashes.append(Crash(name, self.clock(), code, process.log_tail(60)))
            process.start()


async def watch(
    tracker: Tracker, monkey: Monkey, config: ChaosConfig, done: Callable[[], bool], deadline: float
) -> None:
    """Poll the store until `done()` or the deadline; never spend more than half the time polling,
    so a large backlog slows the poll rather than loading FerretDB further."""
    clock = tracker.clock
    last_line = clock()
    while not done() and clock() < deadline:
        began = clock()
        if began - last_line >= 15:
            last_line = began
            print(status_line(tracker, monkey), file=sys.stderr, flush=True)
        try:
            progress = await tracker.poll()
        except Exception as error:  # the store timing out under load: noted, polled again
            tracker.poll_errors.append(f"{clock():.1f}s {type(error).__name__}: {str(error)[:200]}")
            await asyncio.sleep(1.0)
            continue
        ended = clock()
        monkey.observe(progress, began, ended)
        monkey.revive_crashed()
        await asyncio.sleep(max(config.poll_s - (ended - began), ended - began))


def status_line(tracker: Tracker, monkey: Monkey) -> str:
    """A progress line every 15 s, so a long run can be followed (stderr)."""
    finished = Counter(t.status for t in tracker.flows.values() if t.finished_at is not None)
    return (
        f"[{tracker.clock():6.1f}s] started {len(tracker.flows)}, finished {dict(finished)}, "
        f"unfinished {len(tracker.unfinished())}, kills {len(monkey.kills)}, crashes {len(monkey.crashes)}, "
        f"store poll errors {len(tracker.poll_errors)}"
    )


async def patiently(call: Callable[[], Awaitable[T]], attempts: int = 5) -> T:
    """`call()`, tried again after a pause if it raises: the harness's own reads and publishes
    must not end the run when a loaded store times out (the services are what is tested)."""
    for attempt in range(attempts - 1):
        try:
            return await call()
        except Exception:
            await asyncio.sleep(2.0 * (attempt + 1))
    return await call()


# ------------------------------------------------------------------ verification ---------------


@dataclass
class Verdict:
    workflow_id: str
    kind: str
    problem: str | None = None
    detail: str = ""
    status: str | None = None
    latency_s: float | None = None
    records: list[dict[str, Any]] = field(default_factory=list)


def _live(tasks: Sequence[TaskState]) -> list[str]:
    return [f"{t.reference_task_name}#{t.retry_count}:{t.status}" for t in tasks if not t.status.is_terminal]


def _last_per_ref(records: Sequence[TaskState]) -> dict[str, TaskState]:
    last: dict[str, TaskState] = {}
    for record in sorted(records, key=lambda t: (t.retry_count, t.seq)):
        last[record.reference_task_name] = record
    return last


def judge(tracked: Tracked, document: WorkflowDocument | None, records: Sequence[TaskState]) -> Verdict:
    """One workflow's verdict, the first problem found in this order:
    lost: never reached the store (its start was lost);
    stuck: in the store but not finished;
    wrong: finished but not COMPLETED, or its output differs from the expected one;
    dangling: an execution left SCHEDULED/IN_PROGRESS in the finished workflow's state or in its
      task records, or a step whose last recorded execution is not COMPLETED;
    double_completed: a step with more or fewer than one COMPLETED execution (a step that ran
      twice, or not at all, in the workflow's view)."""
    flow = FLOWS[tracked.kind]
    verdict = Verdict(tracked.workflow_id, tracked.kind)
    verdict.records = [
        {"ref": r.reference_task_name, "retry": r.retry_count, "status": r.status.value} for r in records
    ]
    if document is None:
        verdict.problem = "lost"
        return verdict
    state = document.state
    verdict.status = state.status.value
    if not state.status.is_terminal:
        verdict.problem = "stuck"
        verdict.detail = json.dumps(_state_summary(document))
        return verdict
    if tracked.finished_at is not None:  # as the harness saw it: from its start publish
        verdict.latency_s = tracked.finished_at - tracked.started_at
    expected = flow.expected_output(tracked.index)
    if state.status is not WorkflowStatus.COMPLETED or state.output != expected:
        verdict.problem = "wrong"
        verdict.detail = f"{state.status} {state.reason_for_incompletion!r}: {state.output} != {expected}"
        return verdict
    live = _live([*state.tasks.values(), *records])
    last = _last_per_ref(records)
    unfinished = [
        ref for ref in flow.steps if ref not in last or last[ref].status is not TaskStatus.COMPLETED
    ]
    if live or unfinished:
        verdict.problem = "dangling"
        verdict.detail = f"live executions {live}, steps whose last record is not COMPLETED {unfinished}"
        return verdict
    completions = Counter(r.reference_task_name for r in records if r.status is TaskStatus.COMPLETED)
    if any(completions[ref] != 1 for ref in flow.steps) or set(completions) - set(flow.steps):
        verdict.problem = "double_completed"
        verdict.detail = f"COMPLETED executions per step: {dict(completions)}"
    return verdict


def _state_summary(document: WorkflowDocument) -> dict[str, Any]:
    """What a stuck workflow is waiting for: its live tasks, timers and unsent outbox."""
    state = document.state
    return {
        "version": document.version,
        "status": state.status.value,
        "tasks": {
            ref: {
                "status": t.status.value,
                "retry": t.retry_count,
                "dispatches": t.dispatch_count,
                "updated": t.update_time,
            }
            for ref, t in state.tasks.items()
        },
        "timers": {tid: {"purpose": t.purpose, "fireAt": t.fire_at} for tid, t in state.timers.items()},
        "unsentOutbox": [m.type for m in document.outbox],
    }


async def verify(
    store: Store, tracker: Tracker, concurrency: int = 8
) -> tuple[list[Verdict], dict[str, list[TaskState]]]:
    """Judge every started workflow from a fresh read of its document and task records (and
    hand back the records, for the retry figures)."""
    gate = asyncio.Semaphore(concurrency)
    records: dict[str, list[TaskState]] = {}

    async def one(tracked: Tracked) -> Verdict:
        wid = tracked.workflow_id
        async with gate:
            document = (await patiently(lambda: store.load_workflows([wid]))).get(wid)
            records[wid] = await patiently(lambda: store.list_tasks(wid))
        return judge(tracked, document, records[wid])

    verdicts = list(await asyncio.gather(*(one(t) for t in tracker.flows.values())))
    return verdicts, records


# ------------------------------------------------------------------ figures -------------------

REASON_KIND = re.compile(r"\((\w+)\)\s*$")


def timeout_kind(reason: str | None) -> str:
    """Which of Conductor's timeouts a TIMED_OUT reason names (`... (responseTimeoutSeconds)`)."""
    found = REASON_KIND.search(reason or "")
    return found[1] if found else "other"


def retry_figures(verdicts: Sequence[Verdict], records: dict[str, list[TaskState]]) -> dict[str, Any]:
    """Retries from the task records: executions after the first, and failed / timed-out ones
    (timeouts by which of Conductor's timeouts fired)."""
    all_records = [r for rs in records.values() for r in rs]
    timed_out = Counter(
        timeout_kind(r.reason_for_incompletion) for r in all_records if r.status is TaskStatus.TIMED_OUT
    )
    kinds = {v.workflow_id: v.kind for v in verdicts}
    return {
        "records": len(all_records),
        "retry_executions": sum(r.retry_count > 0 for r in all_records),
        "failed_executions": sum(r.status is TaskStatus.FAILED for r in all_records),
        "timed_out_executions": sum(timed_out.values()),
        "timed_out_by": dict(timed_out),
        "retry_executions_by_kind": dict(
            Counter(kinds[wid] for wid, rs in records.items() for r in rs if r.retry_count > 0)
        ),
    }


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The executions the workers recorded (a line cut short by a SIGKILL is skipped)."""
    entries = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return entries


def duplicate_figures(ledger: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Executions of one task execution id beyond its first. `same_delivery_repeats`: the same
    message run again (a Kafka redelivery: the worker was killed before its offset commit);
    `redispatched_task_ids`: executions handed out more than once (the sweeper's repair of a
    task SCHEDULED longer than the stale threshold)."""
    per_task = Counter(e["taskId"] for e in ledger)
    per_delivery = Counter((e["taskId"], e["pollCount"]) for e in ledger)
    deliveries: dict[str, set[int]] = defaultdict(set)
    type_of: dict[str, str] = {}
    for e in ledger:
        deliveries[e["taskId"]].add(e["pollCount"])
        type_of[e["taskId"]] = e["taskType"]
    extra_by_type: Counter[str] = Counter()
    for task_id, n in per_task.items():
        extra_by_type[type_of[task_id]] += n - 1
    return {
        "executions": len(ledger),
        "distinct_task_ids": len(per_task),
        "task_ids_executed_more_than_once": sum(n > 1 for n in per_task.values()),
        "extra_executions": sum(n - 1 for n in per_task.values()),
        "same_delivery_repeats": sum(n - 1 for n in per_delivery.values()),
        "redispatched_task_ids": sum(len(polls) > 1 for polls in deliveries.values()),
        "extra_executions_by_task_type": {t: n for t, n in sorted(extra_by_type.items()) if n},
    }


def _p(values: Sequence[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def recovery_figures(kills: Sequence[Kill]) -> dict[str, Any]:
    def summary(subset: Sequence[Kill]) -> dict[str, Any]:
        times = [k.recovery_s for k in subset if k.recovery_s is not None]
        return {
            "restarts": len(subset),
            "p50_s": statistics.median(times) if times else None,
            "max_s": max(times) if times else None,
            "never": len(subset) - len(times),
        }

    by_service: dict[str, list[Kill]] = defaultdict(list)
    for kill in kills:
        by_service[kill.service].append(kill)
    return {"all": summary(kills), "by_service": {s: summary(ks) for s, ks in sorted(by_service.items())}}


def latency_figures(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    by_kind: dict[str, list[float]] = defaultdict(list)
    for v in verdicts:
        if v.latency_s is not None:
            by_kind[v.kind].append(v.latency_s)
    return {
        kind: {"p50_s": statistics.median(values), "p99_s": _p(values, 99), "max_s": max(values)}
        for kind, values in sorted(by_kind.items())
    }


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def environment() -> dict[str, Any]:
    """Where the figures came from: the commit, whether the tree had uncommitted changes (the
    services run from the working tree), the machine and its load."""
    dirty = [line[3:] for line in _git("status", "--porcelain").splitlines()]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commit": _git("rev-parse", "--short", "HEAD").strip() or None,
        "uncommitted": dirty,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


# ------------------------------------------------------------------ the run -------------------


async def run_chaos(
    config: ChaosConfig, kafka: str, mongo: str, log_dir: Path, unique: str | None = None
) -> dict[str, Any]:
    """One soak, start to verdict, in `log_dir` (which must exist); the report (a JSON-able
    dict) says what happened."""
    cluster = ChaosCluster(kafka, mongo, unique or uuid.uuid4().hex[:10], log_dir, config)
    report: dict[str, Any] = {"config": asdict(config), "environment": environment(), "log_dir": str(log_dir)}
    began = time.monotonic()
    await cluster.start()
    try:
        await cluster.register(*TASK_DEFS, *(flow.definition for flow in FLOWS.values()))
        report["startup_s"] = time.monotonic() - began
        report["warmup_s"] = await warm_up(cluster)
        report.update(await _soak(cluster, config, Clock()))
        report["environment"]["load_average_after"] = os.getloadavg()
    finally:
        stopping = time.monotonic()
        report["stop_codes"] = await cluster.stop()
        report["stop_s"] = time.monotonic() - stopping
    report["elapsed_s"] = time.monotonic() - began
    return report


async def warm_up(cluster: Cluster, within_s: float = 90) -> float:
    """Run one workflow through before the clock starts, so every consumer group has joined and
    neither the first kills nor the figures are about start-up. Returns how long it took."""
    began = time.monotonic()
    flow = FLOWS["pipeline"]
    workflow_id = await cluster.client.start_workflow(
        flow.name, flow.make_input(0), workflow_id="chaos-warmup"
    )
    await cluster.wait_for([workflow_id], within_s=within_s)
    return time.monotonic() - began


async def _soak(cluster: ChaosCluster, config: ChaosConfig, clock: Clock) -> dict[str, Any]:
    tracker = Tracker(cluster, clock)
    monkey = Monkey(cluster, config, clock, tracker)
    starter = asyncio.create_task(start_workflows(cluster, tracker, config, clock))
    killer = asyncio.create_task(monkey.run(config.duration_s))
    chaos_over = lambda: starter.done() and killer.done()  # noqa: E731
    await watch(tracker, monkey, config, chaos_over, float("inf"))
    await asyncio.gather(starter, killer)  # surface their errors
    drain_began = clock()
    await watch(tracker, monkey, config, lambda: not tracker.unfinished(), drain_began + config.drain_s)
    drained_at = clock()
    verdicts, records = await verify(cluster.store, tracker)
    verified_at = clock()
    failures = [v for v in verdicts if v.problem]
    return {
        "workflows": _counts(verdicts),
        "by_kind": {kind: _counts([v for v in verdicts if v.kind == kind]) for kind in FLOWS},
        "kills": dict(Counter(k.service for k in monkey.kills)),
        "kill_events": [asdict(k) for k in monkey.kills],
        "crashes": [asdict(c) for c in monkey.crashes],
        "recovery": recovery_figures(monkey.kills),
        "retries": retry_figures(verdicts, records),
        "duplicates": duplicate_figures(read_ledger(cluster.ledger)),
        "signals_sent": sum(t.signalled_at is not None for t in tracker.flows.values()),
        "latency": latency_figures(verdicts),
        "poll": {
            "polls": len(tracker.poll_durations),
            "p50_s": _p(tracker.poll_durations, 50),
            "errors": tracker.poll_errors,
        },
        "phases": {"chaos_end_s": drain_began, "drained_s": drained_at, "verified_s": verified_at},
        "failures": [asdict(v) for v in failures],
        "diagnostics": cluster.diagnostics() if failures or monkey.crashes else "",
    }


def _counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    problems = Counter(v.problem for v in verdicts)
    counts = {"started": len(verdicts), "completed": sum(v.problem is None for v in verdicts)}
    counts.update({problem: problems[problem] for problem in PROBLEMS})
    return counts


def failed(report: dict[str, Any]) -> bool:
    """A run fails on any workflow with a problem, and on a service that died by itself."""
    return any(report["workflows"][p] for p in PROBLEMS) or bool(report["crashes"])


# ------------------------------------------------------------------ report --------------------


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def render(report: dict[str, Any]) -> str:
    """Markdown tables and a few lines of notes (they go into benchmarks/README.md as printed)."""
    w = report["workflows"]
    headline = f"workflows {w['started']}: completed {w['completed']}, " + ", ".join(
        f"{p} {w[p]}" for p in PROBLEMS
    )
    failures = [f"  {f['problem']}: {f['workflow_id']} {f['detail']}" for f in report["failures"][:20]]
    sections = [headline, _workflow_table(report), _recovery_table(report["recovery"]), _notes(report)]
    return "\n\n".join(sections + (["\n".join(failures)] if failures else []))


def _workflow_table(report: dict[str, Any]) -> str:
    lines = [
        "| kind | started | completed | " + " | ".join(PROBLEMS) + " | latency p50 | latency max |",
        "|---|---|---|" + "---|" * len(PROBLEMS) + "---|---|",
    ]
    for kind, counts in report["by_kind"].items():
        latency = report["latency"].get(kind, {})
        cells = [kind, counts["started"], counts["completed"], *(counts[p] for p in PROBLEMS)]
        cells += [_s(latency.get("p50_s")), _s(latency.get("max_s"))]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _recovery_table(recovery: dict[str, Any]) -> str:
    """Kills per service and the time from each restart to the first progress after it."""
    lines = [
        "| service | kills | first progress after restart: p50 | max | never |",
        "|---|---|---|---|---|",
    ]
    for service, f in [*recovery["by_service"].items(), ("all", recovery["all"])]:
        lines.append(f"| {service} | {f['restarts']} | {_s(f['p50_s'])} | {_s(f['max_s'])} | {f['never']} |")
    return "\n".join(lines)


def _notes(report: dict[str, Any]) -> str:
    r, d, phases = report["retries"], report["duplicates"], report["phases"]
    return "\n".join(
        [
            f"retries: {r['retry_executions']} retry executions; {r['failed_executions']} FAILED and "
            f"{r['timed_out_executions']} TIMED_OUT executions {r['timed_out_by']}; "
            f"{report['signals_sent']} signals sent",
            f"duplicate deliveries: {d['task_ids_executed_more_than_once']} of {d['distinct_task_ids']} "
            f"task executions ran more than once, {d['extra_executions']} extra runs "
            f"({d['same_delivery_repeats']} redelivered messages; {d['redispatched_task_ids']} "
            f"executions re-dispatched) by type {d['extra_executions_by_task_type']}",
            f"crashes (deaths the monkey did not cause): {len(report['crashes'])}; "
            f"stop codes {report.get('stop_codes')}",
            f"start-up {report.get('startup_s', 0):.0f} s, warm-up {report.get('warmup_s', 0):.0f} s, "
            f"then kills until {phases['chaos_end_s']:.0f} s, all finished at {phases['drained_s']:.0f} s, "
            f"verified at {phases['verified_s']:.0f} s, stop {report.get('stop_s', 0):.0f} s "
            f"({report.get('elapsed_s', 0):.0f} s in all); {report['poll']['polls']} store polls, "
            f"p50 {_s(report['poll']['p50_s'])}",
        ]
    )


# ------------------------------------------------------------------ command line ----------------


def _servers(run_dir: Path) -> tuple[str, str, Callable[[], None]]:
    """Kafka and the MongoDB server from the environment, else started here (and stopped after)."""
    kafka, mongo = os.environ.get("CAIRN_KAFKA_BOOTSTRAP"), os.environ.get("CAIRN_MONGO_URL")
    if kafka and mongo:
        return kafka, mongo, lambda: None
    from benchmarks.w1_w2 import guard_servers, start_servers, stop_servers

    variables, pids = start_servers(run_dir)
    guard_servers(pids)
    return variables["CAIRN_KAFKA_BOOTSTRAP"], variables["CAIRN_MONGO_URL"], lambda: stop_servers(run_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of kills (and of starts)")
    parser.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between kills")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pause", type=float, default=1.0, help="mean seconds between kill and restart")
    parser.add_argument("--drain", type=float, default=180.0, help="seconds to wait for stragglers")
    parser.add_argument("--victims", default=",".join(VICTIMS), help="comma-separated; also: hang_worker")
    parser.add_argument("--json", type=Path, help="write the full report here ('-' for stdout)")
    parser.add_argument("--log-dir", type=Path, help="service logs and the ledger (default: a temp dir)")
    args = parser.parse_args(argv)
    config = ChaosConfig(
        workflows=args.workflows,
        duration_s=args.duration,
        kill_every_s=args.kill_every,
        seed=args.seed,
        pause_s=args.pause,
        drain_s=args.drain,
        victims=tuple(v for v in args.victims.split(",") if v),
    )
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="cairn-chaos."))
    log_dir.mkdir(parents=True, exist_ok=True)
    kafka, mongo, stop_servers = _servers(log_dir)
    try:
        report = asyncio.run(run_chaos(config, kafka, mongo, log_dir))
    finally:
        stop_servers()
    report["command"] = "python -m benchmarks.chaos " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.json is not None:
        if str(args.json) == "-":
            print(json.dumps(report, indent=2, default=str))
        else:
            write_results(args.json, report)
    print(render(report))
    if failed(report):
        print(f"\nFAILED; logs in {log_dir}\n{report['diagnostics']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
