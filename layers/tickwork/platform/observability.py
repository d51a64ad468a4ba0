"""Powertools logger, metrics (EMF) and tracer, shared by every function.

Powertools reads its POWERTOOLS_* variables when these objects are built; outside Lambda
(tests, the local runtime) metrics are flushed to stdout only by handlers that ask.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.utilities.typing import LambdaContext

SERVICE = "tickwork"
NAMESPACE = "Tickwork"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)


def metrics_enabled() -> bool:
    # Powertools skips flushing when disabled but still prints when a metric reaches 100
    # values, and keeps accumulating; so nothing is added at all when metrics are off.
    return not is_metrics_disabled()


def emit(
    counts: Mapping[str, float],
    *,
    seconds: Mapping[str, float] | None = None,
    by: tuple[str, str, Mapping[str, int]] | None = None,
) -> None:
    """One run's numbers as metrics: counts, durations, and optionally one metric per value
    of a dimension, `by` = (metric name, dimension name, {dimension value: count})."""
    if not metrics_enabled():
        return
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for name, value in (seconds or {}).items():
        metrics.add_metric(name=name, unit=MetricUnit.Seconds, value=round(value, 3))
    if by is not None:
        metric_name, dimension, values = by
        for key, value in values.items():
            with single_metric(
                name=metric_name, unit=MetricUnit.Count, value=value, namespace=NAMESPACE
            ) as metric:
                metric.add_dimension(name=dimension, value=key)


def run_budget(context: LambdaContext, configured: float, margin: float) -> float:
    """How long a scheduled run may work: its configured budget, within what the Lambda has
    left less a margin to return its summary and flush its metrics."""
    remaining = context.get_remaining_time_in_millis() / 1000 - margin
    return max(1.0, min(configured, remaining))
