"""Handing due rows to their queues: the tick's passes along a watermark per action type, and
the producers' and dispatchers' sends of named rows.

The tick writes nothing per row it sends: a pass locks its type's watermark (a concurrent
tick skips the type), reads the type's rows after it and due within the look-ahead from
action_queue (which holds exactly the rows not finished), sends them, and moves the
watermark to the last one sent, all in one transaction. A tick that dies before its commit
leaves the watermark where it was: the rows are sent again, a duplicate message that the
dispatcher's conditional claim absorbs.

A row that comes to be queued behind its type's watermark (made, retried or backed off due
soon, handed back by a dispatcher) is sent by whoever put it there, after its commit
(`enqueue_soon`); until then it is `unsent`, and the tick's next pass sends it too. A row
whose message is lost is found again after the redelivery timeout (tick.release_lost).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from uuid import UUID

from psycopg.pq import TransactionStatus

from tickwork.platform.config import MAX_SQS_DELAY_SECONDS, Settings
from tickwork.platform.db import Connection
from tickwork.platform.queues.port import OutgoingMessage, QueuePort, doorbells
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow

_PASS_PLANS = query("pass_plans")
_ENSURE_WATERMARK = query("ensure_watermark")
_LOCK_WATERMARK = query("lock_watermark")
_DUE_AFTER = query("due_after_watermark")
_UNSENT = query("unsent_due")
_ADVANCE = query("advance_watermark")
_MARK_BY_ID = query("mark_enqueued_by_id")
_MARK_SENT = query("mark_sent")
_MARK_UNSENT = query("mark_unsent")
_NO_FLUSH_WAIT = query("commit_without_flush_wait")
_UNMARK = query("unmark_enqueued")
# Where a type's first pass starts: before every due time and id.
WATERMARK_START = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))
# A producer hands to its queue a row due this much later than the tick's look-ahead too: a
# tick's pass that starts while the producer's transaction is still open cannot see the
# row, and its watermark may pass it (up to its own look-ahead) before the commit.
PRODUCER_MARGIN_SECONDS = 60


class DueRow(NamedTuple):
    id: UUID
    action_type: str
    due_at: datetime
    workspace_id: UUID


class Pass(NamedTuple):
    """One pass's rows of one type: `unsent` (behind the watermark, handed to no queue) and
    `after` (after the watermark, in due order); the watermark moves to the last of `after`
    sent."""

    action_type: str
    unsent: list[DueRow]
    after: list[DueRow]

    @property
    def rows(self) -> list[DueRow]:
        return self.unsent + self.after


def active_action_types(settings: Settings) -> list[str]:
    """Types the tick may enqueue: configured and not paused by a kill switch."""
    return [name for name in settings.action_types if settings.dispatch_allowed(name)]


def take_due(conn: Connection, action_type: str, horizon: datetime, batch_size: int) -> Pass | None:
    """In the caller's transaction: lock `action_type`'s watermark (None: another tick holds
    it) and read its next rows due by `horizon`: first those behind the watermark that no
    queue has, then those after it, `batch_size` of each at most."""
    conn.execute(_PASS_PLANS)
    conn.execute(_ENSURE_WATERMARK, {"action_type": action_type})
    mark = conn.execute(_LOCK_WATERMARK, {"action_type": action_type}).fetchone()
    if mark is None:
        return None
    with conn.cursor(binary=True) as cur:
        unsent = cur.execute(
            _UNSENT,
            {"action_type": action_type, "horizon": horizon, "batch_size": batch_size},
        ).fetchall()
        after = cur.execute(
            _DUE_AFTER,
            {"action_type": action_type, "horizon": horizon, "batch_size": batch_size,
             "after_due": mark[0], "after_id": mark[1]},
        ).fetchall()  # fmt: skip
    return Pass(action_type, list(map(DueRow._make, unsent)), list(map(DueRow._make, after)))


def finish_pass(conn: Connection, taken: Pass, failed: Collection[UUID]) -> None:
    """In the pass's transaction, after its sends: the watermark moves past every row the
    pass took, the rows whose send failed are unsent (the next pass sends them again), and
    the unsent rows sent count as handed to their queue."""
    if taken.after:
        last = taken.after[-1]
        conn.execute(
            _ADVANCE, {"action_type": taken.action_type, "due_at": last.due_at, "id": last.id}
        )
    if failed:
        conn.execute(_MARK_UNSENT, {"ids": list(failed)})
    sent_unsent = [row.id for row in taken.unsent if row.id not in failed]
    if sent_unsent:
        conn.execute(_MARK_SENT, {"ids": sent_unsent})


def unmark(conn: Connection, messages: Iterable[tuple[UUID, datetime]]) -> None:
    """Hand rows back to the tick, each named with the due time its message carried: a row
    due at another time now (backing off) has a newer message in flight and stays as it is."""
    pairs = list(messages)
    if pairs:
        conn.execute(_UNMARK, {"ids": [p[0] for p in pairs], "due_ats": [p[1] for p in pairs]})


@contextmanager
def marking(conn: Connection) -> Iterator[None]:
    """The transaction in which rows are taken and their messages sent. Its commit does not
    wait for the disk (see commit_without_flush_wait)."""
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
    """Send rows to their queues, rows of a type and a workspace due within the message
    window sharing messages (queues.port.doorbells); the rows whose message failed go back
    to the tick. Returns (sent per action type, failed ids)."""
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


def producer_horizon(now: datetime, settings: Settings) -> datetime:
    """How far ahead a producer hands its rows to their queues itself: the look-ahead and a
    margin (within SQS's longest delay)."""
    ahead = min(settings.lookahead_seconds + PRODUCER_MARGIN_SECONDS, MAX_SQS_DELAY_SECONDS)
    return now + timedelta(seconds=ahead)


def enqueue_soon(
    conn: Connection,
    queues: QueuePort,
    ids: Sequence[UUID],
    settings: Settings,
    now: datetime | None = None,
) -> int:
    """Hand the named rows to their queues now if they are due within the producers' horizon,
    so a row created (or backed off) inside the current tick window still fires on time.
    Returns how many were sent."""
    if not ids:
        return 0
    now = now or utcnow()
    # Mark and send in one transaction, as the tick does: a crash in between unmarks.
    with marking(conn):
        marked = conn.execute(
            _MARK_BY_ID,
            {"ids": list(ids), "horizon": producer_horizon(now, settings),
             "action_types": active_action_types(settings)},
        ).fetchall()  # fmt: skip
        sent, _ = send_rows(conn, queues, list(map(DueRow._make, marked)), now, settings)
    return sum(sent.values())
