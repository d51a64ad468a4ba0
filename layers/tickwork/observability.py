"""Powertools logger, metrics (EMF) and tracer, shared by every function.

Powertools reads its POWERTOOLS_* variables when these objects are built; outside Lambda
(tests, the local runtime) metrics are flushed to stdout only by handlers that ask.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

SERVICE = "tickwork"
NAMESPACE = "Tickwork"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)


def metrics_enabled() -> bool:
    # Powertools skips flushing when disabled but still prints when a metric reaches 100
    # values, and keeps accumulating; so nothing is added at all when metrics are off.
    return not is_metrics_disabled()
