"""Conductor's official Python client's workflow builders, unchanged, against a `cairn dev` server.

The workflows are written with conductor-python's `ConductorWorkflow` and its task classes
(`conductor.client.workflow.task.*`: SimpleTask, SwitchTask, ForkTask + JoinTask, DoWhileTask,
LoopTask, DynamicForkTask, SubWorkflowTask, InlineSubWorkflowTask, InlineTask, JsonJQTask,
SetVariableTask, HttpTask, TerminateTask), sent inline in a StartWorkflowRequest by
`ConductorWorkflow.start_workflow_with_input` (the sub-workflow is registered with
`ConductorWorkflow.register`), and their SIMPLE tasks are run by the client's own TaskHandler
(one spawned process per task type, as in tests/integration/test_conductor_client.py). The HTTP
task calls an http.server the test runs on 127.0.0.1. Each test checks the finished workflow,
fetched with the client's WorkflowClient, output for output and task for task. The same
workflows give the same outputs and task lists on Conductor OSS 3.32.3
(deploy/local/conductor-up.sh).

`ConductorWorkflow.execute` runs a workflow synchronously (POST /api/workflow/execute/{name}/{version}).

The `cairn_server_url` fixture comes from tests/integration/conftest.py.
"""

# No `from __future__ import annotations`: the client reads the worker functions' annotations at
# run time to fill their parameters from the task's inputData (see test_conductor_client.py).
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conductor.client.automator.task_handler import TaskHandler
from conductor.client.configuration.configuration import Configuration
from conductor.client.http.models import TaskDef, Workflow
from conductor.client.orkes.orkes_metadata_client import OrkesMetadataClient
from conductor.client.orkes.orkes_workflow_client import OrkesWorkflowClient
from conductor.client.worker.worker import Worker
from conductor.client.workflow.conductor_workflow import ConductorWorkflow
from conductor.client.workflow.executor.workflow_executor import WorkflowExecutor
from conductor.client.workflow.task.do_while_task import DoWhileTask, LoopTask
from conductor.client.workflow.task.dynamic_fork_task import DynamicForkTask
from conductor.client.workflow.task.fork_task import ForkTask
from conductor.client.workflow.task.http_task import HttpInput, HttpMethod, HttpTask
from conductor.client.workflow.task.inline import InlineTask
from conductor.client.workflow.task.join_task import JoinTask
from conductor.client.workflow.task.json_jq_task import JsonJQTask
from conductor.client.workflow.task.set_variable_task import SetVariableTask
from conductor.client.workflow.task.simple_task import SimpleTask
from conductor.client.workflow.task.sub_workflow_task import InlineSubWorkflowTask, SubWorkflowTask
from conductor.client.workflow.task.switch_task import SwitchTask
from conductor.client.workflow.task.terminate_task import TerminateTask, WorkflowStatus

from tests.integration.test_conductor_client import client_configuration, stop

pytestmark = [
    pytest.mark.integration,
    # The client's own serializer reads its deprecated WorkflowDef.owner_app property.
    pytest.mark.filterwarnings("ignore:Call to deprecated function:DeprecationWarning"),
]

WAIT_SECONDS = 30.0
TERMINAL = ("COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED")


# Worker functions: module-level, so the spawned worker processes can import them by name.
def double(n: int) -> dict[str, Any]:
    return {"value": 2 * n}


def add(x: int, y: int) -> dict[str, Any]:
    return {"sum": x + y}


def greet(who: str) -> dict[str, Any]:
    return {"greeting": f"hello {who}"}


@dataclass(frozen=True)
class Names:
    """Task and workflow names of one test module run (a suffix keeps runs apart)."""

    suffix: str

    @property
    def double(self) -> str:
        return f"cb_double_{self.suffix}"

    @property
    def add(self) -> str:
        return f"cb_add_{self.suffix}"

    @property
    def greet(self) -> str:
        return f"cb_greet_{self.suffix}"

    @property
    def sub(self) -> str:
        return f"cb_sub_{self.suffix}"

    def workflow(self, what: str) -> str:
        return f"cb_{what}_{self.suffix}"


@dataclass
class Conductor:
    """The official client's objects for one server."""

    configuration: Configuration
    executor: WorkflowExecutor
    workflows: OrkesWorkflowClient
    metadata: OrkesMetadataClient


def wait_until_terminal(client: OrkesWorkflowClient, workflow_id: str) -> Workflow:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        workflow = client.get_workflow(workflow_id, include_tasks=True)
        assert workflow is not None, f"GET /api/workflow/{workflow_id} did not parse as a Workflow"
        if workflow.status in TERMINAL:
            return workflow
        if time.monotonic() > deadline:
            tasks = [(t.reference_task_name, t.status) for t in workflow.tasks or []]
            pytest.fail(f"workflow {workflow_id} still {workflow.status} after {WAIT_SECONDS:.0f} s: {tasks}")
        time.sleep(0.2)


def task_rows(workflow: Workflow) -> list[tuple[str, str, str]]:
    return [(t.reference_task_name, t.task_type, t.status) for t in workflow.tasks]


def by_ref(workflow: Workflow) -> dict[str, Any]:
    return {t.reference_task_name: t for t in workflow.tasks}


class EchoHandler(BaseHTTPRequestHandler):
    """POST /echo: answers JSON with what it got (body, query, one header)."""

    def do_POST(self) -> None:
        received = json.loads(self.read_body() or b"null")
        path, _, query = self.path.partition("?")
        answer = {
            "path": path,
            "query": query,
            "header": self.headers.get("X-Cairn-Test"),
            "contentType": self.headers.get("Content-Type"),
            "n": received["n"] if isinstance(received, dict) else None,
            "received": received,
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self) -> bytes:
        """The request body, sent with a Content-Length or chunked (Conductor's Java client)."""
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b""
        while size := int(self.rfile.readline().split(b";")[0], 16):
            body += self.rfile.read(size)
            self.rfile.readline()
        self.rfile.readline()
        return body

    def log_message(self, format: str, *args: Any) -> None:
        pass


# --- The workflows, built with the client's builders only ---------------------------------------


def sub_workflow(executor: WorkflowExecutor, names: Names) -> ConductorWorkflow:
    """Registered (ConductorWorkflow.register) and run by the main workflow's SubWorkflowTask."""
    workflow = ConductorWorkflow(executor, names.sub, version=1, description="doubles n")
    workflow >> SimpleTask(names.double, "sub_double").input_parameter("n", "${workflow.input.n}")
    return workflow.output_parameters({"doubled": "${sub_double.output.value}"})


def inline_child(executor: WorkflowExecutor, names: Names) -> ConductorWorkflow:
    """Sent inside the parent's definition (InlineSubWorkflowTask: subWorkflowParam.workflowDefinition)."""
    workflow = ConductorWorkflow(executor, names.workflow("inline_child"), version=1)
    workflow >> SimpleTask(names.greet, "child_greet").input_parameter("who", "${workflow.input.who}")
    return workflow.output_parameters({"greeting": "${child_greet.output.greeting}"})


def main_workflow(executor: WorkflowExecutor, names: Names) -> ConductorWorkflow:
    """SET_VARIABLE, INLINE, SWITCH, FORK_JOIN + JOIN, DO_WHILE (condition on the body's output),
    LoopTask, SUB_WORKFLOW (registered and inline) and JSON_JQ_TRANSFORM in one workflow."""
    remember = SetVariableTask("remember")
    remember.input_parameters.update({"label": "${workflow.input.label}"})

    triple = InlineTask(
        "triple", "(function () { return $.n * 3; })()", bindings={"n": "${workflow.input.n}"}
    )

    route = (
        SwitchTask("route", "${workflow.input.kind}")
        .switch_case(
            "big", [SimpleTask(names.double, "big_double").input_parameter("n", "${triple.output.result}")]
        )
        .default_case([InlineTask("small_zero", "(function () { return 0; })()")])
    )

    fanout = ForkTask(
        "fanout",
        [
            [
                SimpleTask(names.add, "f_add")
                .input_parameter("x", "${workflow.input.n}")
                .input_parameter("y", 10)
            ],
            [
                JsonJQTask("f_squares", "[range(1; .n + 1) | . * .]").input_parameter(
                    "n", "${workflow.input.n}"
                )
            ],
        ],
    )
    fanin = JoinTask("fanin", join_on=["f_add", "f_squares"])

    # Runs until the body's output reaches 6: iterations 1, 2, 3 give 2, 4, 6.
    grow = DoWhileTask(
        "grow",
        "if ($.grow_double['value'] < 6) { true; } else { false; }",
        [SimpleTask(names.double, "grow_double").input_parameter("n", "${grow.output.iteration}")],
    )
    repeat = LoopTask(
        "repeat",
        2,
        [
            InlineTask(
                "tick", "(function () { return $.i * 10; })()", bindings={"i": "${repeat.output.iteration}"}
            )
        ],
    )

    child = SubWorkflowTask("child", names.sub, version=1).input_parameter("n", "${f_add.output.sum}")
    inline = InlineSubWorkflowTask("inline_child", inline_child(executor, names)).input_parameter(
        "who", "${workflow.variables.label}"
    )

    summarize = JsonJQTask("summarize", "{label: .label, total: (.squares | add), ticks: .ticks}")
    summarize.input_parameters.update(
        {
            "label": "${workflow.variables.label}",
            "squares": "${f_squares.output.result}",
            "ticks": ["${repeat.output.1.tick.result}", "${repeat.output.2.tick.result}"],
        }
    )

    workflow = ConductorWorkflow(executor, names.workflow("main"), version=1, description="builders")
    (
        workflow
        >> remember
        >> triple
        >> route
        >> fanout
        >> fanin
        >> grow
        >> repeat
        >> child
        >> inline
        >> summarize
    )
    return workflow.output_parameters(
        {
            "label": "${workflow.variables.label}",
            "tripled": "${triple.output.result}",
            "routed": "${big_double.output.value}",
            "joined": "${fanin.output}",
            "grew": "${grow.output.iteration}",
            "lastGrowth": "${grow_double.output.value}",
            "childDoubled": "${child.output.doubled}",
            "childGreeting": "${inline_child.output.greeting}",
            "summary": "${summarize.output.result}",
        }
    )


def dynamic_fork_workflow(executor: WorkflowExecutor, names: Names) -> ConductorWorkflow:
    """An INLINE task plans one SIMPLE branch per name; DynamicForkTask runs them, its JoinTask
    gathers them and a JSON_JQ_TRANSFORM sorts the greetings."""
    plan = InlineTask(
        "plan",
        """(function () {
            var tasks = [], inputs = {};
            for (var i = 0; i < $.who.length; i++) {
                var ref = 'hi_' + i;
                tasks.push({name: $.worker, taskReferenceName: ref, type: 'SIMPLE'});
                inputs[ref] = {who: $.who[i]};
            }
            return {tasks: tasks, inputs: inputs};
        })()""",
        bindings={"who": "${workflow.input.who}", "worker": names.greet},
    )
    fan = DynamicForkTask("fan", join_task=JoinTask("gather"))
    fan.input_parameters.update(
        {"dynamicTasks": "${plan.output.result.tasks}", "dynamicTasksInputs": "${plan.output.result.inputs}"}
    )
    collect = JsonJQTask("collect", "[.joined[] | .greeting] | sort").input_parameter(
        "joined", "${gather.output}"
    )
    workflow = ConductorWorkflow(executor, names.workflow("dynamic"), version=1)
    workflow >> plan >> fan >> collect
    return workflow.output_parameters({"greetings": "${collect.output.result}", "joined": "${gather.output}"})


def http_workflow(executor: WorkflowExecutor, names: Names, url: str) -> ConductorWorkflow:
    """HttpTask POSTs JSON to the test's server; a SimpleTask and an InlineTask use the answer."""
    call = HttpTask(
        "call",
        HttpInput(
            method=HttpMethod.POST,
            uri=url + "/echo?from=${workflow.input.who}",
            headers={"X-Cairn-Test": "${workflow.input.who}"},
            accept="application/json",
            content_type="application/json",
            body={"n": "${workflow.input.n}", "tags": ["a", "b"]},
        ),
    )
    use = SimpleTask(names.add, "use").input_parameter("x", call.body("n")).input_parameter("y", 1)
    check = InlineTask(
        "check",
        "(function () { return $.status == 200 && $.header == $.who; })()",
        bindings={
            "status": call.status_code(),
            "header": call.body("header"),
            "who": "${workflow.input.who}",
        },
    )
    workflow = ConductorWorkflow(executor, names.workflow("http"), version=1)
    workflow >> call >> use >> check
    return workflow.output_parameters(
        {
            "status": call.status_code(),
            "echo": call.body(),
            "sum": "${use.output.sum}",
            "ok": "${check.output.result}",
        }
    )


def terminate_workflow(executor: WorkflowExecutor, names: Names) -> ConductorWorkflow:
    """A SwitchTask sends "stop" to a TerminateTask(FAILED); the SimpleTask after it never runs."""
    first = SimpleTask(names.double, "first").input_parameter("n", "${workflow.input.n}")
    decide = (
        SwitchTask("decide", "${workflow.input.action}")
        .switch_case(
            "stop", [TerminateTask("halt", WorkflowStatus.FAILED, "stopped by ${workflow.input.who}")]
        )
        .default_case([InlineTask("go_on", "(function () { return 'on'; })()")])
    )
    never = SimpleTask(names.add, "never").input_parameter("x", 1).input_parameter("y", 2)
    workflow = ConductorWorkflow(executor, names.workflow("terminate"), version=1)
    workflow >> first >> decide >> never
    return workflow.output_parameters({"first": "${first.output.value}", "never": "${never.output.sum}"})


# --- Fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def names() -> Names:
    return Names(uuid.uuid4().hex[:10])


@pytest.fixture(scope="module")
def conductor(cairn_server_url: str) -> Conductor:
    configuration = client_configuration(cairn_server_url)
    return Conductor(
        configuration=configuration,
        executor=WorkflowExecutor(configuration),
        workflows=OrkesWorkflowClient(configuration),
        metadata=OrkesMetadataClient(configuration),
    )


@pytest.fixture(scope="module")
def workers(conductor: Conductor, names: Names) -> Iterator[None]:
    """The task definitions, and the client's TaskHandler running one process per SIMPLE type."""
    for name in (names.double, names.add, names.greet):
        conductor.metadata.register_task_def(
            TaskDef(
                name=name, description="cairn builders test", owner_email="tests@cairn.invalid", retry_count=0
            )
        )
    handler: TaskHandler | None = None
    try:
        handler = TaskHandler(
            workers=[
                Worker(
                    task_definition_name=name,
                    execute_function=function,
                    poll_interval=100,
                    worker_id=f"cb-{names.suffix}",
                )
                for name, function in ((names.double, double), (names.add, add), (names.greet, greet))
            ],
            configuration=conductor.configuration,
            scan_for_annotated_workers=False,
            monitor_processes=False,
        )
        handler.start_processes()
        yield
    finally:
        if handler is not None:
            stop(handler)


@pytest.fixture
def echo_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
    thread = threading.Thread(target=server.serve_forever, name="echo-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- Tests ----------------------------------------------------------------------------------------


def expected_main(n: int, kind: str, label: str) -> dict[str, Any]:
    squares = [i * i for i in range(1, n + 1)]
    summary = {"label": label, "total": sum(squares), "ticks": [10, 20]}
    return {
        "label": label,
        "tripled": 3 * n,
        "routed": 6 * n if kind == "big" else None,
        "joined": {"f_add": {"sum": n + 10}, "f_squares": {"result": squares, "resultList": [squares]}},
        "grew": 3,
        "lastGrowth": 6,
        "childDoubled": 2 * (n + 10),
        "childGreeting": f"hello {label}",
        "summary": summary,
    }


def test_main_workflow_runs_every_operator(conductor: Conductor, names: Names, workers: None) -> None:
    sub = sub_workflow(conductor.executor, names)
    sub.register(overwrite=True)  # PUT /api/metadata/workflow with the builder's WorkflowDef
    registered = conductor.metadata.get_workflow_def(names.sub, version=1)
    assert [t.task_reference_name for t in registered.tasks] == ["sub_double"]

    runs = [(4, "big", "L"), (2, "small", "S")]
    workflow_ids = [
        main_workflow(conductor.executor, names).start_workflow_with_input(
            {"n": n, "kind": kind, "label": label}
        )
        for n, kind, label in runs
    ]

    for workflow_id, (n, kind, label) in zip(workflow_ids, runs, strict=True):
        workflow = wait_until_terminal(conductor.workflows, workflow_id)
        assert workflow.status == "COMPLETED", workflow.reason_for_incompletion
        assert workflow.output == expected_main(n, kind, label)
        assert workflow.variables == {"label": label}
        routed = (
            [("big_double", names.double, "COMPLETED")]
            if kind == "big"
            else [("small_zero", "INLINE", "COMPLETED")]
        )
        assert task_rows(workflow) == [
            ("remember", "SET_VARIABLE", "COMPLETED"),
            ("triple", "INLINE", "COMPLETED"),
            ("route", "SWITCH", "COMPLETED"),
            *routed,
            ("fanout", "FORK", "COMPLETED"),
            ("f_add", names.add, "COMPLETED"),
            ("f_squares", "JSON_JQ_TRANSFORM", "COMPLETED"),
            ("fanin", "JOIN", "COMPLETED"),
            ("grow", "DO_WHILE", "COMPLETED"),
            ("grow_double__1", names.double, "COMPLETED"),
            ("grow_double__2", names.double, "COMPLETED"),
            ("grow_double__3", names.double, "COMPLETED"),
            ("repeat", "DO_WHILE", "COMPLETED"),
            ("tick__1", "INLINE", "COMPLETED"),
            ("tick__2", "INLINE", "COMPLETED"),
            ("child", "SUB_WORKFLOW", "COMPLETED"),
            ("inline_child", "SUB_WORKFLOW", "COMPLETED"),
            ("summarize", "JSON_JQ_TRANSFORM", "COMPLETED"),
        ]
        tasks = by_ref(workflow)
        expected = expected_main(n, kind, label)
        outputs = {
            ref: task.output_data for ref, task in tasks.items() if ref not in ("child", "inline_child")
        }
        assert outputs == {
            "remember": {},
            "triple": {"result": 3 * n},
            "route": {"evaluationResult": [kind], "selectedCase": kind},
            **({"big_double": {"value": 6 * n}} if kind == "big" else {"small_zero": {"result": 0}}),
            "fanout": {},
            "f_add": {"sum": n + 10},
            "f_squares": expected["joined"]["f_squares"],
            "fanin": expected["joined"],
            "grow": {
                "iteration": 3,
                "1": {"grow_double": {"value": 2}},
                "2": {"grow_double": {"value": 4}},
                "3": {"grow_double": {"value": 6}},
            },
            "grow_double__1": {"value": 2},
            "grow_double__2": {"value": 4},
            "grow_double__3": {"value": 6},
            "repeat": {"iteration": 2, "1": {"tick": {"result": 10}}, "2": {"tick": {"result": 20}}},
            "tick__1": {"result": 10},
            "tick__2": {"result": 20},
            "summarize": {"result": expected["summary"], "resultList": [expected["summary"]]},
        }
        assert tasks["remember"].input_data == {"label": label}
        assert tasks["f_add"].input_data == {"x": n, "y": 10}
        assert [tasks[f"grow_double__{i}"].input_data for i in (1, 2, 3)] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert [tasks[f"grow_double__{i}"].iteration for i in (1, 2, 3)] == [1, 2, 3]
        assert (tasks["grow"].iteration, tasks["repeat"].iteration) == (3, 2)

        # Both sub-workflows: the registered one and the one sent inline in the parent's definition.
        for ref, child_name, child_ref, child_worker, child_input, child_output in (
            ("child", names.sub, "sub_double", names.double, {"n": n + 10}, {"doubled": 2 * (n + 10)}),
            (
                "inline_child",
                names.workflow("inline_child"),
                "child_greet",
                names.greet,
                {"who": label},
                {"greeting": f"hello {label}"},
            ),
        ):
            task = tasks[ref]
            child_id = task.output_data["subWorkflowId"]
            assert task.sub_workflow_id == child_id
            assert task.output_data == {**child_output, "subWorkflowId": child_id}
            assert task.input_data["subWorkflowName"] == child_name
            assert task.input_data["workflowInput"] == child_input
            child = wait_until_terminal(conductor.workflows, child_id)
            assert (child.workflow_name, child.status, child.parent_workflow_id) == (
                child_name,
                "COMPLETED",
                workflow_id,
            )
            assert child.input == child_input
            assert child.output == child_output
            assert task_rows(child) == [(child_ref, child_worker, "COMPLETED")]
            assert child.tasks[0].input_data == child_input


def test_dynamic_fork(conductor: Conductor, names: Names, workers: None) -> None:
    who = ["zed", "amy", "bob"]
    workflow_id = dynamic_fork_workflow(conductor.executor, names).start_workflow_with_input({"who": who})
    workflow = wait_until_terminal(conductor.workflows, workflow_id)
    assert workflow.status == "COMPLETED", workflow.reason_for_incompletion
    joined = {f"hi_{i}": {"greeting": f"hello {name}"} for i, name in enumerate(who)}
    assert workflow.output == {"greetings": ["hello amy", "hello bob", "hello zed"], "joined": joined}
    assert task_rows(workflow) == [
        ("plan", "INLINE", "COMPLETED"),
        ("fan", "FORK", "COMPLETED"),
        ("hi_0", names.greet, "COMPLETED"),
        ("hi_1", names.greet, "COMPLETED"),
        ("hi_2", names.greet, "COMPLETED"),
        ("gather", "JOIN", "COMPLETED"),
        ("collect", "JSON_JQ_TRANSFORM", "COMPLETED"),
    ]
    tasks = by_ref(workflow)
    assert [tasks[f"hi_{i}"].input_data for i in range(3)] == [{"who": name} for name in who]
    assert tasks["gather"].input_data == {"joinOn": ["hi_0", "hi_1", "hi_2"]}
    assert tasks["gather"].output_data == joined
    assert tasks["collect"].output_data["result"] == ["hello amy", "hello bob", "hello zed"]


def test_http_task_calls_a_local_server(
    conductor: Conductor, names: Names, workers: None, echo_url: str
) -> None:
    workflow_id = http_workflow(conductor.executor, names, echo_url).start_workflow_with_input(
        {"who": "ann", "n": 5}
    )
    workflow = wait_until_terminal(conductor.workflows, workflow_id)
    assert workflow.status == "COMPLETED", workflow.reason_for_incompletion
    echo = {
        "path": "/echo",
        "query": "from=ann",
        "header": "ann",
        "contentType": "application/json",
        "n": 5,
        "received": {"n": 5, "tags": ["a", "b"]},
    }
    assert workflow.output == {"status": 200, "echo": echo, "sum": 6, "ok": True}
    assert task_rows(workflow) == [
        ("call", "HTTP", "COMPLETED"),
        ("use", names.add, "COMPLETED"),
        ("check", "INLINE", "COMPLETED"),
    ]
    call = by_ref(workflow)["call"]
    assert call.input_data["http_request"] == {
        "uri": f"{echo_url}/echo?from=ann",
        "method": "POST",
        "headers": {"X-Cairn-Test": "ann"},
        "accept": "application/json",
        "contentType": "application/json",
        "body": {"n": 5, "tags": ["a", "b"]},
    }
    response = call.output_data["response"]
    assert (response["statusCode"], response["reasonPhrase"], response["body"]) == (200, "OK", echo)
    assert response["headers"]["Content-Type"] == ["application/json"]
    assert by_ref(workflow)["use"].input_data == {"x": 5, "y": 1}


def test_terminate_task_fails_the_workflow(conductor: Conductor, names: Names, workers: None) -> None:
    stopped, going = (
        terminate_workflow(conductor.executor, names).start_workflow_with_input(
            {"n": 3, "action": action, "who": "me"}
        )
        for action in ("stop", "go")
    )

    workflow = wait_until_terminal(conductor.workflows, stopped)
    assert workflow.status == "FAILED"
    assert workflow.reason_for_incompletion == "stopped by me"
    assert workflow.output == {}
    assert task_rows(workflow) == [
        ("first", names.double, "COMPLETED"),
        ("decide", "SWITCH", "COMPLETED"),
        ("halt", "TERMINATE", "COMPLETED"),
    ]
    halt = by_ref(workflow)["halt"]
    assert halt.input_data == {"terminationStatus": "FAILED", "terminationReason": "stopped by me"}

    # The same definition with the default case: the SimpleTask after the SWITCH runs.
    workflow = wait_until_terminal(conductor.workflows, going)
    assert workflow.status == "COMPLETED", workflow.reason_for_incompletion
    assert workflow.output == {"first": 6, "never": 3}
    assert task_rows(workflow) == [
        ("first", names.double, "COMPLETED"),
        ("decide", "SWITCH", "COMPLETED"),
        ("go_on", "INLINE", "COMPLETED"),
        ("never", names.add, "COMPLETED"),
    ]


def test_execute_runs_the_workflow_synchronously(conductor: Conductor, names: Names, workers: None) -> None:
    """ConductorWorkflow.execute: POST /api/workflow/execute/{name}/{version}, answered with the
    finished run."""
    run = terminate_workflow(conductor.executor, names).execute(
        workflow_input={"n": 3, "action": "go", "who": "me"}, wait_for_seconds=20, request_id="run-1"
    )
    assert run.status == "COMPLETED" and run.request_id == "run-1"
    assert run.output == {"first": 6, "never": 3}
    assert [t.reference_task_name for t in run.tasks] == ["first", "decide", "go_on", "never"]
