"""Reading an LLM task's input (Conductor's field names, docs/research/conductor-ai.md) into a
provider-neutral request; bad input is a `BadInput` naming the field, which fails the task for
good (a retry would send the same).

Conductor's chat messages are `{role, message, toolCalls}` with roles user, assistant, system,
tool_call (the model's earlier tool calls) and tool (their results, each tool call carrying its
`output`). The neutral form is OpenAI's chat form, which the Anthropic provider converts again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TEXT_COMPLETE_USER_MESSAGE = "use the instructions given to generate the response."
"""What Conductor's LLM_TEXT_COMPLETE sends as the user turn: the prompt is the instructions."""
_PROMPT_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_.-]+)\}")


class BadInput(ValueError):
    """The task's input cannot make a request; the message names the field."""


@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    type: str = "SIMPLE"
    config_params: dict[str, Any] = field(default_factory=dict)
    integration_names: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[ToolSpec] = field(default_factory=list)
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    json_output: bool = False
    output_schema: dict[str, Any] | None = None


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))  # a map or list written into a message


def _number(given: Mapping[str, Any], key: str, *, whole: bool = False) -> Any:
    value = given.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(f"{key} must be a number, not {value!r}")
    if whole:
        if value != int(value) or value < 1:
            raise BadInput(f"{key} must be a whole number of at least 1, not {value!r}")
        return int(value)
    return float(value)


def _substitute(text: str, variables: Mapping[str, Any]) -> str:
    """Conductor's promptVariables: `${name}` (written `$${name}` in a definition, so the
    decider leaves it) becomes the variable's value, text as is and anything else as JSON."""
    if not variables:
        return text

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            return match.group(0)
        item = variables[name]
        return item if isinstance(item, str) else json.dumps(item)

    return _PROMPT_VARIABLE.sub(value, text)


def _call_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    params = call.get("inputParameters") or {}
    if not isinstance(params, Mapping):
        return {}
    if call.get("type") == "CALL_MCP_TOOL" and isinstance(params.get("arguments"), Mapping):
        return dict(params["arguments"])
    return {k: v for k, v in params.items() if k != "method"}


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
        raise BadInput(f"{where}.toolCalls must be a list of tool calls")
    out = []
    for index, call in enumerate(calls):
        name = call.get("name") or (call.get("inputParameters") or {}).get("method")
        call_id = call.get("taskReferenceName")
        if not isinstance(name, str) or not isinstance(call_id, str):
            raise BadInput(f"{where}.toolCalls[{index}] needs a name and a taskReferenceName (the call's id)")
        out.append(
            {"id": call_id, "name": name, "arguments": _call_arguments(call), "output": call.get("output")}
        )
    return out


def _message(raw: Any, index: int, variables: Mapping[str, Any]) -> list[dict[str, Any]]:
    where = f"messages[{index}]"
    if not isinstance(raw, Mapping):
        raise BadInput(f"{where} must be a map {{role, message}}, not {type(raw).__name__}")
    role = raw.get("role")
    text = _substitute(_text(raw.get("message"), where), variables)
    if role in ("user", "system"):
        return [{"role": role, "content": text}]
    if role in ("assistant", "tool_call"):
        calls = _tool_calls(raw["toolCalls"], where) if raw.get("toolCalls") else []
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        if role == "tool_call" and not calls:
            raise BadInput(f"{where}: a tool_call message needs toolCalls")
        return [message]
    if role == "tool":
        if raw.get("toolCalls"):
            return [
                {"role": "tool", "tool_call_id": call["id"], "content": _text(call["output"], where)}
                for call in _tool_calls(raw["toolCalls"], where)
            ]
        call_id = raw.get("toolCallId") or raw.get("taskReferenceName")
        if not isinstance(call_id, str):
            raise BadInput(f"{where}: a tool message needs toolCalls (each with its output) or a toolCallId")
        return [{"role": "tool", "tool_call_id": call_id, "content": text}]
    raise BadInput(f"{where}.role {role!r} is not a role: user, assistant, system, tool_call or tool")


def _tools(raw: Any) -> list[ToolSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadInput("tools must be a list of tool specs {name, description, inputSchema}")
    tools = []
    for index, spec in enumerate(raw):
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise BadInput(f"tools[{index}] must be a map with a name")
        schema = spec.get("inputSchema") or {"type": "object", "properties": {}}
        if not isinstance(schema, Mapping):
            raise BadInput(f"tools[{index}].inputSchema must be a JSON Schema (a map)")
        tools.append(
            ToolSpec(
                name=spec["name"],
                description=str(spec.get("description") or ""),
                parameters=dict(schema),
                type=str(spec.get("type") or "SIMPLE"),
                config_params=dict(spec.get("configParams") or {}),
                integration_names=dict(spec.get("integrationNames") or {}),
            )
        )
    return tools


def output_schema_of(given: Mapping[str, Any]) -> dict[str, Any] | None:
    """outputSchema: a JSON Schema, or Conductor's SchemaDef `{name, type: JSON, data: schema}`."""
    schema = given.get("outputSchema")
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        raise BadInput("outputSchema must be a JSON Schema (a map)")
    if (
        isinstance(schema.get("data"), Mapping)
        and "type" in schema
        and schema.get("type") in ("JSON", "json")
    ):
        return dict(schema["data"])
    return dict(schema)


def _common(given: Mapping[str, Any], messages: list[dict[str, Any]]) -> ChatRequest:
    model = given.get("model")
    if not isinstance(model, str) or not model:
        raise BadInput("model is required (the provider's model id)")
    stop = given.get("stopWords")
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise BadInput("stopWords must be a list of strings")
    json_output = given.get("jsonOutput", False)
    if not isinstance(json_output, bool):
        raise BadInput(f"jsonOutput must be true or false, not {json_output!r}")
    return ChatRequest(
        model=model,
        messages=messages,
        tools=_tools(given.get("tools")),
        temperature=_number(given, "temperature"),
        top_p=_number(given, "topP"),
        max_tokens=_number(given, "maxTokens", whole=True),
        stop=stop or None,
        json_output=json_output,
        output_schema=output_schema_of(given),
    )


def _variables(given: Mapping[str, Any]) -> Mapping[str, Any]:
    variables = given.get("promptVariables") or {}
    if not isinstance(variables, Mapping):
        raise BadInput("promptVariables must be a map of name -> value")
    return variables


def chat_request(given: Mapping[str, Any]) -> ChatRequest:
    """LLM_CHAT_COMPLETE: `instructions` first as a system message, then `messages` (or
    `userInput` when there are none), as Conductor's mapper builds them."""
    variables = _variables(given)
    raw = given.get("messages") or []
    if not isinstance(raw, list):
        raise BadInput("messages must be a list of {role, message}")
    messages: list[dict[str, Any]] = []
    instructions = given.get("instructions")
    if isinstance(instructions, str) and instructions.strip():
        messages.append({"role": "system", "content": _substitute(instructions, variables)})
    for index, item in enumerate(raw):
        messages += _message(item, index, variables)
    if not raw and given.get("userInput") is not None:
        messages.append(
            {"role": "user", "content": _substitute(_text(given["userInput"], "userInput"), variables)}
        )
    if not any(m["role"] != "system" for m in messages):
        raise BadInput("messages is empty: give messages, or userInput")
    return _common(given, messages)


def text_request(given: Mapping[str, Any]) -> ChatRequest:
    """LLM_TEXT_COMPLETE, as Conductor runs it: the prompt (promptName is taken as the prompt's
    text: Conductor OSS has no prompt store) as instructions, and a fixed user turn."""
    prompt = given.get("promptName") if given.get("promptName") is not None else given.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadInput("prompt is required (the text to complete)")
    messages = [
        {"role": "system", "content": _substitute(prompt, _variables(given))},
        {"role": "user", "content": TEXT_COMPLETE_USER_MESSAGE},
    ]
    request = _common(given, messages)
    request.tools = []
    return request
