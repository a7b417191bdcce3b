"""The AI test servers as fixtures (imported by tests/conftest.py): the scripted model provider
and the MCP test server over streamable HTTP, one of each per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ai.fake_llm import FakeLlm
from tests.ai.servers import McpHttpServer


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLlm]:
    server = FakeLlm().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpHttpServer]:
    server = McpHttpServer(tmp_path_factory.mktemp("mcp")).start()
    yield server
    server.stop()
