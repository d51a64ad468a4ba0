"""Every minute: add what has finished to the stats rollup /v1/stats reads."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import runtime
from tickwork.engine.rollup import handle_rollup
from tickwork.platform.observability import logger, metrics, tracer


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_rollup(context, runtime.current())
