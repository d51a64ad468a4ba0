"""The suppression table: add an address (idempotent), read one."""

from __future__ import annotations

from uuid import UUID

from psycopg.rows import dict_row

from tickwork.platform.db import Connection
from tickwork.platform.sql import query
from tickwork.suppression.model import REASONS, Suppression, normalize_address, suppression_from_row

_SUPPRESS = query("suppress_address")
_GET = query("get_suppression")


def suppress(
    conn: Connection,
    workspace_id: UUID,
    channel: str,
    address: str,
    reason: str,
    source: str,
    detail: str | None = None,
    scope: str = "all",
) -> bool:
    """Suppress `address` on `channel` in the workspace, for everything (`all`) or one
    `campaign:<id>` or `rule:<id>`; True when it was not suppressed so before (an entry
    already on the list keeps its first reason and source)."""
    if reason not in REASONS:
        raise ValueError(f"unknown suppression reason {reason!r}")
    row = conn.execute(
        _SUPPRESS,
        {
            "workspace_id": workspace_id,
            "channel": channel,
            "address": normalize_address(channel, address),
            "scope": scope,
            "reason": reason,
            "source": source[:300],
            "detail": detail[:300] if detail else None,
        },
    ).fetchone()
    return row is not None


def find_suppression(
    conn: Connection, workspace_id: UUID, channel: str, address: str, scope: str = "all"
) -> Suppression | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _GET,
            {
                "workspace_id": workspace_id,
                "channel": channel,
                "address": normalize_address(channel, address),
                "scope": scope,
            },
        ).fetchone()
    return None if row is None else suppression_from_row(row)
