"""Entities and their reference dates: `PUT /v1/entities/{type}/{id}/dates`.

An entity is the app's own thing (a booking, an episode) named by type and id within the
workspace, with a time zone, named reference dates (`start`, `publish`) and a context. For
every enabled time rule on one of its references there is one action at reference +
offset, with the key `time_trigger:{rule}:{trigger}:{entity}:{reference ISO instant}`. A
date given as a wall time (`2027-03-28T15:00`) is read in the entity's zone by the
project's rule for skipped and repeated times; one with an offset is an instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.actions.model import PAYLOAD_MAX_BYTES, payload_size
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, storable
from tickwork.platform.errors import (
    InputError,
    InvalidTimeError,
    NotFoundError,
    PayloadTooLargeError,
)
from tickwork.platform.sql import query
from tickwork.platform.wallclock import check_horizon, require_aware, resolve_wall_time, zone
from tickwork.rules.events import has_nul
from tickwork.rules.model import MAX_DATES, NAME, WITHDRAWN, ProduceResult, rule_from_row
from tickwork.rules.produce import (
    EntityState,
    RuleRow,
    emit_metrics,
    rule_rows,
    sync_entity,
    withdraw,
)

_TIME_RULES = query("time_rules")
_UPSERT = query("upsert_entity")
_UPSERT_CONTEXT = query("upsert_entity_context")
_GET = query("get_entity")
_LOCK = query("lock_entity")
_DATES = query("entity_dates")
_CLEAR_DATES = query("clear_entity_dates")
_INSERT_DATES = query("insert_entity_dates")
_DELETE = query("delete_entity")
_LIVE = query("live_entity_actions")
_ALL = query("entity_actions")

MAX_ENTITY_ID = 200


@dataclass(frozen=True)
class EntityInput:
    """Dates as the app gives them: name → `YYYY-MM-DDTHH:MM[:SS]` (a wall time in
    `timezone`) or RFC 3339 with an offset (an instant)."""

    dates: Mapping[str, str | datetime]
    timezone: str | None = None
    context: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferenceDate:
    name: str
    at: datetime
    wall: datetime | None  # the wall time given, in the entity's zone


@dataclass(frozen=True)
class Entity:
    entity_type: str
    entity_id: str
    timezone: str
    context: dict[str, Any]
    dates: list[ReferenceDate]
    created_at: datetime
    updated_at: datetime

    def state(self) -> EntityState:
        return EntityState(self.entity_type, self.entity_id, self.timezone, self.context,
                           {d.name: d.at for d in self.dates})  # fmt: skip


@dataclass(frozen=True)
class EntityView:
    entity: Entity
    actions: list[RuleRow]


@dataclass(frozen=True)
class EntityResult(EntityView):
    created: bool = False
    result: ProduceResult = field(default_factory=ProduceResult)


def check_entity_key(entity_type: str, entity_id: str) -> None:
    if not NAME.match(entity_type):
        raise InputError(
            f"entity type {entity_type[:80]!r} must be a lower-case name such as 'booking'",
            field="entity_type",
        )
    if not 1 <= len(entity_id) <= MAX_ENTITY_ID or "\x00" in entity_id:
        raise InputError(f"entity id must be 1 to {MAX_ENTITY_ID} characters", field="entity_id")


def parse_dates(
    raw: Mapping[str, str | datetime], tz_name: str, now: datetime, horizon_days: int
) -> list[ReferenceDate]:
    """The dates as instants, each within the scheduling horizon of `now` (its time rules'
    offsets are added to it)."""
    tz = zone(tz_name)
    if not isinstance(raw, Mapping) or len(raw) > MAX_DATES:
        raise InputError(f"dates must be an object of at most {MAX_DATES} names", field="dates")
    parsed: list[ReferenceDate] = []
    for name, value in sorted(raw.items()):
        where = f"dates.{name}"
        if not isinstance(name, str) or not NAME.match(name):
            raise InputError(
                f"dates: {str(name)[:80]!r} must be a lower-case name such as 'start'",
                field="dates",
            )
        try:
            given = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        except (TypeError, ValueError) as exc:
            raise InvalidTimeError(
                f"{where} {str(value)[:80]!r} is not a date and time such as"
                " 2027-03-28T15:00 (in the entity's zone) or 2027-03-28T15:00:00+02:00",
                field=where,
            ) from exc
        wall = given.replace(tzinfo=None) if given.tzinfo is None else None
        if wall is None:
            at = require_aware(given, field=where)
        else:
            try:
                at = resolve_wall_time(date(wall.year, wall.month, wall.day),
                                       time(wall.hour, wall.minute, wall.second,
                                            wall.microsecond), tz)  # fmt: skip
            except InvalidTimeError as exc:
                raise InvalidTimeError(f"{where}: {exc.message}", field=where) from exc
        check_horizon(at, now, horizon_days, field=where)
        parsed.append(ReferenceDate(name, at, wall))
    return parsed


def load_entity(conn: Connection, workspace_id: UUID, row: Mapping[str, Any]) -> Entity:
    key = {"workspace_id": workspace_id, "entity_type": row["entity_type"],
           "entity_id": row["entity_id"]}  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        dates = [
            ReferenceDate(d["name"], d["at"], d["wall"])
            for d in cur.execute(_DATES, key).fetchall()
        ]
    return Entity(row["entity_type"], row["entity_id"], row["timezone"], row["context"],
                  dates, row["created_at"], row["updated_at"])  # fmt: skip


def put_dates(
    conn: Connection,
    workspace_id: UUID,
    entity_type: str,
    entity_id: str,
    given: EntityInput,
    default_timezone: str,
    settings: Settings,
    now: datetime,
    *,
    updated_by: str | None = None,
) -> EntityResult:
    """Store the entity's zone, dates (the whole set: names left out are removed) and context,
    and bring the actions of its time rules in step, in one transaction."""
    check_entity_key(entity_type, entity_id)
    tz_name = given.timezone or default_timezone
    zone(tz_name)
    dates = parse_dates(given.dates, tz_name, now, settings.max_horizon_days)
    context = _check_context(given.context)
    key = {"workspace_id": workspace_id, "entity_type": entity_type, "entity_id": entity_id}
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur, storable():
        # Rules first, then the entity: the order a rule's change takes them in.
        rules = [rule_from_row(r) for r in cur.execute(_TIME_RULES, key).fetchall()]
        row = cur.execute(
            _UPSERT, key | {"timezone": tz_name, "context": Jsonb(context),
                            "updated_by": updated_by},
        ).fetchone()  # fmt: skip
        assert row is not None
        cur.execute(_CLEAR_DATES, key)
        cur.execute(
            _INSERT_DATES,
            key | {"names": [d.name for d in dates], "ats": [d.at for d in dates],
                   "walls": [d.wall for d in dates]},
        )  # fmt: skip
        entity = load_entity(conn, workspace_id, row)
        live = rule_rows(conn, _LIVE, key)
        result = sync_entity(
            conn, workspace_id, entity.state(), rules, live, settings, now, updated_by
        )
        every = rule_rows(conn, _ALL, key)
    emit_metrics("dates", result)
    return EntityResult(entity, every, created=bool(row["created"]), result=result)


def _check_context(given: Any) -> dict[str, Any]:
    if not isinstance(given, Mapping):
        raise InputError("context must be a JSON object", field="context")
    context = dict(given)
    if has_nul(context):
        raise InputError(
            "context contains a NUL character, which cannot be stored", field="context"
        )
    size = payload_size(context)
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"context is {size} bytes; the limit is {PAYLOAD_MAX_BYTES}", field="context"
        )
    return context


def put_context(
    conn: Connection,
    workspace_id: UUID,
    entity_type: str,
    entity_id: str,
    context: Mapping[str, Any],
    default_timezone: str,
    *,
    updated_by: str | None = None,
) -> EntityResult:
    """Store the entity's context (its fields: a guest's name), keeping its zone and dates;
    a new entity takes `default_timezone` and has no dates. Actions already made keep the
    snapshot they were rendered from, so no action changes; events from now on see it."""
    check_entity_key(entity_type, entity_id)
    fields = _check_context(context)
    key = {"workspace_id": workspace_id, "entity_type": entity_type, "entity_id": entity_id}
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur, storable():
        row = cur.execute(
            _UPSERT_CONTEXT, key | {"timezone": default_timezone, "context": Jsonb(fields),
                                    "updated_by": updated_by},
        ).fetchone()  # fmt: skip
        assert row is not None
        entity = load_entity(conn, workspace_id, row)
        every = rule_rows(conn, _ALL, key)
    return EntityResult(entity, every, created=bool(row["created"]))


def get_entity(
    conn: Connection, workspace_id: UUID, entity_type: str, entity_id: str
) -> EntityView:
    key = {"workspace_id": workspace_id, "entity_type": entity_type, "entity_id": entity_id}
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_GET, key).fetchone()
    if row is None:
        raise NotFoundError(f"no entity {entity_type}/{entity_id} in this workspace")
    return EntityView(load_entity(conn, workspace_id, row), rule_rows(conn, _ALL, key))


def delete_entity(
    conn: Connection, workspace_id: UUID, entity_type: str, entity_id: str
) -> EntityResult:
    """Forget the entity and its dates; its rules' pending actions are cancelled (sent ones
    stay as history)."""
    key = {"workspace_id": workspace_id, "entity_type": entity_type, "entity_id": entity_id}
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_LOCK, key).fetchone()
        if row is None:
            raise NotFoundError(f"no entity {entity_type}/{entity_id} in this workspace")
        entity = load_entity(conn, workspace_id, row)
        result = ProduceResult()
        for live in rule_rows(conn, _LIVE, key):
            withdraw(conn, live, WITHDRAWN, result)
        cur.execute(_DELETE, key)
        every = rule_rows(conn, _ALL, key)
    emit_metrics("dates", result)
    return EntityResult(entity, every, result=result)
