"""The suppression table: add an address (idempotent), read one, list, remove."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.platform.db import Connection
from tickwork.platform.errors import ForbiddenError, InputError, NotFoundError
from tickwork.platform.sql import query
from tickwork.suppression.model import REASONS, Suppression, normalize_address, suppression_from_row

_SUPPRESS = query("suppress_address")
_GET = query("get_suppression")
_LIST = query("list_suppressions")
_REMOVE = query("remove_suppression")


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


@dataclass(frozen=True)
class SuppressionPage:
    items: list[Suppression]
    next_cursor: str | None


def _cursor(entry: Suppression) -> str:
    # (UTF-8, not \u escapes: a page's cursor stays under the API's 600 characters for any
    # ASCII address up to the 320 an address may have)
    raw = json.dumps(
        [entry.created_at.isoformat(), entry.channel, entry.address, entry.scope],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _after(cursor: str | None) -> dict[str, object]:
    if cursor is None:
        return {"after_at": None, "after_channel": None, "after_address": None,
                "after_scope": None}  # fmt: skip
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, channel, address, scope = json.loads(base64.urlsafe_b64decode(padded.encode()))
        when = datetime.fromisoformat(at)
        if when.tzinfo is None or not all(isinstance(v, str) for v in (channel, address, scope)):
            raise ValueError("not a cursor")
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise InputError("cursor is not one this API returned", field="cursor") from exc
    return {"after_at": when, "after_channel": channel, "after_address": address,
            "after_scope": scope}  # fmt: skip


def list_suppressions(
    conn: Connection,
    workspace_id: UUID,
    *,
    channel: str | None = None,
    reason: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> SuppressionPage:
    """A page of the list, newest first, optionally of one channel or reason."""
    params = {"workspace_id": workspace_id, "channel": channel, "reason": reason,
              "limit": limit + 1} | _after(cursor)  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_LIST, params).fetchall()
    items = [suppression_from_row(r) for r in rows[:limit]]
    more = len(rows) > limit and items
    return SuppressionPage(items, _cursor(items[-1]) if more else None)


def remove_suppression(
    conn: Connection,
    workspace_id: UUID,
    channel: str,
    address: str,
    scope: str = "all",
    *,
    may_remove_complaint: bool = False,
) -> Suppression:
    """Remove one entry and return it. A complaint stays unless the caller may remove it
    (an admin): a recipient who marked a message as spam is not messaged again lightly."""
    params = {
        "workspace_id": workspace_id,
        "channel": channel,
        "address": normalize_address(channel, address),
        "scope": scope,
        "may_remove_complaint": may_remove_complaint,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_REMOVE, params).fetchone()
    if row is None:
        raise NotFoundError(f"{channel} {address!r} is not suppressed (scope {scope})")
    if not row["removed"]:
        raise ForbiddenError("only a workspace admin can remove a complaint from the list")
    return suppression_from_row(row)
