"""The tick: recovers zombies, expires stale rows, and hands due rows to their queues.

It drains rather than sips: for each action type in turn it takes the next batch of rows
due within the look-ahead after the type's watermark (and any behind it that no queue has),
sends them with the whole seconds until they are due as the message delay, and moves the
watermark past them, in passes, until nothing is due within the look-ahead or its time
budget is spent. A pass locks its type's watermark (a concurrent tick skips the type) and
writes nothing per row: a tick that dies before its commit leaves the watermark where it
was, and the worst it can cost is a duplicate message, which the dispatcher's conditional
claim absorbs. A row whose message was lost is found again after the redelivery timeout.

Each run's summary names what it did to which rows (id, type, outcome), up to
`tick_summary_items` entries and a count of those left out, as one JSON log line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import events
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.observability import emit, logger, run_budget
from tickwork.platform.queues.enqueue import (
    PRODUCER_MARGIN_SECONDS,
    DueRow,
    Pass,
    active_action_types,
    finish_pass,
    marking,
    send_rows,
    take_due,
)
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow
from tickwork.runtime import Runtime

_RELEASE_LOST = query("release_lost_messages")
_FORGET_OLD_PASSES = query("forget_old_passes")
_RELEASE_ALL = query("release_all_enqueued")
_RECOVER_STUCK = query("recover_stuck")
_EXPIRE_LATE = query("expire_late")

EXPIRY_BATCH = 5000

# What a tick did to a row: handed to its queue; its send refused (un-marked, the next tick
# tries again); failed as stuck (claimed, no outcome within the stuck timeout); failed as
# expired (later than its type's max lateness); un-marked because its message was lost.
ItemOutcome = Literal["enqueued", "send_failed", "stuck", "expired", "redelivered"]
RowRef = tuple[UUID, str]  # (id, action type)


@dataclass
class TickSummary:
    dispatch_enabled: bool = True
    # The most per-row entries kept; beyond it rows are only counted (items_omitted), so a
    # burst of 100k rows still logs one line of bounded size.
    max_items: int = 100
    items: list[dict[str, str]] = field(default_factory=list)
    items_omitted: int = 0
    enqueued: dict[str, int] = field(default_factory=dict)
    recovered: int = 0
    expired: int = 0
    redelivered: int = 0
    events: int = 0  # outcome-event outbox entries turned into event rows
    send_failures: int = 0
    passes: int = 0
    elapsed_seconds: float = 0.0

    def note(self, rows: Sequence[RowRef], outcome: ItemOutcome) -> None:
        room = self.max_items - len(self.items)
        # Past the bound a burst's rows are only counted: no per-row work on the hot path.
        self.items.extend(
            {"id": str(action_id), "type": action_type, "outcome": outcome}
            for action_id, action_type in rows[: max(room, 0)]
        )
        self.items_omitted += max(len(rows) - max(room, 0), 0)

    def note_pass(self, rows: Sequence[DueRow], refused: set[UUID]) -> None:
        """A pass's rows, enqueued or refused by the queue. Past the bound the enqueued ones
        are only counted: a burst's pass of thousands builds a handful of entries."""
        failed = [(r.id, r.action_type) for r in rows if r.id in refused] if refused else []
        self.note(failed, "send_failed")
        room = max(self.max_items - len(self.items), 0)
        kept: list[RowRef] = []
        for row in rows:
            if len(kept) >= room:
                break
            if row.id not in refused:
                kept.append((row.id, row.action_type))
        self.items.extend({"id": str(i), "type": t, "outcome": "enqueued"} for i, t in kept)
        self.items_omitted += len(rows) - len(failed) - len(kept)

    @property
    def due(self) -> int:
        """Rows found due: those enqueued plus those whose send failed."""
        return sum(self.enqueued.values()) + self.send_failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "dispatch_enabled": self.dispatch_enabled,
            "due": self.due,
            "enqueued": sum(self.enqueued.values()),
            "enqueued_by_type": dict(self.enqueued),
            "recovered": self.recovered,
            "expired": self.expired,
            "redelivered": self.redelivered,
            "events": self.events,
            "send_failures": self.send_failures,
            "passes": self.passes,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "items": list(self.items),
            "items_omitted": self.items_omitted,
        }


def recover_stuck(conn: Connection, settings: Settings) -> int:
    return len(recover_stuck_rows(conn, settings))


def recover_stuck_rows(conn: Connection, settings: Settings) -> list[RowRef]:
    # Every configured type, paused ones too: a row claimed before a pause can be stuck.
    rows = conn.execute(
        _RECOVER_STUCK,
        {"stuck_timeout": settings.stuck_timeout_seconds,
         "due_within": settings.in_flight_due_within(),
         "action_types": list(settings.action_types)},
    ).fetchall()  # fmt: skip
    return [(row[0], row[1]) for row in rows]


def expire_late(conn: Connection, settings: Settings, action_types: Iterable[str]) -> int:
    return len(expire_late_rows(conn, settings, action_types))


def expire_late_rows(
    conn: Connection, settings: Settings, action_types: Iterable[str]
) -> list[RowRef]:
    expired: list[RowRef] = []
    for name in action_types:
        config = settings.action_types[name]
        if config.max_lateness_seconds is None:
            continue
        while True:
            rows = conn.execute(
                _EXPIRE_LATE,
                {"action_type": name, "max_lateness": config.max_lateness_seconds,
                 "batch_size": EXPIRY_BATCH},
            ).fetchall()  # fmt: skip
            expired.extend((row[0], name) for row in rows)
            if len(rows) < EXPIRY_BATCH:
                break
    return expired


def release_lost(conn: Connection, settings: Settings) -> int:
    return len(release_lost_rows(conn, settings))


def release_lost_rows(conn: Connection, settings: Settings) -> list[RowRef]:
    """Rows whose message must have been lost, unsent for this run's passes."""
    conn.execute(_FORGET_OLD_PASSES)
    # A row is handed to its queue at most the producers' horizon before it is due.
    due_within = settings.in_flight_due_within() + PRODUCER_MARGIN_SECONDS
    rows = conn.execute(
        _RELEASE_LOST,
        {"redelivery_timeout": settings.redelivery_timeout_seconds, "due_within": due_within,
         "action_types": list(settings.action_types)},
    ).fetchall()  # fmt: skip
    return [(row[0], row[1]) for row in rows]


def release_enqueued(conn: Connection, settings: Settings) -> int:
    """Every row handed to a queue goes back to the tick: for a runtime whose queue starts
    empty (the local one), the messages of its previous run are gone. Returns how many rows
    counted as handed to a queue by a producer (the tick's passes start over anyway)."""
    rows = conn.execute(_RELEASE_ALL, {"action_types": list(settings.action_types)}).fetchall()
    return len(rows)


def pump_events(conn: Connection, deadline: float) -> int:
    """Outcome events from the outbox into event rows, before the pass that enqueues due
    rows (so they go out in this tick). Its failure is logged and left to the next tick:
    the outbox keeps every entry, and the tick's own work must go on."""
    pumped = 0
    try:
        while time.monotonic() < deadline:
            taken = events.pump(conn)
            pumped += taken
            if taken < events.PUMP_BATCH:
                break
    except Exception:
        logger.exception("outcome events could not be pumped; the next tick tries again")
    return pumped


def run_tick(
    conn: Connection,
    queues: QueuePort,
    settings: Settings,
    *,
    budget_seconds: float | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> TickSummary:
    started = time.monotonic()
    deadline = started + (budget_seconds or settings.tick_budget_seconds)
    summary = TickSummary(
        dispatch_enabled=settings.dispatch_enabled, max_items=settings.tick_summary_items
    )
    if not settings.dispatch_enabled:
        return summary
    action_types = active_action_types(settings)
    recovered = recover_stuck_rows(conn, settings)
    summary.recovered = len(recovered)
    summary.note(recovered, "stuck")
    expired = expire_late_rows(conn, settings, action_types)
    summary.expired = len(expired)
    summary.note(expired, "expired")
    redelivered = release_lost_rows(conn, settings)
    summary.redelivered = len(redelivered)
    summary.note(redelivered, "redelivered")
    summary.events = pump_events(conn, deadline)
    lookahead = timedelta(seconds=settings.lookahead_seconds)
    # The types take turns, a pass each, so one type's burst does not hold back another's
    # rows; a type leaves the turns when it has nothing more due (or another tick has it).
    pending = list(action_types)
    while pending and time.monotonic() < deadline:
        for action_type in list(pending):
            if time.monotonic() >= deadline:
                break
            outcome = run_pass(conn, queues, settings, action_type, clock(), lookahead)
            if outcome is None:
                pending.remove(action_type)
                continue
            taken, sent, failed = outcome
            summary.passes += 1
            for name, count in sent.items():
                summary.enqueued[name] = summary.enqueued.get(name, 0) + count
            summary.note_pass(taken.rows, set(failed))
            if failed:
                # The queue is refusing: leave the rest for the next tick rather than spin.
                summary.send_failures += len(failed)
                pending = []
                break
            if max(len(taken.after), len(taken.unsent)) < settings.tick_batch_size:
                pending.remove(action_type)
    summary.elapsed_seconds = time.monotonic() - started
    return summary


def run_pass(
    conn: Connection,
    queues: QueuePort,
    settings: Settings,
    action_type: str,
    now: datetime,
    lookahead: timedelta,
) -> tuple[Pass, dict[str, int], list[UUID]] | None:
    """One pass of one type: its next rows taken, sent, and its watermark moved, in one
    transaction. None when there was nothing to send (or another tick holds the type)."""
    with marking(conn):
        taken = take_due(conn, action_type, now + lookahead, settings.tick_batch_size)
        if taken is None or not taken.rows:
            return None
        sent, failed = send_rows(conn, queues, taken.rows, now, settings)
        finish_pass(conn, taken, set(failed))
    return taken, sent, failed


def emit_metrics(summary: TickSummary) -> None:
    emit(
        {
            "TickDue": summary.due,
            "TickEnqueued": sum(summary.enqueued.values()),
            "RecoveredStuck": summary.recovered,
            "Expired": summary.expired,
            "Redelivered": summary.redelivered,
            "SendFailures": summary.send_failures,
        },
        seconds={"TickElapsed": summary.elapsed_seconds},
        by=("Enqueued", "action_type", summary.enqueued),
    )


# Left for the Lambda to return its summary and flush metrics after the budget ends.
TICK_MARGIN_SECONDS = 5.0


def handle_tick(context: LambdaContext, runtime: Runtime) -> dict[str, Any]:
    budget = run_budget(context, runtime.settings.tick_budget_seconds, TICK_MARGIN_SECONDS)
    summary = run_tick(
        runtime.db.connection(), runtime.queues, runtime.settings, budget_seconds=budget
    )
    emit_metrics(summary)
    logger.info("tick", extra=summary.as_dict())
    return summary.as_dict()
