"""The drip advance (every minute): each drip step published or cancelled since the last
pass moves its enrollment on, and the next step's row is made (and enqueued when due now).

Its own Lambda, apart from the reconciler and the stats rollup: a failure here does not
hold up schedule intents or the rollup, nor theirs the drips.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.platform.observability import emit, logger
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.wallclock import utcnow
from tickwork.runtime import Runtime
from tickwork.sequences.store import advance_ready
from tickwork.sequences.store import emit_metrics as emit_advance


def handle_drips(context: LambdaContext, runtime: Runtime) -> dict[str, Any]:
    started = time.monotonic()
    advanced = advance_ready(runtime.db.connection(), runtime.settings, utcnow())
    emit_advance(advanced)
    if advanced.made:
        enqueue_soon(runtime.db.connection(), runtime.queues, advanced.made, runtime.settings)
    elapsed = time.monotonic() - started
    # DripsElapsed's sample count is what the "not running" alarm watches.
    emit({}, seconds={"DripsElapsed": elapsed})
    summary = advanced.as_dict() | {"elapsed_seconds": round(elapsed, 3)}
    logger.info("drips", extra=summary)
    return summary
