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
settle it once; the loser sees it changed (`raced`). Providers without a lookup (SES,
Twilio) are never asked: their rows stay for a person, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

import psycopg
from aws_lambda_powertools.utilities.typing import LambdaContext
from psycopg.rows import dict_row

from tickwork import connections
from tickwork.actions.model import Action, action_from_row
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
    # By provider name (the action type's provider), for the metrics' dimension.
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


def lookup_for(runtime: Runtime, action_type: str) -> Lookup | None:
    """The action type's lookup; None when its provider has none (or cannot be built)."""
    try:
        return lookup_of(runtime.providers.for_action_type(action_type))
    except Exception:
        logger.exception("provider cannot be built", extra={"action_type": action_type})
        return None


def lookups(runtime: Runtime) -> dict[str, Lookup]:
    """The action types whose provider can be asked, and its lookup."""
    found: dict[str, Lookup] = {}
    for action_type in runtime.settings.action_types:
        lookup = lookup_for(runtime, action_type)
        if lookup is not None:
            found[action_type] = lookup
    return found


def _detail(text: str) -> str:
    """What is stored, logged and answered of a lookup's detail: built by providers from
    masked URLs and documented fields, and cleaned again, bounded."""
    return sanitize(text, limit=MAX_DETAIL)


def _via(conn: Connection, runtime: Runtime, action: Action) -> Via | str | None:
    """The connection to ask through (as the dispatcher sends through it), None for rows
    that name none, or why it cannot be used."""
    if action.connection_id is None:
        return None
    found = connections.load(conn, [action.connection_id]).get(action.connection_id)
    provider = runtime.settings.action_types[action.action_type].provider
    via = connections.via_for(
        action.workspace_id, action.connection_id, found, provider, runtime.secrets
    )
    if isinstance(via, Via):
        return via
    return f"its connection cannot be used: {getattr(via, 'message', 'unavailable')}"


def _ask(conn: Connection, runtime: Runtime, action: Action, lookup: Lookup) -> LookupResult:
    via = _via(conn, runtime, action)
    if isinstance(via, str):
        return Unknown(via)
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


def _unresolved(conn: Connection, action: Action, detail: str) -> Resolution:
    detail = _detail(detail)
    if _changed(conn, _UNRESOLVED, _params(action) | {"detail": detail}):
        return Resolution("unresolved", detail)
    return Resolution("raced", "the row changed meanwhile; left as it is")


def resolve_action(
    conn: Connection, runtime: Runtime, action: Action, lookup: Lookup, age_seconds: float
) -> Resolution:
    """Ask the provider about one row failed ambiguous or stuck, and act on its answer."""
    if action.status != "failed" or action.error_code not in UNSETTLED:
        return Resolution("raced", f"the row is {action.status}, not failed ambiguous or stuck")
    retention = lookup.lookup_retention.total_seconds()
    if age_seconds > retention:
        return _unresolved(
            conn, action, f"the attempt is older than the provider's lookup retention"
            f" ({retention:.0f} s): it cannot tell any more",
        )  # fmt: skip
    answer = _ask(conn, runtime, action, lookup)
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


def _pages(
    conn: Connection, runtime: Runtime, types: dict[str, Lookup]
) -> Iterator[list[tuple[Action, float]]]:
    settings = runtime.settings
    names = sorted(types)
    after_at, after_id = datetime(1970, 1, 1, tzinfo=UTC), UUID(int=0)
    while True:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                _CANDIDATES,
                {"action_types": names,
                 "retention_seconds": [types[n].lookup_retention.total_seconds() for n in names],
                 "after_at": after_at, "after_id": after_id,
                 "recheck_seconds": settings.resolve_recheck_seconds,
                 "limit": settings.resolve_batch_size},
            ).fetchall()  # fmt: skip
        if not rows:
            return
        yield [(action_from_row(row), float(row["age_seconds"])) for row in rows]
        after_at, after_id = rows[-1]["finished_at"], rows[-1]["id"]


def resolve_unsettled(
    conn: Connection, runtime: Runtime, *, budget_seconds: float | None = None
) -> ResolveSummary:
    """The cron's pass: every row failed ambiguous or stuck that a lookup can still answer
    for, oldest attempt first, until none is left or the budget is spent. Rows requeued are
    handed to their queue at once."""
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
                resolution = resolve_action(conn, runtime, action, types[action.action_type], age)
                provider = settings.action_types[action.action_type].provider
                summary.count(provider, resolution)
                if resolution.verdict == "requeued":
                    summary.requeued_ids.append(action.id)
                logger.info(
                    "resolved" if resolution.verdict in ("delivered", "requeued") else "unresolved",
                    extra={"action_id": str(action.id), "verdict": resolution.verdict,
                           "detail": resolution.detail},
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
    lookup = lookups(runtime).get(action.action_type)
    if lookup is None:
        provider = runtime.settings.action_types.get(action.action_type)
        name = provider.provider if provider is not None else action.action_type
        return (
            f"the {name} provider offers no way to ask whether a message arrived: check with"
            " the provider, then retry or leave it"
        )
    submitted = action.submitted_at or action.finished_at or utcnow()
    age = (utcnow() - submitted).total_seconds()
    return resolve_action(conn, runtime, action, lookup, age)


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
