"""What active recurring schedules will make beyond the rows the expander has made: their
projected occurrences in a range, for a calendar that is a true forward view.

The expander materializes 14 days ahead (`last_materialized_through`); a schedule that
starts in March shows nothing in December's calendar without this. Each occurrence is read
from the schedule's compiled rule (`Rule`, as the expander and the preview read it), after
`last_materialized_through` only, so an occurrence is either a row or a projection, never
both. Bounded: a number of schedules, of occurrences, of work per rule and of time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query
from tickwork.recurring.recurrence import Rule, bounded
from tickwork.recurring.store import Schedule, schedule_from_row

_PROJECTABLE = query("projectable_schedules")

# The most a projection reads and answers: schedules (in creation order), occurrences, work
# per rule (Python function calls, about a second at most: see recurrence.bounded) and time.
MAX_SCHEDULES = 200
MAX_OCCURRENCES = 2000
RULE_BUDGET = 1_000_000
MAX_SECONDS = 2.0
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Projected:
    """An occurrence a schedule will make, not made yet: no row, no id."""

    schedule_id: UUID
    action_type: str
    target_key: str
    at: datetime  # the rule's instant (quiet hours may still move the row it becomes)


@dataclass(frozen=True)
class Projection:
    occurrences: list[Projected]  # in instant order
    complete: bool  # False: a bound was reached, and there may be more


def project(
    conn: Connection,
    workspace_id: UUID,
    start: datetime,
    end: datetime,
    *,
    now: datetime,
    action_type: str | None = None,
) -> Projection:
    """The occurrences in [start, end), after `now`, that active schedules of the workspace
    will make and that have no row yet (one already due with no row never fires on time:
    the catch-up policy skips it, or fires it late)."""
    params = {
        "workspace_id": workspace_id, "from": start, "to": end, "action_type": action_type,
        "limit": MAX_SCHEDULES + 1,
    }  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        schedules = [schedule_from_row(row) for row in cur.execute(_PROJECTABLE, params)]
    complete = len(schedules) <= MAX_SCHEDULES
    deadline = time.monotonic() + MAX_SECONDS
    found: list[Projected] = []
    for schedule in schedules[:MAX_SCHEDULES]:
        room = MAX_OCCURRENCES - len(found)
        if room <= 0 or time.monotonic() > deadline:
            return Projection(sorted(found, key=lambda p: p.at), False)
        occurrences = _occurrences(schedule, max(start, now), end, room + 1)
        if occurrences is None or len(occurrences) > room:
            complete = False
        found.extend(
            Projected(schedule.id, schedule.action_type, schedule.target_key, at)
            for at in (occurrences or [])[:room]
        )
    return Projection(sorted(found, key=lambda p: p.at), complete)


def _occurrences(
    schedule: Schedule, start: datetime, end: datetime, count: int
) -> list[datetime] | None:
    """Up to `count` instants of the schedule's rule in [start, end) after what it has made;
    None when the rule cannot be read within its budget (the expander pauses such a one)."""
    # Rows exist up to last_materialized_through; the first projection is after it.
    after = max(schedule.last_materialized_through, start - _TICK)
    if after >= end - _TICK:
        return []
    try:
        rule = Rule(schedule.recurrence)
        upcoming = bounded(
            lambda: rule.upcoming(
                after, count, within=end - _TICK - after, anchor=schedule.expansion_anchor
            ),
            RULE_BUDGET,
        )
    except InputError:
        return None
    return [occurrence.at for occurrence in upcoming]
