"""A small HTTP server on 127.0.0.1 for the HTTP task cases: fixed answers with fixed headers
(no Date, a constant Server), so both servers' HTTP tasks see byte-identical responses.

- `GET /json`: 200, a JSON object;
- `GET /number`: 200, the JSON number 42;
- `GET /text`: 200, text/plain;
- `POST|PUT /echo`: 200, `{method, contentType, accept, body}` (the body parsed as JSON when it
  is JSON);
- anything else: 404 with a JSON body.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "conformance"
    sys_version = ""

    def version_string(self) -> str:
        return "conformance"

    def send_response(self, code: int, message: str | None = None) -> None:
        # BaseHTTPRequestHandler adds Server and Date; the date would differ between the servers
        self.send_response_only(code, message)
        self.send_header("Server", self.version_string())

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._answer(status, json.dumps(value, sort_keys=True).encode(), "application/json")

    def do_GET(self) -> None:
        if self.path == "/json":
            self._json(200, {"hello": "world", "n": 7, "ok": True, "items": [1, 2.5, "three"]})
        elif self.path == "/number":
            self._answer(200, b"42", "application/json")
        elif self.path == "/text":
            self._answer(200, b"plain text", "text/plain")
        else:
            self._json(404, {"error": "not found", "path": self.path})

    def _request_body(self) -> str:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks).decode()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length).decode() if length else ""

    def _echo(self) -> None:
        raw = self._request_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        self._json(
            200,
            {
                "method": self.command,
                "contentType": self.headers.get("Content-Type"),
                "accept": self.headers.get("Accept"),
                "body": body,
            },
        )

    def do_POST(self) -> None:
        if self.path == "/echo":
            self._echo()
        else:
            self._json(404, {"error": "not found", "path": self.path})

    do_PUT = do_POST


class FixedHttpServer:
    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="fixed-http", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
