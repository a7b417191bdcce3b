"""The jq helper process: evaluates jq programs sent by shared/sandbox/jq_pool.py, one at a time.

Started by the pool as `python -I jq_worker.py CONFIG` (a fresh interpreter, isolated from the
user's site and environment variables, run by file path: it imports only the standard library
and `jq`, nothing of Cairn). Before it reads any request it puts limits on itself: an address
space limit (its footprint after start-up plus the evaluation's memory budget; jq aborts with
"cannot allocate memory" past it, Python raises MemoryError), no core files, no file writes, few
descriptors, and an empty environment (TZ=UTC apart, so `localtime` is the same on every host),
so `env` and `$ENV` reveal nothing of the server. Before each evaluation it moves its CPU-time
limit to what it has used plus the time limit and a margin: if the parent is wedged or gone, a
runaway program is still killed by SIGXCPU (a signal's default action needs no GIL). The wall
clock itself is the parent's to enforce (it SIGKILLs a helper past the time limit).

jq's `now` is the decision's clock: the input is sent as `[now_seconds, data]` and the program
run is `.[0] as $__cairn_now | .[1] | def now: $__cairn_now; <query>`, so a compiled program does
not depend on the clock and is cached (LRU) across decisions. Results are taken lazily, at most
`max_results` of them (so `repeat(1)` fails at once instead of running until the time limit).

Wire format, both directions: a 4-byte big-endian length, then the payload.
  first frame from the helper: READY (its limits are in place)
  request: 4-byte query length, the query (UTF-8), the input `[now, data]` (JSON text)
  reply:   b"R" + the JSON array of the results, or b"E" + JSON {"kind": ..., "detail": ...}
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import struct
import sys
from collections import OrderedDict
from typing import Any

READY = b"READY"
HEADER = struct.Struct(">I")
RESULTS = b"R"
FAILURE = b"E"

# Failure kinds in a b"E" reply.
COMPILE = "compile"
RUNTIME = "runtime"
TOO_MANY = "too_many"
TOO_LARGE = "too_large"
MEMORY = "memory"
NESTING = "nesting"

PROLOGUE = ".[0] as $__cairn_now | .[1] | def now: $__cairn_now; "
"""Put before the query (on its line, so `$__loc__` and error lines stay the user's)."""

MAX_FDS = 16


def encode_input(data_json: bytes, now_ms: int) -> bytes:
    """The input the helper runs the program on: `[now in seconds, data]`."""
    return b"[" + repr(int(now_ms) / 1000).encode() + b"," + data_json + b"]"


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, max_size: int) -> bytes | None:
    """The next frame, or None at end of input (the parent closed the pipe or went away)."""
    header = _read_exact(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > max_size:
        raise SystemExit(f"jq helper: request of {size} bytes, more than {max_size}")
    return _read_exact(fd, size)


def _write_frame(fd: int, payload: bytes) -> None:
    view = memoryview(HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _failure(kind: str, detail: str = "") -> bytes:
    return FAILURE + json.dumps({"kind": kind, "detail": detail}).encode()


MEMORY_REPLY = _failure(MEMORY)
"""Made in advance: after a MemoryError there may be no memory to make it."""


def _jq_message(error: Exception) -> str:
    return str(error).strip() or "jq error"


def _private_pipes() -> tuple[int, int]:
    """The protocol's own descriptors; 0 and 1 then point at /dev/null, so nothing that reads
    stdin or writes stdout (C code included) can touch the protocol."""
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return requests, replies


def _address_space_now() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 64 * 1024 * 1024  # no /proc: a generous guess at an interpreter's footprint


def _lower(which: int, value: int) -> None:
    """Set soft and hard limit to `value`, or to the hard limit already in place if it is lower."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def _limit_self(memory_bytes: int) -> None:
    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_FSIZE, 0)  # pipes are not files: replies are unaffected
    _lower(resource.RLIMIT_NOFILE, MAX_FDS)
    _lower(resource.RLIMIT_AS, _address_space_now() + memory_bytes)
    # The parent starts helpers with only TZ=UTC in their environment (so `localtime` is the
    # same on every host); what Python itself added (LC_CTYPE) goes, so nothing else reaches
    # jq's `env` / `$ENV`. Deleting keys also clears the C environment jq reads.
    for key in [name for name in os.environ if name != "TZ"]:
        del os.environ[key]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a helper ends


def _cpu_backstop(seconds: int) -> None:
    """RLIMIT_CPU counts the whole life of the process: move the soft limit past what is used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _dump(results: list[Any]) -> bytes:
    text = json.dumps(results, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (jq does not make them, but be sure)
        return json.dumps(results, separators=(",", ":")).encode()


class _Evaluator:
    def __init__(self, jq: Any, max_results: int, max_reply_bytes: int, cache_size: int) -> None:
        self.jq = jq
        self.max_results = max_results
        self.max_reply_bytes = max_reply_bytes
        self.cache_size = cache_size
        self.programs: OrderedDict[str, Any] = OrderedDict()

    def program(self, query: str) -> Any:
        program = self.programs.get(query)
        if program is not None:
            self.programs.move_to_end(query)
            return program
        try:
            program = self.jq.compile(PROLOGUE + query)
        except ValueError as error:
            # The user's text alone gives the message with the user's columns; it compiles on its
            # own only if it relied on the prologue's names, then the full message it is.
            message = _jq_message(error)
            try:
                self.jq.compile(query)
            except ValueError as own:
                message = _jq_message(own)
            raise _Failed(COMPILE, message) from None
        self.programs[query] = program
        if len(self.programs) > self.cache_size:
            self.programs.popitem(last=False)
        return program

    def reply(self, request: bytes) -> bytes:
        try:
            (query_size,) = HEADER.unpack_from(request)
            query = request[HEADER.size : HEADER.size + query_size].decode()
            text = request[HEADER.size + query_size :].decode()
            return RESULTS + self.evaluate(query, text)
        except _Failed as failed:
            return _failure(failed.kind, failed.detail)
        except MemoryError:
            return MEMORY_REPLY

    def evaluate(self, query: str, text: str) -> bytes:
        program = self.program(query)
        results: list[Any] = []
        try:
            for value in program.input_text(text):  # lazy: stops at the cap
                if len(results) == self.max_results:
                    raise _Failed(TOO_MANY)
                results.append(value)
            payload = _dump(results)
        except ValueError as error:
            raise _Failed(RUNTIME, _jq_message(error)) from None
        except RecursionError:
            raise _Failed(NESTING) from None
        if len(payload) + 1 > self.max_reply_bytes:
            raise _Failed(TOO_LARGE)
        return payload


class _Failed(Exception):
    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(kind)
        self.kind = kind
        self.detail = detail


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    import jq  # before the limits: the interpreter's own footprint is not the program's budget

    requests, replies = _private_pipes()
    _limit_self(int(config["memory_bytes"]))
    evaluator = _Evaluator(
        jq, int(config["max_results"]), int(config["max_reply_bytes"]), int(config["cache_size"])
    )
    max_request = int(config["max_request_bytes"]) + HEADER.size
    cpu_seconds = int(config["cpu_seconds"])
    _write_frame(replies, READY)
    while True:
        request = _read_frame(requests, max_request)
        if request is None:
            return 0
        _cpu_backstop(cpu_seconds)
        _write_frame(replies, evaluator.reply(request))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
