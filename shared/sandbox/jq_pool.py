"""jq in a pool of helper processes, each bounded in time, memory and output.

jq (PyPI `jq`) holds the GIL while it evaluates and has no way to be interrupted, so it never
runs in a server process: a small pool of persistent helpers (shared/sandbox/jq_worker.py) does
the work, and a helper past the time limit is SIGKILLed and replaced. A round trip costs ~0.2 ms
with the program cached in the helper, a few ms when it is compiled first.

- Helpers are started on demand (a decider that never runs jq starts none), up to `size`; one
  that died or was killed is replaced in the background, so the next caller rarely waits for a
  start. They are started with `subprocess.Popen([sys.executable, "-I", worker])` (fork and exec
  with no Python code in between, so safe in a process with threads and an event loop; never
  multiprocessing's fork, never preexec_fn), an empty environment, cwd /, no inherited descriptors
  and a session of their own (a terminal's Ctrl-C does not reach them).
- Waiting for a helper (to start, to answer) is poll() with a deadline, which releases the GIL:
  the event loop and other threads go on meanwhile.
- Limits: the parent's wall clock (`ScriptLimits.timeout_ms`, then SIGKILL); the helper's own
  address-space limit (`ScriptLimits.memory_bytes` above its footprint) and a CPU-time backstop
  (for when this process is wedged or gone; an idle helper exits when its stdin closes);
  at most `ScriptLimits.max_results` results; bounded request and reply sizes, checked on both
  sides.
- `evaluate` is thread-safe; callers beyond `size` wait for a free helper.
"""

from __future__ import annotations

import json
import logging
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from shared.core.scripting import ScriptError, ScriptLimits, ScriptTimeoutError
from shared.sandbox.jq_worker import (
    COMPILE,
    FAILURE,
    HEADER,
    MEMORY,
    NESTING,
    READY,
    RESULTS,
    RUNTIME,
    TOO_LARGE,
    TOO_MANY,
    encode_input,
)

log = logging.getLogger(__name__)

WORKER = Path(__file__).resolve().with_name("jq_worker.py")
MiB = 1024 * 1024


class _TimedOut(Exception):
    pass


class _Ended(Exception):
    """The helper closed its end: it exited or was killed."""


class _Oversized(Exception):
    """The helper announced a reply larger than allowed (only a broken helper does)."""


class _Helper:
    """One helper process and its pipes; used by one thread at a time (the pool sees to it)."""

    def __init__(self, config: dict[str, int], start_timeout_s: float) -> None:
        if not sys.executable:
            raise ScriptError("jq helper cannot start: no Python executable known (sys.executable)")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", str(WORKER), json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={"TZ": "UTC"},
                cwd="/",
                close_fds=True,
                start_new_session=True,
            )
        except OSError as error:
            raise ScriptError(f"jq helper cannot start: {error}") from None
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self._requests = self.proc.stdin.fileno()
        self._replies = self.proc.stdout.fileno()
        self._errors = self.proc.stderr.fileno()
        for fd in (self._requests, self._replies, self._errors):
            os.set_blocking(fd, False)
        self._writable = select.poll()
        self._writable.register(self._requests, select.POLLOUT)
        self._readable = select.poll()
        self._readable.register(self._replies, select.POLLIN)
        self._disposed = False
        self._lock = threading.Lock()
        try:
            ready = self._read_exact(HEADER.size + len(READY), time.monotonic() + start_timeout_s)
        except _TimedOut:
            self.dispose()
            raise ScriptError(f"jq helper did not start within {start_timeout_s:g} s") from None
        except _Ended:
            code, errors = self.reap()
            self.dispose()
            raise ScriptError(f"jq helper failed to start ({_exit(code)}): {errors or 'no output'}") from None
        if ready[HEADER.size :] != READY:
            self.dispose()
            raise ScriptError("jq helper failed to start: it did not say READY")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self._disposed and self.proc.poll() is None

    def exchange(self, request: bytes, deadline: float, max_reply: int) -> bytes:
        """Send a request, return the reply; raises _TimedOut, _Ended or _Oversized (then the
        helper is unusable: kill it)."""
        self._write(HEADER.pack(len(request)), deadline)
        self._write(request, deadline)
        (size,) = HEADER.unpack(self._read_exact(HEADER.size, deadline))
        if size > max_reply:
            raise _Oversized
        reply = self._read_exact(size, deadline)
        self._drain_errors()
        return reply

    def _drain_errors(self) -> None:
        """Nothing writes to a live helper's stderr; should something, it must not fill the pipe."""
        try:
            chatter = os.read(self._errors, 1 << 16)
        except (BlockingIOError, OSError):
            return
        if chatter:
            log.debug("jq helper %d wrote: %s", self.pid, chatter[-500:].decode(errors="replace"))

    def _wait(self, poller: select.poll, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(math.ceil(left * 1000)):
            raise _TimedOut

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._requests, view) :]
            except BlockingIOError:
                self._wait(self._writable, deadline)
            except (BrokenPipeError, ConnectionResetError):
                raise _Ended from None

    def _read_exact(self, size: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while size:
            self._wait(self._readable, deadline)
            try:
                chunk = os.read(self._replies, min(size, 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                raise _Ended
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        """SIGKILL and reap (no zombie); safe from any thread, any number of times."""
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()

    def reap(self, grace_s: float = 2.0) -> tuple[int, str]:
        """After the helper closed its end: its exit status and the tail of what it wrote to stderr."""
        try:
            code = self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        try:
            errors = os.read(self._errors, 1 << 16).decode(errors="replace").strip()
        except (BlockingIOError, OSError):
            errors = ""
        return code, errors[-500:]

    def dispose(self) -> None:
        """Kill, reap and close the pipes; only by the thread that holds the helper (or when no
        thread does)."""
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
        self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def _exit(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


class JqPool:
    """`evaluate(query, data, now_ms)` -> the program's results, in helpers; see the module doc."""

    def __init__(
        self,
        size: int,
        limits: ScriptLimits,
        *,
        max_request_bytes: int | None = None,
        max_reply_bytes: int = 16 * MiB,
        cache_size: int = 256,
        acquire_timeout_s: float | None = None,
        start_timeout_s: float = 10.0,
    ) -> None:
        if size < 1:
            raise ValueError("a jq pool needs at least one helper")
        self.size = size
        self.limits = limits
        self.timeout_s = limits.timeout_ms / 1000
        self.max_request_bytes = max_request_bytes or max(MiB, limits.memory_bytes // 4)
        """The query and its input as sent; jq needs several times the input's size to hold it."""
        self.max_reply_bytes = max_reply_bytes
        self.acquire_timeout_s = acquire_timeout_s or max(30.0, 4 * self.timeout_s)
        self.start_timeout_s = start_timeout_s
        self._config = {
            "memory_bytes": limits.memory_bytes,
            "cpu_seconds": math.ceil(self.timeout_s) + 2,
            "max_results": limits.max_results,
            "max_request_bytes": self.max_request_bytes + HEADER.size,
            "max_reply_bytes": max_reply_bytes,
            "cache_size": cache_size,
        }
        self._changed = threading.Condition()
        self._idle: list[_Helper] = []
        self._helpers: set[_Helper] = set()
        """Every helper started and not yet retired, idle or in use."""
        self._starting = 0
        self._closed = False

    # ---- evaluation ----------------------------------------------------------------------------

    def evaluate(self, query: str, data: Any, now_ms: int) -> list[Any]:
        """The results of `query` on `data` with jq's `now` = `now_ms`; raises ScriptError
        (ScriptTimeoutError past the time limit)."""
        request = self._request(query, data, now_ms)
        helper = self._acquire()
        keep = False
        try:
            reply = self._exchange(helper, request)
            if reply[:1] == RESULTS:
                keep = True
                return self._results(reply[1:])
            if reply[:1] != FAILURE:
                raise ScriptError("jq helper sent a reply it should not have")
            failure = json.loads(reply[1:])
            keep = failure["kind"] != MEMORY  # a MemoryError may have left it in a poor state
            raise self._failure(failure["kind"], failure["detail"])
        finally:
            self._release(helper, keep)

    def _request(self, query: str, data: Any, now_ms: int) -> bytes:
        try:
            program = query.encode()
        except UnicodeEncodeError as error:
            raise ScriptError(f"jq program is not valid text: {error}") from None
        try:
            text = json.dumps(data, separators=(",", ":")).encode()
        except (TypeError, ValueError, RecursionError) as error:
            raise ScriptError(f"jq input is not JSON: {error}") from None
        body = encode_input(text, now_ms)
        size = len(program) + len(body)
        if size > self.max_request_bytes:
            raise ScriptError(
                f"jq program and input are {size} bytes, more than the limit of {self.max_request_bytes}"
            )
        return HEADER.pack(len(program)) + program + body

    def _exchange(self, helper: _Helper, request: bytes) -> bytes:
        try:
            return helper.exchange(request, time.monotonic() + self.timeout_s, self.max_reply_bytes + 1)
        except _TimedOut:
            helper.kill()
            log.info("jq helper %d killed: program past the time limit", helper.pid)
            raise self._timeout() from None
        except _Ended:
            code, errors = helper.reap()
            error = self._death(code, errors)
            log.info("jq helper %d ended (%s): %s", helper.pid, _exit(code), error)
            raise error from None
        except _Oversized:
            helper.kill()
            log.warning("jq helper %d killed: reply larger than allowed", helper.pid)
            raise self._failure(TOO_LARGE, "") from None

    def _results(self, body: bytes) -> list[Any]:
        try:
            results = json.loads(body)
        except RecursionError:
            raise self._failure(NESTING, "") from None
        except ValueError as error:
            raise ScriptError(f"jq helper sent results that are not JSON: {error}") from None
        if not isinstance(results, list):
            raise ScriptError("jq helper sent results that are not a list")
        return results

    # ---- errors ----------------------------------------------------------------------------------

    def _timeout(self) -> ScriptTimeoutError:
        return ScriptTimeoutError(f"jq program exceeded the time limit of {self.timeout_s:g} s")

    def _memory(self) -> ScriptError:
        return ScriptError(f"jq program exceeded the memory limit of {self.limits.memory_bytes / MiB:g} MiB")

    def _failure(self, kind: str, detail: str) -> ScriptError:
        if kind in (COMPILE, RUNTIME):
            return ScriptError(detail)
        if kind == TOO_MANY:
            return ScriptError(f"jq program produced more than {self.limits.max_results} results")
        if kind == TOO_LARGE:
            return ScriptError(
                f"jq program's results are larger than {self.max_reply_bytes / MiB:g} MiB as JSON"
            )
        if kind == MEMORY:
            return self._memory()
        if kind == NESTING:
            return ScriptError("jq program's results are nested too deeply to be returned")
        return ScriptError(f"jq failed: {kind} {detail}".strip())

    def _death(self, code: int, errors: str) -> ScriptError:
        if self._closed:
            return ScriptError("jq sandbox was closed during the evaluation")
        if code == -signal.SIGXCPU:
            return self._timeout()  # its CPU backstop: this process did not stop it in time
        if code == -signal.SIGABRT or "allocate memory" in errors or "MemoryError" in errors:
            return self._memory()
        if code == -signal.SIGSEGV:
            return ScriptError("jq crashed (SIGSEGV): a value nested too deeply?")
        if code == -signal.SIGKILL:
            return ScriptError("jq helper was killed (SIGKILL: by the system's out-of-memory killer?)")
        return ScriptError(f"jq helper ended unexpectedly ({_exit(code)}){': ' + errors if errors else ''}")

    # ---- helpers -----------------------------------------------------------------------------------

    def _acquire(self) -> _Helper:
        deadline = time.monotonic() + self.acquire_timeout_s
        with self._changed:
            while True:
                if self._closed:
                    raise ScriptError("jq sandbox is closed")
                if self._idle:
                    return self._idle.pop()
                if len(self._helpers) + self._starting < self.size:
                    self._starting += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ScriptError(
                        f"no jq helper became free within {self.acquire_timeout_s:g} s (all {self.size} busy)"
                    )
                self._changed.wait(left)
        helper = self._start()
        if helper is None:
            raise ScriptError("jq sandbox is closed")
        return helper

    def _start(self, *, idle: bool = False) -> _Helper | None:
        """Start a helper for a slot already counted in `_starting`; None if the pool closed
        meanwhile. `idle`: put it among the idle ones (a replacement started in the background)."""
        try:
            helper = _Helper(self._config, self.start_timeout_s)
        except BaseException:
            with self._changed:
                self._starting -= 1
                self._changed.notify_all()
            raise
        with self._changed:
            self._starting -= 1
            self._changed.notify_all()
            if self._closed:
                helper.dispose()  # under the lock: close() waits for no start to be under way
                return None
            self._helpers.add(helper)
            if idle:
                self._idle.append(helper)
        return helper

    def _release(self, helper: _Helper, keep: bool) -> None:
        with self._changed:
            if keep and not self._closed and helper.alive():
                self._idle.append(helper)
                self._changed.notify()
                return
            self._helpers.discard(helper)
            self._changed.notify_all()
        helper.dispose()
        self._replace()

    def _replace(self) -> None:
        """Start a helper in the background in place of a retired one."""
        with self._changed:
            if self._closed or len(self._helpers) + self._starting >= self.size:
                return
            self._starting += 1
        threading.Thread(target=self._start_in_background, name="cairn-jq-start", daemon=True).start()

    def _start_in_background(self) -> None:
        try:
            self._start(idle=True)
        except Exception as error:
            log.warning("could not start a jq helper: %s", error)

    def pids(self) -> list[int]:
        """The helpers' process ids (for tests and diagnostics)."""
        with self._changed:
            return sorted(helper.pid for helper in self._helpers)

    def close(self) -> None:
        """Stop every helper (one in use is killed; its caller gets a ScriptError) and wait for
        starts under way; no helper process is left once this returns."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = self._helpers.difference(idle)
            self._helpers.clear()
            self._changed.notify_all()
            while self._starting:
                self._changed.wait()
        for helper in idle:
            helper.dispose()
        for helper in busy:
            helper.kill()  # its pipes are closed by the thread using it, on release
