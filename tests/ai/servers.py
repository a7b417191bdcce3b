"""The AI test servers as fixtures' building blocks: the MCP test server as a real process over
streamable HTTP (and its stdio form as an integration), and the integrations JSON that points
Cairn's system worker at the fake provider and the MCP servers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.devserver import free_port
from tests.e2e.cluster import ROOT, _die_with_parent


class McpHttpServer:
    """tests/ai/mcp_server.py over streamable HTTP at http://127.0.0.1:<port>/mcp; every tool
    call appended to `calls_file`."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.calls_file = log_dir / f"mcp-calls-{self.port}.jsonl"
        self.calls_file.touch()
        self.log_path = log_dir / f"mcp-{self.port}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> McpHttpServer:
        log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.ai.mcp_server", "--http", str(self.port)],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "CAIRN_TEST_MCP_CALLS": str(self.calls_file)},
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if self.popen.poll() is not None:
                    raise RuntimeError(f"the MCP test server exited:\n{self.log_path.read_text()}") from None
                time.sleep(0.05)
        raise TimeoutError("the MCP test server did not listen within 30 s")

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            self.popen.wait(timeout=10)

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.calls_file.read_text().splitlines() if line.strip()]


def stdio_server(calls_file: Path) -> dict[str, Any]:
    """The MCP test server as a stdio integration (one process per task)."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.ai.mcp_server"],
        "cwd": str(ROOT),
        "env": {"CAIRN_TEST_MCP_CALLS": str(calls_file)},
    }


def integrations(llm_url: str, mcp: McpHttpServer | None = None, **extra_mcp: dict[str, Any]) -> str:
    """CAIRN_AI_INTEGRATIONS: `local` (OpenAI-compatible) and `claude` (Anthropic) on the fake
    provider; `tools` the MCP server over HTTP, `tools_stdio` over stdio."""
    servers: dict[str, Any] = dict(extra_mcp)
    if mcp is not None:
        servers["tools"] = {"url": mcp.url}
        servers["tools_stdio"] = stdio_server(mcp.calls_file)
    return json.dumps(
        {
            "llm": {
                "local": {"provider": "openai", "baseUrl": f"{llm_url}/v1", "apiKey": "${secrets.LOCAL_KEY}"},
                "claude": {"provider": "anthropic", "baseUrl": llm_url, "apiKey": "sk-ant-test"},
            },
            "mcp": servers,
            "prices": {"scripted-model": {"inputPerMillion": 1.0, "outputPerMillion": 2.0}},
        }
    )
