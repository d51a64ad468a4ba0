"""The tick: hands due rows to the queue of their action type."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from tickwork.db import Connection
from tickwork.sql import query

_MARK_DUE = query("mark_due_enqueued")


@dataclass(frozen=True, slots=True)
class DueRow:
    id: UUID
    action_type: str
    due_at: datetime


def mark_due(
    conn: Connection, horizon: datetime, batch_size: int, paused_types: Collection[str] = ()
) -> list[DueRow]:
    """Mark the next batch of rows due by `horizon` as enqueued; returns them in due order."""
    rows = conn.execute(
        _MARK_DUE,
        {"horizon": horizon, "batch_size": batch_size, "paused_types": list(paused_types)},
    ).fetchall()
    return [DueRow(*row) for row in rows]
