"""Migrates the database schema; run by the stack as a custom resource, or invoked by hand."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.engine.deploy import handle_migration_event
from tickwork.platform.observability import logger


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_migration_event(event, context)
