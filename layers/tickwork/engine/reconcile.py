"""The reconciler's pass (every minute): schedule intents reconciled with scheduled_actions.

The drip advance (engine/drips.py) and the stats rollup (engine/rollup.py) run in Lambdas of
their own, so a failure in one of the three does not skip the others.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.intents.reconcile import emit_metrics, reconcile_changed
from tickwork.platform.observability import logger, run_budget
from tickwork.runtime import Runtime

# Left for the Lambda to return its summary and flush metrics after the budget ends.
RECONCILE_MARGIN_SECONDS = 5.0


def handle_reconcile(context: LambdaContext, runtime: Runtime) -> dict[str, Any]:
    budget = run_budget(
        context, runtime.settings.reconcile_budget_seconds, RECONCILE_MARGIN_SECONDS
    )
    summary = reconcile_changed(
        runtime.db.connection(), runtime.settings, queues=runtime.queues, budget_seconds=budget
    )
    emit_metrics(summary)
    logger.info("reconcile", extra=summary.as_dict())
    return summary.as_dict()
