"""LLM_CHAT_COMPLETE, LLM_TEXT_COMPLETE, LIST_MCP_TOOLS and CALL_MCP_TOOL: Conductor's AI tasks
(docs/research/conductor-ai.md), run by Cairn's system-task worker like HTTP, so a model call or
a tool call is a durable task with retries, timeouts and heartbeats (docs/agents.md).

What the engine keeps out of the model's hands is decided here, in the decision, before the task
is handed out: an LLM task is not started once the run's token or dollar budget is spent, and its
`maxTokens` is lowered to what is left; CALL_MCP_TOOL refuses a tool that is not on an allowlist
(shared/core/budget.py). Secret references the definition wrote in the input are marked for the
worker to resolve (shared/core/secret_refs.py).

Without a TaskDef an AI task is retried three times, 2 s apart growing linearly, as Conductor's
AI task mapper gives it (a provider's rate limit or outage is the usual failure).
"""

from __future__ import annotations

from typing import Any

from shared.core.budget import allowlist_problems, literal_allowlist
from shared.core.refs import Scope
from shared.core.tasktypes.base import Engine, Problems, from_definition
from shared.core.tasktypes.simple import WorkerTask
from shared.models.definitions import RetryLogic, TaskDef, WorkflowTask
from shared.models.runtime import TaskState, TaskStatus

AI_TASK_DEFAULT = TaskDef(
    name="ai_task_default", retry_count=3, retry_delay_seconds=2, retry_logic=RetryLogic.LINEAR_BACKOFF
)
"""Conductor's AIModelTaskMapper default for an AI task without retries configured."""

CHAT_ROLES = frozenset({"user", "assistant", "system", "tool_call", "tool"})
"""Conductor's ChatMessage.Role, as written in JSON."""


def _is_expression(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _required(node: WorkflowTask, path: str, keys: tuple[str, ...]) -> Problems:
    given = node.input_parameters
    return [
        (f"{path}.inputParameters.{key}", "required")
        for key in keys
        if given.get(key) is None or given.get(key) == ""
    ]


class AiTask(WorkerTask):
    """An AI task: a worker task (the system-task worker's) with Conductor's AI retry default."""

    def default_task_def(self, name: str) -> TaskDef:
        return AI_TASK_DEFAULT

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        if self.admit(engine, node, task):
            super().start(engine, node, task, scope)


class LlmTask(AiTask):
    def admit(self, engine: Engine, node: WorkflowTask, task: TaskState) -> bool:
        refusal = engine.budget.llm_refusal(task)
        if refusal is not None:
            engine.stop_for_budget(refusal)
            return False
        left = engine.budget.max_tokens_left(task)
        asked = task.input_data.get("maxTokens")
        if left is not None and (not isinstance(asked, int) or isinstance(asked, bool) or asked > left):
            task.input_data = {**task.input_data, "maxTokens": left}
        return True


class LlmChatCompleteTask(LlmTask):
    name = "LLM_CHAT_COMPLETE"

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found = _required(node, path, ("llmProvider", "model"))
        given = node.input_parameters
        messages = given.get("messages")
        if messages is None and given.get("userInput") is None and given.get("instructions") is None:
            found.append((f"{path}.inputParameters.messages", "required (or userInput, or instructions)"))
        if isinstance(messages, list):
            for index, message in enumerate(messages):
                found += _message_problems(message, f"{path}.inputParameters.messages[{index}]")
        elif messages is not None and not _is_expression(messages):
            found.append((f"{path}.inputParameters.messages", "a list of {role, message} (or an expression)"))
        return found


def _message_problems(message: Any, path: str) -> Problems:
    if _is_expression(message):
        return []
    if not isinstance(message, dict):
        return [(path, "a chat message is a map {role, message}")]
    role = message.get("role")
    if isinstance(role, str) and not _is_expression(role) and role not in CHAT_ROLES:
        return [(f"{path}.role", f"{role!r} is not a role: {', '.join(sorted(CHAT_ROLES))}")]
    if role is None:
        return [(f"{path}.role", "required")]
    return []


class LlmTextCompleteTask(LlmTask):
    name = "LLM_TEXT_COMPLETE"

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found = _required(node, path, ("llmProvider", "model"))
        given = node.input_parameters
        if given.get("prompt") is None and given.get("promptName") is None:
            found.append((f"{path}.inputParameters.prompt", "required (or promptName)"))
        return found


class ListMcpToolsTask(AiTask):
    name = "LIST_MCP_TOOLS"

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        return _required(node, path, ("mcpServer",))


class CallMcpToolTask(AiTask):
    name = "CALL_MCP_TOOL"

    def admit(self, engine: Engine, node: WorkflowTask, task: TaskState) -> bool:
        own_list = (
            literal_allowlist(node.input_parameters, "allowedTools")
            if from_definition(engine, node)
            else None
        )
        refusal = engine.budget.tool_refusal(task.input_data.get("method"), own_list)
        if refusal is not None:
            engine.fail(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, refusal)
            return False
        return True

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        return _required(node, path, ("mcpServer", "method")) + allowlist_problems(node, path, "allowedTools")
