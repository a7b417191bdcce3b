"""AI integrations from configuration (shared/integrations.py), and the pure parts of the LLM
task: parsing an answer, Retry-After, finish reasons, Anthropic's message shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.system_worker.llm_input import BadInput, chat_request
from services.system_worker.llm_providers import _anthropic_messages, finish_reason, retry_after_s
from services.system_worker.llm_task import parse_result
from shared.integrations import IntegrationError, load_integrations


def test_provider_variables_enable_integrations_as_in_conductor() -> None:
    found = load_integrations(
        None,
        None,
        {
            "OPENAI_API_KEY": "sk",
            "ANTHROPIC_API_KEY": "sk-ant",
            "AZURE_OPENAI_API_KEY": "az",
            "AZURE_OPENAI_ENDPOINT": "https://x.openai.azure.com",
            "OLLAMA_HOST": "127.0.0.1:11434",
        },
    )
    assert sorted(found.llm) == ["anthropic", "azure_openai", "ollama", "openai"]
    assert found.llm["openai"].base_url is None, "the openai SDK reads OPENAI_BASE_URL itself"
    assert found.llm["ollama"].base_url == "http://127.0.0.1:11434/v1"
    assert found.llm["azure_openai"].api_version == "2024-10-21"
    assert load_integrations(None, None, {}).llm == {}


def test_the_file_then_the_inline_json_win_per_name(tmp_path: Path) -> None:
    file = tmp_path / "ai.json"
    file.write_text(
        json.dumps(
            {
                "llm": {"openai": {"provider": "openai", "baseUrl": "http://file/v1"}},
                "mcp": {"tools": {"url": "http://file/mcp"}},
            }
        )
    )
    inline = json.dumps({"mcp": {"tools": {"command": "python", "args": ["-m", "srv"]}}})
    prices = json.dumps({"m": {"inputPerMillion": 1, "outputPerMillion": 2}})
    found = load_integrations(str(file), inline, {"OPENAI_API_KEY": "sk"}, prices)
    assert found.llm["openai"].base_url == "http://file/v1"
    assert found.mcp["tools"].command == "python" and found.mcp["tools"].url is None
    assert found.prices["m"].output_per_million == 2


@pytest.mark.parametrize(
    ("inline", "says"),
    [
        ("{", "CAIRN_AI_INTEGRATIONS is not JSON"),
        ('{"llm": {"x": {"provider": "litellm"}}}', "CAIRN_AI_INTEGRATIONS: llm.x.provider"),
        ('{"mcp": {"x": {}}}', "a url (streamable HTTP) or a command (stdio), one of them"),
        ('{"llm": {"x": {"provider": "openai", "bogus": 1}}}', "llm.x.bogus"),
    ],
)
def test_bad_configuration_is_refused_naming_the_field(inline: str, says: str) -> None:
    with pytest.raises(IntegrationError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_integrations(None, inline, {})


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ("  [1, 2]  ", [1, 2]),
        ("42", None),
        ("{not json", None),
        ('Sure: {"a": 1}', None),
    ],
)
def test_an_answer_is_parsed_when_it_is_a_json_object_or_list(text: str, parsed: object) -> None:
    assert parse_result(text) == parsed


def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"retry-after": "7"}) == 7
    assert retry_after_s({"retry-after": "Wed, 02 Dec 2026 10:00:30 GMT"}, now=1796205600.0) == 30
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("stop", "STOP"),
        ("end_turn", "STOP"),
        ("length", "LENGTH"),
        ("max_tokens", "LENGTH"),
        ("tool_calls", "TOOL_CALLS"),
        ("tool_use", "TOOL_CALLS"),
        ("content_filter", "CONTENT_FILTER"),
        ("refusal", "CONTENT_FILTER"),
        ("pause_turn", "PAUSE_TURN"),
        (None, "STOP"),
    ],
)
def test_finish_reasons_are_normalised(raw: str | None, normalised: str) -> None:
    assert finish_reason(raw) == normalised


def test_anthropic_messages_carry_tool_calls_and_results_as_blocks() -> None:
    call = {
        "taskReferenceName": "toolu_1",
        "name": "search",
        "inputParameters": {"query": "q", "method": "search"},
    }
    request = chat_request(
        {
            "model": "m",
            "instructions": "be brief",
            "messages": [
                {"role": "user", "message": "hi"},
                {"role": "tool_call", "toolCalls": [call]},
                {"role": "tool", "toolCalls": [{**call, "output": {"found": 1}}]},
            ],
        }
    )
    assert _anthropic_messages(request.messages) == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": "q"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"found":1}'}],
        },
    ]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"model": "m", "messages": []}, "messages is empty"),
        ({"model": "m", "messages": "hi"}, "messages must be a list"),
        ({"model": "m", "messages": [{"role": "tool", "message": "x"}]}, "a tool message needs toolCalls"),
        (
            {"model": "m", "messages": [{"role": "user", "message": "x"}], "maxTokens": 0},
            "maxTokens must be a whole",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "message": "x"}], "stopWords": "x"},
            "stopWords must be a list",
        ),
        ({"messages": [{"role": "user", "message": "x"}]}, "model is required"),
    ],
)
def test_bad_chat_input_names_the_field(given: dict[str, object], says: str) -> None:
    with pytest.raises(BadInput, match=says):
        chat_request(given)
