"""Every known difference between Conductor OSS 3.32.3 and Cairn, per conformance case.

A case passes only when the normalised results differ in exactly the paths its entries list
(tests/conformance/normalise.py explains the paths): a difference that gets fixed makes the case
fail until its paths are removed here, and a new difference fails it too. `kind` is "bug" where
Cairn contradicts Conductor and its operator module does not declare the difference deliberate,
"deliberate" where Cairn differs on purpose (its module says so) or cannot do otherwise (another
JavaScript or jq engine's wording).

Ordered by importance: wrong control flow and lost executions first, messages last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Difference:
    kind: Literal["bug", "deliberate"]
    reason: str
    paths: tuple[str, ...]


KNOWN_DIFFERENCES: dict[str, tuple[Difference, ...]] = {
    "optional_failure_last_task": (
        Difference(
            "deliberate",
            "An optional task that fails as the workflow's last task: Conductor leaves it FAILED (the "
            "workflow completes in the same decide pass, before the optional task would be rewritten "
            "to COMPLETED_WITH_ERRORS; the workflow is COMPLETED); Cairn records "
            "COMPLETED_WITH_ERRORS, Conductor's rule for an optional task anywhere else in the list, "
            "so an optional failure reads the same wherever it happens (docs/operators.md).",
            ("tasks[jq_last].status",),
        ),
        Difference(
            "deliberate",
            "jq runtime error text: Conductor runs jackson-jq, Cairn the jq C library, whose message "
            "quotes the key differently. The workflow output is the last task's output, so it shows "
            "the same message.",
            ("output.error", "tasks[jq_last].outputData.error"),
        ),
    ),
    "optional_failure_last_simple": (
        Difference(
            "deliberate",
            "The same quirk for an optional SIMPLE task that fails last: Conductor FAILED, Cairn "
            "COMPLETED_WITH_ERRORS (the workflow is COMPLETED on both).",
            ("tasks[fail_last].status",),
        ),
    ),
    "http_not_found": (
        Difference(
            "deliberate",
            "A non-2xx HTTP answer: Conductor's RestTemplate throws, so `response` is the exception's "
            "text (a string) and no body is read; Cairn keeps the response map (statusCode, headers, "
            "body, reasonPhrase), as services/system_worker/http_task.py declares.",
            (
                "tasks[http_missing].outputData.response",
                "tasks[http_missing].outputData.response.body.error",
                "tasks[http_missing].outputData.response.body.path",
                "tasks[http_missing].outputData.response.headers.Server[0]",
                'tasks[http_missing].outputData.response.headers["Content-Length"][0]',
                'tasks[http_missing].outputData.response.headers["Content-Type"][0]',
                "tasks[http_missing].outputData.response.reasonPhrase",
                "tasks[http_missing].outputData.response.statusCode",
            ),
        ),
    ),
    "http": (
        Difference(
            "deliberate",
            "A JSON number as the whole HTTP body: Conductor reads it as a double (42.0), Cairn keeps "
            "the integer (42), as services/system_worker/http_task.py declares.",
            ("tasks[http_number].outputData.response.body",),
        ),
    ),
    "json_jq_transform": (
        Difference(
            "deliberate",
            "jq compile error text: jackson-jq's parser and the jq C library's word a syntax error "
            "differently (both name the line and column of the user's query).",
            ("tasks[jq_parse_error].outputData.error",),
        ),
        Difference(
            "deliberate",
            'jq runtime error text: jackson-jq says `Cannot index number with string "c"`, the jq '
            'C library `Cannot index number with string ("c")`.',
            ("tasks[jq_runtime_error].outputData.error",),
        ),
    ),
    "inline_error": (
        Difference(
            "deliberate",
            "JavaScript error text: GraalJS says `Cannot read property 'deeper' of undefined` and "
            "Conductor appends ` at line 1`; QuickJS says `cannot read property ...` and gives no "
            "line. (A thrown Error's message is the same on both.)",
            ("tasks[type_error].outputData.error",),
        ),
    ),
    "nested_do_while": (
        Difference(
            "deliberate",
            "Nested DO_WHILE: Conductor OSS does not support it. Its inner loop runs as `inner__1`, "
            "so the condition's `$.inner` is undefined, the inner loop ends "
            "FAILED_WITH_TERMINAL_ERROR after one iteration and the workflow FAILS. Cairn runs nested "
            "loops, with compound references outermost first (body__1__2, inner__2), as "
            "shared/core/refs.py declares.",
            (
                "output.outer.1.body.result",
                "output.outer.1.inner.2.body.result",
                "output.outer.1.inner.iteration",
                "output.outer.2.inner.1.body.result",
                "output.outer.2.inner.2.body.result",
                "output.outer.2.inner.iteration",
                "output.outer.iteration",
                "status",
                "taskOrder",
                "tasks[body__1]",
                "tasks[body__1__1]",
                "tasks[body__1__2]",
                "tasks[body__2__1]",
                "tasks[body__2__2]",
                "tasks[inner__1].iteration",
                "tasks[inner__1].outputData.2.body.result",
                "tasks[inner__1].outputData.iteration",
                "tasks[inner__1].status",
                "tasks[inner__2]",
                "tasks[outer].iteration",
                "tasks[outer].outputData.1.body.result",
                "tasks[outer].outputData.1.inner.2.body.result",
                "tasks[outer].outputData.1.inner.iteration",
                "tasks[outer].outputData.2.inner.1.body.result",
                "tasks[outer].outputData.2.inner.2.body.result",
                "tasks[outer].outputData.2.inner.iteration",
                "tasks[outer].outputData.iteration",
                "tasks[outer].status",
            ),
        ),
    ),
    # ---- lifecycle operations and idempotent starts (docs/operations.md) ----
    "op_rerun_loop_iteration": (
        Difference(
            "deliberate",
            "Rerun from an iteration of a finished DO_WHILE: Conductor deletes the later tasks but leaves "
            "the loop COMPLETED, so nothing runs again and the workflow stays RUNNING with nothing "
            "scheduled, for good; Cairn takes the loop back to that iteration, which goes on from there "
            "(docs/operations.md).",
            ("status", "taskOrder", "tasks[after]", "tasks[body__3]"),
        ),
    ),
    "op_rerun_fork_branch": (
        Difference(
            "deliberate",
            "Rerun from a fork branch's task: Conductor runs the task again (with the taskInput) and "
            "reopens the JOIN, but the JOIN keeps the output it collected in the earlier run, so it "
            "shows the branch's old output; Cairn's JOIN collects again and shows the new one.",
            ("tasks[join].outputData.a2.doubled", "tasks[join].outputData.a2.echo.x"),
        ),
    ),
    "op_skip": (
        Difference(
            "deliberate",
            "Skip of a task not yet reached: Conductor writes its SKIPPED record at once (so it comes "
            "before the task that was running); Cairn records the skip and writes the record when the "
            "workflow reaches the task, in the order the task would have run.",
            ("taskOrder",),
        ),
    ),
    "op_terminate_trigger_failure": (
        Difference(
            "deliberate",
            "Terminate with triggerFailureWorkflow: Conductor OSS ignores the parameter (it is Orkes "
            "Conductor's) and starts no failure workflow; Cairn starts it, as Orkes does.",
            ("output", 'output["conductor.failure_workflow"]'),
        ),
    ),
    "op_idempotent_fail": (
        Difference(
            "deliberate",
            "Conductor OSS accepts idempotencyKey and ignores it (conductor-oss/conductor#1527): a second "
            "start with the same key starts a second execution. Cairn follows Orkes Conductor: FAIL "
            "refuses it with 409.",
            ('answers["start again (FAIL)"]',),
        ),
    ),
    "op_idempotent_return_existing": (
        Difference(
            "deliberate",
            "Conductor OSS ignores idempotencyKey (#1527) and starts a second execution; Cairn follows "
            "Orkes: RETURN_EXISTING answers the execution that holds the key.",
            ('answers["same execution"]',),
        ),
    ),
    "op_idempotent_fail_on_running": (
        Difference(
            "deliberate",
            "Conductor OSS ignores idempotencyKey (#1527); Cairn follows Orkes: FAIL_ON_RUNNING refuses a "
            "start while the execution holding the key runs (409).",
            ('answers["start again (FAIL_ON_RUNNING)"]',),
        ),
    ),
}
