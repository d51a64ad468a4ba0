"""Reading the ledger: an action's attempts, oldest first (its entries, and the call that
published it, which the row itself records)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg.rows import class_row

from tickwork.platform.db import Connection
from tickwork.platform.sql import query

_ATTEMPTS = query("attempts_of_actions")
_ROUTE = query("attempt_route")


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One provider call as the ledger holds it (only sanitized text is ever stored)."""

    action_id: UUID
    attempt: int
    started_at: datetime
    finished_at: datetime | None
    latency_ms: int | None
    outcome: str
    provider_code: str | None
    provider_message_id: str | None
    excerpt: str | None
    resolution: str | None
    resolved_at: datetime | None
    resolution_detail: str | None
    # What the provider said later of the message (its status callbacks, tickwork.feedback):
    # sent, delivered, undelivered, bounced (hard or soft), complained; None when nothing.
    delivery_status: str | None = None
    delivery_bounce: str | None = None
    delivery_at: datetime | None = None
    delivery_detail: str | None = None
    # Types with fallback providers (docs/failover.md): which provider was called, and why
    # not the type's first (threshold, circuit_open); None: the type's provider.
    provider: str | None = None
    failover_reason: str | None = None


def attempts_of(conn: Connection, workspace_id: UUID, action_id: UUID) -> list[AttemptRow]:
    return attempts_by_action(conn, workspace_id, [action_id]).get(action_id, [])


def attempts_by_action(
    conn: Connection, workspace_id: UUID, action_ids: Sequence[UUID]
) -> dict[UUID, list[AttemptRow]]:
    with conn.cursor(row_factory=class_row(AttemptRow)) as cur:
        rows = cur.execute(
            _ATTEMPTS, {"action_ids": list(action_ids), "workspace_id": workspace_id}
        ).fetchall()
    found: dict[UUID, list[AttemptRow]] = {}
    for row in rows:
        found.setdefault(row.action_id, []).append(row)
    return found


@dataclass(frozen=True, slots=True)
class AttemptRoute:
    """Which provider an attempt called and through which connection (None: the provider's
    stack-wide options, or not recorded), as its ledger entry holds them."""

    provider: str | None
    connection_id: UUID | None


def route_of(conn: Connection, action_id: UUID, attempt: int) -> AttemptRoute | None:
    """The route of one attempt; None when the ledger has no entry for it."""
    found = conn.execute(_ROUTE, {"id": action_id, "attempt": attempt}).fetchone()
    return None if found is None else AttemptRoute(found[0], found[1])
