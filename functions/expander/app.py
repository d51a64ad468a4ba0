"""Every hour: materialize the occurrences of every active recurring schedule, 14 days ahead."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import runtime
from tickwork.observability import logger, metrics, tracer
from tickwork.recurring import handle_expand


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_expand(context, runtime.current())
