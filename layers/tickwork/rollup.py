"""Rows by status and action type at a cost flat in the backlog and the history (migrations
0015 and 0039).

Triggers append how many rows each workspace has of each type, and every finish appends what
finished, in the totals and in the ten minutes it finished in (the finalize, for the rows it
publishes, in its own statement); rows in flight are counted live from the queue. `counts`
is exact at any moment; the rollup cron only merges the deltas, and drops ten-minute counts
older than WINDOWS_KEPT.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from tickwork.platform.config import MAX_CLOCK_SKEW_TOLERANCE_SECONDS
from tickwork.platform.db import Connection
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow

_COMPACT_TYPE_ROWS = query("rollup_compact_type_rows")
_COMPACT_FINISHED_ROWS = query("rollup_compact_finished_rows")
_DROP_OLD_WINDOWS = query("rollup_drop_old_windows")
_COMPACT_WINDOWS = query("rollup_compact_windows")
_COUNTS = query("rollup_counts")
_NEEDS_PERSON = query("rollup_needs_person")
_FINISHED_BETWEEN = query("rollup_finished_between")

# How long what finished stays counted by ten minutes: the windows that read them (the
# operations view's 48 hours at most, `tickwork status`'s hour by default) look back less far.
WINDOWS_KEPT = timedelta(days=3)


@dataclass(frozen=True)
class Compaction:
    type_groups: int
    finished_groups: int
    window_groups: int

    def as_dict(self) -> dict[str, Any]:
        return {"type_groups": self.type_groups, "finished_groups": self.finished_groups,
                "window_groups": self.window_groups}  # fmt: skip


def compact(conn: Connection, now: datetime | None = None) -> Compaction:
    """Merge the deltas the triggers and the finishes appended, and drop the ten-minute
    counts no window reads any more. The owner's connection (it reads every workspace)."""
    keep_after = (now or utcnow()) - WINDOWS_KEPT
    with conn.transaction():
        types = conn.execute(_COMPACT_TYPE_ROWS).rowcount
        finished = conn.execute(_COMPACT_FINISHED_ROWS).rowcount
        conn.execute(_DROP_OLD_WINDOWS, {"keep_after": keep_after})
        windows = conn.execute(_COMPACT_WINDOWS).rowcount
    return Compaction(types, finished, windows)


def counts(conn: Connection, workspace_id: UUID | None) -> list[dict[str, Any]]:
    """Rows by (status, action_type), ordered so; `None` counts every workspace."""
    rows = conn.execute(
        _COUNTS,
        # Claimed rows are a range of the queue's due index: each was due within this of now.
        {"workspace_id": workspace_id, "claimed_due_within": MAX_CLOCK_SKEW_TOLERANCE_SECONDS},
    ).fetchall()
    return [
        {"status": status, "action_type": action_type, "count": count}
        for status, action_type, count in rows
    ]


def needs_person(conn: Connection, workspace_id: UUID | None) -> dict[str, int]:
    """Failed rows whose error is stuck or ambiguous (any age)."""
    row = conn.execute(_NEEDS_PERSON, {"workspace_id": workspace_id}).fetchone()
    assert row is not None
    return {"stuck": int(row[0]), "ambiguous": int(row[1])}


def finished_between(
    conn: Connection, workspace_id: UUID | None, start: datetime, stop: datetime
) -> list[dict[str, Any]]:
    """What finished from the ten minutes `start` is in to `stop`, by action type, status and
    error code ('' for none); `None` counts every workspace."""
    rows = conn.execute(
        _FINISHED_BETWEEN, {"workspace_id": workspace_id, "start": start, "stop": stop}
    ).fetchall()
    return [
        {"action_type": t, "status": s, "error_code": e, "count": int(n)} for t, s, e, n in rows
    ]
