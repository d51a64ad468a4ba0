"""Delivery feedback in the database: the connection a callback names, each event recorded
once as a later state of its attempt (ranked: never backwards), suppression, counts.

`record_event` is the one way a delivery state changes; it returns what changed
(`Recorded`), for whatever must follow a change (outcome events to the tenant)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg.rows import class_row, dict_row

from tickwork.connections import Connection
from tickwork.feedback.model import (
    OUTCOMES,
    CallbackOutcome,
    Delivery,
    DeliveryEvent,
    Recorded,
    Suppress,
    rank,
)
from tickwork.platform.db import Connection as Db
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query
from tickwork.suppression.store import suppress

_CONNECTION = query("callback_connection")
_BECOME_API = query("become_api_role")
_RECEIPT = query("note_receipt")
_TARGET = query("delivery_target")
_BEFORE = query("delivery_before")
_RECORD = query("record_delivery")
_COUNT = query("count_callback")
_COUNTS = query("callback_counts")

SHARDS = 8
DEFAULT_RECEIPT_DAYS = 7


def callback_connection(conn: Db, connection_id: UUID) -> Connection | None:
    """The connection a callback names, any workspace, any status (its own transaction,
    as the API's role with no workspace: the lookup is a security definer function)."""
    with conn.transaction():
        conn.execute(_BECOME_API)
        with conn.cursor(row_factory=class_row(Connection)) as cur:
            return cur.execute(_CONNECTION, {"id": connection_id}).fetchone()


# The word a callback's suppression source names its reason by (docs/suppression.md lists
# the sources; a test holds the page to this).
SOURCE_WORDS = {"hard_bounce": "bounce", "complaint": "complaint", "stop_reply": "stop"}


def suppression_source(provider: str, connection_id: UUID | str, reason: str) -> str:
    """Who added an address a callback suppressed: `postmark:bounce:<connection id>`."""
    return f"{provider}:{SOURCE_WORDS[reason]}:{connection_id}"


def _suppress_all(conn: Db, connection: Connection, event: DeliveryEvent) -> tuple[Suppress, ...]:
    added = []
    for entry in event.suppress:
        source = suppression_source(connection.provider, connection.id, entry.reason)
        try:
            new = suppress(conn, connection.workspace_id, entry.channel, entry.address,
                           entry.reason, source, event.detail)  # fmt: skip
        except InputError:
            continue  # not an address that could be messaged anyway
        if new:
            added.append(entry)
    return tuple(added)


def _delivery(row: dict[str, object] | None) -> Delivery | None:
    if row is None or row["delivery_status"] is None:
        return None
    at = row["delivery_at"]
    return Delivery(
        status=row["delivery_status"],  # type: ignore[arg-type]
        bounce=row["delivery_bounce"],  # type: ignore[arg-type]
        at=at if isinstance(at, datetime) else None,
        detail=row["delivery_detail"],  # type: ignore[arg-type]
    )


def record_event(
    conn: Db,
    connection: Connection,
    event: DeliveryEvent,
    *,
    keep_days: int = DEFAULT_RECEIPT_DAYS,
) -> Recorded:
    """Record one verified event of `connection`, in the caller's tenant transaction of
    the connection's workspace: once (a repeat of its key is a duplicate and changes
    nothing), as a later state of the attempt that published the message when it ranks
    above the attempt's state, with the addresses it says to suppress. Counted."""
    params = {"connection_id": connection.id, "workspace_id": connection.workspace_id}
    fresh = conn.execute(
        _RECEIPT, {**params, "event_key": event.key[:300], "keep_days": keep_days}
    ).fetchone()
    recorded = Recorded("duplicate") if fresh is None else _apply(conn, connection, event)
    count(conn, connection, recorded.outcome)
    return recorded


def _apply(conn: Db, connection: Connection, event: DeliveryEvent) -> Recorded:
    suppressed = _suppress_all(conn, connection, event)
    if event.message_id is None or event.status is None:
        # An event about no message (an inbound STOP: applied, or stale when the number
        # was suppressed already) or one Tickwork does not track (an open: ignored).
        outcome: CallbackOutcome = "applied" if suppressed else "stale"
        return Recorded(outcome if event.suppress else "ignored", suppressed=suppressed)
    params = {"connection_id": connection.id, "workspace_id": connection.workspace_id}
    target = conn.execute(_TARGET, {**params, "message_id": event.message_id}).fetchone()
    if target is None:
        return Recorded("applied" if suppressed else "unmatched", suppressed=suppressed)
    action_id, attempt = target[0], max(int(target[1]), 1)
    key = {"action_id": action_id, "attempt": attempt, "workspace_id": connection.workspace_id}
    with conn.cursor(row_factory=dict_row) as cur:
        before = _delivery(cur.execute(_BEFORE, key).fetchone())
    after = Delivery(event.status, event.bounce, event.at, event.detail)
    moved = conn.execute(_RECORD, {
        **key, "status": event.status, "bounce": event.bounce,
        "rank": rank(event.status, event.bounce), "at": event.at,
        "detail": event.detail[:300] if event.detail else None,
    }).fetchone()  # fmt: skip
    if moved is None:
        outcome = "applied" if suppressed else "stale"
        return Recorded(outcome, action_id, attempt, before, None, suppressed)
    return Recorded("applied", action_id, attempt, before, after, suppressed)


def count(conn: Db, connection: Connection, outcome: CallbackOutcome) -> None:
    """One more callback of `outcome` for the connection (in the caller's tenant
    transaction of its workspace)."""
    conn.execute(_COUNT, {
        "connection_id": connection.id, "workspace_id": connection.workspace_id,
        "outcome": outcome, "shard": random.randrange(SHARDS),
    })  # fmt: skip


@dataclass(frozen=True)
class Counts:
    counts: dict[str, int]
    last_at: datetime | None


def counts_of(conn: Db, workspace_id: UUID, ids: Sequence[UUID]) -> dict[UUID, Counts]:
    """Each connection's callback counts by outcome (every outcome named, zeros too)."""
    found: dict[UUID, dict[str, int]] = {key: dict.fromkeys(OUTCOMES, 0) for key in ids}
    last: dict[UUID, datetime | None] = dict.fromkeys(ids)
    if ids:
        rows = conn.execute(_COUNTS, {"ids": list(ids), "workspace_id": workspace_id})
        for connection_id, outcome, total, at in rows.fetchall():
            found[connection_id][outcome] = int(total)
            seen = last[connection_id]
            last[connection_id] = at if seen is None or at > seen else seen
    return {key: Counts(found[key], last[key]) for key in ids}
