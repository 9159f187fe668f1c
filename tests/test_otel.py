"""OpenTelemetryTelemetry with the SDK's in-memory span exporter and metric reader."""

from __future__ import annotations

import pytest

from kolm_search import DefaultQueryPlanner, SearchClient
from tests.fakes import HashEmbedder, ListRetriever

pytest.importorskip("opentelemetry.sdk")


def test_spans_and_metrics() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from kolm_search.adapters import OpenTelemetryTelemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    tel = OpenTelemetryTelemetry(tracer=provider.get_tracer("test"), meter=meter)
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "embedder": HashEmbedder(),
                           "telemetry": tel})
    for q in ("a", "b"):
        client.search_sync({"query": q, "limit": 3})
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["search.completed", "search.completed"]
    attrs = spans[0].attributes
    assert attrs["kolm.mode"] == "hybrid" and attrs["kolm.result_count"] == 3
    assert {"kolm.stage.planner_ms", "kolm.stage.embedder_ms", "kolm.stage.retriever_ms"} <= set(attrs)
    assert spans[0].end_time >= spans[0].start_time
    metrics = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    by_name = {m.name: m for m in metrics}
    assert by_name["kolm.search.count"].data.data_points[0].value == 2
    assert by_name["kolm.search.duration"].data.data_points[0].count == 2
