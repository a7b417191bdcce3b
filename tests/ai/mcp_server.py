"""A real MCP server for tests, built with the MCP SDK (`MCPServer`): run over streamable HTTP
(`--http PORT`, stateful as the SDK serves by default) or over stdio (no argument).

Tools: `search(query)` (a canned finding per query; a query starting "slow" takes 3 s),
`add(a, b)`, `whoami()` (the Authorization header the request carried, over HTTP), `broken()`
(a tool error: isError). Every call is
appended to the file named by CAIRN_TEST_MCP_CALLS (one JSON line: tool, arguments, the
Authorization header), so a test can count how often each tool really ran.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("cairn-test-tools", version="1.0")


def _record(tool: str, arguments: dict[str, Any], ctx: Context | None) -> None:
    path = os.environ.get("CAIRN_TEST_MCP_CALLS")
    if not path:
        return
    headers = (ctx.headers if ctx is not None else None) or {}
    line = {"tool": tool, "arguments": arguments, "authorization": headers.get("authorization")}
    with open(path, "a") as calls:
        calls.write(json.dumps(line) + "\n")


@server.tool()
def search(query: str, ctx: Context) -> str:
    """Search the knowledge base for a query; returns one finding."""
    _record("search", {"query": query}, ctx)
    if query.startswith("slow"):
        time.sleep(3)  # a test kills the engine while this call is in flight
    return f"finding about {query}"


@server.tool()
def add(a: int, b: int, ctx: Context) -> int:
    """Add two integers."""
    _record("add", {"a": a, "b": b}, ctx)
    return a + b


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header of the request."""
    _record("whoami", {}, ctx)
    return (ctx.headers or {}).get("authorization", "<none>")


@server.tool()
def broken(ctx: Context) -> str:
    """Always fails as a tool (isError)."""
    _record("broken", {}, ctx)
    raise ToolError("the knowledge base is offline")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on 127.0.0.1:PORT at /mcp")
    args = parser.parse_args()
    if args.http:
        server.run(transport="streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
