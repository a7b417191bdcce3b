"""The budget of a run (shared/core/budget.py): each limit stops the workflow FAILED, with a
reason naming it, before the task that would pass it is created or handed out; the allowlists
refuse a name the model invented as a task failure; the failureWorkflow runs; a restart starts a
new budget."""

from __future__ import annotations

from typing import Any

from shared.models.messages import RestartWorkflow, StartWorkflow, TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, chat, do_while, join, simple, task, workflow


def agent_loop(budget: dict[str, Any], iterations: int = 10, **fields: Any) -> Flow:
    loop = do_while("loop", f"$.loop['iteration'] < {iterations}", chat(), simple("act"))
    return Flow(workflow(loop, budget=budget, **fields))


def usage(tokens: int, prompt: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"result": "ok", "finishReason": "STOP", "tokenUsed": tokens}
    if prompt is not None:
        out |= {"promptTokens": prompt, "completionTokens": tokens - prompt}
    return out


def run_iterations(f: Flow, tokens: int = 100) -> int:
    """Complete chat and act until nothing is scheduled; how many chats ran."""
    chats = 0
    while f.state.status is WorkflowStatus.RUNNING and (due := f.scheduled()):
        [ref] = due
        if ref == "chat":
            chats += 1
            f.complete("chat", usage(tokens))
        else:
            f.complete(ref, {})
    return chats


def test_max_tasks_stops_the_workflow_before_the_task_past_it_is_created() -> None:
    f = Flow(workflow(*(simple(f"s{i}") for i in range(5)), budget={"maxTasks": 3}))
    for ref in ("s0", "s1", "s2"):
        f.complete(ref)
    assert f.state.status is WorkflowStatus.FAILED
    assert f.state.reason_for_incompletion == (
        "budget maxTasks (3) reached: 3 task executions were created and the workflow needs another"
    )
    assert "s3" not in f.state.tasks and f.dispatched() == []
    assert f.state.usage is not None and f.state.usage.tasks == 3


def test_max_tasks_counts_retries_and_stops_a_retry_past_it() -> None:
    f = Flow(workflow(simple("s", retries=5), budget={"maxTasks": 2}))
    f.fail("s")
    assert f.task("s").retry_count == 1
    f.fail("s")
    assert f.state.status is WorkflowStatus.FAILED
    assert "budget maxTasks (2) reached" in (f.state.reason_for_incompletion or "")


def test_max_iterations_stops_a_loop_before_the_iteration_past_it() -> None:
    f = agent_loop({"maxIterations": 3})
    assert run_iterations(f) == 3
    assert f.state.status is WorkflowStatus.FAILED
    assert (
        f.state.reason_for_incompletion
        == "budget maxIterations (3) reached: DO_WHILE loop would start iteration 4"
    )
    assert f.task("loop").iteration == 3


def test_a_loop_that_ends_within_max_iterations_completes() -> None:
    f = agent_loop({"maxIterations": 3}, iterations=3)
    assert run_iterations(f) == 3
    assert f.state.status is WorkflowStatus.COMPLETED


def test_max_llm_tokens_refuses_the_llm_call_once_spent_and_lowers_max_tokens_to_what_is_left() -> None:
    f = agent_loop({"maxLlmTokens": 250})
    [first] = f.outbox(TaskMessage)
    assert first.input_data["maxTokens"] == 250
    f.complete("chat", usage(100, prompt=60))
    f.complete("act")
    assert f.task("chat").input_data["maxTokens"] == 150
    f.complete("chat", usage(100))
    f.complete("act")
    assert f.task("chat").input_data["maxTokens"] == 50
    f.complete("chat", usage(60))
    assert f.state.status is WorkflowStatus.RUNNING, "act does not spend tokens"
    f.complete("act")
    assert f.state.status is WorkflowStatus.FAILED
    assert f.state.reason_for_incompletion == (
        "budget maxLlmTokens (250) reached: 260 tokens spent; LLM_CHAT_COMPLETE chat__4 was not run"
    )
    assert f.dispatched() == []


def test_a_smaller_max_tokens_of_the_definition_is_kept() -> None:
    loop = do_while("loop", "true", chat(maxTokens=20), simple("act"))
    f = Flow(workflow(loop, budget={"maxLlmTokens": 1000}))
    assert f.task("chat").input_data["maxTokens"] == 20


def test_tokens_of_a_failed_attempt_count() -> None:
    loop = do_while("loop", "true", chat(), simple("act"))
    f = Flow(workflow(loop, budget={"maxLlmTokens": 100}))
    f.send(f.result("chat", TaskStatus.FAILED, usage(100), reason_for_incompletion="schema"))
    assert f.state.status is WorkflowStatus.FAILED
    assert "budget maxLlmTokens (100) reached: 100 tokens spent" in (f.state.reason_for_incompletion or "")


PRICES = {"gpt-4o-mini": {"inputPerMillion": 1.0, "outputPerMillion": 4.0}}


def test_max_cost_usd_prices_prompt_and_completion_and_stops_once_spent() -> None:
    f = agent_loop({"maxCostUsd": 0.001, "prices": PRICES})
    assert f.task("chat").input_data["maxTokens"] == 250, "$0.001 at $4 per million output tokens"
    f.complete("chat", usage(300, prompt=200))  # 200 * 1 + 100 * 4 = 600 millionths
    f.complete("act")
    assert f.state.usage is not None and abs(f.state.usage.cost_usd - 0.0006) < 1e-12
    assert f.task("chat").input_data["maxTokens"] == 100
    f.complete("chat", usage(300, prompt=200))
    f.complete("act")
    assert f.state.status is WorkflowStatus.FAILED
    assert (f.state.reason_for_incompletion or "").startswith(
        "budget maxCostUsd (0.001) reached: $0.001200 spent"
    )


def test_a_price_for_the_integration_and_model_wins_over_the_model_s() -> None:
    prices = {**PRICES, "openai/gpt-4o-mini": {"inputPerMillion": 0, "outputPerMillion": 1000}}
    f = agent_loop({"maxCostUsd": 0.01, "prices": prices})
    assert f.task("chat").input_data["maxTokens"] == 10


def test_max_cost_usd_without_a_price_for_the_model_refuses_the_call() -> None:
    f = agent_loop({"maxCostUsd": 1.0, "prices": {"other": PRICES["gpt-4o-mini"]}})
    assert f.state.status is WorkflowStatus.FAILED
    assert "model 'gpt-4o-mini' of 'openai' has no price" in (f.state.reason_for_incompletion or "")
    assert f.dispatched() == []


def test_a_budget_stop_runs_the_failure_workflow() -> None:
    f = Flow(workflow(simple("a"), simple("b"), budget={"maxTasks": 1}, failureWorkflow="cleanup"))
    f.complete("a")
    assert f.state.status is WorkflowStatus.FAILED
    [start] = f.outbox(StartWorkflow)
    assert start.name == "cleanup"
    assert "budget maxTasks (1) reached" in str(start.input.get("reason"))


def fan_out(budget: dict[str, Any], calls: list[dict[str, Any]], **fork_inputs: Any) -> Flow:
    fork = task(
        "FORK_JOIN_DYNAMIC",
        "df",
        dynamicForkTasksParam="calls",
        dynamicForkTasksInputParamName="inputs",
        inputParameters={"calls": "${workflow.input.calls}", "inputs": {}, **fork_inputs},
    )
    return Flow(workflow(fork, join("j"), budget=budget), {"calls": calls})


def tool_call(name: str, i: int) -> dict[str, Any]:
    return {
        "name": name,
        "taskReferenceName": f"call_{i}",
        "type": "CALL_MCP_TOOL",
        "inputParameters": {"mcpServer": "tools", "method": name, "arguments": {"q": i}},
    }


def test_max_dynamic_fork_width_stops_a_wider_fork_before_any_branch_runs() -> None:
    f = fan_out({"maxDynamicForkWidth": 2}, [tool_call("search", i) for i in range(3)])
    assert f.state.status is WorkflowStatus.FAILED
    assert f.state.reason_for_incompletion == (
        "budget maxDynamicForkWidth (2) passed: FORK_JOIN_DYNAMIC df would make 3 branches"
    )
    assert f.dispatched() == []


def test_a_fork_within_the_width_runs_its_branches() -> None:
    f = fan_out({"maxDynamicForkWidth": 2}, [tool_call("search", i) for i in range(2)])
    assert f.dispatched() == ["call_0", "call_1"]


def test_allowed_tools_refuses_a_tool_the_model_invented_as_a_task_failure() -> None:
    call = task(
        "CALL_MCP_TOOL",
        "call",
        optional=True,
        inputParameters={
            "mcpServer": "tools",
            "method": "${workflow.input.tool}",
            "allowedTools": ["search"],
        },
    )
    f = Flow(workflow(call, simple("after")), {"tool": "rm_rf"})
    record = f.record("call")
    assert record.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR or f.task("call").status is (
        TaskStatus.COMPLETED_WITH_ERRORS
    )
    assert f.task("call").reason_for_incompletion == "tool 'rm_rf' is not allowed: allowedTools is ['search']"
    assert f.dispatched() == ["after"], "optional: the workflow goes on (an agent's model can read why)"


def test_the_workflow_s_allowed_tools_apply_to_dynamic_branches_too() -> None:
    f = fan_out({"allowedTools": ["search"]}, [tool_call("search", 0), tool_call("delete_all", 1)])
    assert f.dispatched() == ["call_0"]
    assert f.state.status is WorkflowStatus.FAILED
    assert "tool 'delete_all' is not allowed: budget.allowedTools is ['search']" in (
        f.state.reason_for_incompletion or ""
    )


def test_allowed_task_names_refuses_an_invented_branch_before_the_fork_makes_any() -> None:
    f = fan_out({}, [tool_call("search", 0), tool_call("shell", 1)], allowedTaskNames=["search", "fetch"])
    assert f.dispatched() == []
    fork_task = f.task("df")
    assert fork_task.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert fork_task.reason_for_incompletion == (
        "branch call_1: task name 'shell' is not allowed: allowedTaskNames is ['search', 'fetch']"
    )


def test_allowed_task_names_refuses_a_dynamic_task_name() -> None:
    node = task(
        "DYNAMIC",
        "dyn",
        dynamicTaskNameParam="name",
        inputParameters={"name": "${workflow.input.name}"},
    )
    f = Flow(workflow(node, budget={"allowedTaskNames": ["lookup"]}), {"name": "wire_money"})
    assert f.task("dyn").status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert f.task("dyn").reason_for_incompletion == (
        "task name 'wire_money' is not allowed: budget.allowedTaskNames is ['lookup']"
    )


def test_a_restart_starts_a_new_budget() -> None:
    f = Flow(workflow(simple("a"), simple("b"), budget={"maxTasks": 1}))
    f.complete("a")
    assert f.state.status is WorkflowStatus.FAILED
    f.send(RestartWorkflow(id="r1", workflow_id=f.state.workflow_id))
    assert f.state.status is WorkflowStatus.RUNNING
    assert f.state.usage is not None and f.state.usage.tasks == 1
    assert f.dispatched() == ["a"]


def test_a_workflow_without_a_budget_keeps_no_books() -> None:
    f = Flow(workflow(chat(), simple("a")))
    f.complete("chat", usage(10_000))
    assert f.state.usage is None
    assert "maxTokens" not in f.record("chat").input_data
    assert "usage" not in f.state.model_dump(by_alias=True, exclude_defaults=False, mode="json") or (
        f.state.model_dump(by_alias=True, mode="json").get("usage") is None
    )


def test_a_budget_decision_computed_twice_is_the_same() -> None:
    f = agent_loop({"maxLlmTokens": 150})
    f.complete("chat", usage(100))
    again = f.decide(f.result("act"))
    first = f.decide(f.result("act"))
    assert again.state == first.state and again.outbox == first.outbox


def test_a_delayed_retry_is_refused_when_its_timer_fires_after_the_tokens_were_spent() -> None:
    fork = task("FORK_JOIN", "fork", forkTasks=[[chat("a")], [chat("b")]])
    f = Flow(workflow(fork, join("j", "a", "b"), budget={"maxLlmTokens": 100}))
    f.send(f.result("a", TaskStatus.FAILED, usage(10), reason_for_incompletion="503"))
    [arm] = [m for m in f.decision.outbox if getattr(m, "action", None) == "arm"]
    assert f.task("a").retry_count == 1 and f.dispatched() == []
    f.complete("b", usage(90))
    assert f.state.status is WorkflowStatus.RUNNING
    f.fire(arm.timer_id)
    assert f.state.status is WorkflowStatus.FAILED
    assert f.dispatched() == []
    assert "budget maxLlmTokens (100) reached: 100 tokens spent; LLM_CHAT_COMPLETE a was not run" == (
        f.state.reason_for_incompletion
    )
