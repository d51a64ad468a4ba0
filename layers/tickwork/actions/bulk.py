"""Bulk transitions: cancel or retry the actions matching a filter, a bounded batch a call.

Each call takes at most `limit` matching rows in (publish_at, id) order after a cursor, and
moves them in one statement of conditional updates naming the status each expects, as the
single-row transitions do (queued → cancelled; failed → queued, bounded by the manual
retries). It answers how many rows matched, how many changed, how many had moved on
meanwhile (skipped) or may not be retried (refused, by reason), and the cursor to go on
from, or None when nothing is left. A repeated call changes nothing twice: a row it changed
no longer matches, and the cursor moves past the rows it saw.

A cancel that names a parent (a `tag`, a `recipient_id`, an entity, a `campaign_id`) takes
every pending row of it instead, without walking the workspace: batches of at most
PARENT_BATCH rows along the parent's partial index of pending rows (SKIP LOCKED, so a row a
tick or dispatcher holds this instant is theirs), as many as fit in the call's row budget
(`limit`, up to MAX_PARENT_LIMIT) and time budget (BUDGET_SECONDS). Cancelled rows leave the
pending set, so no cursor is needed: `next` only says that more is left, and the next call
takes what is. A campaign's (or a recipient's) running enrollments are exited first, by the
caller's `exits` step (sequences live above this package), so none makes its next step.
Likewise a cancel by tag or by recipient first pauses the active recurring schedules that
carry the tag or send to the recipient (the caller's `pauses` step), so none makes its next
occurrences; not when the cancel names a due range (`due_from`, `due_to`): that cancels a
window, and the schedules go on after it. A paused schedule is no longer active, so a
later call pauses nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, LiteralString
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
_BY_PARENT: dict[str, tuple[LiteralString, LiteralString]] = {
    "tag": (query("bulk_cancel_by_tag"), query("pending_of_tag")),
    "recipient_id": (query("bulk_cancel_by_recipient"), query("pending_of_recipient")),
    "entity": (query("bulk_cancel_by_entity"), query("pending_of_entity")),
}
_BY_INDEX_ONLY = query("by_index_only")
_RESTORE_SCANS = query("restore_scans")

DEFAULT_LIMIT = 500
MAX_LIMIT = 1000
# A cancel by parent: rows (or enrollments) a call may take, and a statement's batch. The
# time budget keeps a call well inside the API's 29 s and its row locks short.
MAX_PARENT_LIMIT = 10_000
DEFAULT_PARENT_LIMIT = 5_000
PARENT_BATCH = 1000
BUDGET_SECONDS = 2.0
PARENTS = ("tag", "recipient_id", "entity", "campaign_id")
# The walk's bounds when the filter names none: before every row and after every row.
_START = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))
_END = datetime(9999, 12, 31, tzinfo=UTC)

Operation = Literal["cancel", "retry"]
# The status each operation moves rows from: the only one a filter may name.
FROM_STATUS: dict[Operation, str] = {"cancel": "queued", "retry": "failed"}


@dataclass(frozen=True, slots=True)
class Filter:
    """Which rows a bulk call takes. `due_from` (inclusive) and `due_to` (exclusive) bound
    `publish_at`. A cancel may name one parent: a tag, a recipient, an entity (type and id,
    the rows rules made for it) or a campaign (its running enrollments)."""

    action_type: str | None = None
    error_code: str | None = None
    due_from: datetime | None = None
    due_to: datetime | None = None
    thing_id: str | None = None
    target_key: str | None = None
    tag: str | None = None
    recipient_id: str | None = None
    entity_type: str | None = None
    entity_id: str | None = None
    campaign_id: UUID | None = None

    def criteria(self) -> list[str]:
        """The fields given."""
        return [name for name in Filter.__dataclass_fields__ if getattr(self, name) is not None]

    def parents(self) -> list[str]:
        """The parents named (an entity counts once, by either of its fields)."""
        given = {
            "tag": self.tag, "recipient_id": self.recipient_id, "campaign_id": self.campaign_id,
            "entity": self.entity_type or self.entity_id,
        }  # fmt: skip
        return [name for name in PARENTS if given[name] is not None]


@dataclass(frozen=True, slots=True)
class Result:
    matched: int
    changed: int
    skipped: int
    refused: dict[str, int] = field(default_factory=dict)
    next: str | None = None
    changed_ids: list[UUID] = field(default_factory=list)
    exited: int = 0  # enrollments a cancel by campaign or recipient exited
    # recurring schedules a cancel by tag or recipient paused
    paused_schedules: list[UUID] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Exits:
    """What a batch of exits did (the caller's `exits` step): enrollments taken and exited,
    and their pending steps cancelled."""

    taken: int
    exited: int
    cancelled: int


# Exit up to n running enrollments of the filter's campaign or recipient.
ExitStep = Callable[[int], Exits]
# Pause up to n active recurring schedules of the filter's tag or recipient: their ids.
PauseStep = Callable[[int], list[UUID]]


def pauses_schedules(where: Filter) -> bool:
    """Whether a cancel pauses the recurring schedules of its parent: by tag or recipient,
    and not of a due range only."""
    by_parent = where.tag is not None or where.recipient_id is not None
    return by_parent and where.due_from is None and where.due_to is None


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
    _check_parent(operation, where)
    most = MAX_PARENT_LIMIT if where.parents() else MAX_LIMIT
    if not 1 <= limit <= most:
        raise InputError(f"limit must be between 1 and {most}", field="limit")
    start = (where.due_from, UUID(int=0)) if where.due_from else _START
    if after is None:
        return start
    try:
        cursor = paging.decode_cursor(after)
    except InputError as exc:
        raise InputError("after is not a cursor this API returned", field="after") from exc
    return max(cursor, start)


def _check_parent(operation: Operation, where: Filter) -> None:
    parents = where.parents()
    if parents and operation != "cancel":
        raise InputError(
            f"a bulk {operation} takes no parent ({', '.join(parents)}): only a cancel does",
            field=parents[0],
        )
    if len(parents) > 1:
        raise InputError(
            f"name one parent a call, not {' and '.join(parents)}: cancel each in its own"
            " calls",
            field=parents[1], details={"parents": list(PARENTS)},
        )  # fmt: skip
    if (where.entity_type is None) != (where.entity_id is None):
        raise InputError(
            "an entity is entity_type and entity_id together: give both",
            field="entity_id" if where.entity_id is None else "entity_type",
        )
    if where.campaign_id is not None and where.criteria() != ["campaign_id"]:
        others = [name for name in where.criteria() if name != "campaign_id"]
        raise InputError(
            "a cancel by campaign exits all its running enrollments and takes no other"
            f" criterion ({', '.join(others)})",
            field=others[0],
        )
    if parents and where.error_code is not None:
        raise InputError(
            "error_code does not apply to a cancel by parent: pending rows are the target",
            field="error_code",
        )


def cancel_matching(
    conn: Connection,
    workspace_id: UUID,
    where: Filter,
    *,
    status: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    exits: ExitStep | None = None,
    pauses: PauseStep | None = None,
    budget_seconds: float = BUDGET_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Result:
    """queued → cancelled for the next `limit` rows matching `where` after the cursor; or,
    when `where` names a parent, for its pending rows within the call's budgets (`exits`
    first exits the campaign's or recipient's running enrollments: required for those;
    `pauses` first pauses the tag's or recipient's recurring schedules, where
    `pauses_schedules` says so)."""
    parents = where.parents()
    if limit is None:
        limit = DEFAULT_PARENT_LIMIT if parents else DEFAULT_LIMIT
    start = check("cancel", where, status, limit, after)
    if not parents:
        return _run(conn, _CANCEL, _params(workspace_id, where, limit, start))
    needs_exits = where.campaign_id is not None or where.recipient_id is not None
    if needs_exits and exits is None:
        raise ValueError("a cancel by campaign or recipient needs the exits step")
    steps = _Steps(exits if needs_exits else None, pauses if pauses_schedules(where) else None)
    with _by_index_only(conn, bitmap_only=parents[0] == "tag"):
        return _cancel_parent(
            conn, workspace_id, where, limit, steps, clock() + budget_seconds, clock
        )


@contextmanager
def _by_index_only(conn: Connection, *, bitmap_only: bool) -> Iterator[None]:
    # On an error the savepoint's rollback puts the settings back itself.
    with conn.transaction():
        row = conn.execute(_BY_INDEX_ONLY, {"indexscan": "off" if bitmap_only else "on"})
        was = row.fetchone()
        assert was is not None
        yield
        conn.execute(_RESTORE_SCANS, {"seqscan": was[0], "indexscan": was[1]})


@dataclass(frozen=True, slots=True)
class _Steps:
    """What a cancel by parent does before its rows: exit enrollments, pause schedules."""

    exits: ExitStep | None
    pauses: PauseStep | None


def _cancel_parent(
    conn: Connection, workspace_id: UUID, where: Filter, limit: int, first: _Steps,
    deadline: float, clock: Callable[[], float],
) -> Result:  # fmt: skip
    """Batches until the row budget, the time budget or the parent's pending rows run out:
    schedules paused first (each counts as a row), then enrollments exited, then rows."""
    spent = matched = exited = steps = 0
    ids: list[UUID] = []
    paused: list[UUID] = []
    exits, pauses = first.exits, first.pauses
    exiting, pausing = exits is not None, pauses is not None
    parent = where.parents()[0]
    params = _parent_params(workspace_id, where)
    while spent < limit and clock() < deadline:
        take = min(PARENT_BATCH, limit - spent)
        if pauses is not None and pausing:
            batch = pauses(take)
            paused += batch
            spent += len(batch)
            pausing = len(batch) == take
            continue
        if exits is not None and exiting:
            step = exits(take)
            spent += step.taken
            exited += step.exited
            matched += step.cancelled
            steps += step.cancelled
            exiting = step.taken == take
            continue
        if parent == "campaign_id":
            break  # a campaign's pending steps went with its enrollments
        sql, _ = _BY_PARENT[parent]
        with integrity_errors(), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(sql, params | {"limit": take}).fetchone()
        assert row is not None
        spent += row["matched"]
        matched += row["matched"]
        ids.extend(row["ids"])
        if row["matched"] < take:
            break
    more = pausing or exiting or (parent != "campaign_id" and _pending(conn, parent, params))
    changed = len(ids) + steps
    return Result(
        matched=matched,
        changed=changed,
        skipped=matched - changed,
        next=paging.encode_cursor(*_START) if more else None,
        changed_ids=ids,
        exited=exited,
        paused_schedules=paused,
    )


def _pending(conn: Connection, parent: str, params: dict[str, Any]) -> bool:
    _, sql = _BY_PARENT[parent]
    row = conn.execute(sql, params).fetchone()
    return bool(row and row[0])


def _parent_params(workspace_id: UUID, where: Filter) -> dict[str, Any]:
    return {
        "workspace_id": workspace_id, "tag": where.tag, "recipient_id": where.recipient_id,
        "entity_type": where.entity_type, "entity_id": where.entity_id,
        "action_type": where.action_type, "target_key": where.target_key,
        "thing_id": where.thing_id, "due_from": where.due_from or _START[0],
        "due_to": where.due_to or _END,
    }  # fmt: skip


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
