"""Rows by status and action type at a cost flat in the backlog (migration 0015).

Triggers keep how many rows each workspace has of each type; the rollup cron advances a
watermark over finished_at and adds the rows finished before it; everything else is counted
live from small indexes. `counts` is exact: the rollup up to the watermark and the rows
finished since, read in one snapshot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from tickwork.platform.config import MAX_CLOCK_SKEW_TOLERANCE_SECONDS
from tickwork.platform.db import Connection
from tickwork.platform.sql import query

logger = logging.getLogger(__name__)

_MARK = query("rollup_mark")
_LOCK = query("rollup_lock")
_SAFE_MARK = query("rollup_safe_mark")
_ADD_FINISHED = query("rollup_add_finished")
_SET_MARK = query("rollup_set_mark")
_COMPACT_TYPE_ROWS = query("rollup_compact_type_rows")
_COMPACT_FINISHED_ROWS = query("rollup_compact_finished_rows")
_COUNTS = query("rollup_counts")
_NEEDS_PERSON = query("rollup_needs_person")

# Behind the oldest open transaction by this much: a transaction's start instant (its now())
# is taken a moment before pg_stat_activity shows it.
SAFE_MARGIN_SECONDS = 1.0
# Behind now by this much when some session is not visible to this role in pg_stat_activity:
# a transaction that finishes rows would have to stay open this long to be missed.
BLIND_MARGIN_SECONDS = 600.0
# An advance commits rarely (once a rollup run); a reader that keeps losing the race
# to it is told so rather than looping.
COUNT_ATTEMPTS = 5


@dataclass(frozen=True)
class Advance:
    previous: datetime | None
    finished_before: datetime | None
    groups_added: int

    def as_dict(self) -> dict[str, Any]:
        mark = self.finished_before
        return {"finished_before": mark.isoformat() if mark else None, "groups": self.groups_added}


def advance(
    conn: Connection,
    *,
    margin_seconds: float = SAFE_MARGIN_SECONDS,
    blind_margin_seconds: float = BLIND_MARGIN_SECONDS,
) -> Advance:
    """Move the watermark as far as is safe, adding the rows finished up to it, and merge
    the triggers' deltas. The owner's connection (it reads every workspace)."""
    with conn.transaction():
        conn.execute(_LOCK)
        row = conn.execute(_MARK).fetchone()
        previous = row[0] if row else None
        safe = conn.execute(
            _SAFE_MARK, {"margin": margin_seconds, "blind_margin": blind_margin_seconds}
        ).fetchone()
        assert safe is not None
        mark = safe[0]
        added = 0
        if previous is None or mark > previous:
            added = conn.execute(_ADD_FINISHED, {"previous": previous, "mark": mark}).rowcount
            conn.execute(_SET_MARK, {"mark": mark})
        else:
            mark = previous
        conn.execute(_COMPACT_TYPE_ROWS)
        conn.execute(_COMPACT_FINISHED_ROWS)
    return Advance(previous, mark, added)


class RollupBusy(RuntimeError):
    """The watermark moved under every read attempt."""


def _consistent(
    conn: Connection, statement: Any, workspace_id: UUID | None, mark_column: int
) -> list[Any]:
    """The rows of `statement`, read with the watermark the same snapshot saw."""
    for _ in range(COUNT_ATTEMPTS):
        row = conn.execute(_MARK).fetchone()
        mark = row[0] if row else None
        rows = conn.execute(statement, {
            "workspace_id": workspace_id, "mark": mark,
            # Claimed rows are a range of the due index: each was due within this of now.
            "claimed_due_within": MAX_CLOCK_SKEW_TOLERANCE_SECONDS,
        }).fetchall()  # fmt: skip
        if rows[0][mark_column] == mark:
            return rows
        logger.info("rollup watermark moved while counting; reading again")
    raise RollupBusy("the rollup's watermark kept moving; try again")


def counts(conn: Connection, workspace_id: UUID | None) -> list[dict[str, Any]]:
    """Rows by (status, action_type), ordered so; `None` counts every workspace. Run it in a
    transaction under calendar.SMALL_READS, as its callers do: its rows in flight are a
    range of the due index the planner overestimates (finished rows count as due)."""
    return [
        {"status": status, "action_type": action_type, "count": count}
        for status, action_type, count, _ in _consistent(conn, _COUNTS, workspace_id, 3)
        if status is not None
    ]


def needs_person(conn: Connection, workspace_id: UUID | None) -> dict[str, int]:
    """Failed rows whose error is stuck or ambiguous (any age)."""
    stuck, ambiguous, _ = _consistent(conn, _NEEDS_PERSON, workspace_id, 2)[0]
    return {"stuck": int(stuck), "ambiguous": int(ambiguous)}
