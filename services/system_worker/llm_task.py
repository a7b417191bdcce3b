"""LLM_CHAT_COMPLETE and LLM_TEXT_COMPLETE in the system-task worker: one model call per attempt,
through the integration the task names (`llmProvider`), with Conductor's output fields.

Output: `result` (the answer; parsed when it is a JSON object or list, a ```json fence taken
off), `finishReason` (STOP, TOOL_CALLS, LENGTH, CONTENT_FILTER), `tokenUsed`, `promptTokens`,
`completionTokens`, `media` ([]), `responseId`, and `toolCalls` when the model asked for tools —
each shaped as a task a FORK_JOIN_DYNAMIC runs as it is: `{taskReferenceName: <call id>, name,
type, inputParameters}` (a CALL_MCP_TOOL tool gets `{...configParams, method, arguments}`).

Structured output: with `jsonOutput`, an answer that is not JSON fails the attempt; with
`outputSchema` (a JSON Schema, or Conductor's SchemaDef), the parsed answer is validated against
it with jsonschema (Conductor validates against inputSchema by mistake) and an invalid one fails
the attempt with the errors in its reason. Both are retried per the TaskDef: the next attempt
asks the model again. A failed attempt's output keeps its token counts (the budget counts them).

The request carries `Idempotency-Key: cairn-<task id>`: the same attempt delivered twice (its
worker died mid-call) is the same key, for the providers and gateways that honour one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.validators import validator_for

from services.system_worker.llm_input import BadInput, ChatRequest, chat_request, text_request
from services.system_worker.llm_providers import ChatAnswer, Provider, ProviderError, ToolCall, provider_for
from services.system_worker.outcome import Outcome
from shared.integrations import Integrations
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskStatus
from shared.secrets import SecretStore

MAX_SCHEMA_ERRORS = 5
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.S)
_UNSAFE_REFERENCE = re.compile(r"[^A-Za-z0-9._:-]|__")


def parse_result(text: str) -> Any:
    """The answer parsed when it is a JSON object or list (inside a ```json fence or not), else
    None."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """jsonschema's errors of `value` against `schema`, as `$.path: message`; BadInput when the
    schema itself is not one."""
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as error:
        raise BadInput(f"outputSchema is not a valid JSON Schema: {error.message}") from None
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{error.json_path}: {error.message}" for error in errors]


def _reference(call_id: str, index: int) -> str:
    """A tool call's id as a task reference (no '/', no '__': those are reserved)."""
    cleaned = _UNSAFE_REFERENCE.sub("_", call_id)[:200]
    return cleaned or f"tool_call_{index}"


def task_shaped(call: ToolCall, index: int, request: ChatRequest) -> dict[str, Any]:
    spec = next((tool for tool in request.tools if tool.name == call.name), None)
    kind = spec.type if spec else "SIMPLE"
    arguments = call.arguments or {}
    if kind == "CALL_MCP_TOOL":
        parameters = {**(spec.config_params if spec else {}), "method": call.name, "arguments": arguments}
    else:
        parameters = {**arguments, "method": call.name}
    return {
        "taskReferenceName": _reference(call.id, index),
        "name": call.name,
        "type": kind,
        "inputParameters": parameters,
        "integrationNames": dict(spec.integration_names) if spec else {},
    }


def answer_output(answer: ChatAnswer, request: ChatRequest) -> dict[str, Any]:
    output: dict[str, Any] = {
        "result": answer.text if answer.text is not None else [],
        "finishReason": answer.finish_reason,
        "tokenUsed": answer.total_tokens,
        "promptTokens": answer.prompt_tokens,
        "completionTokens": answer.completion_tokens,
        "media": [],
    }
    if answer.text:
        parsed = parse_result(answer.text)
        if parsed is not None:
            output["result"] = parsed
    if answer.tool_calls:
        output["toolCalls"] = [task_shaped(call, i, request) for i, call in enumerate(answer.tool_calls)]
    if answer.response_id:
        output["responseId"] = answer.response_id
    return output


def _structure_problem(answer: ChatAnswer, request: ChatRequest, output: dict[str, Any]) -> str | None:
    """Why the answer does not have the structure the task asked for, or None."""
    bad_calls = [call for call in answer.tool_calls if call.arguments is None]
    if bad_calls:
        bad = bad_calls[0]
        return f"the model's arguments for tool {bad.name!r} are not a JSON object: {bad.raw!r}"
    wants_json = request.json_output or request.output_schema is not None
    if not wants_json or answer.tool_calls:
        return None
    result = output["result"]
    if not isinstance(result, dict | list):
        return f"the model's answer is not JSON (jsonOutput): {str(answer.text)[:200]!r}"
    if request.output_schema is not None:
        errors = schema_errors(request.output_schema, result)
        if errors:
            more = f" (and {len(errors) - MAX_SCHEMA_ERRORS} more)" if len(errors) > MAX_SCHEMA_ERRORS else ""
            return (
                "the model's answer does not match outputSchema: "
                + "; ".join(errors[:MAX_SCHEMA_ERRORS])
                + more
            )
    return None


class LlmRunner:
    """Runs LLM tasks; keeps one provider client per integration."""

    def __init__(
        self, integrations: Integrations, secrets: SecretStore, max_retry_after_s: int = 600
    ) -> None:
        self.integrations = integrations
        self.secrets = secrets
        self.max_retry_after_s = max_retry_after_s
        self._providers: dict[str, Provider] = {}

    def _provider(self, name: Any) -> Provider:
        if not isinstance(name, str) or not name:
            raise BadInput("llmProvider is required: the name of a configured integration")
        provider = self._providers.get(name)
        if provider is None:
            integration = self.integrations.llm.get(name)
            if integration is None:
                known = ", ".join(sorted(self.integrations.llm)) or "none"
                raise BadInput(
                    f"llmProvider {name!r} is not a configured integration (configured: {known}); "
                    "set OPENAI_API_KEY / ANTHROPIC_API_KEY or CAIRN_AI_INTEGRATIONS_FILE (docs/agents.md)"
                )
            provider = self._providers[name] = provider_for(name, integration, self.secrets)
        return provider

    async def run(self, task: TaskMessage, given: Mapping[str, Any]) -> Outcome:
        try:
            provider = self._provider(given.get("llmProvider") or given.get("integrationName"))
            request = text_request(given) if task.task_type == "LLM_TEXT_COMPLETE" else chat_request(given)
        except BadInput as error:
            return Outcome.terminal(str(error))
        try:
            answer = await provider.chat(request, idempotency_key=f"cairn-{task.task_id}")
        except ProviderError as error:
            if error.terminal:
                return Outcome.terminal(str(error))
            wait = min(self.max_retry_after_s, int(error.retry_after_s + 0.999)) if error.retry_after_s else 0
            return Outcome.failed(str(error), retry_after_s=wait)
        output = answer_output(answer, request)
        try:
            problem = _structure_problem(answer, request, output)
        except BadInput as error:
            return Outcome.terminal(str(error), output)
        if problem is not None:
            return Outcome.failed(problem, output)
        return Outcome(TaskStatus.COMPLETED, output)

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()
