"""Recipients in the database: put (create or replace), get, list, delete."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork import quotas
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, storable
from tickwork.platform.errors import ConflictError, NotFoundError
from tickwork.platform.sql import query
from tickwork.platform.wallclock import zone
from tickwork.quotas import Limits
from tickwork.recipients.model import (
    Recipient,
    check_recipient_id,
    parse_cap_policy,
    parse_caps,
    parse_quiet_hours,
    recipient_from_row,
)

_PUT = query("put_recipient")
_GET = query("get_recipient")
_LIST = query("list_recipients")
_DELETE = query("delete_recipient")
_COUNTS = query("recipient_counts")


@dataclass(frozen=True)
class RecipientInput:
    timezone: str
    quiet_hours: Any = None
    caps: Any = None
    cap_policy: Any = "defer"


@dataclass(frozen=True)
class StoredRecipient:
    recipient: Recipient
    row: dict[str, Any]
    created: bool = False


def _stored(row: dict[str, Any], created: bool = False) -> StoredRecipient:
    return StoredRecipient(recipient_from_row(row), row, created)


def put_recipient(
    conn: Connection, workspace_id: UUID, recipient_id: str, given: RecipientInput,
    settings: Settings, *, limits: Limits | None = None,
) -> StoredRecipient:  # fmt: skip
    """Create or replace a recipient after checking every field (nothing written otherwise)
    and, for a new one, the workspace's quota of recipients (`limits`; default: the
    stack's, from `settings`)."""
    check_recipient_id(recipient_id)
    zone(given.timezone)
    windows = parse_quiet_hours(given.quiet_hours)
    caps = parse_caps(given.caps, settings)
    policy = parse_cap_policy(given.cap_policy)
    params = {
        "workspace_id": workspace_id,
        "recipient_id": recipient_id,
        "timezone": given.timezone,
        "quiet_hours": Jsonb([w.as_json() for w in windows]),
        "caps": Jsonb(caps),
        "cap_policy": policy,
    }
    with conn.transaction(), storable(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_PUT, params).fetchone()
        assert row is not None
        if row["created"]:
            quotas.check_recipients(conn, workspace_id, limits or Limits.of(settings))
    return _stored(row, bool(row["created"]))


def find_recipient(conn: Connection, workspace_id: UUID, recipient_id: str) -> Recipient | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _GET, {"workspace_id": workspace_id, "recipient_id": recipient_id}
        ).fetchone()
    return recipient_from_row(row) if row else None


def get_recipient(conn: Connection, workspace_id: UUID, recipient_id: str) -> StoredRecipient:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _GET, {"workspace_id": workspace_id, "recipient_id": recipient_id}
        ).fetchone()
    if row is None:
        raise NotFoundError(f"no recipient {recipient_id[:200]!r} in this workspace")
    return _stored(row)


def list_recipients(
    conn: Connection, workspace_id: UUID, *, limit: int, after: str | None
) -> list[StoredRecipient]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _LIST, {"workspace_id": workspace_id, "after": after, "limit": limit}
        ).fetchall()
    return [_stored(row) for row in rows]


def delete_recipient(conn: Connection, workspace_id: UUID, recipient_id: str) -> None:
    try:
        with conn.transaction():
            row = conn.execute(
                _DELETE, {"workspace_id": workspace_id, "recipient_id": recipient_id}
            ).fetchone()
    except psycopg.errors.ForeignKeyViolation as exc:
        raise ConflictError(
            "this recipient has enrollments; exit them and keep the recipient"
        ) from exc
    if row is None:
        raise NotFoundError(f"no recipient {recipient_id[:200]!r} in this workspace")


def counts(
    conn: Connection, workspace_id: UUID, recipient_id: str, since: date
) -> list[tuple[str, date, int]]:
    rows = conn.execute(
        _COUNTS, {"workspace_id": workspace_id, "recipient_id": recipient_id, "since": since}
    ).fetchall()
    return [(str(r[0]), r[1], int(r[2])) for r in rows]
