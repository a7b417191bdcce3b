"""The LLM and MCP runners of the system worker, made on first use.

Their SDKs (openai, anthropic, mcp and the pydantic models they define) add about 220,000
objects to the interpreter, and every full garbage collection of a process that imported them
walks them all: measured, a full collection went from 18 ms to 230 ms, and `cairn dev`'s W1
throughput fell by a tenth. A process that runs no AI task does not import them; one that does
imports them once and then freezes what exists into the collector's permanent generation
(`gc.freeze`), so later collections skip it (objects alive at that moment that later become
cyclic garbage are not collected: a one-time cost of a few in-flight objects).
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import httpx

from shared.integrations import Integrations
from shared.secrets import SecretStore

if TYPE_CHECKING:
    from services.system_worker.llm_task import LlmRunner
    from services.system_worker.mcp_task import McpRunner


class AiRunners:
    def __init__(
        self,
        integrations: Integrations,
        secrets: SecretStore,
        http: httpx.AsyncClient,
        max_retry_after_s: int,
    ) -> None:
        self.integrations = integrations
        self.secrets = secrets
        self.http = http
        self.max_retry_after_s = max_retry_after_s
        self._llm: LlmRunner | None = None
        self._mcp: McpRunner | None = None

    def llm(self) -> LlmRunner:
        if self._llm is None:
            from services.system_worker.llm_task import LlmRunner

            gc.freeze()
            self._llm = LlmRunner(self.integrations, self.secrets, self.max_retry_after_s)
        return self._llm

    def mcp(self) -> McpRunner:
        if self._mcp is None:
            from services.system_worker.mcp_task import McpRunner

            gc.freeze()
            self._mcp = McpRunner(self.integrations, self.secrets, self.http)
        return self._mcp

    async def aclose(self) -> None:
        if self._llm is not None:
            await self._llm.aclose()
