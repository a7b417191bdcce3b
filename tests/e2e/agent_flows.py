"""The agent examples' scripts for the end-to-end tests on both modes: what the scripted model
answers at each iteration, and the exact outputs the examples must end with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.ai.fake_llm import rule

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"
AGENT_LOOP: dict[str, Any] = json.loads((EXAMPLES / "agent_loop.json").read_text())
RESEARCH_AGENT: dict[str, Any] = json.loads((EXAMPLES / "research_agent.json").read_text())

ITERATIONS = 6
KILL_AT = 3
QUERIES = {
    1: "cairn history",
    2: "cairn builders",
    KILL_AT: "slow cairn height",
    4: "cairn lichens",
    5: "cairn maps",
}
ANSWER = "Cairns are stacked stones that mark trails."


def agent_rules() -> list[dict[str, Any]]:
    """Iterations 1-5 search (the third one slowly), the sixth answers."""
    rules = [
        rule(
            f"Iteration {i}.",
            {
                "content": json.dumps(
                    {"done": False, "action": "search", "arguments": {"query": QUERIES[i]}}
                ),
                "promptTokens": 100,
                "completionTokens": 20,
            },
        )
        for i in range(1, ITERATIONS)
    ]
    rules.append(
        rule(
            f"Iteration {ITERATIONS}.",
            {
                "content": json.dumps({"done": True, "answer": ANSWER}),
                "promptTokens": 100,
                "completionTokens": 20,
            },
        )
    )
    return rules


def agent_output() -> dict[str, Any]:
    history = "".join(f"\n[{i}] search -> finding about {QUERIES[i]}" for i in range(1, ITERATIONS))
    return {"answer": ANSWER, "iterations": ITERATIONS, "history": history}


def agent_input(mcp_server: str = "tools") -> dict[str, Any]:
    return {
        "task": "Find out what a cairn is.",
        "mcpServer": mcp_server,
        "llmProvider": "local",
        "model": "scripted-model",
    }


RESEARCH_TOPICS = ["cairn etymology", "cairn construction", "cairn in Scotland"]
RESEARCH_ANSWER = "A cairn is a human-made pile of stones."


def research_rules() -> list[dict[str, Any]]:
    calls = [
        {"id": f"call_{i}", "name": "search", "arguments": {"query": topic}}
        for i, topic in enumerate(RESEARCH_TOPICS)
    ]
    return [
        # The answer turn carries the tool results (role tool); the plan turn does not.
        rule("finding about", {"content": RESEARCH_ANSWER}),
        rule("What is a cairn?", {"toolCalls": calls}),
    ]


def research_input(mcp_server: str = "tools") -> dict[str, Any]:
    return {
        "question": "What is a cairn?",
        "mcpServer": mcp_server,
        "llmProvider": "local",
        "model": "scripted-model",
    }


def iteration_requests(log: list[dict[str, Any]]) -> dict[int, int]:
    """How many model requests each iteration of the agent loop made."""
    counts: dict[int, int] = {}
    for entry in log:
        text = json.dumps(entry["body"])
        for i in range(1, ITERATIONS + 1):
            if f"Iteration {i}." in text:
                counts[i] = counts.get(i, 0) + 1
    return counts
