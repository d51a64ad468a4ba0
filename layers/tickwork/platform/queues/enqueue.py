"""Marking due rows enqueued and ringing their queues' doorbells, in one transaction.

The tick drains with these, and the API, the dispatcher's backoff, the reconciler and the
expander call `enqueue_soon` after committing rows due inside the current tick window, so
they fire on time rather than at the next tick. A pass marks and sends inside one
transaction: the mark commits only after its messages were handed to the queue, so a crash
between the two leaves its rows unmarked, and the worst it can cost is a duplicate message,
which the dispatcher's conditional claim absorbs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from uuid import UUID

from psycopg.pq import TransactionStatus

from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.queues.port import OutgoingMessage, QueuePort, doorbells
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow

_MARK_DUE = query("mark_due_enqueued")
_MARK_BY_ID = query("mark_enqueued_by_id")
_NO_FLUSH_WAIT = query("commit_without_flush_wait")
_UNMARK = query("unmark_enqueued")
# Where a tick run's cursor starts: before every due time and id.
CURSOR_START = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))


class DueRow(NamedTuple):
    id: UUID
    action_type: str
    due_at: datetime
    workspace_id: UUID


def active_action_types(settings: Settings) -> list[str]:
    """Types the tick may enqueue: configured and not paused by a kill switch."""
    return [name for name in settings.action_types if settings.dispatch_allowed(name)]


def mark_due(
    conn: Connection,
    horizon: datetime,
    batch_size: int,
    action_types: Collection[str],
    after: tuple[datetime, UUID] = CURSOR_START,
) -> list[DueRow]:
    """Mark the next batch of rows due by `horizon`, and after `after` (due time, id), as
    enqueued; returns them in (due time, id) order."""
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(
            _MARK_DUE,
            {"horizon": horizon, "batch_size": batch_size, "action_types": list(action_types),
             "after_due": after[0], "after_id": after[1]},
        ).fetchall()  # fmt: skip
    return list(map(DueRow._make, rows))


def unmark(conn: Connection, messages: Iterable[tuple[UUID, datetime]]) -> None:
    """Hand rows back to the tick, each named with the due time its message carried: a row
    due at another time now (backing off) has a newer message in flight and stays marked."""
    pairs = list(messages)
    if pairs:
        conn.execute(_UNMARK, {"ids": [p[0] for p in pairs], "due_ats": [p[1] for p in pairs]})


@contextmanager
def marking(conn: Connection) -> Iterator[None]:
    """The transaction in which rows are marked and their messages sent. Its commit does not
    wait for the disk (see commit_without_flush_wait): on a burst of rows already due, the
    tick holds the rows' locks, and the dispatchers wait, for less time."""
    # Only in a transaction of its own: inside another, the setting would cover that
    # transaction's writes too (a row created in it must not be lost to a crash).
    outermost = conn.info.transaction_status == TransactionStatus.IDLE
    with conn.transaction():
        if outermost:
            conn.execute(_NO_FLUSH_WAIT)
        yield


def send_rows(
    conn: Connection, queues: QueuePort, rows: Sequence[DueRow], now: datetime, settings: Settings
) -> tuple[dict[str, int], list[UUID]]:
    """Send marked rows to their queues, rows of a type and a workspace due within the message
    window sharing messages (queues.port.doorbells); un-mark the rows whose message failed.
    Returns (sent per action type, failed ids)."""
    by_type: dict[str, list[OutgoingMessage]] = defaultdict(list)
    for message in doorbells(rows, now, settings.rows_per_message):
        by_type[message.action_type].append(message)
    sent: dict[str, int] = {}
    failed: list[UUID] = []
    for action_type, messages in by_type.items():
        not_sent = queues.send(action_type, messages)
        failed.extend(not_sent)
        sent[action_type] = sum(len(m.action_ids) for m in messages) - len(not_sent)
    refused = set(failed)
    unmark(conn, [(row.id, row.due_at) for row in rows if row.id in refused])
    return sent, failed


def enqueue_soon(
    conn: Connection,
    queues: QueuePort,
    ids: Sequence[UUID],
    settings: Settings,
    now: datetime | None = None,
) -> int:
    """Hand the named rows to their queues now if they are due within the look-ahead, so a
    row created (or backed off) inside the current tick window still fires on time.
    Returns how many were sent."""
    if not ids:
        return 0
    now = now or utcnow()
    horizon = now + timedelta(seconds=settings.lookahead_seconds)
    # Mark and send in one transaction, as the tick does: a crash in between unmarks.
    with marking(conn):
        marked = conn.execute(
            _MARK_BY_ID,
            {"ids": list(ids), "horizon": horizon, "action_types": active_action_types(settings)},
        ).fetchall()
        sent, _ = send_rows(conn, queues, list(map(DueRow._make, marked)), now, settings)
    return sum(sent.values())
