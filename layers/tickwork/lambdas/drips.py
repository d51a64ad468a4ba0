"""Every minute: move drip enrollments on to their next step."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import runtime
from tickwork.engine.drips import handle_drips
from tickwork.platform.observability import logger, metrics, tracer


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_drips(context, runtime.current())
