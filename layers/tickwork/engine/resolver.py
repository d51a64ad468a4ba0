"""The resolver: settles rows failed `ambiguous` or `stuck` by asking their provider.

A provider call that timed out after the request left, or a dispatcher that died after
calling, leaves a row that may or may not have arrived. Where the provider offers a lookup
(`providers.base.Lookup`) and still holds the attempt (`lookup_retention`), the resolver
asks it, every minute and on an admin's request:

- found → `published` with the provider's id: failed → published, a transition only the
  resolver makes, and nothing is sent;
- absent, authoritatively, and the attempt older than `lookup_grace` (search indexes lag)
  → `queued`, due now, for one more attempt: at most once per action, never when any of
  its attempts is recorded delivered;
- unknown (the lookup failed, or absent within the grace) → the row stays failed; the
  attempt's ledger entry says why, and it is asked again after `resolve_recheck_seconds`.

Every transition is one conditional statement naming the state read (failed, the code,
the attempt number), which also writes the ledger entry: two resolvers racing on a row
settle it once; the loser sees it changed (`raced`). A message found whose provider id is
already another action's (lookups that match by content can find a twin's) settles
nothing. Providers without a lookup (SES) are never asked: their rows stay for a person.

A type with fallback providers (docs/failover.md) is asked exactly so, of the provider its
attempt named, through that attempt's connection: the dispatcher records both before the
call (migration 0034), so a row whose dispatcher died names them too. An attempt recorded
without its provider (before that) is left for a person.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import psycopg
from aws_lambda_powertools.utilities.typing import LambdaContext
from psycopg.rows import dict_row

from tickwork import connections
from tickwork.actions.model import Action, action_from_row
from tickwork.ledger.attempts import route_of as attempt_route
from tickwork.platform.db import Connection
from tickwork.platform.observability import emit, logger, run_budget
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow
from tickwork.providers.base import Absent, Found, Lookup, LookupResult, Unknown, Via, lookup_of
from tickwork.providers.redact import Redactor, sanitize
from tickwork.runtime import Runtime

_CANDIDATES = query("unresolved_actions")
_DELIVERED = query("resolve_delivered")
_REQUEUED = query("resolve_requeued")
_UNRESOLVED = query("resolve_unresolved")
_ANOTHER_ACTIONS = query("provider_id_of_another_action")

# error_code of the rows that may have arrived (dispatch.decide, tick.recover_stuck).
UNSETTLED = frozenset({"ambiguous", "stuck"})
# The ledger's resolution_detail column is bounded.
MAX_DETAIL = 300

Verdict = Literal["delivered", "requeued", "unresolved", "raced"]


@dataclass(frozen=True)
class Resolution:
    """What the resolver did with one row."""

    verdict: Verdict
    detail: str
    provider_id: str | None = None


@dataclass
class ResolveSummary:
    examined: int = 0
    # By provider name (the one asked), for the metrics' dimension.
    delivered: dict[str, int] = field(default_factory=dict)
    requeued: dict[str, int] = field(default_factory=dict)
    unresolved: dict[str, int] = field(default_factory=dict)
    raced: int = 0  # changed by someone else between the read and the transition
    requeued_ids: list[UUID] = field(default_factory=list)
    elapsed_seconds: float = 0.0

    def count(self, provider: str, resolution: Resolution) -> None:
        self.examined += 1
        if resolution.verdict == "raced":
            self.raced += 1
            return
        bucket = getattr(self, resolution.verdict)
        bucket[provider] = bucket.get(provider, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "delivered": dict(self.delivered),
            "requeued": dict(self.requeued),
            "unresolved": dict(self.unresolved),
            "raced": self.raced,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
        }


@dataclass(frozen=True)
class Askable:
    """The providers of one action type that can be asked, by name. `routed`: the type has
    fallback providers, so each row is asked of the provider its attempt named."""

    lookups: dict[str, Lookup]
    routed: bool = False


@dataclass(frozen=True)
class Asked:
    """Whom one row's attempt is asked about: the provider it called, its lookup, and the
    connection it went through (None: the provider's stack-wide options)."""

    provider: str
    lookup: Lookup
    connection_id: UUID | None


def lookup_for(runtime: Runtime, action_type: str, provider: str | None = None) -> Lookup | None:
    """The lookup of the action type's provider, or of its fallback provider `provider`;
    None when that provider has none (or cannot be built)."""
    config = runtime.settings.action_types.get(action_type)
    try:
        if config is not None and provider is not None and provider != config.provider:
            return lookup_of(runtime.providers.for_fallback(action_type, provider))
        return lookup_of(runtime.providers.for_action_type(action_type))
    except Exception:
        logger.exception("provider cannot be built", extra={"action_type": action_type,
                                                           "provider": provider})  # fmt: skip
        return None


def askable_for(runtime: Runtime, action_type: str) -> Askable | None:
    """The type's providers that can be asked; None when none can."""
    config = runtime.settings.action_types.get(action_type)
    if config is None:
        return None
    names = config.providers if config.failover is not None else (config.provider,)
    found = {n: lk for n in names if (lk := lookup_for(runtime, action_type, n)) is not None}
    return Askable(found, config.failover is not None) if found else None


def lookups(runtime: Runtime) -> dict[str, Askable]:
    """The action types some provider of which can be asked, and those providers' lookups."""
    found: dict[str, Askable] = {}
    for action_type in runtime.settings.action_types:
        askable = askable_for(runtime, action_type)
        if askable is not None:
            found[action_type] = askable
    return found


def asked_of(
    conn: Connection, runtime: Runtime, action: Action, askable: Askable | None
) -> Asked | str:
    """Whom to ask about the row's attempt, or why nobody can be asked (a person decides).
    A type with fallback providers asks the provider its attempt's ledger entry names,
    through the connection recorded with it (before the call: docs/failover.md)."""
    config = runtime.settings.action_types.get(action.action_type)
    first = config.provider if config is not None else action.action_type
    if askable is None or config is None:
        return (
            f"the {first} provider offers no way to ask whether a message arrived: check with"
            " the provider, then retry or leave it"
        )
    route = attempt_route(conn, action.id, action.attempt_count)
    if not askable.routed:
        if route is not None and route.provider not in (None, first):
            return (
                f"the attempt went to {route.provider}, no longer a provider of this type:"
                f" asking {first} could call absent what it sent; check with {route.provider},"
                " then retry or leave it"
            )
        return Asked(first, askable.lookups[first], action.connection_id)
    if route is None or route.provider is None:
        return (
            "the attempt was recorded without the provider it called (before providers were"
            " recorded, or its dispatcher died before choosing one): check with each"
            " provider, then retry or leave it"
        )
    lookup = askable.lookups.get(route.provider)
    if lookup is None:
        return (
            f"the attempt went to {route.provider}, which offers no way to ask whether a"
            " message arrived: check with it, then retry or leave it"
        )
    connection_id = route.connection_id
    if connection_id is None and action.connection_id is not None:
        if route.provider != first:
            return (
                f"the {route.provider} connection the attempt went through was not recorded:"
                " check with that provider, then retry or leave it"
            )
        connection_id = action.connection_id  # the first provider: the row's own
    return Asked(route.provider, lookup, connection_id)


def _detail(text: str) -> str:
    """What is stored, logged and answered of a lookup's detail: built by providers from
    masked URLs and documented fields, and cleaned again, bounded."""
    return sanitize(text, limit=MAX_DETAIL)


def _via(conn: Connection, runtime: Runtime, action: Action, asked: Asked) -> Via | str | None:
    """The connection to ask through (as the dispatcher sent through it), None for the
    provider's stack-wide options, or why it cannot be used."""
    if asked.connection_id is None:
        return None
    found = connections.load(conn, [asked.connection_id]).get(asked.connection_id)
    via = connections.via_for(
        action.workspace_id, asked.connection_id, found, asked.provider, runtime.secrets
    )
    if isinstance(via, Via):
        return via
    return f"its connection cannot be used: {getattr(via, 'message', 'unavailable')}"


def _ask(conn: Connection, runtime: Runtime, action: Action, asked: Asked) -> LookupResult:
    via = _via(conn, runtime, action, asked)
    if isinstance(via, str):
        return Unknown(via)
    lookup = asked.lookup
    try:
        return lookup.lookup(action) if via is None else lookup.lookup(action, via)
    except Exception as exc:
        # A lookup bug: nothing is known. Its text may hold what it was given: redacted.
        known = (via.credentials, via.settings) if via is not None else ()
        logger.error("lookup raised", extra={"action_id": str(action.id),
                                             **Redactor.of(*known).error(exc)})  # fmt: skip
        return Unknown(f"the lookup raised {type(exc).__name__}")


def _params(action: Action) -> dict[str, Any]:
    return {
        "id": action.id,
        "workspace_id": action.workspace_id,
        "expected_code": action.error_code,
        "attempt": action.attempt_count,
        "started_at": action.submitted_at,
    }


def _changed(conn: Connection, sql: Any, params: dict[str, Any]) -> bool:
    with conn.transaction():
        return conn.execute(sql, params).fetchone() is not None


def _another_actions(conn: Connection, action: Action, provider_id: str | None) -> bool:
    """Whether the provider id found is already another action's (through the connection)."""
    if provider_id is None or action.connection_id is None:
        return False
    params = {"connection_id": action.connection_id, "provider_id": provider_id, "id": action.id}
    return conn.execute(_ANOTHER_ACTIONS, params).fetchone() is not None


def _unresolved(conn: Connection, action: Action, detail: str) -> Resolution:
    detail = _detail(detail)
    if _changed(conn, _UNRESOLVED, _params(action) | {"detail": detail}):
        return Resolution("unresolved", detail)
    return Resolution("raced", "the row changed meanwhile; left as it is")


def resolve_action(
    conn: Connection, runtime: Runtime, action: Action, asked: Asked, age_seconds: float
) -> Resolution:
    """Ask the provider about one row failed ambiguous or stuck, and act on its answer."""
    if action.status != "failed" or action.error_code not in UNSETTLED:
        return Resolution("raced", f"the row is {action.status}, not failed ambiguous or stuck")
    lookup = asked.lookup
    retention = lookup.lookup_retention.total_seconds()
    if age_seconds > retention:
        return _unresolved(
            conn, action, f"the attempt is older than the provider's lookup retention"
            f" ({retention:.0f} s): it cannot tell any more",
        )  # fmt: skip
    answer = _ask(conn, runtime, action, asked)
    if isinstance(answer, Found) and _another_actions(conn, action, answer.provider_id):
        return _unresolved(
            conn, action, f"the provider's message {answer.provider_id} is recorded for another"
            " action: whether this attempt made one too cannot be told",
        )  # fmt: skip
    if isinstance(answer, Found):
        detail = _detail(f"the provider has it{': ' + answer.detail if answer.detail else ''}")
        message = _detail(f"delivered (resolved with the provider: {detail})")
        params = _params(action) | {
            "provider_id": answer.provider_id, "message": message, "detail": _detail(detail),
        }  # fmt: skip
        if _changed(conn, _DELIVERED, params):
            return Resolution("delivered", detail, answer.provider_id)
        return Resolution("raced", "the row changed meanwhile; left as it is")
    if isinstance(answer, Absent):
        grace = lookup.lookup_grace.total_seconds()
        if age_seconds < grace:
            return _unresolved(
                conn, action, f"the provider has no record yet, within the lookup's grace"
                f" ({grace:.0f} s; its search may lag): asked again later",
            )  # fmt: skip
        detail = _detail(
            f"the provider has no such message{': ' + answer.detail if answer.detail else ''}"
        )
        message = _detail(f"{detail}; sent once more (the resolver's one retry)")
        params = _params(action) | {
            "grace_seconds": grace, "message": message, "detail": _detail(detail),
        }  # fmt: skip
        try:
            requeued = _changed(conn, _REQUEUED, params)
        except psycopg.errors.UniqueViolation:
            return _unresolved(
                conn, action, f"{detail}, but another row for this thing and target is active"
                " or published: a person decides",
            )  # fmt: skip
        if requeued:
            return Resolution("requeued", detail)
        return _unresolved(
            conn, action, f"{detail}, but this action already had its one more attempt (or an"
            " attempt is recorded delivered): a person decides",
        )  # fmt: skip
    return _unresolved(conn, action, f"the lookup could not tell: {answer.reason}")


def _entries(types: dict[str, Askable]) -> list[tuple[str, str, bool, float]]:
    """The candidate query's (action type, provider, routed, retention seconds): a type's
    own provider, or each provider of a type with fallbacks that can be asked (only the
    attempts that name it)."""
    entries: list[tuple[str, str, bool, float]] = []
    for action_type in sorted(types):
        askable = types[action_type]
        for name, lookup in sorted(askable.lookups.items()):
            retention = lookup.lookup_retention.total_seconds()
            entries.append((action_type, name, askable.routed, retention))
    return entries


def _pages(
    conn: Connection, runtime: Runtime, types: dict[str, Askable]
) -> Iterator[list[tuple[Action, float]]]:
    settings = runtime.settings
    entries = _entries(types)
    after_at, after_id = datetime(1970, 1, 1, tzinfo=UTC), UUID(int=0)
    while True:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                _CANDIDATES,
                {"action_types": [e[0] for e in entries], "providers": [e[1] for e in entries],
                 "routed": [e[2] for e in entries], "retention_seconds": [e[3] for e in entries],
                 "after_at": after_at, "after_id": after_id,
                 "recheck_seconds": settings.resolve_recheck_seconds,
                 "limit": settings.resolve_batch_size},
            ).fetchall()  # fmt: skip
        if not rows:
            return
        yield [(action_from_row(row), float(row["age_seconds"])) for row in rows]
        after_at, after_id = rows[-1]["attempt_started_at"], rows[-1]["id"]


def resolve_unsettled(
    conn: Connection, runtime: Runtime, *, budget_seconds: float | None = None
) -> ResolveSummary:
    """The cron's pass: every row failed ambiguous or stuck that a lookup can still answer
    for, oldest attempt first, until none is left or the budget is spent. Rows requeued are
    handed to their queue at once. A row of a type with fallback providers is asked of the
    provider its attempt named."""
    settings = runtime.settings
    started = time.monotonic()
    deadline = started + (budget_seconds or settings.resolve_budget_seconds)
    summary = ResolveSummary()
    types = lookups(runtime)
    if types and settings.resolve_enabled:
        for page in _pages(conn, runtime, types):
            for action, age in page:
                if time.monotonic() >= deadline:
                    break
                asked = asked_of(conn, runtime, action, types.get(action.action_type))
                if isinstance(asked, str):
                    # Changed since the page was read (the query takes only askable rows).
                    summary.raced += 1
                    summary.examined += 1
                    continue
                resolution = resolve_action(conn, runtime, action, asked, age)
                summary.count(asked.provider, resolution)
                if resolution.verdict == "requeued":
                    summary.requeued_ids.append(action.id)
                logger.info(
                    "resolved" if resolution.verdict in ("delivered", "requeued") else "unresolved",
                    extra={"action_id": str(action.id), "verdict": resolution.verdict,
                           "provider": asked.provider, "detail": resolution.detail},
                )  # fmt: skip
            if time.monotonic() >= deadline:
                break
    if summary.requeued_ids:
        enqueue_soon(conn, runtime.queues, summary.requeued_ids, settings)
    summary.elapsed_seconds = time.monotonic() - started
    return summary


def resolve_one(conn: Connection, runtime: Runtime, action: Action) -> Resolution | str:
    """On demand (an admin, through the API): settle one row now, whenever it was last
    asked. Returns the resolution, or why it cannot be asked."""
    if action.status != "failed" or action.error_code not in UNSETTLED:
        return (
            f"only actions failed as ambiguous or stuck can be resolved; this one is"
            f" {action.status}{'/' + action.error_code if action.error_code else ''}"
        )
    asked = asked_of(conn, runtime, action, askable_for(runtime, action.action_type))
    if isinstance(asked, str):
        return asked
    submitted = action.submitted_at or action.finished_at or utcnow()
    age = (utcnow() - submitted).total_seconds()
    return resolve_action(conn, runtime, action, asked, age)


def retention_of(conn: Connection, runtime: Runtime, action: Action) -> timedelta | None:
    """How long the provider a failed ambiguous or stuck row's attempt called keeps it
    (for `why`); None when nobody can be asked."""
    asked = asked_of(conn, runtime, action, askable_for(runtime, action.action_type))
    return None if isinstance(asked, str) else asked.lookup.lookup_retention


# ------------------------------------------------------------------------ the Lambda


def emit_metrics(summary: ResolveSummary) -> None:
    emit(
        {"ResolveExamined": summary.examined, "ResolveRaced": summary.raced},
        seconds={"ResolveElapsed": summary.elapsed_seconds},
    )
    emit({}, by=("ResolvedDelivered", "provider", summary.delivered))
    emit({}, by=("ResolvedAbsent", "provider", summary.requeued))
    emit({}, by=("Unresolved", "provider", summary.unresolved))


# Left for the Lambda to return its summary and flush metrics after the budget ends.
RESOLVE_MARGIN_SECONDS = 5.0


def handle_resolve(context: LambdaContext, runtime: Runtime) -> dict[str, Any]:
    budget = run_budget(context, runtime.settings.resolve_budget_seconds, RESOLVE_MARGIN_SECONDS)
    summary = resolve_unsettled(runtime.db.connection(), runtime, budget_seconds=budget)
    emit_metrics(summary)
    logger.info("resolve", extra=summary.as_dict())
    return summary.as_dict()
