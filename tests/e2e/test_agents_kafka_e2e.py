"""The agent examples on Kafka + a MongoDB-protocol server, every service its own process, with
the system-task worker running the model and tool calls against the scripted provider and the
MCP test server:

- the agent loop ends with its exact output although the decider and the system worker are
  SIGKILLed at iteration 3 of 6 (iteration 3's tool call in flight): the provider saw each
  completed iteration's model call exactly once; the system worker is SIGKILLed again while
  iteration 5's model call is in flight, and that call is made again under the same
  Idempotency-Key (what a call in flight costs);
- the fan-out research agent forks as wide as the model's tool calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from shared.core.validation import parse_workflow_def
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.ai.fake_llm import FakeLlm
from tests.ai.servers import McpHttpServer, integrations
from tests.e2e.agent_flows import (
    AGENT_LOOP,
    ITERATIONS,
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
from tests.e2e.cluster import Cluster, assert_stopped_cleanly

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SLOW_MODEL_CALL = 5


@pytest.fixture
async def cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path, llm: FakeLlm, mcp: McpHttpServer
) -> AsyncIterator[Cluster]:
    running = Cluster(
        kafka_bootstrap,
        mongo_url,
        unique,
        tmp_path,
        CAIRN_AI_INTEGRATIONS=integrations(llm.url, mcp),
        CAIRN_SECRET_LOCAL_KEY="sk-local-kafka",
    )
    del running.processes["worker"]  # the agents need no SDK worker: the system worker runs them
    running.add("system-worker", ["run", "system-worker"])
    await running.start()
    await running.bus.ensure_topics([running.topics.tasks(t) for t in ("LIST_MCP_TOOLS", "CALL_MCP_TOOL")])
    for definition in (AGENT_LOOP, RESEARCH_AGENT):
        await running.store.put_workflow_def(parse_workflow_def(definition))
    yield running
    assert_stopped_cleanly(await running.stop(), running.diagnostics)


async def until(
    cluster: Cluster,
    workflow_id: str,
    seen: Callable[[WorkflowDocument], bool],
    what: str,
    within_s: float = 90,
) -> None:
    for _ in range(int(within_s / 0.05)):
        document = (await cluster.store.load_workflows([workflow_id])).get(workflow_id)
        if document is not None and seen(document):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never saw {what}\n{cluster.diagnostics()}")


def in_tool_call_of(iteration: int) -> Callable[[WorkflowDocument], bool]:
    def seen(document: WorkflowDocument) -> bool:
        tasks = document.state.tasks
        think, tool_call = tasks.get("think"), tasks.get("tool_call")
        return (
            think is not None
            and think.reference_task_name == f"think__{iteration}"
            and think.status is TaskStatus.COMPLETED
            and tool_call is not None
            and tool_call.reference_task_name == f"tool_call__{iteration}"
            and not tool_call.status.is_terminal
        )

    return seen


async def test_the_agent_loop_survives_sigkills_of_decider_and_system_worker(
    cluster: Cluster, llm: FakeLlm, mcp: McpHttpServer
) -> None:
    rules = agent_rules()
    slow = rules[SLOW_MODEL_CALL - 1]
    slow["replies"] = [{**slow["replies"][0], "delay": 4}, slow["replies"][0]]
    llm.rules(*rules)
    calls_before = len(mcp.calls())
    workflow_id = f"{cluster.topics.prefix}agent-1"
    await cluster.client.start_workflow("agent_loop", agent_input(), workflow_id=workflow_id)

    await until(cluster, workflow_id, in_tool_call_of(KILL_AT), f"iteration {KILL_AT}'s tool call in flight")
    cluster["decider"].kill()
    cluster["system-worker"].kill()
    assert iteration_requests(llm.log) == {1: 1, 2: 1, 3: 1}
    await asyncio.sleep(1)
    cluster["decider"].start()
    cluster["system-worker"].start()

    for _ in range(1200):  # iteration 5's (slow) model call reached the provider: kill its worker
        if iteration_requests(llm.log).get(SLOW_MODEL_CALL):
            break
        await asyncio.sleep(0.05)
    cluster["system-worker"].kill()
    await asyncio.sleep(1)
    cluster["system-worker"].start()

    [document] = (await cluster.wait_for([workflow_id], within_s=180)).values()
    assert document.state.status is WorkflowStatus.COMPLETED, document.state.reason_for_incompletion
    assert document.state.output == agent_output()
    expected = {i: 1 for i in range(1, ITERATIONS + 1)} | {SLOW_MODEL_CALL: 2}
    assert iteration_requests(llm.log) == expected, "only the call in flight at a kill was made again"
    keys = {
        entry["headers"]["idempotency-key"]
        for entry in llm.log
        if f"Iteration {SLOW_MODEL_CALL}." in str(entry["body"])
    }
    assert len(keys) == 1, f"the call made again carried the same Idempotency-Key: {keys}"
    searches = [call["arguments"]["query"] for call in mcp.calls()[calls_before:]]
    assert [q for q in searches if q != QUERIES[KILL_AT]] == [QUERIES[i] for i in (1, 2, 4, 5)]
    assert 1 <= searches.count(QUERIES[KILL_AT]) <= 2


async def test_the_research_agent_forks_as_wide_as_the_models_tool_calls(
    cluster: Cluster, llm: FakeLlm, mcp: McpHttpServer
) -> None:
    llm.rules(*research_rules())
    calls_before = len(mcp.calls())
    workflow_id = f"{cluster.topics.prefix}research-1"
    await cluster.client.start_workflow("research_agent", research_input(), workflow_id=workflow_id)
    [document] = (await cluster.wait_for([workflow_id], within_s=120)).values()
    assert document.state.status is WorkflowStatus.COMPLETED, document.state.reason_for_incompletion
    assert document.state.output == {"answer": RESEARCH_ANSWER, "width": len(RESEARCH_TOPICS)}
    assert sorted(c["arguments"]["query"] for c in mcp.calls()[calls_before:]) == sorted(RESEARCH_TOPICS)
