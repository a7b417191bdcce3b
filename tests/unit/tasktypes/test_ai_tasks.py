"""The AI tasks in the decision core: LLM_CHAT_COMPLETE, LLM_TEXT_COMPLETE, LIST_MCP_TOOLS and
CALL_MCP_TOOL are handed to the system-task worker on their type's topic, with Conductor's AI
retry default; registration names what is missing; a FAILED result's callbackAfterSeconds (a
provider's Retry-After) holds its retry back; secret references stay as written and are marked
where the definition put them (shared/core/tasktypes/ai.py, shared/core/secret_refs.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.core.validation import DefinitionError, parse_workflow_def
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import NOW, Flow, join, task, timer_arms, workflow
from tests.unit.tasktypes.builders import chat as llm_chat


def chat(ref: str = "chat", **inputs: Any) -> dict[str, Any]:
    return llm_chat(ref, "${workflow.input.question}", **inputs)


def call_tool(ref: str = "call", **inputs: Any) -> dict[str, Any]:
    return task(
        "CALL_MCP_TOOL",
        ref,
        inputParameters={"mcpServer": "tools", "method": "${workflow.input.tool}", "arguments": {}, **inputs},
    )


def test_an_llm_task_is_handed_to_workers_of_its_type_with_its_input_evaluated() -> None:
    f = Flow(workflow(chat()), {"question": "why?"})
    [message] = f.outbox(TaskMessage)
    assert (message.task_type, message.reference_task_name) == ("LLM_CHAT_COMPLETE", "chat")
    assert message.input_data["messages"] == [{"role": "user", "message": "why?"}]
    f.complete("chat", {"result": "because", "finishReason": "STOP", "tokenUsed": 5})
    assert f.state.status is WorkflowStatus.COMPLETED
    assert f.state.output["result"] == "because"


@pytest.mark.parametrize(
    "node",
    [
        chat(),
        task("LLM_TEXT_COMPLETE", "t", inputParameters={"llmProvider": "o", "model": "m", "prompt": "p"}),
        task("LIST_MCP_TOOLS", "t", inputParameters={"mcpServer": "http://127.0.0.1:1/mcp"}),
        call_tool(),
    ],
)
def test_without_a_task_def_an_ai_task_gets_conductors_three_linear_retries_two_seconds_apart(
    node: dict[str, Any],
) -> None:
    f = Flow(workflow(node), {"question": "q", "tool": "search"})
    ref = node["taskReferenceName"]
    f.fail(ref, "provider said 503")
    assert f.task(ref).retry_count == 1
    [arm] = timer_arms(f.decision)
    assert arm.fire_at == NOW + 2_000
    f.fire(arm.timer_id)
    f.fail(ref, "provider said 503")
    [arm] = timer_arms(f.decision)
    assert arm.fire_at == NOW + 4_000, "LINEAR_BACKOFF: 2 s, then 4 s"


def test_a_failed_result_s_callback_after_seconds_holds_the_retry_back_longer_than_the_task_def() -> None:
    f = Flow(workflow(chat()), {"question": "q"})
    f.send(f.result("chat", TaskStatus.FAILED, reason_for_incompletion="429", callback_after_seconds=30))
    [arm] = timer_arms(f.decision)
    assert arm.fire_at == NOW + 30_000
    f.fire(arm.timer_id)
    f.send(f.result("chat", TaskStatus.FAILED, reason_for_incompletion="503"))
    [arm] = timer_arms(f.decision)
    assert arm.fire_at == NOW + 4_000, "without one, the TaskDef's delay"


def test_a_terminal_failure_is_not_retried() -> None:
    f = Flow(workflow(chat()), {"question": "q"})
    f.fail("chat", "the provider refused the API key (HTTP 401)", TaskStatus.FAILED_WITH_TERMINAL_ERROR)
    assert f.state.status is WorkflowStatus.FAILED
    assert "HTTP 401" in (f.state.reason_for_incompletion or "")


@pytest.mark.parametrize(
    ("node", "where", "says"),
    [
        (
            task("LLM_CHAT_COMPLETE", "c", inputParameters={"model": "m", "messages": []}),
            "llmProvider",
            "required",
        ),
        (
            task("LLM_CHAT_COMPLETE", "c", inputParameters={"llmProvider": "o", "messages": []}),
            "model",
            "required",
        ),
        (
            task("LLM_CHAT_COMPLETE", "c", inputParameters={"llmProvider": "o", "model": "m"}),
            "messages",
            "required",
        ),
        (
            chat(messages=[{"role": "robot", "message": "hi"}]),
            "messages[0].role",
            "'robot' is not a role",
        ),
        (
            task("LLM_TEXT_COMPLETE", "c", inputParameters={"llmProvider": "o", "model": "m"}),
            "prompt",
            "required",
        ),
        (task("LIST_MCP_TOOLS", "l", inputParameters={}), "mcpServer", "required"),
        (task("CALL_MCP_TOOL", "c", inputParameters={"mcpServer": "s"}), "method", "required"),
        (call_tool(allowedTools="${workflow.input.tools}"), "allowedTools", "a list of names written"),
    ],
)
def test_registration_names_what_an_ai_task_lacks(node: dict[str, Any], where: str, says: str) -> None:
    with pytest.raises(DefinitionError) as refused:
        workflow(node)
    assert f"inputParameters.{where}" in str(refused.value)
    assert says in str(refused.value)


# ---- secrets ------------------------------------------------------------------------------------


def test_a_secret_reference_stays_as_written_and_its_place_is_marked_for_the_worker() -> None:
    node = task(
        "LIST_MCP_TOOLS",
        "tools",
        inputParameters={
            "mcpServer": "${workflow.input.server}",
            "headers": {"Authorization": "Bearer ${secrets.TOOLS_TOKEN}", "X-Org": "${workflow.secrets.ORG}"},
            "note": "${workflow.input.note}",
        },
    )
    f = Flow(workflow(node), {"server": "http://127.0.0.1:9/mcp", "note": "${secrets.TOOLS_TOKEN}"})
    [message] = f.outbox(TaskMessage)
    assert message.input_data["headers"] == {
        "Authorization": "Bearer ${secrets.TOOLS_TOKEN}",
        "X-Org": "${workflow.secrets.ORG}",
    }
    assert message.secret_paths == [["headers", "Authorization"], ["headers", "X-Org"]]
    # The same text arriving as data is inert: its place is not marked.
    assert message.input_data["note"] == "${secrets.TOOLS_TOKEN}"
    assert f.task("tools").secret_paths == message.secret_paths


def test_a_dynamic_fork_branch_made_from_data_gets_no_secret_places() -> None:
    fork = task(
        "FORK_JOIN_DYNAMIC",
        "df",
        dynamicForkTasksParam="calls",
        dynamicForkTasksInputParamName="inputs",
        inputParameters={"calls": "${workflow.input.calls}", "inputs": {}},
    )
    branch = {
        "name": "search",
        "taskReferenceName": "c1",
        "type": "CALL_MCP_TOOL",
        "inputParameters": {"mcpServer": "evil", "method": "search", "headers": {"A": "${secrets.KEY}"}},
    }
    f = Flow(workflow(fork, join("j")), {"calls": [branch]})
    [message] = f.outbox(TaskMessage)
    assert message.input_data["headers"] == {"A": "${secrets.KEY}"}
    assert message.secret_paths is None


@pytest.mark.parametrize(
    ("node", "says"),
    [
        (
            task(
                "INLINE",
                "i",
                inputParameters={"evaluatorType": "javascript", "expression": "1", "k": "${secrets.K}"},
            ),
            "INLINE tasks do not resolve secrets",
        ),
        (task("SIMPLE", "s", inputParameters={"k": "${secrets.K}"}), "SIMPLE tasks do not resolve secrets"),
        (
            task("EVENT", "e", sink="kafka:t", inputParameters={"k": "${secrets.K}"}),
            "EVENT tasks do not resolve",
        ),
        (
            task(
                "HTTP",
                "h",
                inputParameters={
                    "uri": "http://x",
                    "method": "GET",
                    "headers": {"A": "${secrets.K} ${workflow.input.user}"},
                },
            ),
            "may hold only text and secret references",
        ),
    ],
)
def test_registration_refuses_a_secret_where_it_would_not_be_resolved_or_beside_an_expression(
    node: dict[str, Any], says: str
) -> None:
    with pytest.raises(DefinitionError) as refused:
        workflow(node)
    assert says in str(refused.value)
    assert "inputParameters." in str(refused.value)


def test_an_http_task_resolves_secrets_too() -> None:
    node = task(
        "HTTP",
        "h",
        inputParameters={
            "http_request": {"uri": "http://x/", "method": "GET", "headers": {"K": "${secrets.K}"}}
        },
    )
    f = Flow(workflow(node))
    [message] = f.outbox(TaskMessage)
    assert message.secret_paths == [["http_request", "headers", "K"]]


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[3] / "examples" / "agents").glob("*.json")), ids=str
)
def test_the_agent_examples_register(path: Path) -> None:
    definition = parse_workflow_def(json.loads(path.read_text()))
    assert definition.budget is not None, "every agent example has a budget"
