"""The agent examples on `cairn dev`, end to end, against the scripted model provider (real HTTP,
the real openai client in the system worker) and the MCP test server (a process, MCP SDK):

- the agent loop runs to its exact output, and a SIGKILL of the engine at iteration 3 of 6
  resumes at iteration 3: the provider saw each iteration's model call exactly once;
- the fan-out research agent forks as wide as the model's tool calls;
- a budget stops the loop before the model call that would pass it; a tool the model invented
  is refused and never reaches the server;
- a schema-invalid answer fails and is retried, and the SWITCH after it reads the parsed object;
- a secret reaches the MCP server's header and nothing else: no task input or output, no log
  line, no byte of the store;
- a 429 is retried no sooner than its Retry-After; a 401 fails the workflow for good;
- a slow model call is kept alive by heartbeats past its responseTimeoutSeconds."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ai.fake_llm import FakeLlm, rule
from tests.ai.servers import McpHttpServer, integrations
from tests.devserver import DevServer
from tests.e2e.agent_flows import (
    AGENT_LOOP,
    KILL_AT,
    QUERIES,
    RESEARCH_AGENT,
    RESEARCH_ANSWER,
    RESEARCH_TOPICS,
    agent_input,
    agent_output,
    agent_rules,
    iteration_requests,
    research_input,
    research_rules,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SECRET = "mcp-7c41e0-do-not-store"
LOCAL_KEY = "sk-local-93ab1"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, llm: FakeLlm, mcp: McpHttpServer) -> Iterator[DevServer]:
    logs = tmp_path_factory.mktemp("agents-dev")
    server = DevServer(
        logs,
        CAIRN_AI_INTEGRATIONS=integrations(llm.url, mcp),
        CAIRN_SECRET_TOOLS_TOKEN=SECRET,
        CAIRN_SECRET_LOCAL_KEY=LOCAL_KEY,
    )
    server.start()
    response = httpx.put(f"{server.url}/api/metadata/workflow", json=[AGENT_LOOP, RESEARCH_AGENT], timeout=30)
    assert response.status_code == 200, response.text
    try:
        yield server
    finally:
        server.process.stop()


@pytest.fixture
async def api(dev: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev.url, timeout=30) as client:
        yield client


async def start(api: httpx.AsyncClient, name: str, data: dict[str, Any], **body: Any) -> str:
    response = await api.post("/api/workflow", json={"name": name, "input": data, **body})
    assert response.status_code == 200, response.text
    return response.text.strip('"')


async def execution(api: httpx.AsyncClient, workflow_id: str) -> dict[str, Any]:
    response = await api.get(f"/api/workflow/{workflow_id}")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def finished(api: httpx.AsyncClient, workflow_id: str, within_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            found = await execution(api, workflow_id)
        except httpx.HTTPError:
            found = {}
        if found.get("status") in ("COMPLETED", "FAILED", "TERMINATED", "TIMED_OUT"):
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} did not finish within {within_s:.0f} s: {found.get('status')}")


def task(found: dict[str, Any], ref: str, retry_count: int = 0) -> dict[str, Any] | None:
    for item in found.get("tasks", []):
        if item["referenceTaskName"] == ref and item.get("retryCount", 0) == retry_count:
            return dict(item)
    return None


async def test_the_agent_loop_resumes_at_iteration_3_after_a_sigkill_without_paying_again(
    dev: DevServer, api: httpx.AsyncClient, llm: FakeLlm, mcp: McpHttpServer
) -> None:
    llm.rules(*agent_rules())
    calls_before = len(mcp.calls())
    workflow_id = await start(api, "agent_loop", agent_input())
    deadline = time.monotonic() + 60
    while True:  # iteration 3's model call answered and committed; its (slow) tool call in flight
        found = await execution(api, workflow_id)
        think, tool_call = task(found, f"think__{KILL_AT}"), task(found, f"tool_call__{KILL_AT}")
        if (
            think
            and think["status"] == "COMPLETED"
            and tool_call
            and tool_call["status"] in ("SCHEDULED", "IN_PROGRESS")
        ):
            break
        assert time.monotonic() < deadline, (
            f"never reached iteration {KILL_AT}'s tool call: {found['status']}"
        )
        await asyncio.sleep(0.05)
    dev.process.kill()
    assert iteration_requests(llm.log) == {1: 1, 2: 1, 3: 1}, "killed within iteration 3"
    dev.start()
    found = await finished(api, workflow_id)
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    assert found["output"] == agent_output()
    assert iteration_requests(llm.log) == {i: 1 for i in range(1, 7)}, (
        "no completed model call was made again"
    )
    searches = [call["arguments"]["query"] for call in mcp.calls()[calls_before:]]
    assert [q for q in searches if q != QUERIES[KILL_AT]] == [QUERIES[i] for i in (1, 2, 4, 5)]
    assert 1 <= searches.count(QUERIES[KILL_AT]) <= 2, "the call in flight at the kill may run twice"


async def test_the_research_agent_forks_as_wide_as_the_models_tool_calls(
    api: httpx.AsyncClient, llm: FakeLlm, mcp: McpHttpServer
) -> None:
    llm.rules(*research_rules())
    calls_before = len(mcp.calls())
    workflow_id = await start(api, "research_agent", research_input())
    found = await finished(api, workflow_id)
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    assert found["output"] == {"answer": RESEARCH_ANSWER, "width": 3}
    fork = task(found, "fan_out")
    assert fork is not None and fork["inputData"]["forkedTasks"] == ["call_0", "call_1", "call_2"]
    searched = sorted(call["arguments"]["query"] for call in mcp.calls()[calls_before:])
    assert searched == sorted(RESEARCH_TOPICS)
    answer_turn = llm.log[-1]["body"]["messages"]
    assert [m["role"] for m in answer_turn] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert (
        answer_turn[3]["tool_call_id"] == "call_0"
        and "finding about cairn etymology" in answer_turn[3]["content"]
    )


def variant(name: str, **budget: Any) -> dict[str, Any]:
    definition = copy.deepcopy(AGENT_LOOP)
    definition["name"] = name
    definition["budget"] = {**definition["budget"], **budget}
    return definition


async def register(api: httpx.AsyncClient, *definitions: dict[str, Any]) -> None:
    response = await api.put("/api/metadata/workflow", json=list(definitions))
    assert response.status_code == 200, response.text


async def test_a_token_budget_stops_the_loop_before_the_model_call_that_would_pass_it(
    api: httpx.AsyncClient, llm: FakeLlm
) -> None:
    await register(api, variant("agent_loop_tokens", maxLlmTokens=300))
    llm.rules(*agent_rules())  # 120 tokens a call: the third call would pass 300
    found = await finished(api, await start(api, "agent_loop_tokens", agent_input()))
    assert found["status"] == "FAILED"
    assert found["reasonForIncompletion"] == (
        "budget maxLlmTokens (300) reached: 360 tokens spent; LLM_CHAT_COMPLETE think__4 was not run"
    )
    assert iteration_requests(llm.log) == {1: 1, 2: 1, 3: 1}
    assert [entry["body"]["max_tokens"] for entry in llm.log] == [300, 180, 60], (
        "maxTokens lowered to what is left"
    )


async def test_a_tool_the_model_invented_is_refused_and_never_reaches_the_server(
    api: httpx.AsyncClient, llm: FakeLlm, mcp: McpHttpServer
) -> None:
    llm.rules(
        rule(
            "Iteration 1.",
            {"content": json.dumps({"done": False, "action": "rm_rf", "arguments": {"path": "/"}})},
        ),
        rule("Iteration 2.", {"content": json.dumps({"done": True, "answer": "gave up"})}),
    )
    calls_before = len(mcp.calls())
    found = await finished(api, await start(api, "agent_loop", agent_input()))
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    refused = task(found, "tool_call__1")
    assert refused is not None and refused["status"] == "COMPLETED_WITH_ERRORS"
    assert (
        refused["reasonForIncompletion"]
        == "tool 'rm_rf' is not allowed: budget.allowedTools is ['search', 'add']"
    )
    assert found["output"]["history"] == (
        "\n[1] rm_rf -> refused: tool 'rm_rf' is not allowed: budget.allowedTools is ['search', 'add']"
    )
    assert mcp.calls()[calls_before:] == []
    assert "rm_rf" in json.dumps(llm.log[-1]["body"]), "the model read why on its next turn"


async def test_a_schema_invalid_answer_fails_and_is_retried_then_the_switch_reads_the_parsed_object(
    api: httpx.AsyncClient, llm: FakeLlm
) -> None:
    search = {"done": False, "action": "search", "arguments": {"query": "cairn history"}}
    llm.rules(
        rule("Iteration 1.", {"content": '{"done": false}'}, {"content": json.dumps(search)}),
        rule("Iteration 2.", {"content": json.dumps({"done": True, "answer": "ok"})}),
    )
    found = await finished(api, await start(api, "agent_loop", agent_input()))
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    first, second = task(found, "think__1", 0), task(found, "think__1", 1)
    assert first is not None and first["status"] == "FAILED"
    assert first["reasonForIncompletion"] == (
        "the model's answer does not match outputSchema: $: 'action' is a required property; "
        "$: 'arguments' is a required property"
    )
    assert second is not None and second["status"] == "COMPLETED"
    assert second["outputData"]["result"] == search
    act = task(found, "act__1")
    assert act is not None and act["outputData"]["selectedCase"] == "false", "the SWITCH read result.done"
    assert found["output"]["history"] == "\n[1] search -> finding about cairn history"


SECRET_FLOW = {
    "name": "whoami_with_a_secret",
    "tasks": [
        {
            "name": "whoami",
            "taskReferenceName": "whoami",
            "type": "CALL_MCP_TOOL",
            "inputParameters": {
                "mcpServer": "tools",
                "method": "whoami",
                "arguments": {},
                "headers": {"Authorization": "Bearer ${secrets.TOOLS_TOKEN}"},
            },
        }
    ],
}


async def test_a_secret_reaches_the_mcp_header_and_no_input_output_log_or_store_byte(
    dev: DevServer, api: httpx.AsyncClient, mcp: McpHttpServer
) -> None:
    await register(api, SECRET_FLOW)
    calls_before = len(mcp.calls())
    found = await finished(api, await start(api, "whoami_with_a_secret", {}))
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    assert mcp.calls()[calls_before:] == [
        {"tool": "whoami", "arguments": {}, "authorization": f"Bearer {SECRET}"}
    ]
    whoami = task(found, "whoami")
    assert whoami is not None
    assert whoami["inputData"]["headers"] == {"Authorization": "Bearer ${secrets.TOOLS_TOKEN}"}
    assert whoami["outputData"]["content"][0]["text"] == "Bearer ***"
    assert SECRET not in json.dumps(found), "not in any task's input or output"
    assert SECRET not in dev.process.log_path.read_text(), "not in a log line"
    store = b"".join(path.read_bytes() for path in Path(dev.db).parent.glob(Path(dev.db).name + "*"))
    assert SECRET.encode() not in store, "not in the store (the SQLite file, its WAL)"
    assert b"secrets.TOOLS_TOKEN" in store, "the grep did read the store"


def chat_flow(name: str, **task_def: Any) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [
            {
                "name": "ask",
                "taskReferenceName": "ask",
                "type": "LLM_CHAT_COMPLETE",
                "taskDefinition": {"name": "ask", **task_def},
                "inputParameters": {
                    "llmProvider": "local",
                    "model": "scripted-model",
                    "messages": [{"role": "user", "message": "${workflow.input.q}"}],
                },
            }
        ],
        "outputParameters": {"answer": "${ask.output.result}"},
    }


async def test_a_429_is_retried_after_its_retry_after_and_a_401_fails_for_good(
    api: httpx.AsyncClient, llm: FakeLlm
) -> None:
    await register(api, chat_flow("ask_once", retryCount=2, retryDelaySeconds=0))
    llm.rules(
        rule(
            "busy",
            {"status": 429, "headers": {"Retry-After": "3"}, "error": "slow down"},
            {"content": "fine"},
        ),
        rule("locked", {"status": 401, "error": "invalid api key"}),
    )
    busy = await finished(api, await start(api, "ask_once", {"q": "busy?"}))
    assert busy["status"] == "COMPLETED" and busy["output"] == {"answer": "fine"}
    first, second = (entry["at"] for entry in llm.requests_matching("busy?"))
    assert second - first >= 3, f"retried after {second - first:.2f} s, before the provider's Retry-After"
    locked = await finished(api, await start(api, "ask_once", {"q": "locked?"}))
    assert locked["status"] == "FAILED"
    assert (
        "the provider answered HTTP 401: invalid api key (check the integration's API key)"
        in (locked["reasonForIncompletion"])
    )
    assert len(llm.requests_matching("locked?")) == 1, "a 401 is not retried"


async def test_a_slow_model_call_is_kept_alive_by_heartbeats(api: httpx.AsyncClient, llm: FakeLlm) -> None:
    await register(api, chat_flow("ask_slowly", retryCount=0, responseTimeoutSeconds=2))
    llm.rules(rule("ponder", {"content": "done pondering", "delay": 5}))
    found = await finished(api, await start(api, "ask_slowly", {"q": "ponder"}))
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    assert len(llm.requests_matching("ponder")) == 1
