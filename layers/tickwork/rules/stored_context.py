"""The stored entities an event's rules read (`load`), as of the event.

An event names entity ids; each matching rule's `load` says which stored entities its
templates read. The ids of every rule are rendered first, then all the entities the event
needs are read in one query (not one per rule or per entity), and each rule's context
snapshot gets its entities under their names. The snapshot is kept with the action it
makes, and the payload is rendered from it then: an entity changed afterwards does not
change an action already made. An entity that is not stored fails that rule only
(`missing_entity`, naming its type and id); the others still fire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query
from tickwork.platform.wallclock import zone
from tickwork.rules.loads import parse_loads
from tickwork.rules.metering import RenderBudget
from tickwork.rules.model import LOAD_RESERVED, CompiledRule, Failed, Rule
from tickwork.rules.templating import RenderError

_ENTITIES_BY_KEY = query("entities_by_key")

EntityKey = tuple[str, str]  # (entity_type, entity_id)
MISSING_ENTITY = "missing_entity"


@dataclass(frozen=True)
class Prepared:
    """One rule ready to fire on the event (`compiled`, `context`), or why it cannot
    (`failed`; `record`: whether it is the rule's `last_error`, as a render failure is)."""

    rule: Rule
    compiled: CompiledRule | None
    context: dict[str, Any]
    failed: Failed | None = None
    record: bool = False


@dataclass(frozen=True)
class _Wanted:
    rule: Rule
    compiled: CompiledRule
    context: dict[str, Any]
    keys: dict[str, EntityKey]  # alias → the entity it names


def entity_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a template sees of a stored entity: its context's fields, each reference date
    by its name (an instant in the entity's zone, with its offset), and `id`,
    `entity_type`, `timezone` and `dates` ({name: {at, local}}); these win over a context
    field of the same name."""
    tz = zone(row["timezone"])
    dates = dict(zip(row["date_names"] or [], row["date_ats"] or [], strict=True))
    return {
        **row["context"],
        **{name: at.astimezone(tz).isoformat() for name, at in dates.items()},
        "id": row["entity_id"],
        "entity_type": row["entity_type"],
        "timezone": row["timezone"],
        "dates": {name: {"at": at.isoformat(), "local": at.astimezone(tz).isoformat()}
                  for name, at in dates.items()},
    }  # fmt: skip


def fetch(
    conn: Connection, workspace_id: UUID, keys: set[EntityKey]
) -> dict[EntityKey, dict[str, Any]]:
    """The stored entities of `keys` that exist, with their dates: one round trip."""
    if not keys:
        return {}
    ordered = sorted(keys)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _ENTITIES_BY_KEY,
            {"workspace_id": workspace_id, "entity_types": [k[0] for k in ordered],
             "entity_ids": [k[1] for k in ordered]},
        ).fetchall()  # fmt: skip
    return {(r["entity_type"], r["entity_id"]): entity_fields(r) for r in rows}


def _entity_ids(
    rule: Rule, context: Mapping[str, Any], budget: RenderBudget | None
) -> dict[str, EntityKey]:
    """alias → (type, id) for the rule's `load`, ids rendered from the event's context.
    RenderError when one cannot be rendered (the event does not name that entity)."""
    keys: dict[str, EntityKey] = {}
    for load in parse_loads(rule.load, LOAD_RESERVED):
        field = f"load.{load.alias}.id"
        entity_id = str(load.compiled_id().render(context, budget)).strip()
        if not entity_id:
            raise RenderError(f"{field}: the id rendered empty", field=field)
        keys[load.alias] = (load.entity_type, entity_id)
    return keys


def prepare(
    conn: Connection,
    workspace_id: UUID,
    rules: Sequence[Rule],
    base_context: Callable[[Rule], dict[str, Any]],
    budget: RenderBudget | None,
) -> list[Prepared]:
    """Each rule with the context it fires with: `base_context(rule)` and the entities of
    its `load`, all read in one query. A rule that cannot fire is `failed`, never raised."""
    out: dict[int, Prepared] = {}
    wanted: dict[int, _Wanted] = {}
    for i, rule in enumerate(rules):
        context = base_context(rule)
        try:
            compiled = rule.compiled()
        except InputError as exc:
            failed = Failed(rule.id, rule.name, exc.field or "rule", exc.message,
                            code="invalid_rule")  # fmt: skip
            out[i] = Prepared(rule, None, context, failed)
            continue
        try:
            keys = _entity_ids(rule, context, budget)
        except RenderError as exc:
            failed = Failed(rule.id, rule.name, exc.field, exc.message)
            out[i] = Prepared(rule, compiled, context, failed, record=True)
            continue
        except InputError as exc:  # a stored load that no longer parses
            failed = Failed(rule.id, rule.name, exc.field or "load", exc.message,
                            code="invalid_rule")  # fmt: skip
            out[i] = Prepared(rule, compiled, context, failed)
            continue
        wanted[i] = _Wanted(rule, compiled, context, keys)
    found = fetch(conn, workspace_id, {k for w in wanted.values() for k in w.keys.values()})
    for i, w in wanted.items():
        out[i] = _with_entities(w, found)
    return [out[i] for i in range(len(rules))]


def _with_entities(w: _Wanted, found: Mapping[EntityKey, dict[str, Any]]) -> Prepared:
    context = dict(w.context)
    for alias, key in sorted(w.keys.items()):
        fields = found.get(key)
        if fields is None:
            entity_type, entity_id = key
            message = (
                f"load.{alias}: no {entity_type} {entity_id!r} is stored in this workspace"
                f" (PUT /v1/entities/{entity_type}/{{id}}/context stores one)"
            )
            failed = Failed(w.rule.id, w.rule.name, f"load.{alias}", message,
                            code=MISSING_ENTITY, entity_type=entity_type,
                            entity_id=entity_id)  # fmt: skip
            return Prepared(w.rule, w.compiled, w.context, failed, record=True)
        context[alias] = fields
    return Prepared(w.rule, w.compiled, context)
