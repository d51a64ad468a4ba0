"""The change log: every cancel, reschedule, defer, quiet-hours move, skip, drop, exit, hold and
retry of an action, with who or what made it, why, and the old and new time.

Entries are written where the change happens, so no code path can skip them: triggers on
scheduled_actions record cancels (by their error_code: `exited` → exit, `skipped` → skip,
`capped` → drop), turn a cancel followed by its replacement into a reschedule, and record a
quiet-hours move at creation; claim-time admission records defers, and the dispatcher's
rate limits the rows they held back (`throttled`); an admin's retry is written by the
retry statements themselves (`retry`: which retry, after which failure); an exit with
nothing left to cancel records itself. The actor is the API caller (`tickwork.actor`, set
for the request's transaction) or `system:<source>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.platform.db import Connection
from tickwork.platform.sql import query

_OF_ACTION = query("changes_of_action")
_LIST = query("list_changes")

KINDS = (
    "cancel",
    "reschedule",
    "defer",
    "quiet_hours",
    "skip",
    "drop",
    "exit",
    "digest",
    "flush",
    "throttled",
    "retry",
)


@dataclass(frozen=True, slots=True)
class Change:
    id: int
    workspace_id: UUID
    action_id: UUID | None
    enrollment_id: UUID | None
    kind: str
    actor: str
    reason: str | None
    old_at: datetime | None
    new_at: datetime | None
    new_action_id: UUID | None
    created_at: datetime


def change_from_row(row: Mapping[str, Any]) -> Change:
    return Change(**{name: row[name] for name in Change.__dataclass_fields__})


def changes_of(conn: Connection, workspace_id: UUID, action_id: UUID) -> list[Change]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _OF_ACTION, {"workspace_id": workspace_id, "action_id": action_id}
        ).fetchall()
    return [change_from_row(r) for r in rows]


def list_changes(
    conn: Connection, workspace_id: UUID, *, limit: int, after: int | None = None,
    kind: str | None = None, enrollment_id: UUID | None = None,
) -> list[Change]:  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _LIST,
            {"workspace_id": workspace_id, "limit": limit, "after": after, "kind": kind,
             "enrollment_id": enrollment_id},
        ).fetchall()  # fmt: skip
    return [change_from_row(r) for r in rows]
