"""OpenTelemetry wiring: tracer setup per service and W3C trace context in message headers.

Export is on only when CAIRN_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set. Otherwise no
SDK is installed and the API's no-op tracer is used: a span costs nothing (profiling `cairn dev`
found 11% of its time in spans nobody exported), yet a no-op span carries its parent's context,
so a trace a client starts (a `traceparent` on the start request or message) still flows
through every message to the workers and back. Tests install an in-memory exporter with
`install_tracer_provider`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

_configured = False


def install_tracer_provider(service_name: str, processor: SpanProcessor | None = None) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if processor is not None:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return provider


def configure(service_name: str, otlp_endpoint: str | None = None) -> None:
    """Set up tracing and metrics for a service process, once."""
    global _configured
    if _configured:
        return
    _configured = True
    endpoint = otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    processor: SpanProcessor | None = None
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        base = endpoint.rstrip("/")
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces"))
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{base}/v1/metrics"))
        metrics.set_meter_provider(
            MeterProvider(resource=Resource.create({"service.name": service_name}), metric_readers=[reader])
        )
    if processor is not None and not isinstance(trace.get_tracer_provider(), TracerProvider):
        install_tracer_provider(service_name, processor)


def exporting() -> bool:
    """Whether spans are recorded in this process (an SDK tracer provider is installed: export is
    configured, or a test installed one); False means every span is the API's no-op."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def meter(name: str) -> metrics.Meter:
    return metrics.get_meter(name)


def extract(headers: Mapping[str, str]) -> Context:
    """The trace context a message carries (empty context if none)."""
    return propagate.extract(dict(headers))


def inject(headers: dict[str, str] | None = None, context: Context | None = None) -> dict[str, str]:
    """Headers carrying the current (or given) trace context."""
    carrier: dict[str, str] = dict(headers or {})
    propagate.inject(carrier, context=context)
    return carrier
