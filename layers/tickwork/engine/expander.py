"""The expander (every hour): materializes each active recurring schedule's occurrences
up to the window ahead, in bounded batches, each schedule under its row lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import quotas
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.platform.observability import emit, logger, run_budget
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.sql import query
from tickwork.platform.wallclock import require_aware, utcnow
from tickwork.quotas import Limits
from tickwork.recurring.recurrence import (
    EXPANSION_BUDGET,
    Rule,
    bounded,
)
from tickwork.recurring.store import (
    INFRASTRUCTURE_ERRORS,
    Schedule,
    end_now,
    lock_to_expand,
    materialize,
    pause_unexpandable,
)
from tickwork.runtime import Runtime

_TO_EXPAND = query("schedules_to_expand")


# ------------------------------------------------------------------------------ expander


@dataclass
class ExpandSummary:
    schedules: int = 0  # schedules expanded
    created: int = 0  # occurrence rows materialized
    skipped: int = 0  # missed occurrences skipped by the catch-up policy
    conflicts: int = 0  # occurrences that already had a row
    ended: int = 0  # schedules whose rule has no occurrence left
    paused: int = 0  # schedules whose stored rule can no longer be expanded
    errors: int = 0
    batches: int = 0
    elapsed_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedules": self.schedules,
            "created": self.created,
            "skipped": self.skipped,
            "conflicts": self.conflicts,
            "ended": self.ended,
            "paused": self.paused,
            "errors": self.errors,
            "batches": self.batches,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
        }


def _expand_one(
    conn: Connection, schedule: Schedule, settings: Settings, now: datetime,
    summary: ExpandSummary, limits: Limits,
) -> list[UUID]:  # fmt: skip
    try:
        rule = Rule(schedule.recurrence)
        expansion = materialize(conn, schedule, rule, settings, now, limits)
        finished = (
            bounded(
                lambda: rule.next_after(now, anchor=expansion.schedule.expansion_anchor),
                EXPANSION_BUDGET,
            )
            is None
        )
    except InputError as exc:
        # The stored rule no longer expands (a zone gone from tzdata, a search too costly):
        # pause it, visibly, instead of failing every hour.
        pause_unexpandable(conn, schedule, str(exc), now)
        summary.paused += 1
        logger.warning(
            "recurring schedule paused", extra={"schedule_id": str(schedule.id), "why": str(exc)}
        )
        return []
    summary.schedules += 1
    summary.created += len(expansion.created)
    summary.skipped += expansion.skipped
    summary.conflicts += expansion.conflicts
    if finished:
        end_now(conn, expansion.schedule, "the rule has no occurrence left", now)
        summary.ended += 1
    return expansion.created


def expand_all(
    conn: Connection,
    settings: Settings,
    *,
    now: datetime | None = None,
    queues: QueuePort | None = None,
    budget_seconds: float | None = None,
) -> ExpandSummary:
    """Materialize every active schedule up to now + window. Ids are read in batches; each
    schedule is locked (SKIP LOCKED) and expanded in a transaction of its own, so
    concurrent expanders take disjoint schedules and a lock is never held for long. The
    unique index on (schedule, instant) makes a repeated expansion create nothing twice."""
    started = time.monotonic()
    deadline = started + (budget_seconds or settings.expander_budget_seconds)
    now = require_aware(now or utcnow(), field="now")
    horizon = now + timedelta(days=settings.recurring_window_days)
    summary = ExpandSummary()
    # Schedules this run will not expand: failed, or held by someone else. (One expanded is
    # materialized through the horizon, so the batch query leaves it out by itself.)
    passed: list[UUID] = []
    created: list[UUID] = []
    # Each workspace's quotas, read once a run (an operator may have set its own).
    limits: dict[UUID, Limits] = {}
    while time.monotonic() < deadline:
        params = {"horizon": horizon, "exclude": passed, "batch_size": settings.expander_batch_size}
        batch = [row[0] for row in conn.execute(_TO_EXPAND, params).fetchall()]
        if not batch:
            break
        summary.batches += 1
        for schedule_id in batch:
            if time.monotonic() >= deadline:
                break
            try:
                with conn.transaction():
                    locked = lock_to_expand(conn, schedule_id, horizon)
                    if locked is None:
                        passed.append(schedule_id)
                        continue
                    ws = locked.workspace_id
                    if ws not in limits:
                        limits[ws] = quotas.workspace_limits(conn, ws, settings)
                    created += _expand_one(conn, locked, settings, now, summary, limits[ws])
            except INFRASTRUCTURE_ERRORS:
                raise
            except Exception:
                logger.exception(
                    "recurring schedule not expanded", extra={"schedule_id": str(schedule_id)}
                )
                summary.errors += 1
                passed.append(schedule_id)
    if queues is not None and created:
        enqueue_soon(conn, queues, created, settings)
    summary.elapsed_seconds = time.monotonic() - started
    return summary


def emit_metrics(summary: ExpandSummary) -> None:
    emit(
        {
            "ExpanderSchedules": summary.schedules,
            "ExpanderCreated": summary.created,
            "ExpanderSkipped": summary.skipped,
            "ExpanderConflicts": summary.conflicts,
            "ExpanderEnded": summary.ended,
            "ExpanderPaused": summary.paused,
            "ExpanderErrors": summary.errors,
        },
        seconds={"ExpanderElapsed": summary.elapsed_seconds},
    )


# Left for the Lambda to return its summary and flush metrics after the budget ends.
EXPANDER_MARGIN_SECONDS = 10.0


def handle_expand(context: LambdaContext, runtime: Runtime) -> dict[str, Any]:
    budget = run_budget(context, runtime.settings.expander_budget_seconds, EXPANDER_MARGIN_SECONDS)
    summary = expand_all(
        runtime.db.connection(), runtime.settings, queues=runtime.queues, budget_seconds=budget
    )
    emit_metrics(summary)
    # Nested: "created" is a LogRecord attribute and cannot be a top-level extra key.
    logger.info("expander", extra={"summary": summary.as_dict()})
    return summary.as_dict()
