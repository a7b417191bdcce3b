"""A scripted model provider for tests: a small FastAPI app speaking OpenAI's
`/v1/chat/completions` and `/v1/completions` and Anthropic's `/v1/messages` over real HTTP, so the
system worker's real `openai` and `anthropic` clients talk to it as to the real services.

It answers by rules the test sets (`POST /_script`): the first rule whose `match` text appears
in the request's messages answers; a rule's `replies` are given in turn, the last one again and
again. A reply is `{content, toolCalls: [{id, name, arguments}], finishReason, promptTokens,
completionTokens, delay}` (delay: seconds before answering) or an error `{status, headers,
error}`. Every request is logged (`GET /_log`): what the test reads to show which calls reached
the provider, and how often.

Run in a thread of the test process (`FakeLlm`), or as a process:
`python -m tests.ai.fake_llm --port 8123`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.devserver import free_port


class Script:
    def __init__(self) -> None:
        self.rules: list[dict[str, Any]] = []
        self.given: dict[int, int] = {}
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def reply_for(self, text: str) -> dict[str, Any]:
        with self.lock:
            for index, rule in enumerate(self.rules):
                if rule.get("match", "") in text:
                    replies = rule["replies"]
                    n = self.given.get(index, 0)
                    self.given[index] = n + 1
                    return dict(replies[min(n, len(replies) - 1)])
        return {"content": "no rule matched", "finishReason": "stop"}


def _text_of(body: dict[str, Any]) -> str:
    parts: list[str] = []
    if isinstance(body.get("system"), str):
        parts.append(body["system"])
    if isinstance(body.get("prompt"), str):
        parts.append(body["prompt"])
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for block in content:
                parts.append(json.dumps(block))
    return "\n".join(parts)


def _error(reply: dict[str, Any], anthropic: bool) -> JSONResponse:
    status = int(reply["status"])
    message = reply.get("error", f"scripted {status}")
    if anthropic:
        body: dict[str, Any] = {"type": "error", "error": {"type": "api_error", "message": message}}
    else:
        body = {"error": {"message": message, "type": "scripted", "code": str(status)}}
    return JSONResponse(body, status_code=status, headers=reply.get("headers") or {})


def create_app(script: Script) -> FastAPI:
    app = FastAPI()

    async def logged(request: Request) -> dict[str, Any]:
        body = await request.json()
        with script.lock:
            script.log.append(
                {
                    "at": time.time(),
                    "path": request.url.path,
                    "headers": {k.lower(): v for k, v in request.headers.items()},
                    "body": body,
                }
            )
        return dict(body)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await logged(request)
        reply = script.reply_for(_text_of(body))
        if reply.get("delay"):
            await asyncio.sleep(float(reply["delay"]))
        if "status" in reply:
            return _error(reply, anthropic=False)
        calls = reply.get("toolCalls") or []
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        if calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": call["arguments"]
                        if isinstance(call["arguments"], str)
                        else json.dumps(call["arguments"]),
                    },
                }
                for call in calls
            ]
        prompt, completion = reply.get("promptTokens", 10), reply.get("completionTokens", 5)
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(script.log)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": reply.get("finishReason", "tool_calls" if calls else "stop"),
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    @app.post("/v1/messages")
    async def messages(request: Request) -> JSONResponse:
        body = await logged(request)
        reply = script.reply_for(_text_of(body))
        if "status" in reply:
            return _error(reply, anthropic=True)
        content: list[dict[str, Any]] = []
        if reply.get("content"):
            content.append({"type": "text", "text": reply["content"]})
        for call in reply.get("toolCalls") or []:
            arguments = call["arguments"]
            content.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["name"],
                    "input": json.loads(arguments) if isinstance(arguments, str) else arguments,
                }
            )
        stop = reply.get("finishReason", "tool_use" if reply.get("toolCalls") else "end_turn")
        return JSONResponse(
            {
                "id": f"msg_{len(script.log)}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": reply.get("promptTokens", 10),
                    "output_tokens": reply.get("completionTokens", 5),
                },
            }
        )

    @app.post("/_script")
    async def set_script(request: Request) -> dict[str, int]:
        rules = await request.json()
        with script.lock:
            script.rules = rules
            script.given = {}
        return {"rules": len(rules)}

    @app.post("/_reset")
    async def reset() -> dict[str, bool]:
        with script.lock:
            script.rules, script.given, script.log = [], {}, []
        return {"reset": True}

    @app.get("/_log")
    async def get_log() -> list[dict[str, Any]]:
        with script.lock:
            return list(script.log)

    return app


class FakeLlm:
    """The fake provider on 127.0.0.1 in a thread of the test process."""

    def __init__(self) -> None:
        self.script = Script()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(self.script), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> FakeLlm:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("the fake model provider did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def rules(self, *rules: dict[str, Any]) -> None:
        with self.script.lock:
            self.script.rules = list(rules)
            self.script.given = {}
            self.script.log = []

    @property
    def log(self) -> list[dict[str, Any]]:
        with self.script.lock:
            return list(self.script.log)

    def requests_matching(self, text: str) -> list[dict[str, Any]]:
        return [entry for entry in self.log if text in _text_of(entry["body"])]


def rule(match: str, *replies: dict[str, Any]) -> dict[str, Any]:
    return {"match": match, "replies": list(replies)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(Script()), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
