"""LIST_MCP_TOOLS and CALL_MCP_TOOL in the system-task worker, through the official MCP SDK.

`mcpServer` is the name of a configured MCP server (shared/integrations.py: a streamable HTTP
URL with headers, or a stdio command started for the task) or, as in Conductor, a URL. `headers`
(the task's) go on top of the server's. Over HTTP the SDK's session is tried first (the MCP
handshake); a server that refuses the handshake (Conductor's own client never makes one, so
servers built for it may not answer it) is asked again with one bare JSON-RPC POST, as
Conductor asks — only when the handshake failed, so a tool is never called twice.

Output, Conductor's: LIST_MCP_TOOLS `{tools: [{name, description, inputSchema}]}` (every page);
CALL_MCP_TOOL `{content: [{type, text, data, mimeType, parsed}], isError}` (`parsed`: a text
item's JSON when it is JSON, else its text) and `structuredContent` when the tool gave one. A
tool's error (`isError: true`) is its output: the task COMPLETES and the workflow decides. A
transport failure (a refused connection, a timeout, an HTTP error) fails the attempt and is
retried; a protocol error (an unknown method) fails it too, with the server's message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client

from services.system_worker.outcome import Outcome
from shared.integrations import Integrations, McpIntegration
from shared.models.runtime import TaskStatus
from shared.secrets import SecretStore

MAX_PAGES = 50
"""tools/list pages read at most (a server that pages forever is not waited on)."""


class McpProblem(Exception):
    """A failure worth a retry (transport) or not (`terminal`: the task's input is wrong)."""

    def __init__(self, message: str, *, terminal: bool = False) -> None:
        super().__init__(message)
        self.terminal = terminal


class HandshakeRefused(Exception):
    """The server did not take the MCP handshake: nothing was called yet."""


@dataclass
class Target:
    name: str
    """What the task named (for reasons)."""
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    transport: str = "auto"
    stdio: StdioServerParameters | None = None
    timeout_s: float = 60.0


def _first_error(error: BaseException) -> BaseException:
    """The first real error inside the task groups' exception groups the SDK raises."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _describe(error: BaseException) -> str:
    error = _first_error(error)
    if isinstance(error, MCPError):
        return f"MCP error {error.code}: {error.message}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def text_item(item: dict[str, Any]) -> dict[str, Any]:
    """Conductor adds `parsed` to every text item: its JSON when it starts as JSON, else the text."""
    if item.get("type") != "text" or not isinstance(item.get("text"), str):
        return item
    text = item["text"]
    parsed: Any = text
    if text.lstrip().startswith(("{", "[")):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
    return {**item, "parsed": parsed}


def call_output(result: Mapping[str, Any]) -> dict[str, Any]:
    content = result.get("content")
    if not isinstance(content, list):
        raise McpProblem("the MCP server's tools/call result has no content list")
    output: dict[str, Any] = {
        "content": [text_item(dict(item)) if isinstance(item, Mapping) else item for item in content],
        "isError": bool(result.get("isError", False)),
    }
    if result.get("structuredContent") is not None:
        output["structuredContent"] = result["structuredContent"]
    return output


def tool_entry(tool: Mapping[str, Any]) -> dict[str, Any]:
    entry = {"name": tool.get("name"), "description": tool.get("description") or ""}
    entry["inputSchema"] = tool.get("inputSchema") or {"type": "object", "properties": {}}
    return entry


class McpRunner:
    def __init__(self, integrations: Integrations, secrets: SecretStore, http: httpx.AsyncClient) -> None:
        self.integrations = integrations
        self.secrets = secrets
        self.http = http

    def _resolve(self, text: str) -> str:
        return self.secrets.resolve_text(text, set())

    def target(self, given: Mapping[str, Any]) -> Target:
        server = given.get("mcpServer")
        headers = given.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise McpProblem("headers must be a map of header names to values", terminal=True)
        task_headers = {str(k): str(v) for k, v in headers.items() if v is not None}
        if not isinstance(server, str) or not server:
            raise McpProblem("mcpServer is required: a configured MCP server's name, or a URL", terminal=True)
        configured: McpIntegration | None = self.integrations.mcp.get(server)
        if configured is None:
            if server.startswith(("http://", "https://")):
                return Target(server, url=server, headers=task_headers)
            known = ", ".join(sorted(self.integrations.mcp)) or "none"
            raise McpProblem(
                f"mcpServer {server!r} is neither a URL nor a configured MCP server (configured: {known})",
                terminal=True,
            )
        merged = {k: self._resolve(v) for k, v in configured.headers.items()} | task_headers
        if configured.command is not None:
            stdio = StdioServerParameters(
                command=configured.command,
                args=list(configured.args),
                env={k: self._resolve(v) for k, v in configured.env.items()} or None,
                cwd=configured.cwd,
            )
            return Target(server, stdio=stdio, timeout_s=configured.timeout_seconds)
        return Target(
            server,
            url=configured.url,
            headers=merged,
            transport=configured.transport,
            timeout_s=configured.timeout_seconds,
        )

    async def run(self, task_type: str, given: Mapping[str, Any]) -> Outcome:
        try:
            target = self.target(given)
            if task_type == "LIST_MCP_TOOLS":
                output = await self._timed(target, self._list(target))
            else:
                method = given.get("method")
                arguments = given.get("arguments") or {}
                if not isinstance(method, str) or not method:
                    raise McpProblem("method is required: the name of the tool to call", terminal=True)
                if not isinstance(arguments, Mapping):
                    raise McpProblem("arguments must be a map of the tool's arguments", terminal=True)
                output = await self._timed(target, self._call(target, method, dict(arguments)))
        except McpProblem as problem:
            return Outcome.terminal(str(problem)) if problem.terminal else Outcome.failed(str(problem))
        return Outcome(TaskStatus.COMPLETED, output)

    async def _timed(self, target: Target, work: Any) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await asyncio.wait_for(work, target.timeout_s + 5)
            return result
        except TimeoutError:
            raise McpProblem(
                f"MCP server {target.name!r}: no answer within {target.timeout_s:.0f} s"
            ) from None

    # ---- through the SDK ---------------------------------------------------------------------

    @asynccontextmanager
    async def _session(self, target: Target) -> AsyncIterator[ClientSession]:
        """An initialised session; HandshakeRefused when the server would not take the handshake."""
        if target.stdio is not None:
            async with stdio_client(target.stdio) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=target.timeout_s) as session:
                    await session.initialize()
                    yield session
            return
        assert target.url is not None
        timeout = httpx2.Timeout(target.timeout_s)
        async with httpx2.AsyncClient(headers=target.headers, timeout=timeout, follow_redirects=True) as http:
            async with streamable_http_client(target.url, http_client=http) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=target.timeout_s) as session:
                    try:
                        await session.initialize()
                    except Exception as error:
                        raise HandshakeRefused(_describe(error)) from None
                    yield session

    async def _through_sdk(self, target: Target, action: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self._session(target) as session:
                if action == "tools/list":
                    tools: list[dict[str, Any]] = []
                    cursor = None
                    for _ in range(MAX_PAGES):
                        page_params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                        page = await session.list_tools(params=page_params)
                        tools += [t.model_dump(by_alias=True, mode="json") for t in page.tools]
                        cursor = page.next_cursor
                        if not cursor:
                            break
                    return {"tools": tools}
                result = await session.call_tool(params["name"], params["arguments"])
                return result.model_dump(by_alias=True, mode="json", exclude_none=True)
        except HandshakeRefused:
            raise
        except BaseException as error:
            first = _first_error(error)
            if isinstance(first, HandshakeRefused):
                raise first from None
            if isinstance(first, asyncio.CancelledError) and not isinstance(error, BaseExceptionGroup):
                raise
            if not isinstance(first, Exception):
                raise
            raise McpProblem(f"MCP server {target.name!r}: {_describe(first)}") from None

    # ---- bare JSON-RPC, as Conductor's client speaks ---------------------------------------

    async def _bare(self, target: Target, action: str, params: dict[str, Any] | None) -> dict[str, Any]:
        assert target.url is not None
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": action}
        if params is not None:
            body["params"] = params
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **target.headers,
        }
        try:
            response = await self.http.post(target.url, json=body, headers=headers, timeout=target.timeout_s)
        except httpx.HTTPError as error:
            raise McpProblem(f"MCP server {target.name!r}: {type(error).__name__}: {error}") from None
        where = f"MCP server {target.name!r}"
        if not response.is_success:
            raise McpProblem(f"{where}: HTTP {response.status_code}: {response.text[:300]}")
        answer = _jsonrpc_answer(response)
        failure = answer.get("error")
        if isinstance(failure, Mapping):
            raise McpProblem(f"{where}: JSON-RPC error {failure.get('code')}: {failure.get('message')}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise McpProblem(f"MCP server {target.name!r}: the answer to {action} has no result")
        return result

    async def _ask(self, target: Target, action: str, params: dict[str, Any]) -> dict[str, Any]:
        if target.stdio is None and target.transport == "jsonrpc":
            return await self._bare(target, action, params or None)
        try:
            return await self._through_sdk(target, action, params)
        except HandshakeRefused as refused:
            if target.stdio is not None or target.transport != "auto":
                raise McpProblem(f"MCP server {target.name!r} refused the MCP handshake: {refused}") from None
            try:
                return await self._bare(target, action, params or None)
            except McpProblem as bare:
                raise McpProblem(
                    f"MCP server {target.name!r}: the MCP handshake failed ({refused}), and so did a bare "
                    f"JSON-RPC {action} ({bare})"
                ) from None

    async def _list(self, target: Target) -> dict[str, Any]:
        result = await self._ask(target, "tools/list", {})
        tools = result.get("tools")
        if not isinstance(tools, list):
            raise McpProblem(f"MCP server {target.name!r}: the tools/list result has no tools list")
        return {"tools": [tool_entry(tool) for tool in tools if isinstance(tool, Mapping)]}

    async def _call(self, target: Target, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self._ask(target, "tools/call", {"name": method, "arguments": arguments})
        return call_output(result)


def _jsonrpc_answer(response: httpx.Response) -> dict[str, Any]:
    """A JSON answer, or the JSON of a server-sent-events answer's data lines."""
    text = response.text
    if "text/event-stream" in response.headers.get("content-type", ""):
        lines = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = "".join(line for line in lines if line and line != "[DONE]")
    try:
        answer = json.loads(text)
    except ValueError:
        raise McpProblem(f"the MCP server's answer is not JSON: {text[:200]!r}") from None
    if not isinstance(answer, dict):
        raise McpProblem(f"the MCP server's answer is not a JSON-RPC response: {text[:200]!r}")
    return answer
