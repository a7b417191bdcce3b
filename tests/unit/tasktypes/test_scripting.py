"""The JavaScript sandbox (shared/core/scripting.py): bounded in time and memory, without host
access, reproducible clock and randomness, JSON in and out; and `check_javascript`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from shared.core.scripting import (
    InProcessSandbox,
    ScriptError,
    ScriptLimits,
    ScriptTimeoutError,
    check_javascript,
    run_javascript,
)
from shared.models.runtime import TaskStatus
from tests.unit.tasktypes.builders import Flow, inline, workflow

LIMITS = ScriptLimits(timeout_ms=300, memory_bytes=16 * 1024 * 1024)
NOW = 1_700_000_000_000


def js(script: str, bindings: dict[str, Any] | None = None, *, now: int = NOW, seed: str = "seed-1") -> Any:
    return run_javascript(script, bindings or {}, now_ms=now, seed=seed, limits=LIMITS)


# ---- limits ----------------------------------------------------------------------------


def test_an_endless_loop_is_stopped_at_the_time_limit() -> None:
    began = time.monotonic()
    with pytest.raises(ScriptTimeoutError, match=r"^Script not evaluated within 0.3 seconds, interrupted\.$"):
        js("while (true) {}")
    assert time.monotonic() - began < 2.0
    assert js("1 + 1") == 2, "the host goes on"


def test_the_time_limit_goes_through_decide_s_sandbox() -> None:
    f = Flow(workflow(inline("i", "while (true) {}")), sandbox=InProcessSandbox(ScriptLimits(timeout_ms=100)))
    assert f.task("i").status is TaskStatus.FAILED
    assert f.task("i").reason_for_incompletion == "Script not evaluated within 0.1 seconds, interrupted."


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ("let a = []; while (true) { a.push(new Array(100000).fill(1)); }", "out of memory"),
        ("let s = 'x'; while (true) { s = s + s; }", "string too long"),
    ],
)
def test_unbounded_allocation_fails_with_the_memory_limit(script: str, why: str) -> None:
    with pytest.raises(ScriptError) as caught:
        js(script)
    assert not isinstance(caught.value, ScriptTimeoutError)
    assert str(caught.value).startswith("Script ran out of memory (limit 16 MB): InternalError: ")
    assert why in str(caught.value)


def test_unbounded_recursion_fails() -> None:
    with pytest.raises(ScriptError, match="Maximum call stack size exceeded"):
        js("function f() { return f(); } f()")


# ---- no host access --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["require", "process", "fetch", "console", "XMLHttpRequest", "std", "os", "setTimeout", "Java"]
)
def test_host_objects_do_not_exist(name: str) -> None:
    assert js(f"typeof {name}") == "undefined"


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ("require('fs')", "ReferenceError: require is not defined"),
        ("process.exit(1)", "ReferenceError: process is not defined"),
        ("fetch('http://example.com')", "ReferenceError: fetch is not defined"),
    ],
)
def test_using_them_is_a_script_error(script: str, error: str) -> None:
    with pytest.raises(ScriptError) as caught:
        js(script)
    assert str(caught.value) == f"Error evaluating the script `{error}`"


def test_no_script_sees_another_s_globals() -> None:
    assert js("var leaked = 1; leaked") == 1
    assert js("typeof leaked") == "undefined"


# ---- clock and randomness --------------------------------------------------------------


def test_the_clock_is_the_decision_s() -> None:
    assert js("Date.now()") == NOW
    assert js("new Date().getTime()") == NOW
    assert js("new Date().toISOString()") == "2023-11-14T22:13:20.000Z"
    assert js("Date()") == "Tue Nov 14 2023 22:13:20 GMT+0000"
    assert js("Date.now()", now=5) == 5
    assert js("new Date(0).getTime()") == 0, "explicit dates are untouched"
    assert js("new Date() instanceof Date") is True
    assert js("performance.now()") == 0


@pytest.mark.parametrize(
    "script",
    [
        "var real; Reflect.construct = function (C) { real = C; return {}; }; new Date(); typeof real",
        "var real; Object.defineProperty = function (o) { real = o; }; Date.now(); typeof real",
        # a setter planted where installing the clock used to assign CairnDate.now (review finding)
        "var real; Object.defineProperty(Function.prototype, 'now', {configurable: true,"
        " set(v) { real = this.prototype.constructor; }}); Date; real === Date ? 'undefined' : typeof real",
        "var real; Object.defineProperty(Object.prototype, 'UTC', {configurable: true,"
        " set(v) { real = this.prototype.constructor; }}); Date; real === Date ? 'undefined' : typeof real",
        # the host's Date as a CallSite's function while it converts an argument (review finding)
        "var fns = []; try { Error.prepareStackTrace = (e, cs) => {"
        " for (const c of cs) fns.push(c.getFunction()); return ''; }; } catch (e) {}"
        " new Date({valueOf() { new Error().stack; return 0; }});"
        " typeof fns.find(f => f && f.name === 'Date' && f !== Date)",
    ],
)
def test_a_script_that_replaces_builtins_first_never_reaches_the_host_clock(script: str) -> None:
    """The clock is put in place on first use, with builtins taken before the script runs (with
    the clock installed eagerly, replacing Reflect.construct handed over the host's Date)."""
    assert js(script) == "undefined"


def test_the_clock_survives_a_script_that_breaks_what_it_uses() -> None:
    assert js("eval = null; Date.now()") == NOW
    assert js("Object.prototype.get = function () { return 1; }; [Date.now(), new Date().getTime()]") == [
        NOW,
        NOW,
    ]


def test_the_clock_and_random_can_be_replaced_by_the_script() -> None:
    assert js("Date = 5; Date") == 5
    assert js("Math.random = () => 7; Math.random()") == 7
    assert js("Math.random(); Math.random = () => 7; [Math.random(), Date.now()]") == [7, NOW]
    assert js("delete Date; typeof Date") == "undefined"
    assert js("Object.freeze(Math); Math.random = 1; typeof Math.random") == "function"


def test_random_is_derived_from_the_seed() -> None:
    script = "[Math.random(), Math.random(), Math.random()]"
    first = js(script, seed="task-a")
    assert js(script, seed="task-a") == first, "same seed, same values"
    other = js(script, seed="task-b")
    assert other != first, "another seed, other values"
    assert len(set(first)) == 3 and all(0 <= x < 1 for x in first + other)


def test_the_sandbox_protocol_passes_the_clock_and_seed() -> None:
    sandbox = InProcessSandbox(LIMITS)
    a = sandbox.javascript("[Date.now(), Math.random()]", {}, now_ms=42, seed="s")
    b = sandbox.javascript("[Date.now(), Math.random()]", {}, now_ms=42, seed="s")
    assert a == b and a[0] == 42


# ---- JSON in and out -------------------------------------------------------------------


def test_bindings_are_dollar_and_results_come_back_as_json_values() -> None:
    bindings = {"a": {"b": 2}, "list": [1, 2, 3], "text": "é", "none": None, "flag": True, "x": 1.5}
    assert js("$.a.b + $.list.length", bindings) == 5
    assert js("({t: $.text, n: $.none, f: !$.flag, x: $.x * 2, l: $.list.map(v => v * 10)})", bindings) == {
        "t": "é",
        "n": None,
        "f": False,
        "x": 3,
        "l": [10, 20, 30],
    }
    assert js("JSON.stringify($)", {"k": [1]}) == '{"k":[1]}'


@pytest.mark.parametrize("script", ["undefined", "null", "NaN", "1 / 0", "(function () {})"])
def test_values_json_cannot_carry_come_back_as_none(script: str) -> None:
    assert js(script) is None


def test_the_completion_value_is_the_result() -> None:
    assert js("if ($.c) { 'yes'; } else { 'no'; }", {"c": True}) == "yes"
    assert js("var x = 1; x + 1") == 2


def test_input_that_is_not_json_is_refused() -> None:
    with pytest.raises(ScriptError, match="script input cannot be passed to JavaScript"):
        js("1", {"n": float("nan")})
    with pytest.raises(ScriptError, match="script input cannot be passed to JavaScript"):
        js("1", {"o": object()})


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ("x.y", "ReferenceError: x is not defined"),
        ("return 1", "SyntaxError: return not in a function"),
        ("throw new Error('boom')", "Error: boom"),
    ],
)
def test_errors_name_the_first_line_of_the_engine_s_message(script: str, error: str) -> None:
    with pytest.raises(ScriptError) as caught:
        js(script)
    assert str(caught.value) == f"Error evaluating the script `{error}`"


# ---- check_javascript ------------------------------------------------------------------


def test_check_javascript_accepts_scripts_and_never_runs_them() -> None:
    assert check_javascript("(function () { return 1; })()") is None
    began = time.monotonic()
    assert check_javascript("while (true) {}") is None
    assert time.monotonic() - began < 0.5
    assert check_javascript("throw new Error('would fail if run')") is None


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("1 +", "JavaScript does not parse: SyntaxError: unexpected token in expression: ''"),
        ("return 1", "JavaScript does not parse: SyntaxError: return not in a function"),
        ("function (", "JavaScript does not parse: SyntaxError: function name expected"),
    ],
)
def test_check_javascript_says_why_a_script_does_not_parse(script: str, problem: str) -> None:
    assert check_javascript(script) == problem
