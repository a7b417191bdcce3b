"""One in-memory OpenTelemetry metric reader for the test process.

A process has one global MeterProvider and it can be set only once, so every test that reads
Cairn's counters shares this reader (read deltas, not absolute values)."""

from __future__ import annotations

from functools import cache

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader


@cache
def metric_reader() -> InMemoryMetricReader:
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


def counter_value(name: str, **attributes: str) -> int:
    """The current total of a counter, over the data points whose attributes include these."""
    data = metric_reader().get_metrics_data()
    total = 0
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:  # type: ignore[union-attr]
                    if all(point.attributes.get(k) == v for k, v in attributes.items()):  # type: ignore[union-attr]
                        total += int(point.value)  # type: ignore[union-attr]
    return total
