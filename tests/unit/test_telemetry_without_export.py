"""Without an OTLP endpoint, telemetry installs no SDK (spans cost nothing), yet a caller's trace
context still flows from an incoming message's headers to the messages a service sends; and the
api leaves FastAPI's own telemetry off (its per-request check cost 2.6% of `cairn dev`'s CPU)."""

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


APP_PROBE = """
import json, os, sys
from types import SimpleNamespace
from shared import telemetry

telemetry.configure("cairn-probe")
from services.api.app import create_app

app = create_app(SimpleNamespace(store=None, auth=None))
# FastAPI answers "off" either way when nothing is configured; what the change saves is the
# per-request look at the global providers that finds it out, which its own flags skip.
flags = [app._telemetry[kind] for kind in ("tracing", "metrics", "logs")]
print(json.dumps({"fastapi telemetry": flags, "enabled": app._native_telemetry.enabled()}))
sys.stdout.flush()
os._exit(0)
"""


def _probe(script: str = PROBE, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CAIRN_OTLP"))}
    out = subprocess.run(
        [sys.executable, "-c", script],
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


def test_fastapis_own_telemetry_is_on_only_where_cairn_exports() -> None:
    assert _probe(APP_PROBE) == {"fastapi telemetry": [False] * 3, "enabled": False}
    exporting = _probe(APP_PROBE, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert exporting == {"fastapi telemetry": [True] * 3, "enabled": True}
