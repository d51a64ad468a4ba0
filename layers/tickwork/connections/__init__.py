"""Connections: a workspace's own provider accounts, the credentials actions send through.

A connection has a provider (postmark, twilio, ...), settings (shown back, URLs masked:
`providers.catalog.masked_settings`) and credentials (write-only: kept in the secret store,
never returned, logged or put in `last_error`).
Deleting keeps the row as `deleted` so an action that named it fails with its own reason
(`connection_removed`) instead of being sent or lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from tickwork.connections.secrets import PROVIDER_TAG, SecretStore, SecretStoreError
from tickwork.platform.db import Connection as Db
from tickwork.platform.db import storable
from tickwork.platform.errors import ConflictError, InputError, NotFoundError
from tickwork.platform.sql import query
from tickwork.providers.base import Outcome, Rejected, Transient, Via
from tickwork.providers.catalog import RATE_LIMITS_SETTING

Status = Literal["active", "disabled", "deleted"]
MAX_LIST = 500

_INSERT = query("insert_connection")
_GET = query("get_connection")
_LIST = query("list_connections")
_UPDATE = query("update_connection")
_DELETE = query("delete_connection")
_VERIFIED = query("record_verification")
_FOR_SCHEDULE = query("connection_for_schedule")
_BY_ID = query("connections_by_id")


class ConnectionUnusableError(InputError):
    code = "connection_unusable"


@dataclass(frozen=True, slots=True)
class Connection:
    """One row of connections, column for column (no credentials: they are in the store)."""

    id: UUID
    workspace_id: UUID
    name: str
    provider: str
    settings: dict[str, Any]
    secret_ref: str | None
    status: Status
    verified_at: datetime | None
    verify_ok: bool | None
    verify_message: str | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None


def _not_found(connection_id: UUID | str) -> NotFoundError:
    return NotFoundError(f"no connection {connection_id} in this workspace")


def parse_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError as exc:
        raise _not_found(raw) from exc


def _one(conn: Db, sql: Any, params: Mapping[str, Any]) -> Connection | None:
    try:
        with storable(), conn.cursor(row_factory=class_row(Connection)) as cur:
            return cur.execute(sql, dict(params)).fetchone()
    except psycopg.errors.UniqueViolation as exc:
        raise ConflictError(
            "a connection with this name already exists in the workspace; pick another name",
            details={"field": "name"},
        ) from exc


def create(
    conn: Db,
    workspace_id: UUID,
    *,
    name: str,
    provider: str,
    settings: dict[str, Any],
    credentials: dict[str, str],
    store: SecretStore,
    created_by: str | None,
) -> Connection:
    """Insert the row and store its credentials, in the caller's transaction: a store that
    fails leaves no row behind."""
    connection_id = uuid4()
    ref = store.ref(str(connection_id))
    row = _one(conn, _INSERT, {
        "id": connection_id, "workspace_id": workspace_id, "name": name, "provider": provider,
        "settings": Jsonb(settings), "secret_ref": ref, "created_by": created_by,
    })  # fmt: skip
    assert row is not None
    _store(store, ref, credentials, provider)
    return row


def _store(store: SecretStore, ref: str, credentials: dict[str, str], provider: str) -> None:
    try:
        store.put(ref, credentials, {PROVIDER_TAG: provider})
    except SecretStoreError as exc:
        raise ConflictError(exc.message) from exc


def get(conn: Db, workspace_id: UUID, connection_id: UUID) -> Connection:
    found = _one(conn, _GET, {"id": connection_id, "workspace_id": workspace_id})
    if found is None:
        raise _not_found(connection_id)
    return found


def list_all(
    conn: Db, workspace_id: UUID, provider: str | None = None, limit: int = MAX_LIST
) -> list[Connection]:
    with conn.cursor(row_factory=class_row(Connection)) as cur:
        params = {"workspace_id": workspace_id, "provider": provider, "limit": limit}
        return cur.execute(_LIST, params).fetchall()


def update(
    conn: Db,
    workspace_id: UUID,
    connection_id: UUID,
    *,
    store: SecretStore,
    name: str | None = None,
    settings: dict[str, Any] | None = None,
    credentials: dict[str, str] | None = None,
    status: Literal["active", "disabled"] | None = None,
) -> Connection:
    changes_account = settings is not None or credentials is not None
    row = _one(conn, _UPDATE, {
        "id": connection_id, "workspace_id": workspace_id, "name": name,
        "settings": Jsonb(settings) if settings is not None else None, "status": status,
        "reset_verification": changes_account,
    })  # fmt: skip
    if row is None:
        raise _not_found(connection_id)
    if credentials is not None and row.secret_ref:
        _store(store, row.secret_ref, credentials, row.provider)
    return row


def delete(conn: Db, workspace_id: UUID, connection_id: UUID) -> Connection:
    """active|disabled → deleted. The caller removes the credentials after the commit."""
    row = _one(conn, _DELETE, {"id": connection_id, "workspace_id": workspace_id})
    if row is None:
        raise _not_found(connection_id)
    return row


def record_verification(
    conn: Db, workspace_id: UUID, connection_id: UUID, ok: bool, message: str
) -> Connection:
    row = _one(conn, _VERIFIED, {"id": connection_id, "workspace_id": workspace_id,
                                 "ok": ok, "message": message[:500]})  # fmt: skip
    if row is None:
        raise _not_found(connection_id)
    return row


def require_usable(conn: Db, workspace_id: UUID, connection_id: UUID, provider: str) -> Connection:
    """At schedule time: another workspace's connection is not found (404); a deleted,
    disabled or other provider's connection is refused (422) naming `connection_id`."""
    row = _one(conn, _FOR_SCHEDULE, {"id": connection_id, "workspace_id": workspace_id})
    if row is None:
        raise _not_found(connection_id)
    if row.status == "deleted":
        raise ConnectionUnusableError(
            f"connection {connection_id} was deleted; name another connection",
            field="connection_id",
        )
    if row.status == "disabled":
        raise ConnectionUnusableError(
            f"connection {connection_id} is disabled; enable it (PATCH status=active) first",
            field="connection_id",
        )
    if row.provider != provider:
        raise ConnectionUnusableError(
            f"connection {connection_id} is a {row.provider} connection; this action type"
            f" sends through {provider}",
            field="connection_id",
        )
    return row


def load(conn: Db, ids: Sequence[UUID]) -> dict[UUID, Connection]:
    """The connections of a claimed batch, any status, in one statement."""
    if not ids:
        return {}
    with conn.cursor(row_factory=class_row(Connection)) as cur:
        rows = cur.execute(_BY_ID, {"ids": list(set(ids))}).fetchall()
    return {row.id: row for row in rows}


def via_for(
    action_workspace: UUID,
    connection_id: UUID,
    found: Connection | None,
    provider: str,
    store: SecretStore,
) -> Via | Outcome:
    """What the dispatcher sends through for a claimed row, or why it must not send: a
    connection removed or disabled since scheduling fails the row (never sent); credentials
    that cannot be read now are a transient error (nothing left)."""
    if found is None or found.status == "deleted" or found.workspace_id != action_workspace:
        return Rejected("connection_removed", f"connection {connection_id} was deleted")
    if found.status == "disabled":
        return Rejected("connection_disabled", f"connection {connection_id} is disabled")
    if found.provider != provider:
        return Rejected(
            "connection_mismatch", f"connection {connection_id} is not a {provider} connection"
        )
    try:
        credentials = store.get(found.secret_ref or "")
    except SecretStoreError as exc:
        return Transient(f"the credentials of connection {connection_id}: {exc.message}")
    # The rate limits are the dispatcher's business, not the provider's.
    settings = {k: v for k, v in found.settings.items() if k != RATE_LIMITS_SETTING}
    return Via(found.id, found.workspace_id, found.provider, settings, credentials)
