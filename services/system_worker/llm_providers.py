"""The model providers, through their official SDKs: `openai` (OpenAI and every OpenAI-compatible
server by its base URL, Azure OpenAI) and `anthropic`. One client per integration, made when
first used, with the SDK's own retries off: a retry is the task's, per its TaskDef, so it is
durable, counted and visible (docs/agents.md).

Errors come out as `ProviderError`: a rate limit (429), a timeout of the server (408), a
conflict (409), a server error (5xx) or a lost connection may pass with time (retried, after the
provider's Retry-After when it sent one); any other 4xx — a wrong key, an unknown model, a
request the provider refuses — would be refused again, so it fails the task for good.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import anthropic
import openai

from services.system_worker.llm_input import ChatRequest
from shared.integrations import LlmIntegration
from shared.secrets import SecretStore

RETRIABLE_STATUSES = frozenset({408, 409, 429})
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires max_tokens; used when the task gives none."""
FINISH_REASONS = {
    "stop": "STOP",
    "end_turn": "STOP",
    "stop_sequence": "STOP",
    "length": "LENGTH",
    "max_tokens": "LENGTH",
    "model_context_window_exceeded": "LENGTH",
    "tool_calls": "TOOL_CALLS",
    "function_call": "TOOL_CALLS",
    "tool_use": "TOOL_CALLS",
    "content_filter": "CONTENT_FILTER",
    "refusal": "CONTENT_FILTER",
}


def finish_reason(raw: str | None) -> str:
    """Normalised: STOP, TOOL_CALLS, LENGTH, CONTENT_FILTER (another provider value upper-cased)."""
    if not raw:
        return "STOP"
    return FINISH_REASONS.get(raw, raw.upper())


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | None
    """None when the model's arguments were not a JSON object (`raw` holds them)."""
    raw: str | None = None


@dataclass
class ChatAnswer:
    text: str | None
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    response_id: str | None = None


class ProviderError(Exception):
    def __init__(self, message: str, *, terminal: bool, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.terminal = terminal
        self.retry_after_s = retry_after_s


class Provider(Protocol):
    async def chat(self, request: ChatRequest, idempotency_key: str) -> ChatAnswer: ...

    async def aclose(self) -> None: ...


def retry_after_s(headers: Any, now: float | None = None) -> float | None:
    """A response's `retry-after-ms`, else `retry-after` (seconds, or an HTTP date)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    try:
        if millis is not None and math.isfinite(float(millis)):
            return max(0.0, float(millis) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _status_error(integration: str, status: int, message: str, headers: Any) -> ProviderError:
    terminal = status not in RETRIABLE_STATUSES and status < 500
    what = f"integration {integration!r}: the provider answered HTTP {status}: {message}"
    if status in (401, 403):
        what += " (check the integration's API key)"
    return ProviderError(what, terminal=terminal, retry_after_s=None if terminal else retry_after_s(headers))


def _arguments(raw: str | None) -> dict[str, Any] | None:
    """A tool call's arguments (JSON text from OpenAI-compatible servers), None when they are
    not a JSON object: the task fails and asks the model again, with the tokens counted."""
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class _Configured:
    """A provider of one configured integration: its name (for reasons) and its settings, whose
    text may name secrets of the store."""

    def __init__(self, name: str, integration: LlmIntegration, secrets: SecretStore) -> None:
        self.name = name
        self.integration = integration
        self.secrets = secrets

    def _resolved(self, value: str | None) -> str | None:
        return self.secrets.resolve_text(value, set()) if value else None

    def _headers(self) -> dict[str, str]:
        return {k: self.secrets.resolve_text(v, set()) for k, v in self.integration.headers.items()}


class OpenAIProvider(_Configured):
    _client: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            given = self.integration
            api_key = self._resolved(given.api_key)
            headers = self._headers()
            try:
                if given.provider == "azure_openai":
                    self._client = openai.AsyncAzureOpenAI(
                        api_key=api_key,
                        azure_endpoint=given.base_url or "",
                        api_version=given.api_version,
                        max_retries=0,
                        timeout=given.timeout_seconds,
                        default_headers=headers or None,
                    )
                else:
                    if api_key is None and given.base_url is not None:
                        api_key = "none"  # a local server that takes no key
                    self._client = openai.AsyncOpenAI(
                        api_key=api_key,
                        base_url=given.base_url,
                        organization=given.organization,
                        max_retries=0,
                        timeout=given.timeout_seconds,
                        default_headers=headers or None,
                    )
            except openai.OpenAIError as error:
                raise ProviderError(
                    f"integration {self.name!r} cannot be used: {error}", terminal=True
                ) from None
        return self._client

    def _arguments(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "messages": _openai_messages(request.messages)}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.max_tokens is not None:
            body[self.integration.max_tokens_field] = request.max_tokens
        if request.stop:
            body["stop"] = request.stop
        if request.output_schema is not None and request.json_output:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": request.output_schema},
            }
        elif request.json_output:
            body["response_format"] = {"type": "json_object"}
        return body

    async def chat(self, request: ChatRequest, idempotency_key: str) -> ChatAnswer:
        client = self.client()
        try:
            response = await client.chat.completions.create(
                **self._arguments(request), extra_headers={"Idempotency-Key": idempotency_key}
            )
        except openai.APIStatusError as error:
            raise _status_error(
                self.name, error.status_code, _openai_message(error), error.response.headers
            ) from None
        except openai.APIConnectionError as error:
            raise ProviderError(
                f"integration {self.name!r}: no answer from the provider: {error}", terminal=False
            ) from None
        if not response.choices:
            raise ProviderError(
                f"integration {self.name!r}: the provider answered without a choice", terminal=False
            )
        choice = response.choices[0]
        usage = response.usage
        prompt = usage.prompt_tokens if usage else 0
        completion = usage.completion_tokens if usage else 0
        return ChatAnswer(
            text=choice.message.content,
            finish_reason=finish_reason(choice.finish_reason),
            prompt_tokens=prompt or 0,
            completion_tokens=completion or 0,
            total_tokens=(usage.total_tokens if usage else 0) or (prompt or 0) + (completion or 0),
            tool_calls=[
                ToolCall(
                    call.id, call.function.name, _arguments(call.function.arguments), call.function.arguments
                )
                for call in choice.message.tool_calls or []
                if getattr(call, "function", None) is not None
            ],
            response_id=response.id,
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


def _openai_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return str(error.message)


def _openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if message.get("tool_calls"):
            out.append(
                {
                    "role": "assistant",
                    "content": message.get("content"),
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                        }
                        for call in message["tool_calls"]
                    ],
                }
            )
        else:
            out.append(message)
    return out


class AnthropicProvider(_Configured):
    _client: anthropic.AsyncAnthropic | None = None

    def client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            given = self.integration
            headers = self._headers()
            if given.api_version:
                headers["anthropic-version"] = given.api_version
            self._client = anthropic.AsyncAnthropic(
                api_key=self._resolved(given.api_key),
                base_url=given.base_url,
                max_retries=0,
                timeout=given.timeout_seconds,
                default_headers=headers or None,
            )
        return self._client

    def _arguments(self, request: ChatRequest) -> dict[str, Any]:
        sampling = {"temperature": request.temperature, "top_p": request.top_p}
        given = {key: value for key, value in sampling.items() if value is not None}
        if given and not self.integration.api_version:
            # Anthropic's API (version 2026-10-21, its SDK's default) refuses sampling settings:
            # say so rather than drop them.
            names = ", ".join("temperature" if k == "temperature" else "topP" for k in given)
            raise ProviderError(
                f"integration {self.name!r}: Anthropic's current API takes no {names}; remove it from the "
                "task, or give the integration an apiVersion that does (2023-06-01)",
                terminal=True,
            )
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system" and m["content"])
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS,
            "messages": _anthropic_messages(request.messages),
        }
        if system:
            body["system"] = system
        if request.stop:
            body["stop_sequences"] = request.stop
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        if request.json_output and request.output_schema is not None:
            body["output_config"] = {"format": {"type": "json_schema", "schema": request.output_schema}}
        if given:
            body["extra_body"] = given
        return body

    async def chat(self, request: ChatRequest, idempotency_key: str) -> ChatAnswer:
        arguments = self._arguments(request)
        try:
            message = await self.client().messages.create(**arguments)
        except anthropic.APIStatusError as error:
            raise _status_error(
                self.name, error.status_code, str(error.message), error.response.headers
            ) from None
        except anthropic.APIConnectionError as error:
            raise ProviderError(
                f"integration {self.name!r}: no answer from the provider: {error}", terminal=False
            ) from None
        except TypeError as error:  # the SDK found no credentials
            raise ProviderError(f"integration {self.name!r} cannot be used: {error}", terminal=True) from None
        texts = [block.text for block in message.content if getattr(block, "type", None) == "text"]
        calls = [
            ToolCall(block.id, block.name, dict(block.input) if isinstance(block.input, dict) else {})
            for block in message.content
            if getattr(block, "type", None) == "tool_use"
        ]
        usage = message.usage
        return ChatAnswer(
            text="".join(texts) if texts else None,
            finish_reason=finish_reason(message.stop_reason),
            prompt_tokens=usage.input_tokens or 0,
            completion_tokens=usage.output_tokens or 0,
            total_tokens=(usage.input_tokens or 0) + (usage.output_tokens or 0),
            tool_calls=calls,
            response_id=message.id,
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


def _anthropic_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI's chat form to Anthropic's: the system turns go to `system`; an assistant's tool
    calls become tool_use blocks and tool results user turns of tool_result blocks."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "system":
            continue
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": message["content"],
            }
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif role == "assistant" and message.get("tool_calls"):
            blocks: list[dict[str, Any]] = []
            if message.get("content"):
                blocks.append({"type": "text", "text": message["content"]})
            blocks += [
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
                for c in message["tool_calls"]
            ]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out


def provider_for(name: str, integration: LlmIntegration, secrets: SecretStore) -> Provider:
    if integration.provider == "anthropic":
        return AnthropicProvider(name, integration, secrets)
    return OpenAIProvider(name, integration, secrets)
