"""Every 15 minutes: archive, then remove, finished rows older than their retention."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import runtime
from tickwork.engine.retention import handle_retention
from tickwork.platform.observability import logger, metrics, tracer


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_retention(context, runtime.current())
