"""``OpenTelemetryTelemetry``: one span (and optional metrics) per search, with stage durations."""

from __future__ import annotations

from typing import Any

from kolm_search._extras import require

__all__ = ["OpenTelemetryTelemetry"]


class OpenTelemetryTelemetry:
    """``Telemetry`` over OpenTelemetry (extra ``otel``).

    Parameters
    ----------
    tracer : opentelemetry.trace.Tracer, optional
        Each event becomes a span named after it (``"search.completed"``) with attributes
        ``kolm.duration_ms``, ``kolm.mode``, ``kolm.result_count`` and one
        ``kolm.stage.<stage>_ms`` per stage; start and end times span the search.
    meter : opentelemetry.metrics.Meter, optional
        Records a ``kolm.search.duration`` histogram (ms) and a ``kolm.search.count`` counter.
    """

    def __init__(self, tracer: Any = None, meter: Any = None) -> None:
        require("opentelemetry.trace", "otel")
        if tracer is None and meter is None:
            from opentelemetry import trace

            tracer = trace.get_tracer("kolm_search")
        self.tracer = tracer
        self.meter = meter
        if meter is not None:
            self._hist = meter.create_histogram("kolm.search.duration", unit="ms", description="search wall time")
            self._count = meter.create_counter("kolm.search.count", description="searches completed")

    def track(self, event: str, payload: dict[str, Any]) -> None:
        import time

        attrs: dict[str, Any] = {}
        for key, value in payload.items():
            if key == "stage_durations" and isinstance(value, dict):
                attrs.update({f"kolm.stage.{stage}_ms": float(ms) for stage, ms in value.items()})
            elif isinstance(value, (str, bool, int, float)):
                attrs[f"kolm.{key}"] = value
        if self.tracer is not None:
            end = time.time_ns()
            start = end - int(float(payload.get("duration_ms", 0.0)) * 1e6)
            span = self.tracer.start_span(event, start_time=start, attributes=attrs)
            span.end(end_time=end)
        if self.meter is not None:
            mode = {"kolm.mode": str(payload.get("mode", ""))}
            self._hist.record(float(payload.get("duration_ms", 0.0)), attributes=mode)
            self._count.add(1, attributes=mode)
