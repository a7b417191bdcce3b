"""Without an OTLP endpoint, telemetry installs no SDK (spans cost nothing), yet a caller's trace
context still flows from an incoming message's headers to the messages a service sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from shared import telemetry

telemetry.configure("cairn-probe")
incoming = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
with telemetry.tracer("probe").start_as_current_span("cairn.decide", context=telemetry.extract(incoming)):
    sent = telemetry.inject()
with telemetry.tracer("probe").start_as_current_span("cairn.decide"):
    fresh = telemetry.inject()
sdk = isinstance(trace.get_tracer_provider(), TracerProvider)
print(json.dumps({"sdk": sdk, "sent": sent, "fresh": fresh}))
sys.stdout.flush()
os._exit(0)  # no export at exit: the endpoint is not there
"""


def _probe(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CAIRN_OTLP"))}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_no_endpoint_installs_no_sdk_and_still_carries_the_callers_trace() -> None:
    result = _probe()
    assert result["sdk"] is False
    assert result["sent"] == {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert result["fresh"] == {}, "no caller's trace: nothing is made up"


def test_an_endpoint_installs_the_sdk_and_its_spans_continue_the_trace() -> None:
    result = _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert result["sdk"] is True
    sent = result["sent"]
    assert isinstance(sent, dict)
    _version, trace_id, span_id, _ = sent["traceparent"].split("-")
    assert trace_id == "0af7651916cd43dd8448eb211c80319c" and span_id != "b7ad6b7169203331"
