"""Workspaces: their zone and settings, and the admin commands that make them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.platform.db import Connection, storable
from tickwork.platform.errors import InputError, NotFoundError
from tickwork.platform.sql import query
from tickwork.platform.wallclock import zone

_GET = query("get_workspace")
_UPDATE = query("update_workspace")
_FIND = query("find_workspace")
_CREATE = query("create_workspace")
_UPSERT_MEMBER = query("upsert_member")

SETTINGS_MAX_BYTES = 16384
# A workspace's own retention (docs/retention.md), as the table's check says.
RETENTION_MIN_DAYS = 7
RETENTION_MAX_DAYS = 3650


class _Unset:
    """A value not given (where None is one: the retention back to the stack's)."""


UNSET = _Unset()


@dataclass(frozen=True)
class Workspace:
    id: UUID
    name: str
    timezone: str
    settings: dict[str, Any]
    # Its own retention in days (None: the stack's), and whether removal is suspended.
    retention_days: int | None
    legal_hold: bool
    created_at: datetime
    updated_at: datetime


def current(conn: Connection) -> Workspace:
    """The workspace of the current tenant transaction."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_GET).fetchone()
    if row is None:
        raise NotFoundError("workspace not found")
    return Workspace(**row)


def update(
    conn: Connection,
    *,
    name: str | None = None,
    timezone: str | None = None,
    settings: dict[str, Any] | None = None,
    retention_days: int | _Unset | None = UNSET,
    legal_hold: bool | None = None,
) -> Workspace:
    """Change the current workspace's name, zone (validated), settings (replaced whole),
    retention (days; None: the stack's) or legal hold."""
    set_retention = not isinstance(retention_days, _Unset)
    if isinstance(retention_days, int) and not (
        RETENTION_MIN_DAYS <= retention_days <= RETENTION_MAX_DAYS
    ):
        raise InputError(
            f"retention_days must be {RETENTION_MIN_DAYS} to {RETENTION_MAX_DAYS} days",
            field="retention_days",
        )
    if timezone is not None:
        zone(timezone)
    if name is not None and not (1 <= len(name.strip()) <= 200):
        raise InputError("name must be 1 to 200 characters", field="name")
    if settings is not None and len(json.dumps(settings)) > SETTINGS_MAX_BYTES:
        raise InputError(f"settings are larger than {SETTINGS_MAX_BYTES} bytes", field="settings")
    params = {
        "name": name,
        "timezone": timezone,
        "settings": Jsonb(settings) if settings is not None else None,
        "set_retention": set_retention,
        "retention_days": None if isinstance(retention_days, _Unset) else retention_days,
        "legal_hold": legal_hold,
    }
    with storable(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_UPDATE, params).fetchone()
    if row is None:
        raise NotFoundError("workspace not found")
    return Workspace(**row)


def ensure(conn: Connection, key: str, *, timezone: str = "UTC") -> tuple[UUID, bool]:
    """The workspace whose id or name is `key`, created (named `key`) if there is none.
    Returns (id, created). Runs as the owner: for operators and the local runtime."""
    row = conn.execute(_FIND, {"key": key}).fetchone()
    if row is not None:
        return UUID(str(row[0])), False
    zone(timezone)
    created = conn.execute(_CREATE, {"name": key, "timezone": timezone}).fetchone()
    assert created is not None
    return UUID(str(created[0])), True


def add_member(conn: Connection, workspace_id: UUID, user_id: str, role: str) -> None:
    if role not in ("member", "admin"):
        raise InputError("role must be member or admin", field="role")
    conn.execute(_UPSERT_MEMBER, {"workspace_id": workspace_id, "user_id": user_id, "role": role})
