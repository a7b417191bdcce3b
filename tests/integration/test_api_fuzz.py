"""Issue 12 point 8: schemathesis against the api's own OpenAPI, every operation, with a bounded
number of examples, on a real `cairn dev`, while a trickle of normal workflows runs beside it.
Nothing it sends may make the api answer 5xx, and the trickle must come out exact (no stuck
workflow). Findings are fixed in the code, never excluded here.

Two parameters are pinned, not excluded: long-poll waits (`timeout` of a poll, `waitForSeconds`
of execute), so that each example costs milliseconds rather than the up to 30 s a generated wait
asks for. FUZZ_EXAMPLES sets the examples per operation (CI: 25; the note has a longer run)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tests.devserver import DevServer
from tests.trickle import TRICKLE, Trickle

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))


class TrickleThread:
    """The trickle on its own event loop, beside the synchronous fuzzing."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.took: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        try:
            async with httpx.AsyncClient(base_url=self.url, timeout=30) as api:
                assert (await api.post("/api/metadata/workflow", json=TRICKLE)).status_code == 200
                trickle = Trickle(api, gap_s=0.2)
                running = asyncio.create_task(trickle.run())
                await asyncio.to_thread(self._stop.wait)
                self.took = await trickle.finish(within_s=120)
                running.cancel()
        except BaseException as error:  # reported by the last test
            self.error = error

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)

    def finish(self) -> list[float]:
        self._stop.set()
        self._thread.join(180)
        if self.error is not None:
            raise self.error
        return self.took


@pytest.fixture(scope="module")
def trickle(dev_server: DevServer) -> Iterator[TrickleThread]:
    running = TrickleThread(dev_server.url)
    running.start()
    yield running
    running.stop()  # when a failure ended the module before the last test


def _openapi() -> dict[str, object]:
    """The api's OpenAPI, as it serves it at /openapi.json (it does not depend on the context)."""
    from services.api.app import create_app

    return create_app(None).openapi()  # type: ignore[arg-type]


SCHEMA = schemathesis.openapi.from_dict(_openapi())
OPERATIONS = {f"{op.method.upper()} {op.path}": op for op in (r.ok() for r in SCHEMA.get_all_operations())}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_no_input_makes_the_api_fail(dev_server: DevServer, trickle: TrickleThread, operation: str) -> None:
    """Every operation, EXAMPLES generated requests (valid and invalid by the schema), over real
    HTTP: never a 5xx, every error in Conductor's body."""
    strategy = OPERATIONS[operation].as_strategy()

    @given(case=strategy)
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    def fuzz(case: schemathesis.Case) -> None:
        if case.query is not None:
            if "timeout" in case.query:
                case.query["timeout"] = 0
            if "waitForSeconds" in case.query:
                case.query["waitForSeconds"] = 1
        response = case.call(base_url=dev_server.url, timeout=30)
        case.validate_response(response, checks=[not_a_server_error])
        if response.status_code >= 400:
            content_type = (response.headers.get("content-type") or [""])[0]
            assert content_type.startswith("application/json"), response.text
            body = response.json()
            assert body["status"] == response.status_code and "message" in body, body

    fuzz()


def test_the_trickle_beside_the_fuzzing_completed_exactly(trickle: TrickleThread) -> None:
    took = trickle.finish()
    assert len(took) >= 5, "the trickle barely ran"
    print(f"\ntrickle beside the fuzzing: {len(took)} workflows, max {max(took) * 1000:.0f} ms")
