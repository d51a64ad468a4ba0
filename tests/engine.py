"""Helpers for engine tests: a recording queue port, seeding rows, ageing claims, a webhook
provider against a fake receiver, draining queues."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row

from tests.fakes import LOOPBACK
from tests.fakes.webhook_server import SECRET, FakeWebhookServer, fake_webhook_server
from tests.waiting import wait_for
from tickwork.engine.dispatch import Dispatcher, DispatchSummary
from tickwork.platform.db import Connection
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.platform.queues.port import OutgoingMessage
from tickwork.providers.webhook import WebhookProvider
from tickwork.runtime import Runtime


class RecordingQueues:
    """A queue port that keeps what it was sent and can refuse chosen ids (a message naming
    one is refused whole)."""

    def __init__(self) -> None:
        self.sent: dict[str, list[OutgoingMessage]] = defaultdict(list)
        self.refuse: set[UUID] = set()
        self._lock = threading.Lock()

    def send(self, action_type: str, messages: Sequence[OutgoingMessage]) -> list[UUID]:
        refused = [m for m in messages if self.refuse.intersection(m.action_ids)]
        with self._lock:
            self.sent[action_type].extend(m for m in messages if m not in refused)
        return [action_id for m in refused for action_id in m.action_ids]

    def change_visibility(self, action_type: str, changes: Sequence[Any]) -> int:
        return 0

    def ids(self, action_type: str | None = None) -> list[UUID]:
        types = [action_type] if action_type else list(self.sent)
        return [action_id for t in types for m in self.sent[t] for action_id in m.action_ids]


def seed(
    conn: Connection,
    workspace: UUID,
    count: int,
    publish_at: datetime,
    action_type: str = "log",
    spread: timedelta | None = None,
) -> list[UUID]:
    """Insert `count` queued rows due at `publish_at` (or spread evenly after it)."""
    step = (spread / count) if spread else timedelta(0)
    rows = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, %(type)s, 't' || g, %(at)s + (g - 1) * %(step)s"
        " from generate_series(1, %(n)s) g returning id",
        {"ws": workspace, "type": action_type, "at": publish_at, "step": step, "n": count},
    ).fetchall()
    return [row[0] for row in rows]


def claimed_an_hour_ago(conn: Connection, ids: Sequence[UUID] | None = None) -> None:
    """Move the claim (and the mark before it) of these rows, or of every row, an hour
    back: past the stuck and reclaim timeouts, as if its dispatcher had died. A row is
    claimed only once due, so a row due later than that is made due then too."""
    conn.execute(
        "update scheduled_actions set submitted_at = now() - interval '1 hour',"
        " enqueued_at = now() - interval '1 hour',"
        " publish_at = least(publish_at, now() - interval '1 hour'),"
        " next_attempt_at = least(next_attempt_at, now() - interval '1 hour'),"
        " updated_at = now()"
        " where %(ids)s::uuid[] is null or id = any(%(ids)s::uuid[])",
        {"ids": None if ids is None else list(ids)},
    )


@contextmanager
def webhook_receiver(runtime: Runtime, max_attempts: int) -> Iterator[FakeWebhookServer]:
    """A fake receiver, and the runtime's `webhook` type sending to it with short backoffs."""
    with fake_webhook_server() as server:
        options = {"endpoints": {"primary": {"url": server.url, "secret": SECRET}}}
        runtime.providers.register(
            "webhook", WebhookProvider(options, timeout=0.5, policy=LOOPBACK)
        )
        runtime.settings = runtime.settings.model_copy(
            update={"backoff_base_seconds": 0.05, "max_attempts": max_attempts}
        )
        yield server


def statuses(conn: Connection) -> dict[str, int]:
    return dict(
        conn.execute("select status, count(*) from scheduled_actions group by 1").fetchall()
    )


def row(conn: Connection, action_id: UUID) -> dict[str, Any]:

    with conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute("select * from scheduled_actions where id = %s", (action_id,))
        result = found.fetchone()
    assert result is not None
    return result


def in_queue(conn: Connection, action_id: UUID) -> bool:
    """Whether a row not finished was handed to its queue (migration 0039): by a producer, a
    dispatcher or the lost-message sweep (its queue entry's enqueued_at), or by the tick's
    pass (its type's watermark is past it and it is not unsent)."""
    found = conn.execute(
        "select q.enqueued_at is not null"
        "       or (tickwork_behind_watermark(q.action_type, q.due_at, q.id) and not q.unsent)"
        " from action_queue q where q.id = %s",
        (action_id,),
    ).fetchone()
    return bool(found and found[0])


def drain(
    runtime: Runtime, action_type: str = "log", batch_size: int = 10, wait: float = 0.0
) -> DispatchSummary:
    """Receive every visible message of one type and dispatch it, batch by batch."""
    assert isinstance(runtime.queues, InProcessQueues)
    queue = runtime.queues.queue(action_type)
    total = DispatchSummary()
    dispatcher = Dispatcher(runtime)
    while messages := queue.receive(batch_size, wait_seconds=wait):
        result = dispatcher.dispatch([(m.message_id, m.body) for m in messages])
        failed = set(result.failed_message_ids)
        queue.delete([m.receipt_handle for m in messages if m.message_id not in failed])
        s = result.summary
        total.received += s.received
        total.claimed += s.claimed
        total.skipped += s.skipped
        total.paused += s.paused
        total.throttled += s.throttled
        total.failed_over += s.failed_over
        total.circuits_opened += s.circuits_opened
        total.published += s.published
        total.requeued += s.requeued
        total.reverted += s.reverted
        for code, count in s.failed.items():
            total.failed[code] = total.failed.get(code, 0) + count
        total.lags.extend(s.lags)
    return total


def drain_all(runtime: Runtime, action_type: str = "log", timeout: float = 10.0) -> None:
    """Dispatch the messages of one type, delayed ones as they come due, until the queue
    holds none at all (visible, delayed or in flight): whatever was on its way has been
    dispatched. A test asserting that nothing more is sent waits for this first."""
    assert isinstance(runtime.queues, InProcessQueues)
    queue = runtime.queues.queue(action_type)

    def emptied() -> bool:
        drain(runtime, action_type, wait=0.1)
        return len(queue) == 0

    wait_for(emptied, timeout, interval=0, message=lambda: f"{action_type}: {queue.depth()}")
