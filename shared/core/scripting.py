"""Scripts inside a decision: JavaScript (INLINE, SWITCH, DO_WHILE's loopCondition) and jq
(JSON_JQ_TRANSFORM), each bounded in time and memory, and reproducible.

JavaScript runs in QuickJS (PyPI `quickjs-ng`), a fresh context per evaluation (~0.16 ms) so no
script sees another's globals or what it did to Math or Date: no file, network, process or module
access exists in it; a time limit (Conductor's default 4 s) and a memory limit (exact: QuickJS
counts every allocation) stop runaway scripts with an error, and the host goes on. The time
limit is QuickJS's, measured in CPU time of the whole process (its interrupt handler reads
clock()): it always stops a runaway script, but may stop one early while other threads of the
process are busy — a script that really needs seconds of CPU should get a larger
CAIRN_SCRIPT_TIMEOUT_MS. `Date.now()`, `new Date()` and `Math.random()` are derived from the
decision's clock and a seed (the execution id), put in place when a script first touches them,
so a decision computed twice computes the same values (local-time Date methods follow the host's
time zone: run services in UTC). The script is a Script as in Conductor (its value is the last
expression's; a top-level `return` is a syntax error, so a function body is written as
`(function(){ ... })()`), with `$` bound to the input. Why QuickJS and not V8: docs/operators.md, "Scripts".

jq cannot be interrupted inside a process (its C code holds the GIL), so a decider evaluates jq
in a pool of helper processes (shared/sandbox/jq_pool.py) through the `Sandbox` protocol;
`InProcessSandbox` here evaluates jq directly, for unit tests and tools only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import jq
import quickjs


class ScriptError(Exception):
    """A script that failed: a syntax or runtime error, or a limit; the message says which."""


class ScriptTimeoutError(ScriptError):
    """The script ran past its time limit."""


@dataclass(frozen=True)
class ScriptLimits:
    timeout_ms: int = 4000
    memory_bytes: int = 64 * 1024 * 1024
    stack_bytes: int = 1024 * 1024
    max_results: int = 10_000
    """jq: a program emitting more values than this fails (an endless generator)."""


class Sandbox(Protocol):
    def javascript(self, script: str, bindings: Mapping[str, Any], *, now_ms: int, seed: str) -> Any: ...

    def jq(self, query: str, data: Any, *, now_ms: int) -> list[Any]: ...


_CLOCK_AND_RANDOM = r"""
(function (now, seed, RealDate, define, construct, imul, freeze) {
  "use strict";
  let s0 = seed[0], s1 = seed[1], s2 = seed[2], s3 = seed[3];
  function next() {  // xoshiro128**: the decision's seed, not the host's randomness
    const r = imul(((imul(s1, 5) << 7) | (imul(s1, 5) >>> 25)), 9) >>> 0;
    const t = s1 << 9;
    s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t;
    s3 = (s3 << 11) | (s3 >>> 21);
    return r / 4294967296;
  }
  function CairnDate(...args) {
    if (new.target === undefined) return new RealDate(now).toString();
    return construct(RealDate, args.length ? args : [now], new.target);
  }
  // Defined, never assigned: an assignment would look up setters on Function.prototype, which the
  // script may have planted, with `this` a function whose prototype still leads to the host's Date.
  const own = (target, key, value) =>
    define(target, key, { __proto__: null, value: value, configurable: true, writable: true });
  own(RealDate.prototype, "constructor", CairnDate);
  define(CairnDate, "prototype", { __proto__: null, value: RealDate.prototype });  // non-configurable
  own(CairnDate, "now", () => now);
  own(CairnDate, "parse", RealDate.parse);
  own(CairnDate, "UTC", RealDate.UTC);
  const performance = freeze({ __proto__: null, now: () => 0 });
  return { __proto__: null, Date: CairnDate, random: next, performance: performance };
})
"""
"""The decision's clock and random numbers. It is evaluated only when a script first touches
`Date`, `Math.random` or `performance` (see _LAZY): parsing it costs more than most scripts."""

_LAZY = r"""
(function (now, seed, source) {
  "use strict";
  const define = Object.defineProperty, evaluate = eval, RealDate = Date;
  const construct = Reflect.construct, imul = Math.imul, freeze = Object.freeze;
  const tryDefine = Reflect.defineProperty;
  // QuickJS hands CallSite objects, whose getFunction() returns the host's Date from inside the
  // clock's frames, to Error.prepareStackTrace: a script may not set one.
  define(Error, "prepareStackTrace", { __proto__: null, value: undefined });
  let made = null;
  function lazy(target, key) {
    define(target, key, {
      __proto__: null,
      configurable: true,
      get: function () {
        return (made || (made = evaluate(source)(now, seed, RealDate, define, construct, imul, freeze)))[key];
      },
      set: function (value) {  // on a frozen target, ignored as an assignment would be
        tryDefine(target, key, { __proto__: null, value: value, configurable: true, writable: true });
      },
    });
  }
  lazy(globalThis, "Date");
  lazy(Math, "random");
  lazy(globalThis, "performance");
})
"""
"""Put the decision's clock and random numbers in place of the host's, made on first use (function
expressions, not method shorthand: cheaper to parse, and parsing is most of the cost). Everything
it and _CLOCK_AND_RANDOM call is taken before the script runs, so a script that first replaces
`Reflect.construct`, `Object.defineProperty` or `eval` can never get hold of the host's `Date`
(with the clock installed eagerly, replacing `Reflect.construct` handed it over)."""
_LAZY_SOURCE = json.dumps(_CLOCK_AND_RANDOM)
_RUN = "JSON.stringify({v: (0, eval)(__cairn_source)})"
_CHECK = r"""(function () {
  const asScript = "throw __cairn_stop;\n" + __cairn_source;
  const strict = "throw __cairn_stop; (function () {" + __cairn_source + "\n})";
  for (const text of [asScript, strict]) {
    try { (0, eval)(text); return "did not stop"; } catch (e) { if (e !== __cairn_stop) return String(e); }
  }
  return "";
})()"""


def _seed_words(seed: str) -> list[int]:
    digest = hashlib.sha256(seed.encode()).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def _context(limits: ScriptLimits) -> Any:
    context = quickjs.Context()
    context.set_memory_limit(limits.memory_bytes)
    context.set_max_stack_size(limits.stack_bytes)
    context.set_time_limit(limits.timeout_ms / 1000)
    return context


def _error(error: Exception, limits: ScriptLimits) -> ScriptError:
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    if "interrupted" in first:
        return ScriptTimeoutError(
            f"Script not evaluated within {limits.timeout_ms / 1000:g} seconds, interrupted."
        )
    if "out of memory" in first or "string too long" in first:
        return ScriptError(
            f"Script ran out of memory (limit {limits.memory_bytes // (1024 * 1024)} MB): {first}"
        )
    return ScriptError(f"Error evaluating the script `{first}`")


def run_javascript(
    script: str, bindings: Mapping[str, Any], *, now_ms: int, seed: str, limits: ScriptLimits
) -> Any:
    """The value of `script` with `$` = `bindings` (JSON values in and out; undefined -> None)."""
    context = _context(limits)
    try:
        text = context.eval(  # one evaluation: each call into QuickJS costs a few microseconds
            f"{_LAZY}({int(now_ms)}, {json.dumps(_seed_words(seed))}, {_LAZY_SOURCE});"
            f" var $ = {json.dumps(bindings, allow_nan=False)}; var __cairn_source = {json.dumps(script)};"
            f" {_RUN}"
        )
    except quickjs.JSException as error:
        raise _error(error, limits) from None
    except (ValueError, TypeError, OverflowError) as error:  # input that is not JSON
        raise ScriptError(f"script input cannot be passed to JavaScript: {error}") from None
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text).get("v")
    except (ValueError, RecursionError) as error:
        raise ScriptError(f"script result cannot be read back: {error}") from None


def check_javascript(script: str, limits: ScriptLimits | None = None) -> str | None:
    """Why `script` does not parse as a Script, or None; nothing of it runs."""
    context = _context(limits or ScriptLimits(timeout_ms=1000))
    try:
        context.eval(f"var __cairn_stop = {{}}; var __cairn_source = {json.dumps(script)};")
        problem = context.eval(_CHECK)
    except quickjs.JSException as error:
        return f"JavaScript does not parse: {str(error).splitlines()[0]}"
    return f"JavaScript does not parse: {problem}" if problem else None


JQ_PROLOGUE = ".[0] as $__cairn_now | .[1] | def now: $__cairn_now; "
"""jq's `now` is the decision's clock: the program runs over [now, data] (the same prologue as
the helper processes of shared/sandbox, so both engines answer alike)."""


def run_jq_in_process(query: str, data: Any, *, now_ms: int, limits: ScriptLimits) -> list[Any]:
    """jq in this process: no time limit can stop it here (see the module docstring)."""
    try:
        program = jq.compile(JQ_PROLOGUE + query)
    except ValueError:
        try:  # report the error in the user's own text and columns
            jq.compile(query)
        except ValueError as error:
            raise ScriptError(str(error).strip() or "jq error") from None
        raise
    try:
        results: list[Any] = []
        for value in program.input_value([now_ms / 1000, data]):
            results.append(value)
            if len(results) > limits.max_results:
                raise ScriptError(f"jq program produced more than {limits.max_results} results")
        return results
    except ValueError as error:
        raise ScriptError(str(error).strip() or "jq error") from None


@dataclass(frozen=True)
class InProcessSandbox:
    """Both engines in this process: JavaScript with its limits, jq without (tests, tools)."""

    limits: ScriptLimits = ScriptLimits()

    def javascript(self, script: str, bindings: Mapping[str, Any], *, now_ms: int, seed: str) -> Any:
        return run_javascript(script, bindings, now_ms=now_ms, seed=seed, limits=self.limits)

    def jq(self, query: str, data: Any, *, now_ms: int) -> list[Any]:
        return run_jq_in_process(query, data, now_ms=now_ms, limits=self.limits)
