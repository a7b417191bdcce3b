"""The system worker (services/system_worker) against a real HTTP server on 127.0.0.1: HTTP tasks
with Conductor's inputs and output, failures that keep the response, timeouts, refused
connections, size bounds and heartbeats; EVENT tasks publishing to a topic that is consumed back;
dead letters. On the embedded bus (one test on Kafka), then end to end through `cairn dev`: a
workflow whose HTTP task calls the local server and whose EVENT task publishes completes."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from services.system_worker.handler import SystemWorker
from shared.adapters.embedded_bus import EmbeddedBus
from shared.models.messages import TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Bus, Outgoing, Received
from shared.topics import Topics
from tests.devserver import DevServer

# ------------------------------------------------------------------ a real HTTP server ---


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Server:
    """ThreadingHTTPServer on 127.0.0.1 with a few routes; records every request it got."""

    def __init__(self) -> None:
        seen: list[Seen] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                seen.append(Seen(self.command, url.path, dict(self.headers.items()), body))
                if url.path == "/json":
                    self._send(200, b'{"ok": true, "n": 7, "items": [1, "two"]}', "application/json")
                elif url.path == "/text":
                    self._send(200, b"hello, world", "text/plain; charset=utf-8")
                elif url.path == "/empty":
                    self._send(204, b"", None)
                elif url.path.startswith("/status/"):
                    status = int(url.path.rsplit("/", 1)[1])
                    self._send(status, json.dumps({"error": f"status {status}"}).encode(), "application/json")
                elif url.path == "/echo":
                    echo = {
                        "method": self.command,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body.decode(),
                    }
                    self._send(200, json.dumps(echo).encode(), "application/json")
                elif url.path == "/slow":
                    time.sleep(float(query.get("s", "1")))
                    self._send(200, b'{"slow": true}', "application/json")
                elif url.path == "/big":
                    self._send(200, b"x" * int(query.get("bytes", "1000")), "text/plain")
                elif url.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "/json")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._send(404, b"no such route", "text/plain")

            def _send(self, status: int, body: bytes, content_type: str | None) -> None:
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                self.send_header("X-Multi", "a")
                self.send_header("X-Multi", "b")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.close()


def refused_url() -> str:
    """An address nothing listens on: a port bound and released again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/nothing"


# ------------------------------------------------------------------ the worker on a bus ---


@dataclass
class Results:
    """Every TaskResult on the task-result topic, by task id."""

    by_task: dict[str, list[TaskResult]] = field(default_factory=dict)
    keys: dict[str, str | None] = field(default_factory=dict)

    async def handle(self, batch: Sequence[Received]) -> None:
        for received in batch:
            result = TaskResult.model_validate_json(received.value)
            self.by_task.setdefault(result.task_id, []).append(result)
            self.keys[result.task_id] = received.key

    async def final(self, task_id: str, within_s: float = 20) -> TaskResult:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            for result in self.by_task.get(task_id, []):
                if result.status is not TaskStatus.IN_PROGRESS:
                    return result
            await asyncio.sleep(0.02)
        raise AssertionError(f"no result for {task_id}: {self.by_task.get(task_id)}")


@dataclass
class Harness:
    bus: Bus
    topics: Topics
    results: Results

    async def run(
        self, task_type: str, input_data: dict[str, Any], response_timeout_seconds: int = 0
    ) -> TaskResult:
        task = task_message(task_type, input_data, response_timeout_seconds)
        await self.bus.publish([_dispatch(self.topics, task)])
        result = await self.results.final(task.task_id)
        assert self.results.keys[task.task_id] == task.workflow_instance_id, "keyed by workflow id"
        assert result.id == f"result:{task.task_id}:1" and result.workflow_instance_id == "wf-" + task.task_id
        return result

    async def http(self, **request: Any) -> TaskResult:
        return await self.run("HTTP", {"http_request": request})


def task_message(
    task_type: str, input_data: dict[str, Any], response_timeout_seconds: int = 0
) -> TaskMessage:
    task_id = uuid.uuid4().hex
    return TaskMessage(
        id=f"dispatch:{task_id}:1",
        task_id=task_id,
        task_type=task_type,
        task_def_name=task_type,
        reference_task_name=f"{task_type.lower()}_ref",
        workflow_instance_id=f"wf-{task_id}",
        workflow_type="system_worker_test",
        input_data=input_data,
        poll_count=1,
        response_timeout_seconds=response_timeout_seconds,
        correlation_id="corr-1",
        workflow_version=3,
    )


def _dispatch(topics: Topics, task: TaskMessage) -> Outgoing:
    return Outgoing(topics.tasks(task.task_type), task.to_bytes(), task.workflow_instance_id)


async def _harness(bus: Bus, topics: Topics, **options: Any) -> AsyncIterator[Harness]:
    worker = SystemWorker(bus, topics, concurrency=8, **options)
    results = Results()
    await bus.ensure_topics([topics.task_result, topics.tasks("HTTP"), topics.tasks("EVENT")])
    worker.attach()
    bus.subscribe([topics.task_result], topics.group("results"), results.handle)
    await bus.start()
    try:
        yield Harness(bus, topics, results)
    finally:
        await bus.stop()
        await worker.aclose()


@pytest.fixture
async def embedded(tmp_path: Path, topics: Topics) -> AsyncIterator[Harness]:
    """The system worker on the embedded bus, with small size limits to test them."""
    bus = EmbeddedBus(str(tmp_path / "bus.db"), partitions=2, poll_interval_s=0.02)
    async for harness in _harness(bus, topics, max_body_bytes=50_000, max_result_bytes=200_000):
        yield harness


async def consume(bus: Bus, topic: str, group: str, count: int = 1, within_s: float = 30) -> list[Received]:
    """The first `count` messages on `topic`, read by a new group (from the earliest)."""
    got: list[Received] = []
    enough = asyncio.Event()

    async def handle(batch: Sequence[Received]) -> None:
        got.extend(batch)
        if len(got) >= count:
            enough.set()

    subscription = await bus.add_subscription([topic], group, handle)
    try:
        async with asyncio.timeout(within_s):
            await enough.wait()
    except TimeoutError:
        raise AssertionError(f"{len(got)} of {count} messages on {topic} within {within_s:.0f}s") from None
    finally:
        await subscription.close()
    return got


# ------------------------------------------------------------------------------- HTTP ---


async def test_200_json_completes_with_the_response_map(embedded: Harness, server: Server) -> None:
    result = await embedded.http(uri=f"{server.url}/json", method="GET")
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    response = result.output_data["response"]
    assert response["statusCode"] == 200 and response["reasonPhrase"] == "OK"
    assert response["body"] == {"ok": True, "n": 7, "items": [1, "two"]}
    assert response["headers"]["X-Multi"] == ["a", "b"], "a multi-map: name -> list of strings"
    assert response["headers"]["Content-Type"] == ["application/json"]
    assert result.reason_for_incompletion is None and result.worker_id


async def test_200_text_and_empty_bodies(embedded: Harness, server: Server) -> None:
    text = await embedded.http(uri=f"{server.url}/text", method="GET")
    assert text.status is TaskStatus.COMPLETED
    assert text.output_data["response"]["body"] == "hello, world"
    empty = await embedded.http(uri=f"{server.url}/empty", method="DELETE")
    assert empty.status is TaskStatus.COMPLETED
    assert empty.output_data["response"]["statusCode"] == 204
    assert empty.output_data["response"]["body"] is None


@pytest.mark.parametrize(("status", "phrase"), [(404, "Not Found"), (500, "Internal Server Error")])
async def test_non_2xx_fails_and_keeps_the_response(
    embedded: Harness, server: Server, status: int, phrase: str
) -> None:
    result = await embedded.http(uri=f"{server.url}/status/{status}?token=secret", method="POST", body={})
    assert result.status is TaskStatus.FAILED
    assert result.reason_for_incompletion == f"HTTP {status} {phrase} from POST {server.url}/status/{status}"
    response = result.output_data["response"]
    assert response["statusCode"] == status and response["reasonPhrase"] == phrase
    assert response["body"] == {"error": f"status {status}"}
    assert "X-Multi" in response["headers"]


async def test_connection_refused_fails_with_a_clear_reason(embedded: Harness) -> None:
    url = refused_url()
    result = await embedded.http(uri=url, method="GET")
    assert result.status is TaskStatus.FAILED
    assert result.reason_for_incompletion is not None
    assert result.reason_for_incompletion.startswith(f"GET {url}: cannot connect"), (
        result.reason_for_incompletion
    )
    assert result.output_data == {}


async def test_read_timeout_fails_after_read_time_out(embedded: Harness, server: Server) -> None:
    started = time.monotonic()
    result = await embedded.http(uri=f"{server.url}/slow?s=2", method="GET", readTimeOut=300)
    assert time.monotonic() - started < 1.8, "the call was cut off at readTimeOut, not at the answer"
    assert result.status is TaskStatus.FAILED
    assert result.reason_for_incompletion == f"GET {server.url}/slow: no response within 300 ms (readTimeOut)"


async def test_missing_uri_or_method_fails_as_conductor_does(embedded: Harness, server: Server) -> None:
    no_uri = await embedded.http(method="GET")
    assert no_uri.status is TaskStatus.FAILED
    assert no_uri.reason_for_incompletion == (
        "Missing HTTP URI. See documentation for HttpTask for required input parameters"
    )
    no_method = await embedded.http(uri=f"{server.url}/json")
    assert (no_method.status, no_method.reason_for_incompletion) == (
        TaskStatus.FAILED,
        "No HTTP method specified",
    )
    other = await embedded.http(uri="ftp://127.0.0.1/file", method="GET")
    assert other.status is TaskStatus.FAILED and "only http:// and https://" in str(
        other.reason_for_incompletion
    )
    bad = await embedded.run("HTTP", {"http_request": "GET /"})
    assert bad.status is TaskStatus.FAILED and "http_request must be a map" in str(
        bad.reason_for_incompletion
    )
    timeout = await embedded.http(uri=f"{server.url}/json", method="GET", readTimeOut="soon")
    assert timeout.status is TaskStatus.FAILED and "readTimeOut" in str(timeout.reason_for_incompletion)


async def test_method_headers_and_body_are_sent(embedded: Harness, server: Server) -> None:
    result = await embedded.http(
        uri=f"{server.url}/echo",
        method="put",
        headers={"X-Text": "one", "X-Number": 5, "X-Flag": True, "X-Dropped": None},
        body={"order": [1, 2], "name": "é"},
    )
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    echo = result.output_data["response"]["body"]
    assert echo["method"] == "PUT"
    headers = echo["headers"]
    assert (headers["x-text"], headers["x-number"], headers["x-flag"]) == ("one", "5", "true")
    assert "x-dropped" not in headers
    assert headers["content-type"] == "application/json" and headers["accept"] == "application/json"
    assert json.loads(echo["body"]) == {"order": [1, 2], "name": "é"}

    text = await embedded.http(
        uri=f"{server.url}/echo",
        method="POST",
        body="plain words",
        contentType="text/plain",
        accept=["text/plain", "application/json"],
        headers={"Accept": "application/json"},  # an explicit header wins over `accept`
    )
    echo = text.output_data["response"]["body"]
    assert echo["body"] == "plain words" and echo["headers"]["content-type"] == "text/plain"
    assert echo["headers"]["accept"] == "application/json"


async def test_the_whole_input_is_the_request_without_http_request(embedded: Harness, server: Server) -> None:
    result = await embedded.run("HTTP", {"uri": f"{server.url}/redirect", "method": "GET"})
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    assert result.output_data["response"]["body"]["ok"] is True, "redirects are followed"


async def test_a_body_over_the_read_bound_fails(embedded: Harness, server: Server) -> None:
    result = await embedded.http(uri=f"{server.url}/big?bytes=60000", method="GET")
    assert result.status is TaskStatus.FAILED
    assert "larger than 50000 bytes" in str(result.reason_for_incompletion)
    assert result.output_data["response"]["statusCode"] == 200
    assert result.output_data["response"]["body"] is None
    fits = await embedded.http(uri=f"{server.url}/big?bytes=40000", method="GET")
    assert fits.status is TaskStatus.COMPLETED and len(fits.output_data["response"]["body"]) == 40000


async def test_a_result_too_big_to_publish_fails(tmp_path: Path, topics: Topics, server: Server) -> None:
    bus = EmbeddedBus(str(tmp_path / "small.db"), partitions=1, poll_interval_s=0.02)
    async for harness in _harness(bus, topics, max_result_bytes=5_000):
        result = await harness.http(uri=f"{server.url}/big?bytes=8000", method="GET")
        assert result.status is TaskStatus.FAILED
        assert "more than the 5000 a task result may carry" in str(result.reason_for_incompletion)
        assert result.output_data == {
            "response": {"statusCode": 200, "reasonPhrase": "OK", "headers": {}, "body": None}
        }


async def test_a_long_call_is_reported_in_progress_every_third_of_the_response_timeout(
    embedded: Harness, server: Server
) -> None:
    result = await embedded.run(
        "HTTP",
        {"http_request": {"uri": f"{server.url}/slow?s=1.7", "method": "GET", "readTimeOut": 5000}},
        response_timeout_seconds=1,  # a beat every 0.5 s
    )
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    reports = embedded.results.by_task[result.task_id]
    beats = [r for r in reports if r.status is TaskStatus.IN_PROGRESS]
    assert 2 <= len(beats) <= 4, [r.status for r in reports]
    assert reports[-1].status is TaskStatus.COMPLETED, "every beat is published before the result"
    assert len({beat.id for beat in beats}) == len(beats)

    quick = await embedded.run(
        "HTTP", {"uri": f"{server.url}/json", "method": "GET"}, response_timeout_seconds=1
    )
    assert [r.status for r in embedded.results.by_task[quick.task_id]] == [TaskStatus.COMPLETED]


async def test_a_batch_runs_concurrently(embedded: Harness, server: Server) -> None:
    tasks = [
        task_message("HTTP", {"http_request": {"uri": f"{server.url}/slow?s=1", "method": "GET"}})
        for _ in range(6)
    ]
    started = time.monotonic()
    await embedded.bus.publish([_dispatch(embedded.topics, task) for task in tasks])
    results = [await embedded.results.final(task.task_id) for task in tasks]
    assert all(r.status is TaskStatus.COMPLETED for r in results)
    assert time.monotonic() - started < 4.5, "six one-second calls did not run one after another"


async def test_bad_messages_are_dead_lettered_and_the_rest_runs(embedded: Harness, server: Server) -> None:
    topics = embedded.topics
    await embedded.bus.publish(
        [
            Outgoing(topics.tasks("HTTP"), b"not json", "k1"),
            Outgoing(topics.tasks("HTTP"), json.dumps({"type": "task", "v": 1, "id": "x"}).encode(), "k2"),
        ]
    )
    good = await embedded.http(uri=f"{server.url}/json", method="GET")
    assert good.status is TaskStatus.COMPLETED
    letters = [json.loads(m.value) for m in await consume(embedded.bus, topics.dead_letter, "dlq", 2)]
    reasons = sorted(letter["reason"] for letter in letters)
    assert len(reasons) == 2 and reasons[0].startswith("not JSON"), reasons
    assert reasons[1].startswith("schema violation") and "taskId" in reasons[1], reasons
    assert {letter["topic"] for letter in letters} == {topics.tasks("HTTP")}


# ------------------------------------------------------------------------------ EVENT ---


async def test_event_publishes_the_output_to_the_kafka_sink_topic(embedded: Harness, unique: str) -> None:
    sink = f"kafka:orders-{unique}"
    result = await embedded.run("EVENT", {"sink": sink, "asyncComplete": False, "order": {"id": 42}})
    assert result.status is TaskStatus.COMPLETED, result.reason_for_incompletion
    assert result.output_data == {
        "sink": sink,
        "asyncComplete": False,
        "order": {"id": 42},
        "workflowInstanceId": result.workflow_instance_id,
        "workflowType": "system_worker_test",
        "workflowVersion": 3,
        "correlationId": "corr-1",
        "taskToDomain": {},
        "event_produced": sink,
    }
    [message] = await consume(embedded.bus, f"orders-{unique}", "event-reader")
    assert message.key == result.task_id
    assert json.loads(message.value) == result.output_data


@pytest.mark.parametrize(
    ("sink", "reason"),
    [
        ("conductor", "Invalid / Unsupported sink specified: conductor"),
        ("sqs:orders", "Invalid / Unsupported sink specified: sqs:orders"),
        (None, "Invalid / Unsupported sink specified: None"),
        ("kafka:no spaces!", "is not a Kafka topic name"),
        ("kafka:", "is not a Kafka topic name"),
        ("kafka:{task_result}", "is one of Cairn's own topics"),
        ("kafka:{tasks}", "is one of Cairn's own topics"),
    ],
)
async def test_event_with_an_unsupported_sink_fails(embedded: Harness, sink: str | None, reason: str) -> None:
    if sink is not None:
        sink = sink.format(task_result=embedded.topics.task_result, tasks=embedded.topics.tasks("SIMPLE_X"))
    result = await embedded.run("EVENT", {"sink": sink})
    assert result.status is TaskStatus.FAILED
    assert reason in str(result.reason_for_incompletion), result.reason_for_incompletion


# ------------------------------------------------------------------------------ Kafka ---


@pytest.mark.integration
async def test_http_and_event_on_kafka(
    kafka_bootstrap: str, topics: Topics, unique: str, server: Server
) -> None:
    from shared.adapters.kafka_bus import KafkaBus

    bus = KafkaBus(kafka_bootstrap, client_id=f"sysworker-{unique}", partitions=2)
    async for harness in _harness(bus, topics):
        http = await harness.http(uri=f"{server.url}/json", method="GET")
        assert http.status is TaskStatus.COMPLETED and http.output_data["response"]["body"]["n"] == 7
        topic = f"sysworker-events-{unique}"  # does not exist yet: the worker creates it
        event = await harness.run("EVENT", {"sink": f"kafka:{topic}", "n": 1})
        assert event.status is TaskStatus.COMPLETED, event.reason_for_incompletion
        [message] = await consume(bus, topic, f"reader-{unique}")
        assert (
            message.key == event.task_id and json.loads(message.value)["event_produced"] == f"kafka:{topic}"
        )


# --------------------------------------------------------------------- through cairn dev ---


def test_a_workflow_with_http_and_event_tasks_completes_on_cairn_dev(
    dev_server: DevServer, server: Server
) -> None:
    name = f"sysworker_{uuid.uuid4().hex[:8]}"
    workflow = {
        "name": name,
        "version": 1,
        "tasks": [
            {
                "name": "call",
                "taskReferenceName": "call",
                "type": "HTTP",
                "inputParameters": {
                    "http_request": {"uri": f"{server.url}/json", "method": "GET"},
                },
            },
            {
                "name": "announce",
                "taskReferenceName": "announce",
                "type": "EVENT",
                "sink": f"kafka:{name}-events",
                "inputParameters": {"n": "${call.output.response.body.n}"},
            },
        ],
        "outputParameters": {
            "status": "${call.output.response.statusCode}",
            "n": "${call.output.response.body.n}",
            "produced": "${announce.output.event_produced}",
            "sent": "${announce.output.n}",
        },
    }
    with httpx.Client(base_url=dev_server.url, timeout=30) as api:
        registered = api.post("/api/metadata/workflow", json=workflow)
        assert registered.status_code == 200, registered.text
        started = api.post(f"/api/workflow/{name}", json={})
        assert started.status_code == 200, started.text
        workflow_id = started.text
        deadline = time.monotonic() + 30
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            found = api.get(f"/api/workflow/{workflow_id}", params={"includeTasks": "false"})
            if found.status_code == 200:
                state = found.json()
                if state["status"] != "RUNNING":
                    break
            time.sleep(0.1)
    assert state.get("status") == "COMPLETED", f"{state}\n{dev_server.process.log_tail()}"
    assert state["output"] == {"status": 200, "n": 7, "produced": f"kafka:{name}-events", "sent": 7}
