"""The stats rollup (every minute): merges the deltas that the triggers and the finishes
append into the counts `/v1/stats` reads (tickwork.rollup).

Its own Lambda, apart from the reconciler and the drip advance: a failure here does not
hold up either of them, nor theirs the rollup.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import rollup
from tickwork.platform.observability import emit, logger
from tickwork.runtime import Runtime


def handle_rollup(context: LambdaContext, runtime: Runtime) -> dict[str, Any]:
    started = time.monotonic()
    rolled = rollup.compact(runtime.db.connection())
    elapsed = time.monotonic() - started
    # RollupElapsed's sample count is what the "not running" alarm watches.
    emit({"RollupGroups": rolled.finished_groups}, seconds={"RollupElapsed": elapsed})
    summary = rolled.as_dict() | {"elapsed_seconds": round(elapsed, 3)}
    logger.info("rollup", extra=summary)
    return summary
