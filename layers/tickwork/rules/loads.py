"""A rule's `load`: the stored entities its templates read, each under a name of its own.

`{"guest": {"entity_type": "guest", "id": "{{ event.entities.guest }}"}}` makes the stored
guest named by the event the template variable `guest` (`{{ guest.name }}`). The `id` is a
template rendered from the event's context; left out, it is the event's entity of that type
(`{{ event.entities.<entity_type> }}`). No I/O here: this is the declaration and its
checks; tickwork.rules.stored_context loads what it names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tickwork.platform.errors import InputError
from tickwork.rules.templating import InvalidTemplateError, JsonTemplate

MAX_LOADS = 10
MAX_ID_TEMPLATE = 500
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_FIELDS = frozenset({"entity_type", "id"})


class InvalidLoadError(InputError):
    """A rule's `load` that cannot be used: not an object, a name taken by the context's
    own roots, an entity type that is not a name, an id that is not a template."""

    code = "invalid_load"


@dataclass(frozen=True)
class Load:
    """One stored entity a rule reads: `alias` in its templates, found by type and id."""

    alias: str
    entity_type: str
    id_template: str

    def as_json(self) -> dict[str, str]:
        return {"entity_type": self.entity_type, "id": self.id_template}

    def compiled_id(self) -> JsonTemplate:
        return JsonTemplate(self.id_template, f"load.{self.alias}.id")


def default_id(entity_type: str) -> str:
    """The id a load names when it gives none: the event's entity of its type."""
    return "{{ event.entities." + entity_type + " }}"


def parse_loads(raw: Any, reserved: frozenset[str]) -> list[Load]:
    """A rule's `load` as written, checked; InvalidLoadError naming the field. `reserved`:
    the names the context already has at its top level (`event`, `context`, ...)."""
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise InvalidLoadError("load must be an object: name → {entity_type, id}", field="load")
    if len(raw) > MAX_LOADS:
        raise InvalidLoadError(f"load: at most {MAX_LOADS} entities", field="load")
    return [_parse_one(alias, spec, reserved) for alias, spec in sorted(raw.items())]


def _parse_one(alias: Any, spec: Any, reserved: frozenset[str]) -> Load:
    if not isinstance(alias, str) or not _NAME.match(alias):
        raise InvalidLoadError(
            f"load: {str(alias)[:80]!r} must be a lower-case name such as 'guest'", field="load"
        )
    where = f"load.{alias}"
    if alias in reserved:
        taken = ", ".join(sorted(reserved))
        raise InvalidLoadError(
            f"{where}: {alias!r} is a name the context already has ({taken}); choose another",
            field=where,
        )
    if not isinstance(spec, Mapping) or not set(spec) <= _FIELDS:
        raise InvalidLoadError(
            f"{where} must be an object with entity_type and, optionally, id", field=where
        )
    entity_type = spec.get("entity_type")
    if not isinstance(entity_type, str) or not _NAME.match(entity_type):
        raise InvalidLoadError(
            f"{where}.entity_type must be a lower-case name such as 'guest'",
            field=f"{where}.entity_type",
        )
    id_template = spec.get("id")
    if id_template is None:
        id_template = default_id(entity_type)
    if not isinstance(id_template, str) or not 1 <= len(id_template) <= MAX_ID_TEMPLATE:
        raise InvalidLoadError(
            f"{where}.id must be a template of 1 to {MAX_ID_TEMPLATE} characters",
            field=f"{where}.id",
        )
    load = Load(alias, entity_type, id_template)
    try:
        load.compiled_id()
    except InvalidTemplateError as exc:
        raise InvalidLoadError(exc.message, field=f"{where}.id") from exc
    return load


def aliases(raw: Mapping[str, Any] | None) -> frozenset[str]:
    """The names a stored (already checked) `load` adds to the context."""
    return frozenset(raw or ())
