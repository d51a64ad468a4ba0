"""Bulk transitions: cancel or retry the actions matching a filter, a bounded batch a call.

Each call takes at most `limit` matching rows in (publish_at, id) order after a cursor, and
moves them in one statement of conditional updates naming the status each expects, as the
single-row transitions do (queued → cancelled; failed → queued, bounded by the manual
retries). It answers how many rows matched, how many changed, how many had moved on
meanwhile (skipped) or may not be retried (refused, by reason), and the cursor to go on
from, or None when nothing is left. A repeated call changes nothing twice: a row it changed
no longer matches, and the cursor moves past the rows it saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.actions.store import integrity_errors
from tickwork.platform import paging
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query

_CANCEL = query("bulk_cancel_actions")
_RETRY = query("bulk_retry_actions")

DEFAULT_LIMIT = 500
MAX_LIMIT = 1000
# The walk's bounds when the filter names none: before every row and after every row.
_START = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))
_END = datetime(9999, 12, 31, tzinfo=UTC)

Operation = Literal["cancel", "retry"]
# The status each operation moves rows from: the only one a filter may name.
FROM_STATUS: dict[Operation, str] = {"cancel": "queued", "retry": "failed"}


@dataclass(frozen=True, slots=True)
class Filter:
    """Which rows a bulk call takes. `due_from` (inclusive) and `due_to` (exclusive) bound
    `publish_at`. Actions have no tags: `thing_id` and `target_key` name what they act on."""

    action_type: str | None = None
    error_code: str | None = None
    due_from: datetime | None = None
    due_to: datetime | None = None
    thing_id: str | None = None
    target_key: str | None = None

    def criteria(self) -> list[str]:
        """The fields given."""
        return [name for name in Filter.__dataclass_fields__ if getattr(self, name) is not None]


@dataclass(frozen=True, slots=True)
class Result:
    matched: int
    changed: int
    skipped: int
    refused: dict[str, int] = field(default_factory=dict)
    next: str | None = None
    changed_ids: list[UUID] = field(default_factory=list)


def check(
    operation: Operation, where: Filter, status: str | None, limit: int, after: str | None
) -> tuple[datetime, UUID]:
    """Refuse a filter that names nothing (it would take every row of the workspace), a
    status the operation cannot move, an empty range or a bad limit; the cursor to start
    after."""
    if not where.criteria():
        named = ", ".join(Filter.__dataclass_fields__)
        raise InputError(
            f"a bulk {operation} must name at least one criterion besides limit, after and"
            f" status ({named}): an empty filter would {operation} every"
            f" {FROM_STATUS[operation]} action of the workspace",
            field="body",
            details={"criteria": list(Filter.__dataclass_fields__)},
        )
    if status is not None and status != FROM_STATUS[operation]:
        raise InputError(
            f"status: only {FROM_STATUS[operation]} actions can be"
            f" {'cancelled' if operation == 'cancel' else 'retried'}; give"
            f" {FROM_STATUS[operation]!r} or leave it out",
            field="status",
        )
    if where.due_from and where.due_to and where.due_to <= where.due_from:
        raise InputError("due_to must be after due_from", field="due_to")
    if not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
    start = (where.due_from, UUID(int=0)) if where.due_from else _START
    if after is None:
        return start
    try:
        cursor = paging.decode_cursor(after)
    except InputError as exc:
        raise InputError("after is not a cursor this API returned", field="after") from exc
    return max(cursor, start)


def cancel_matching(
    conn: Connection,
    workspace_id: UUID,
    where: Filter,
    *,
    status: str | None = None,
    limit: int = DEFAULT_LIMIT,
    after: str | None = None,
) -> Result:
    """queued → cancelled for the next `limit` rows matching `where` after the cursor."""
    start = check("cancel", where, status, limit, after)
    return _run(conn, _CANCEL, _params(workspace_id, where, limit, start))


def retry_matching(
    conn: Connection,
    workspace_id: UUID,
    where: Filter,
    settings: Settings,
    *,
    status: str | None = None,
    limit: int = DEFAULT_LIMIT,
    after: str | None = None,
) -> Result:
    """failed → queued (due at once, at most `max_manual_retries` times a row) for the next
    `limit` rows matching `where` after the cursor."""
    start = check("retry", where, status, limit, after)
    params = _params(workspace_id, where, limit, start)
    params["max_manual_retries"] = settings.max_manual_retries
    return _run(conn, _RETRY, params)


def _params(
    workspace_id: UUID, where: Filter, limit: int, start: tuple[datetime, UUID]
) -> dict[str, Any]:
    return {
        "workspace_id": workspace_id, "after_at": start[0], "after_id": start[1],
        "before": where.due_to or _END, "action_type": where.action_type,
        "error_code": where.error_code, "thing_id": where.thing_id,
        "target_key": where.target_key, "limit": limit,
    }  # fmt: skip


def _run(conn: Connection, sql: Any, params: dict[str, Any]) -> Result:
    with integrity_errors(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    assert row is not None
    refused = {
        reason: count
        for reason, count in (("retries_exhausted", row["exhausted"]), ("taken", row["taken"]))
        if count
    }
    more = row["more"] and row["last_at"] is not None
    return Result(
        matched=row["matched"],
        changed=row["changed"],
        skipped=row["matched"] - row["changed"] - sum(refused.values()),
        refused=refused,
        next=paging.encode_cursor(row["last_at"], row["last_id"]) if more else None,
        changed_ids=list(row["ids"]),
    )
