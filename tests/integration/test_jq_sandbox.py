"""jq in helper processes (shared/sandbox): results, limits, hygiene, concurrency, clean close.

Starts helper processes but needs no Kafka or MongoDB. A short time limit (0.5 s) keeps it fast.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.core.scripting import ScriptError, ScriptLimits, ScriptTimeoutError, run_jq_in_process
from shared.sandbox import JqPool, PooledSandbox
from shared.sandbox.jq_pool import _Ended, _Helper
from shared.sandbox.jq_worker import HEADER, encode_input

LIMITS = ScriptLimits(timeout_ms=500)
TIMEOUT_S = LIMITS.timeout_ms / 1000
SMALL = ScriptLimits(timeout_ms=500, memory_bytes=16 * 1024 * 1024)
"""The shared pool's: programs run out of 16 MiB well within the time limit, even on a busy box."""
NOW_MS = 1_700_000_000_123


def children() -> set[int]:
    """This process's child processes (any thread's). A thread that ends between the listing and
    the read takes its entry with it (seen once in CI): it has no children left to report."""
    found: set[int] = set()
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        try:
            with open(path) as listing:
                found.update(int(pid) for pid in listing.read().split())
        except FileNotFoundError:
            continue
    return found


class Tracked:
    """A pool, and every helper pid it ever had (read after each use)."""

    def __init__(self, pool: JqPool) -> None:
        self.pool = pool
        self.seen: set[int] = set()

    def evaluate(self, query: str, data: object = None, now_ms: int = NOW_MS) -> list[object]:
        try:
            return self.pool.evaluate(query, data, now_ms)
        finally:
            self.seen.update(self.pool.pids())


@pytest.fixture(scope="module")
def jq() -> Iterator[Tracked]:
    before = children()
    tracked = Tracked(JqPool(2, SMALL))
    yield tracked
    tracked.pool.close()
    assert tracked.seen, "the pool never started a helper"
    assert not (children() - before), "helpers left after close()"
    assert not any(os.path.exists(f"/proc/{pid}") for pid in tracked.seen)


def test_results_are_jq_s(jq: Tracked) -> None:
    data = {"a": [1, 2, {"b": "é"}], "n": None}
    for query in [".a[]", ".a | length", "[.a[] | numbers] | add", ".n", "empty", "{x: .a[2].b}", "$__loc__"]:
        expected = run_jq_in_process(query, data, now_ms=NOW_MS, limits=LIMITS)
        assert jq.evaluate(query, data) == expected, query
    assert jq.evaluate("now") == [NOW_MS / 1000]
    assert jq.evaluate("now | todate", now_ms=0) == ["1970-01-01T00:00:00Z"]
    assert jq.evaluate("def now: 5; now") == [5]
    assert jq.evaluate(". # a comment") == [None]


def test_compile_and_runtime_errors_are_jq_s_messages(jq: Tracked) -> None:
    with pytest.raises(ScriptError, match=r"syntax error.*\n    \.a \|\n") as syntax:
        jq.evaluate(".a |")
    assert not isinstance(syntax.value, ScriptTimeoutError)
    with pytest.raises(ScriptError, match=r"foo/0 is not defined at <top-level>, line 1, column 1"):
        jq.evaluate("foo")
    with pytest.raises(ScriptError, match=r'^Cannot index number with string \("a"\)$'):
        jq.evaluate(".a", 1)
    with pytest.raises(ScriptError, match=r"^boom$"):
        jq.evaluate('error("boom")')
    assert jq.evaluate("1") == [1]


TIMEOUT, MEMORY, RESULTS, NESTING = "timeout", "memory", "results", "nesting"
NASTY = [
    ("until(false; .)", {TIMEOUT}),
    ("def f: f; f", {TIMEOUT}),  # a tail call: runs in constant memory
    ("last(range(1e12))", {TIMEOUT}),
    # Which limit comes first depends on the box's speed:
    ("reduce range(1e8) as $i ([]; . + [$i])", {TIMEOUT, MEMORY}),
    ("[range(1e18)]", {TIMEOUT, MEMORY}),
    ("[range(1e9)]", {TIMEOUT, MEMORY}),
    ("repeat(1)", {RESULTS}),
    ("range(1e9)", {RESULTS}),
    ("def f: [f]; f", {MEMORY}),
    ("def f: 1 + f; f", {MEMORY}),
    ('"x" * 100000000', {MEMORY}),
    ('[limit(9000; repeat("x" * 5000))]', {MEMORY}),
    # Overflows the C stack in jq.py's conversion (SIGSEGV), or Python's recursion limit when the
    # stack is unlimited; ~0.25 s of work, so past 0.5 s on a very busy box; or, when the box is
    # busy enough, the helper's memory limit comes first (seen in a CI-like run).
    ("reduce range(100000) as $i (null; [.])", {NESTING, TIMEOUT, MEMORY}),
    ("reduce range(3000) as $i (null; [.])", {NESTING}),  # past Python's recursion limit
]


def kind_of(error: ScriptError) -> str:
    message = str(error)
    if isinstance(error, ScriptTimeoutError):
        assert message == "jq program exceeded the time limit of 0.5 s"
        return TIMEOUT
    if message == "jq program exceeded the memory limit of 16 MiB":
        return MEMORY
    if message == f"jq program produced more than {LIMITS.max_results} results":
        return RESULTS
    if "nested too deeply" in message:
        return NESTING
    return message


@pytest.mark.parametrize(("query", "kinds"), NASTY, ids=[query for query, _ in NASTY])
def test_nasty_programs_fail_in_time_and_the_next_evaluation_succeeds(
    jq: Tracked, query: str, kinds: set[str]
) -> None:
    started = time.monotonic()
    with pytest.raises(ScriptError) as failure:
        jq.evaluate(query)
    elapsed = time.monotonic() - started
    assert kind_of(failure.value) in kinds
    assert elapsed < TIMEOUT_S + 1
    assert jq.evaluate(". + 1", 41) == [42]


def test_a_killed_helper_is_replaced(jq: Tracked) -> None:
    jq.evaluate("1")
    before = set(jq.pool.pids())
    with pytest.raises(ScriptTimeoutError):
        jq.evaluate("until(false; .)")
    assert jq.evaluate(".", "back") == ["back"]
    assert set(jq.pool.pids()) != before


def test_the_environment_reveals_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_TEST_SENTINEL", "s3cret")
    pool = JqPool(1, LIMITS)
    try:
        environment = pool.evaluate("env", None, NOW_MS)[0]
        assert environment == pool.evaluate("$ENV", None, NOW_MS)[0]
        assert "CAIRN_TEST_SENTINEL" not in environment
        assert "s3cret" not in json.dumps(environment)
        assert set(environment) <= {"TZ"}
        assert pool.evaluate('[getpath(["a"])?, (input_filename), get_search_list]', {}, NOW_MS) == [
            [None, None, []]
        ]
        with pytest.raises(ScriptError, match="module not found"):
            pool.evaluate('include "/etc/passwd"; .', None, NOW_MS)
    finally:
        pool.close()


def test_input_and_results_are_bounded() -> None:
    pool = JqPool(1, LIMITS, max_request_bytes=10_000, max_reply_bytes=10_000)
    try:
        with pytest.raises(ScriptError, match="more than the limit of 10000"):
            pool.evaluate(".", "x" * 10_000, NOW_MS)
        assert pool.pids() == []  # refused before any helper was needed
        with pytest.raises(ScriptError, match="results are larger than"):
            pool.evaluate('[range(2000) | "xxxxxx"]', None, NOW_MS)
        with pytest.raises(ScriptError, match="not JSON"):
            pool.evaluate(".", {"a": object()}, NOW_MS)
        assert pool.evaluate("length", "x" * 5_000, NOW_MS) == [5_000]
    finally:
        pool.close()


def test_concurrent_use_from_threads(jq: Tracked) -> None:
    failures: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(150):
                assert jq.pool.evaluate(".n * 2 + .w", {"n": i, "w": worker}, NOW_MS) == [i * 2 + worker]
        except BaseException as error:
            failures.append(error)

    def runaway() -> None:
        try:
            jq.pool.evaluate("until(false; .)", None, NOW_MS)
        except ScriptTimeoutError:
            return
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    threads.append(threading.Thread(target=runaway))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures
    assert len(jq.pool.pids()) <= jq.pool.size
    jq.seen.update(jq.pool.pids())


async def test_the_event_loop_goes_on_while_jq_runs(jq: Tracked) -> None:
    longest = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal longest
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest = max(longest, now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    with pytest.raises(ScriptTimeoutError):
        await asyncio.to_thread(jq.evaluate, "until(false; .)")
    assert await asyncio.to_thread(jq.evaluate, "1") == [1]  # a replacement's start included
    done.set()
    await ticking
    assert longest < 0.25


def test_close_stops_a_helper_in_use_and_leaves_no_process() -> None:
    before = children()
    pool = JqPool(2, ScriptLimits(timeout_ms=20_000))
    assert pool.evaluate("1", None, NOW_MS) == [1]
    errors: list[ScriptError] = []

    def runaway() -> None:
        try:
            pool.evaluate("until(false; .)", None, NOW_MS)
        except ScriptError as error:
            errors.append(error)

    thread = threading.Thread(target=runaway)
    thread.start()
    time.sleep(0.2)  # well into its evaluation
    pids = pool.pids()
    started = time.monotonic()
    pool.close()
    thread.join(timeout=5)
    assert time.monotonic() - started < 2
    assert [str(error) for error in errors] == ["jq sandbox was closed during the evaluation"]
    assert not (children() - before)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    with pytest.raises(ScriptError, match="closed"):
        pool.evaluate("1", None, NOW_MS)
    pool.close()  # twice is fine


def test_the_cpu_backstop_kills_a_helper_nobody_waits_for() -> None:
    """When this process cannot enforce the wall clock, RLIMIT_CPU stops a runaway anyway."""
    config = {
        "memory_bytes": 64 << 20,
        "cpu_seconds": 0,  # the soft limit is then the CPU time used, rounded up: 1 s
        "max_results": 10,
        "max_request_bytes": 1000,
        "max_reply_bytes": 1000,
        "cache_size": 4,
    }
    helper = _Helper(config, 10)
    try:
        query = b"until(false; .)"
        request = HEADER.pack(len(query)) + query + encode_input(b"null", NOW_MS)
        started = time.monotonic()
        with pytest.raises(_Ended):
            helper.exchange(request, time.monotonic() + 15, 1000)
        code, _ = helper.reap()
        assert code == -signal.SIGXCPU
        assert time.monotonic() - started < 10  # 1 s of CPU: longer on a busy box
    finally:
        helper.dispose()


def gone(pid: int) -> bool:
    """Exited (a zombie whose new parent has not reaped it yet counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_an_idle_helper_ends_with_its_parent() -> None:
    script = (
        "import sys; from shared.core.scripting import ScriptLimits; from shared.sandbox import JqPool;"
        "pool = JqPool(1, ScriptLimits()); pool.evaluate('1', None, 0);"
        "print(pool.pids()[0], flush=True); sys.stdin.read()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert parent.stdout is not None
        helper = int(parent.stdout.readline())
        assert not gone(helper)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 3
    while not gone(helper) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone(helper)


def test_pooled_sandbox_runs_both_engines() -> None:
    sandbox = PooledSandbox(LIMITS, 1)
    try:
        assert sandbox.javascript("$.a + 1", {"a": 1}, now_ms=NOW_MS, seed="s") == 2
        assert sandbox.javascript("Date.now()", {}, now_ms=NOW_MS, seed="s") == NOW_MS
        assert sandbox.jq_pool.pids() == []  # no jq yet, no helper
        assert sandbox.jq(".a + 1", {"a": 1}, now_ms=NOW_MS) == [2]
        assert len(sandbox.jq_pool.pids()) == 1
        with pytest.raises(ScriptError, match=r"^jq program exceeded the memory limit of 64 MiB$"):
            sandbox.jq('"x" * 100000000', None, now_ms=NOW_MS)
    finally:
        asyncio.run(sandbox.aclose())
    assert sandbox.jq_pool.pids() == []
