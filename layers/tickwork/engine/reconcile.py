"""The reconciler's pass (every minute): schedule intents reconciled, drip enrollments
advanced, and the stats rollup's watermark moved up to what has finished.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import rollup
from tickwork.intents.reconcile import emit_metrics, reconcile_changed
from tickwork.platform.observability import logger, run_budget
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.wallclock import utcnow
from tickwork.runtime import Runtime
from tickwork.sequences.store import advance_ready
from tickwork.sequences.store import emit_metrics as emit_advance

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
    # Drip enrollments are producers' state too: their next steps are made here.
    advanced = advance_ready(runtime.db.connection(), runtime.settings, utcnow())
    emit_advance(advanced)
    if advanced.made:
        enqueue_soon(runtime.db.connection(), runtime.queues, advanced.made, runtime.settings)
    # The stats rollup's watermark moves up to what has finished (tickwork.rollup).
    rolled = rollup.advance(runtime.db.connection())
    return summary.as_dict() | {
        "sequences": advanced.as_dict(),
        "rollup": rolled.as_dict(),
    }
