"""The budget of a run (a Cairn extension to the WorkflowDef, docs/agents.md): the books the
engine keeps so that no answer of a model can make a workflow do more than its author allowed.

Checked in the decision, from the definition snapshot and the counts in the workflow document,
before the task that would pass a limit is created — so a limit holds exactly, whatever the
model says, and a decision computed twice decides the same:

- `maxTasks`: executions this run creates (retries and server-side tasks included);
- `maxIterations`: iterations any one DO_WHILE starts;
- `maxDynamicForkWidth`: branches any one FORK_JOIN_DYNAMIC makes;
- `maxLlmTokens` / `maxCostUsd`: what the LLM tasks spent, as their providers counted it (prompt
  and completion tokens; dollars at the snapshot's prices). An LLM task is not started once the
  budget is spent, and its `maxTokens` is lowered to what is left, so a completion cannot pass
  it; a prompt can (its size is known only to the provider), and then the next LLM task is
  refused. A failed attempt's tokens count too (a schema-invalid answer was paid for).

Passing a limit ends the workflow FAILED with a reason naming the limit (its failureWorkflow
runs). The allowlists (`allowedTools`, `allowedTaskNames`) refuse a name instead: the task that
would run it fails with FAILED_WITH_TERMINAL_ERROR, so an optional task lets the loop go on and
the model read why. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from shared.models.definitions import Budget, ModelPrice, WorkflowTask
from shared.models.runtime import TaskState, Usage, WorkflowState

LLM_TASK_TYPES = frozenset({"LLM_CHAT_COMPLETE", "LLM_TEXT_COMPLETE"})


def _count(value: Any) -> int:
    """A token count from a result: a whole non-negative number, else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def price_of(budget: Budget, provider: Any, model: Any) -> ModelPrice | None:
    """`<integration>/<model>` first, then `<model>`."""
    if not isinstance(model, str):
        return None
    if isinstance(provider, str) and f"{provider}/{model}" in budget.prices:
        return budget.prices[f"{provider}/{model}"]
    return budget.prices.get(model)


class BudgetKeeper:
    """One decision's view of the run's budget and what it spent (`state.usage`)."""

    def __init__(self, budget: Budget | None, state: WorkflowState) -> None:
        self.budget = budget
        self.state = state

    @property
    def usage(self) -> Usage:
        if self.state.usage is None:
            self.state.usage = Usage()
        return self.state.usage

    # ---- tasks -------------------------------------------------------------------------------

    def task_refusal(self) -> str | None:
        """Why one more execution may not be created (maxTasks), or None."""
        if self.budget is None or self.budget.max_tasks is None:
            return None
        if self.usage.tasks >= self.budget.max_tasks:
            return (
                f"budget maxTasks ({self.budget.max_tasks}) reached: {self.usage.tasks} task executions "
                "were created and the workflow needs another"
            )
        return None

    def count_task(self) -> None:
        if self.budget is not None:
            self.usage.tasks += 1

    def iteration_refusal(self, loop_ref: str, iteration: int) -> str | None:
        if self.budget is None or self.budget.max_iterations is None:
            return None
        if iteration > self.budget.max_iterations:
            return (
                f"budget maxIterations ({self.budget.max_iterations}) reached: DO_WHILE {loop_ref} "
                f"would start iteration {iteration}"
            )
        return None

    def fork_refusal(self, fork_ref: str, width: int) -> str | None:
        if self.budget is None or self.budget.max_dynamic_fork_width is None:
            return None
        if width > self.budget.max_dynamic_fork_width:
            return (
                f"budget maxDynamicForkWidth ({self.budget.max_dynamic_fork_width}) passed: "
                f"FORK_JOIN_DYNAMIC {fork_ref} would make {width} branches"
            )
        return None

    # ---- LLM spending ------------------------------------------------------------------------

    def llm_refusal(self, task: TaskState) -> str | None:
        """Why an LLM task may not run: its run's tokens or dollars are spent, or it has no price
        while the budget is in dollars."""
        budget = self.budget
        if budget is None:
            return None
        usage = self.usage
        where = f"{task.task_type} {task.reference_task_name} was not run"
        if budget.max_llm_tokens is not None and usage.llm_tokens >= budget.max_llm_tokens:
            return (
                f"budget maxLlmTokens ({budget.max_llm_tokens}) reached: {usage.llm_tokens} tokens spent; "
                f"{where}"
            )
        if budget.max_cost_usd is not None:
            if usage.cost_usd >= budget.max_cost_usd:
                return (
                    f"budget maxCostUsd ({budget.max_cost_usd}) reached: ${usage.cost_usd:.6f} spent; {where}"
                )
            provider, model = task.input_data.get("llmProvider"), task.input_data.get("model")
            if price_of(budget, provider, model) is None:
                return (
                    f"budget maxCostUsd is set but model {model!r} of {provider!r} has no price "
                    f"(budget.prices or the decider's CAIRN_AI_PRICES); {where}"
                )
        return None

    def max_tokens_left(self, task: TaskState) -> int | None:
        """The most completion tokens the task may ask for so that it cannot pass the budget by
        its completion (None: no limit from the budget)."""
        budget = self.budget
        if budget is None:
            return None
        limits: list[int] = []
        if budget.max_llm_tokens is not None:
            limits.append(budget.max_llm_tokens - self.usage.llm_tokens)
        if budget.max_cost_usd is not None:
            price = price_of(budget, task.input_data.get("llmProvider"), task.input_data.get("model"))
            if price is not None and price.output_per_million > 0:
                left = (budget.max_cost_usd - self.usage.cost_usd) * 1_000_000 / price.output_per_million
                limits.append(int(left))
        return max(1, min(limits)) if limits else None

    def charge_llm(self, task: TaskState) -> None:
        """Count what a finished LLM task spent (its output's promptTokens / completionTokens,
        else tokenUsed)."""
        if self.budget is None:
            return
        output = task.output_data
        prompt, completion = _count(output.get("promptTokens")), _count(output.get("completionTokens"))
        total = _count(output.get("tokenUsed")) or prompt + completion
        if not total:
            return
        usage = self.usage
        usage.llm_tokens += total
        price = price_of(self.budget, task.input_data.get("llmProvider"), task.input_data.get("model"))
        if price is not None:
            if not prompt and not completion:
                completion = total  # split unknown: priced as output, the dearer side
            usage.cost_usd += (
                prompt * price.input_per_million + completion * price.output_per_million
            ) / 1_000_000

    # ---- allowlists --------------------------------------------------------------------------

    def tool_refusal(self, method: Any, own_list: Sequence[str] | None) -> str | None:
        """Why CALL_MCP_TOOL may not call `method`: it is not on the workflow's or the task's
        allowedTools."""
        workflow_list = self.budget.allowed_tools if self.budget else None
        return _refusal("tool", method, [("budget.allowedTools", workflow_list), ("allowedTools", own_list)])

    def task_name_refusal(self, name: Any, own_list: Sequence[str] | None) -> str | None:
        workflow_list = self.budget.allowed_task_names if self.budget else None
        lists = [("budget.allowedTaskNames", workflow_list), ("allowedTaskNames", own_list)]
        return _refusal("task name", name, lists)


def _refusal(what: str, name: Any, lists: Sequence[tuple[str, Sequence[str] | None]]) -> str | None:
    for where, allowed in lists:
        if allowed is not None and name not in allowed:
            return f"{what} {name!r} is not allowed: {where} is {list(allowed)}"
    return None


def literal_allowlist(parameters: dict[str, Any], key: str) -> list[str] | None:
    """A task's own allowlist, as its definition wrote it (a literal list of names); what an
    expression would make of it is not looked at: a model's answer must not widen it."""
    value = parameters.get(key)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return None


def allowlist_problems(node: WorkflowTask, path: str, key: str = "allowedTaskNames") -> list[tuple[str, str]]:
    """A task's own allowlist must be a literal list of names (checked at registration)."""
    if key in node.input_parameters and literal_allowlist(node.input_parameters, key) is None:
        return [
            (
                f"{path}.inputParameters.{key}",
                "a list of names written in the definition (an expression could let a model widen it)",
            )
        ]
    return []
