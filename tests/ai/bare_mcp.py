"""An MCP server of the kind Conductor's client is written for: it answers one bare JSON-RPC POST
(`tools/list`, `tools/call`) and knows no handshake (`initialize` is "method not found"), with
no sessions. In a thread of the test process; records every JSON-RPC request it got."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOLS = [
    {
        "name": "lookup",
        "description": "Look a word up.",
        "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    }
]


class BareMcp:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                requests.append({"body": body, "headers": {k.lower(): v for k, v in self.headers.items()}})
                method, ident = body.get("method"), body.get("id")
                if method == "tools/list":
                    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "result": {"tools": TOOLS}}
                elif method == "tools/call":
                    word = body["params"]["arguments"].get("word", "")
                    text = json.dumps({"word": word, "meaning": f"the meaning of {word}"})
                    answer = {
                        "jsonrpc": "2.0",
                        "id": ident,
                        "result": {"content": [{"type": "text", "text": text}]},
                    }
                else:
                    error = {"code": -32601, "message": f"Method not found: {method}"}
                    answer = {"jsonrpc": "2.0", "id": ident, "error": error}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/rpc"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def methods(self) -> list[str]:
        return [request["body"].get("method") for request in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
