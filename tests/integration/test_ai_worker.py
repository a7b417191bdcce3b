"""The AI tasks in the system worker, against real protocols: the fake model provider (OpenAI's
and Anthropic's HTTP APIs, driven by the real `openai` and `anthropic` clients), the MCP test
server built with the MCP SDK as a process over streamable HTTP and as a stdio subprocess, and a
bare JSON-RPC server as Conductor's client speaks to. On the embedded bus, task message in,
TaskResult out (services/system_worker/llm_task.py, mcp_task.py)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.embedded_bus import EmbeddedBus
from shared.integrations import load_integrations, parse
from shared.models.messages import TaskResult
from shared.models.runtime import TaskStatus
from shared.secrets import SecretStore
from shared.topics import Topics
from tests.ai.bare_mcp import BareMcp
from tests.ai.fake_llm import FakeLlm, rule
from tests.ai.servers import McpHttpServer, integrations
from tests.integration.test_system_worker import Harness, _harness, task_message

SECRET = "tok-7f3a9c-never-stored"
LOCAL_KEY = "sk-local-5e1d"
AI_TYPES = ("LLM_CHAT_COMPLETE", "LLM_TEXT_COMPLETE", "LIST_MCP_TOOLS", "CALL_MCP_TOOL")


@pytest.fixture(scope="module")
def bare() -> Iterator[BareMcp]:
    server = BareMcp()
    yield server
    server.close()


class AiHarness:
    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    async def run(
        self, task_type: str, secret_paths: list[list[str | int]] | None = None, **given: Any
    ) -> TaskResult:
        task = task_message(task_type, given)
        if secret_paths:
            task.secret_paths = secret_paths
        await self.harness.bus.publish([_outgoing(self.harness.topics, task)])
        return await self.harness.results.final(task.task_id)

    async def chat(self, text: str, **given: Any) -> TaskResult:
        inputs = {
            "llmProvider": "local",
            "model": "scripted-model",
            "messages": [{"role": "user", "message": text}],
        }
        return await self.run("LLM_CHAT_COMPLETE", **(inputs | given))


def _outgoing(topics: Topics, task: Any) -> Any:
    from shared.ports.bus import Outgoing

    return Outgoing(topics.tasks(task.task_type), task.to_bytes(), task.workflow_instance_id)


@pytest.fixture
async def ai(
    tmp_path: Path, topics: Topics, llm: FakeLlm, mcp: McpHttpServer, bare: BareMcp
) -> AsyncIterator[AiHarness]:
    bus = EmbeddedBus(str(tmp_path / "bus.db"), partitions=2, poll_interval_s=0.02)
    await bus.ensure_topics([topics.tasks(kind) for kind in AI_TYPES])
    configured = parse(
        integrations(llm.url, mcp, bare_only={"url": bare.url, "transport": "jsonrpc"}), "test integrations"
    )
    secrets = SecretStore({"TOOLS_TOKEN": SECRET, "LOCAL_KEY": LOCAL_KEY})
    async for harness in _harness(
        bus, topics, integrations=configured, secrets=secrets, max_retry_after_s=60
    ):
        yield AiHarness(harness)


# ---- LLM_CHAT_COMPLETE -------------------------------------------------------------------------


async def test_a_chat_completion_has_conductors_output_and_the_request_the_provider_expects(
    ai: AiHarness, llm: FakeLlm
) -> None:
    llm.rules(rule("capital", {"content": "Paris.", "promptTokens": 12, "completionTokens": 3}))
    result = await ai.chat(
        "What is the capital of France?",
        instructions="Answer in one word.",
        temperature=0.2,
        topP=0.9,
        maxTokens=64,
        stopWords=["\n\n"],
    )
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    assert result.output_data == {
        "result": "Paris.",
        "finishReason": "STOP",
        "tokenUsed": 15,
        "promptTokens": 12,
        "completionTokens": 3,
        "media": [],
        "responseId": "chatcmpl-1",
    }
    [request] = llm.log
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {LOCAL_KEY}", (
        "the integration's key, from a secret"
    )
    assert request["headers"]["idempotency-key"] == f"cairn-{result.task_id}"
    body = request["body"]
    assert body["messages"] == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["stop"]) == (0.2, 0.9, 64, ["\n\n"])


async def test_tool_calls_come_back_shaped_as_tasks_a_dynamic_fork_runs(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(
        rule(
            "research",
            {
                "toolCalls": [
                    {"id": "call_a", "name": "search", "arguments": {"query": "cairns"}},
                    {"id": "call_b", "name": "notify", "arguments": {"to": "ops"}},
                ]
            },
        )
    )
    tools = [
        {
            "name": "search",
            "description": "s",
            "inputSchema": {"type": "object"},
            "type": "CALL_MCP_TOOL",
            "configParams": {"mcpServer": "tools"},
        },
        {"name": "notify", "description": "n", "inputSchema": {"type": "object"}},
    ]
    result = await ai.chat("research cairns", tools=tools)
    assert result.status is TaskStatus.COMPLETED
    output = result.output_data
    assert output["finishReason"] == "TOOL_CALLS" and output["result"] == []
    assert output["toolCalls"] == [
        {
            "taskReferenceName": "call_a",
            "name": "search",
            "type": "CALL_MCP_TOOL",
            "inputParameters": {"mcpServer": "tools", "method": "search", "arguments": {"query": "cairns"}},
            "integrationNames": {},
        },
        {
            "taskReferenceName": "call_b",
            "name": "notify",
            "type": "SIMPLE",
            "inputParameters": {"to": "ops", "method": "notify"},
            "integrationNames": {},
        },
    ]
    sent = llm.log[0]["body"]["tools"]
    assert sent[0] == {
        "type": "function",
        "function": {"name": "search", "description": "s", "parameters": {"type": "object"}},
    }


async def test_earlier_tool_calls_and_their_results_go_back_to_the_model(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(rule("again", {"content": "done"}))
    call = {
        "taskReferenceName": "call_a",
        "name": "search",
        "type": "CALL_MCP_TOOL",
        "inputParameters": {"method": "search", "arguments": {"query": "q"}},
    }
    messages = [
        {"role": "user", "message": "again"},
        {"role": "tool_call", "toolCalls": [call]},
        {"role": "tool", "toolCalls": [{**call, "output": {"content": [{"type": "text", "text": "found"}]}}]},
    ]
    result = await ai.run("LLM_CHAT_COMPLETE", llmProvider="local", model="m", messages=messages)
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    assert llm.log[0]["body"]["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "q"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"content":[{"type":"text","text":"found"}]}'},
    ]


SCHEMA = {
    "type": "object",
    "properties": {"route": {"enum": ["refund", "escalate"]}, "amount": {"type": "number"}},
    "required": ["route", "amount"],
}


async def test_structured_output_an_answer_off_the_schema_fails_with_the_errors_and_its_tokens(
    ai: AiHarness, llm: FakeLlm
) -> None:
    llm.rules(rule("triage", {"content": '{"route": "shrug"}', "promptTokens": 20, "completionTokens": 4}))
    result = await ai.chat("triage this", jsonOutput=True, outputSchema=SCHEMA)
    assert result.status is TaskStatus.FAILED, "retried per the TaskDef: the next attempt asks again"
    reason = result.reason_for_incompletion or ""
    assert reason.startswith("the model's answer does not match outputSchema: ")
    assert "$: 'amount' is a required property" in reason and "$.route: 'shrug' is not one of" in reason
    assert result.output_data["tokenUsed"] == 24, "the budget counts what a failed attempt spent"
    body = llm.log[0]["body"]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SCHEMA},
    }


async def test_structured_output_a_valid_answer_is_the_parsed_object(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(rule("triage", {"content": '```json\n{"route": "refund", "amount": 12.5}\n```'}))
    conductor_schema_def = {"name": "triage", "type": "JSON", "data": SCHEMA}
    result = await ai.chat("triage this", jsonOutput=True, outputSchema=conductor_schema_def)
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    assert result.output_data["result"] == {"route": "refund", "amount": 12.5}


async def test_json_output_that_is_not_json_fails_the_attempt(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(rule("json please", {"content": "Sure! Here you go."}))
    result = await ai.chat("json please", jsonOutput=True)
    assert result.status is TaskStatus.FAILED
    assert (
        result.reason_for_incompletion == "the model's answer is not JSON (jsonOutput): 'Sure! Here you go.'"
    )
    assert llm.log[0]["body"]["response_format"] == {"type": "json_object"}


async def test_a_429_is_retried_no_sooner_than_its_retry_after(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(rule("busy", {"status": 429, "headers": {"Retry-After": "7"}, "error": "slow down"}))
    result = await ai.chat("busy now")
    assert result.status is TaskStatus.FAILED
    assert result.callback_after_seconds == 7
    assert "HTTP 429: slow down" in (result.reason_for_incompletion or "")


async def test_retry_after_ms_wins_and_a_long_retry_after_is_cut(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(
        rule("ms", {"status": 429, "headers": {"retry-after-ms": "2500", "Retry-After": "9"}}),
        rule("long", {"status": 503, "headers": {"Retry-After": "86400"}}),
    )
    assert (await ai.chat("ms")).callback_after_seconds == 3
    long = await ai.chat("long")
    assert (long.status, long.callback_after_seconds) == (TaskStatus.FAILED, 60), "CAIRN_AI_MAX_RETRY_AFTER_S"


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (401, "HTTP 401: invalid api key (check the integration's API key)"),
        (400, "HTTP 400: bad request"),
        (404, "HTTP 404: no such model"),
    ],
)
async def test_a_4xx_that_a_retry_cannot_fix_fails_for_good(
    ai: AiHarness, llm: FakeLlm, status: int, says: str
) -> None:
    message = {401: "invalid api key", 400: "bad request", 404: "no such model"}[status]
    llm.rules(rule("refused", {"status": status, "error": message}))
    result = await ai.chat("refused")
    assert result.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert result.reason_for_incompletion == f"integration 'local': the provider answered {says}"


async def test_a_5xx_fails_the_attempt_for_a_retry(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(rule("down", {"status": 500, "error": "oops"}))
    result = await ai.chat("down")
    assert (result.status, result.callback_after_seconds) == (TaskStatus.FAILED, 0)


async def test_an_unknown_provider_or_bad_input_fails_for_good_naming_it(ai: AiHarness) -> None:
    unknown = await ai.chat("x", llmProvider="nope")
    assert unknown.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "llmProvider 'nope' is not a configured integration (configured: claude, local)" in (
        unknown.reason_for_incompletion or ""
    )
    bad = await ai.run(
        "LLM_CHAT_COMPLETE", llmProvider="local", model="m", messages=[{"role": "robot", "message": "x"}]
    )
    assert bad.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert (
        bad.reason_for_incompletion
        == "messages[0].role 'robot' is not a role: user, assistant, system, tool_call or tool"
    )


async def test_text_completion_sends_the_prompt_as_instructions_as_conductor_does(
    ai: AiHarness, llm: FakeLlm
) -> None:
    llm.rules(rule("haiku", {"content": "leaves fall", "finishReason": "length"}))
    result = await ai.run(
        "LLM_TEXT_COMPLETE",
        llmProvider="local",
        model="m",
        prompt="Write a haiku about ${topic}",
        promptVariables={"topic": "autumn"},
    )
    assert result.status is TaskStatus.COMPLETED
    assert (result.output_data["result"], result.output_data["finishReason"]) == ("leaves fall", "LENGTH")
    assert llm.log[0]["body"]["messages"] == [
        {"role": "system", "content": "Write a haiku about autumn"},
        {"role": "user", "content": "use the instructions given to generate the response."},
    ]


async def test_anthropic_through_its_sdk(ai: AiHarness, llm: FakeLlm) -> None:
    llm.rules(
        rule(
            "weather",
            {
                "content": "Let me look.",
                "toolCalls": [{"id": "toolu_1", "name": "search", "arguments": {"query": "Paris"}}],
                "promptTokens": 30,
                "completionTokens": 9,
            },
        )
    )
    result = await ai.run(
        "LLM_CHAT_COMPLETE",
        llmProvider="claude",
        model="claude-x",
        instructions="Be brief.",
        messages=[{"role": "user", "message": "weather in Paris?"}],
        tools=[{"name": "search", "description": "s", "inputSchema": {"type": "object"}}],
    )
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    output = result.output_data
    assert (output["result"], output["finishReason"], output["tokenUsed"]) == (
        "Let me look.",
        "TOOL_CALLS",
        39,
    )
    assert output["toolCalls"][0]["inputParameters"] == {"query": "Paris", "method": "search"}
    [request] = llm.log
    assert request["path"] == "/v1/messages"
    assert request["body"]["system"] == "Be brief." and request["body"]["max_tokens"] == 4096
    assert request["body"]["tools"] == [
        {"name": "search", "description": "s", "input_schema": {"type": "object"}}
    ]


async def test_anthropic_refuses_sampling_settings_its_api_no_longer_takes(
    ai: AiHarness, llm: FakeLlm
) -> None:
    llm.rules()
    result = await ai.run(
        "LLM_CHAT_COMPLETE",
        llmProvider="claude",
        model="c",
        temperature=0.5,
        messages=[{"role": "user", "message": "hi"}],
    )
    assert result.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "Anthropic's current API takes no temperature" in (result.reason_for_incompletion or "")
    assert llm.log == []


# ---- LIST_MCP_TOOLS / CALL_MCP_TOOL ------------------------------------------------------------


@pytest.mark.parametrize("server", ["tools", "tools_stdio"])
async def test_mcp_tools_are_listed_and_called_over_streamable_http_and_stdio(
    ai: AiHarness, mcp: McpHttpServer, server: str
) -> None:
    listed = await ai.run("LIST_MCP_TOOLS", mcpServer=server)
    assert listed.status is TaskStatus.COMPLETED, listed.reason_for_incompletion
    tools = {tool["name"]: tool for tool in listed.output_data["tools"]}
    assert sorted(tools) == ["add", "broken", "search", "whoami"]
    assert tools["add"]["description"] == "Add two integers."
    assert tools["add"]["inputSchema"]["required"] == ["a", "b"]
    before = len(mcp.calls())
    called = await ai.run("CALL_MCP_TOOL", mcpServer=server, method="add", arguments={"a": 2, "b": 40})
    assert called.status is TaskStatus.COMPLETED, called.reason_for_incompletion
    assert called.output_data == {
        "content": [
            {"type": "text", "text": "42", "parsed": "42"}
        ],  # JSON only when it starts as a map or list
        "isError": False,
        "structuredContent": {"result": 42},
    }
    assert mcp.calls()[before:] == [{"tool": "add", "arguments": {"a": 2, "b": 40}, "authorization": None}]


async def test_mcp_a_tool_error_is_the_tasks_output_not_a_failure(ai: AiHarness) -> None:
    result = await ai.run("CALL_MCP_TOOL", mcpServer="tools", method="broken", arguments={})
    assert result.status is TaskStatus.COMPLETED
    assert result.output_data["isError"] is True
    assert "the knowledge base is offline" in result.output_data["content"][0]["text"]


async def test_mcp_a_server_by_url_as_in_conductor_and_a_refused_connection_is_retried(
    ai: AiHarness, mcp: McpHttpServer
) -> None:
    by_url = await ai.run("CALL_MCP_TOOL", mcpServer=mcp.url, method="search", arguments={"query": "q"})
    assert by_url.status is TaskStatus.COMPLETED
    assert by_url.output_data["content"][0]["text"] == "finding about q"
    refused = await ai.run("LIST_MCP_TOOLS", mcpServer="http://127.0.0.1:9/mcp")
    assert refused.status is TaskStatus.FAILED, "a transport failure is retried per the TaskDef"
    unknown = await ai.run("LIST_MCP_TOOLS", mcpServer="nowhere")
    assert unknown.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "mcpServer 'nowhere' is neither a URL nor a configured MCP server" in (
        unknown.reason_for_incompletion or ""
    )


async def test_mcp_a_bare_json_rpc_server_without_the_handshake(ai: AiHarness, bare: BareMcp) -> None:
    bare.requests.clear()
    listed = await ai.run("LIST_MCP_TOOLS", mcpServer=bare.url)
    assert listed.status is TaskStatus.COMPLETED, listed.reason_for_incompletion
    assert [tool["name"] for tool in listed.output_data["tools"]] == ["lookup"]
    called = await ai.run("CALL_MCP_TOOL", mcpServer=bare.url, method="lookup", arguments={"word": "cairn"})
    assert called.status is TaskStatus.COMPLETED, called.reason_for_incompletion
    assert called.output_data["content"][0]["parsed"] == {"word": "cairn", "meaning": "the meaning of cairn"}
    assert bare.methods() == ["initialize", "tools/list", "initialize", "tools/call"], (
        "the handshake was refused, then one bare POST each: the tool ran once"
    )
    bare.requests.clear()
    configured = await ai.run(
        "CALL_MCP_TOOL", mcpServer="bare_only", method="lookup", arguments={"word": "x"}
    )
    assert configured.status is TaskStatus.COMPLETED
    assert bare.methods() == ["tools/call"], "transport jsonrpc: no handshake tried"


# ---- secrets -----------------------------------------------------------------------------------


async def test_a_secret_reaches_the_server_only_where_the_definition_put_it_and_never_comes_back(
    ai: AiHarness, mcp: McpHttpServer
) -> None:
    before = len(mcp.calls())
    result = await ai.run(
        "CALL_MCP_TOOL",
        secret_paths=[["headers", "Authorization"]],
        mcpServer="tools",
        method="whoami",
        arguments={"note": "${secrets.TOOLS_TOKEN}"},
        headers={"Authorization": "Bearer ${secrets.TOOLS_TOKEN}"},
    )
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    assert mcp.calls()[before:][0]["authorization"] == f"Bearer {SECRET}", "the server got the secret"
    assert result.output_data["content"][0]["text"] == "Bearer ***", "the echo of it is masked"
    assert SECRET not in json.dumps(result.to_json_dict())
    assert mcp.calls()[before:][0]["arguments"] == {}, "whoami takes no arguments"


async def test_an_unknown_secret_fails_the_task_naming_it(ai: AiHarness) -> None:
    result = await ai.run(
        "LIST_MCP_TOOLS",
        secret_paths=[["headers", "X"]],
        mcpServer="tools",
        headers={"X": "${secrets.MISSING}"},
    )
    assert result.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "secret 'MISSING' is not in the secret store" in (result.reason_for_incompletion or "")


async def test_two_variables_point_cairn_at_any_openai_compatible_server(
    tmp_path: Path, topics: Topics, llm: FakeLlm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OPENAI_API_KEY enables the `openai` integration and the openai SDK honours OPENAI_BASE_URL."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{llm.url}/v1")
    configured = load_integrations(None, None, os.environ)
    bus = EmbeddedBus(str(tmp_path / "bus.db"), partitions=2, poll_interval_s=0.02)
    await bus.ensure_topics([topics.tasks(kind) for kind in AI_TYPES])
    llm.rules(rule("ping", {"content": "pong"}))
    async for harness in _harness(bus, topics, integrations=configured):
        result = await AiHarness(harness).chat("ping", llmProvider="openai")
        assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
        assert result.output_data["result"] == "pong"
    [request] = llm.log
    assert request["headers"]["authorization"] == "Bearer sk-from-the-environment"
