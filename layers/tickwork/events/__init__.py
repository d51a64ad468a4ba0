"""Outcome events to the tenant: a workspace's endpoints, and the events they receive.

An endpoint is a URL, the event types it wants (and optionally the action types), and a
`whsec_` signing secret shown once, at creation. Its URL and secret are kept as a connection
of provider `event` (the secret in the secret store, never returned), which is how the
dispatcher finds where to send.

Events are scheduled actions of the internal type `event`, delivered by the engine with its
retries, its ledger and its dead-letter handling. An outcome reaches the outbox
(`event_outbox`) in the statement that makes it (migration 0026: the dispatcher's finalize
writes its wave's outcomes in one insert, a trigger the others: cancels, bulk cancels, the
tick's stuck and expired, enrollments completing), so it is as durable as the change
itself; the tick turns the outbox into event rows (`pump`). `emit_delivery_events` records
what a provider said later (delivered, bounced), for the delivery-callback code.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from tickwork import connections
from tickwork.actions.store import text_array, uuid_array
from tickwork.connections.secrets import SecretStore
from tickwork.platform.db import Connection as Db
from tickwork.platform.db import storable
from tickwork.platform.errors import InputError, NotFoundError
from tickwork.platform.sql import query
from tickwork.providers.http import OutboundPolicy, check_url
from tickwork.providers.redact import mask_url

EVENT_TYPES = (
    "action.published",
    "action.failed",
    "action.delivered",
    "action.bounced",
    "action.cancelled",
    "enrollment.completed",
)
DELIVERY_EVENT_TYPES = frozenset({"action.delivered", "action.bounced"})
EVENT_PROVIDER = "event"
MAX_ENDPOINTS = 20
MAX_LIST = 100

Status = Literal["active", "disabled", "deleted"]

_INSERT = query("insert_event_endpoint")
_GET = query("get_event_endpoint")
_LIST = query("list_event_endpoints")
_UPDATE = query("update_event_endpoint")
_DELETE = query("delete_event_endpoint")
_EMIT = query("emit_action_events")


class TooManyEndpointsError(InputError):
    code = "too_many_event_endpoints"


@dataclass(frozen=True, slots=True)
class EventEndpoint:
    """One row of event_endpoints, with its connection's URL (shown masked)."""

    id: UUID
    workspace_id: UUID
    connection_id: UUID
    event_types: list[str]
    action_types: list[str] | None
    description: str | None
    status: Status
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    url: str

    @property
    def masked_url(self) -> str:
        return mask_url(self.url)


@dataclass(frozen=True, slots=True)
class Created:
    endpoint: EventEndpoint
    secret: str  # whsec_<base64>: shown once, never again


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def _not_found(endpoint_id: UUID | str) -> NotFoundError:
    return NotFoundError(f"no event endpoint {endpoint_id} in this workspace")


def parse_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError as exc:
        raise _not_found(raw) from exc


def check_event_types(values: Sequence[str], field: str = "event_types") -> list[str]:
    unknown = sorted(set(values) - set(EVENT_TYPES))
    if unknown or not values:
        raise InputError(
            f"unknown event types {unknown}; known: {', '.join(EVENT_TYPES)}"
            if unknown
            else "name at least one event type",
            field=field,
        )
    return sorted(set(values))


def _one(conn: Db, sql: Any, params: dict[str, Any]) -> EventEndpoint | None:
    with storable(), conn.cursor(row_factory=class_row(EventEndpoint)) as cur:
        return cur.execute(sql, params).fetchone()


def create(
    conn: Db,
    workspace_id: UUID,
    *,
    url: str,
    event_types: Sequence[str],
    action_types: Sequence[str] | None,
    description: str | None,
    store: SecretStore,
    policy: OutboundPolicy,
    created_by: str | None,
) -> Created:
    """Check the URL as a webhook connection's is checked (http(s), public addresses unless
    the operator allowed the network), then insert the endpoint and its connection in the
    caller's transaction; the secret is returned here and only here."""
    check_url(url, policy)
    types = check_event_types(event_types)
    if len(list_all(conn, workspace_id)) >= MAX_ENDPOINTS:
        raise TooManyEndpointsError(
            f"a workspace has at most {MAX_ENDPOINTS} event endpoints; delete one first"
        )
    endpoint_id = uuid4()
    secret = new_secret()
    connection = connections.create(
        conn, workspace_id, name=f"events:{endpoint_id}", provider=EVENT_PROVIDER,
        settings={"url": url}, credentials={"signing_secret": secret}, store=store,
        created_by=created_by,
    )  # fmt: skip
    with storable():
        row = conn.execute(_INSERT, {
            "id": endpoint_id, "workspace_id": workspace_id, "connection_id": connection.id,
            "event_types": types, "action_types": None if action_types is None
            else sorted(set(action_types)), "description": description,
            "created_by": created_by,
        }).fetchone()  # fmt: skip
    assert row is not None
    return Created(get(conn, workspace_id, endpoint_id), secret)


def get(conn: Db, workspace_id: UUID, endpoint_id: UUID) -> EventEndpoint:
    found = _one(conn, _GET, {"id": endpoint_id, "workspace_id": workspace_id})
    if found is None:
        raise _not_found(endpoint_id)
    return found


def list_all(conn: Db, workspace_id: UUID, limit: int = MAX_LIST) -> list[EventEndpoint]:
    with conn.cursor(row_factory=class_row(EventEndpoint)) as cur:
        return cur.execute(_LIST, {"workspace_id": workspace_id, "limit": limit}).fetchall()


def update(
    conn: Db,
    workspace_id: UUID,
    endpoint_id: UUID,
    *,
    status: Literal["active", "disabled"] | None = None,
    event_types: Sequence[str] | None = None,
    action_types: Sequence[str] | None = None,
    clear_action_types: bool = False,
    description: str | None = None,
) -> EventEndpoint:
    row = _one(conn, _UPDATE, {
        "id": endpoint_id, "workspace_id": workspace_id, "status": status,
        "event_types": None if event_types is None else check_event_types(event_types),
        "action_types": None if action_types is None else sorted(set(action_types)),
        "clear_action_types": clear_action_types, "description": description,
    })  # fmt: skip
    if row is None:
        raise _not_found(endpoint_id)
    return row


def delete(conn: Db, workspace_id: UUID, endpoint_id: UUID) -> EventEndpoint:
    """active|disabled → deleted with its connection; the caller removes the secret after
    the commit."""
    row = _one(conn, _DELETE, {"id": endpoint_id, "workspace_id": workspace_id})
    if row is None:
        raise _not_found(endpoint_id)
    return row


@dataclass(frozen=True, slots=True)
class DeliveryEvent:
    """A later state of an action that its provider reported: `action.delivered` or
    `action.bounced`, with public details (e.g. {"bounce": "hard", "provider_at": ...})."""

    action_id: UUID
    type: Literal["action.delivered", "action.bounced"]
    details: dict[str, Any] | None = None


def emit_delivery_events(conn: Db, rows: Sequence[DeliveryEvent]) -> int:
    """Make the events of what providers said after `published`, for every active endpoint
    of the actions' workspaces that asked for them, in one statement (none for workspaces
    without endpoints). Call it in the transaction that records the delivery state, so an
    event exists exactly when that state does. Returns the number of event rows made."""
    if not rows:
        return 0
    for row in rows:
        if row.type not in DELIVERY_EVENT_TYPES:
            raise ValueError(f"not a delivery event type: {row.type!r}")
    params = {
        "ids": uuid_array(r.action_id for r in rows),
        "event_types": text_array(r.type for r in rows),
        "extras": [Jsonb({"delivery": r.details or {}}) for r in rows],
    }
    try:
        found = conn.execute(_EMIT, params).fetchone()
    except psycopg.errors.DataError as exc:  # pragma: no cover - the arrays are built here
        raise InputError(f"delivery events could not be made: {exc}") from exc
    return int(found[0] or 0) if found else 0


_WAITING_BEHIND = query("events_waiting_behind")


def waiting_behind(conn: Db, ids: Sequence[UUID]) -> set[UUID]:
    """Of claimed event rows, those with an earlier event of the same action (or
    enrollment) to the same endpoint still on its way: they must wait for it."""
    if not ids:
        return set()
    rows = conn.execute(_WAITING_BEHIND, {"ids": uuid_array(ids)}).fetchall()
    return {row[0] for row in rows}


_PUMP = query("pump_events")
PUMP_BATCH = 5000


def pump(conn: Db, limit: int = PUMP_BATCH) -> int:
    """Outbox entries, oldest first, into event rows (one per endpoint that wants each), at
    most `limit` entries; returns how many were taken. The tick runs it before it marks due
    rows, so the events made are handed to the queue in the same pass."""
    with conn.transaction():
        row = conn.execute(_PUMP, {"limit": limit}).fetchone()
    return int(row[0]) if row else 0
