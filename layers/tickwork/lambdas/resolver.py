"""Every minute: settle rows failed ambiguous or stuck with their provider's lookup."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import runtime
from tickwork.engine.resolver import handle_resolve
from tickwork.platform.observability import logger, metrics, tracer


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_resolve(context, runtime.current())
