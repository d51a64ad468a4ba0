"""Claims a batch of due rows from one action type's queue and calls their provider."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import runtime
from tickwork.engine.dispatch import handle_sqs_event
from tickwork.platform.observability import logger, metrics, tracer


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_sqs_event(event, context, runtime.current())
