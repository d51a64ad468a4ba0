"""Why an action is where it is ("why not yet?"): its status explained as an ordered list of
steps, each a machine-readable code, a time (or none), one plain sentence and a few details.

What it can tell comes from what is stored, read in one statement (`read`): the row (its
source, times, attempt count, backoff, error), what made it (a rule, a drip step, a
recurring schedule, an intent, a person through the API), its change log (cancels,
reschedules with their lineage, quiet-hours moves, defers, skips, drops, exits, admins'
retries, and who made each), and its provider calls from the delivery ledger. Beside the
data, `explain` reads the deployment's settings (the kill switch and paused types, timeouts,
lateness) and, for a row the resolver may settle, whether its provider can be asked
(`lookup_retention`).

The history comes first, oldest first; then where the row stands now and what happens next.
Only sanitized text is shown: codes, the ledger's excerpts, `last_error` and the change
log's reasons (stored without receivers' bodies, as GET /v1/actions/{id} shows them); never
a payload or a credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from psycopg.rows import dict_row
from pydantic import TypeAdapter

from tickwork.actions.model import Action, action_from_row
from tickwork.changes import Change
from tickwork.ledger.attempts import AttemptRow
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.sql import query

_EXPLAIN = query("explain_action")
_CHANGES = TypeAdapter(list[Change])
_ATTEMPTS = TypeAdapter(list[AttemptRow])

# error_code of failed rows the resolver may settle (engine.resolver.UNSETTLED).
UNSETTLED = frozenset({"ambiguous", "stuck"})

# Who a change log's `system:<source>` actor is, in words.
_SYSTEM_ACTORS = {
    "intent": "the intent reconciler",
    "recurring": "the recurring schedule's expander",
    "sequence": "the drip engine",
    "rule": "the rules engine",
    "run_now": "the recurring schedule's expander",
}

# What made a row, by its source.
_SOURCES = {
    "api": "through the API",
    "send_now": "by send-now through the API",
    "rule": "by an automation rule",
    "sequence": "by a drip step",
    "recurring": "by a recurring schedule",
    "run_now": "by a recurring schedule's run-now",
    "intent": "by the schedule intent of its thing",
}


@dataclass(frozen=True, slots=True)
class Step:
    """One thing that happened to an action, or where it stands now."""

    code: str
    at: datetime | None
    text: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Facts:
    """What the database holds about one action, read in one statement."""

    action: Action
    origin: dict[str, Any]  # what made it: rule, drip step (ids), where there is one
    changes: list[Change]  # its change log, and the reschedule that made it, oldest first
    attempts: list[AttemptRow]  # its provider calls that did not publish it at once
    # A row not finished: whether it was handed to its queue, and when (by a producer or a
    # dispatcher, or by the tick's pass that reached it; unknown after a day).
    handed: bool = False
    handed_at: datetime | None = None


def read(conn: Connection, workspace_id: UUID, action_id: UUID) -> Facts | None:
    """The action, its origin, its change log and its ledger; None if the workspace has no
    such action."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_EXPLAIN, {"id": action_id, "workspace_id": workspace_id}).fetchone()
    if row is None:
        return None
    return Facts(
        action=action_from_row(row),
        origin=_origin(row),
        changes=_CHANGES.validate_python(row["changes"]),
        attempts=_ATTEMPTS.validate_python(row["attempts"]),
        handed=row["queue_enqueued_at"] is not None
        or bool(row["queue_passed"] and not row["queue_unsent"]),
        handed_at=row["queue_enqueued_at"]
        or (row["queue_passed_at"] if not row["queue_unsent"] else None),
    )


def _origin(row: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if row["rule_id"] is not None:
        found |= {"rule_id": row["rule_id"], "rule_kind": row["rule_kind"]}
        if row["rule_loaded"]:
            found["loaded"] = row["rule_loaded"]
        if row["rule_entity_id"] is not None:
            found |= {
                "entity_type": row["rule_entity_type"],
                "entity_id": row["rule_entity_id"],
                "reference": row["rule_reference"],
            }
    if row["enrollment_id"] is not None:
        found |= {
            "campaign_id": row["campaign_id"],
            "enrollment_id": row["enrollment_id"],
            "step_index": row["step_index"],
        }
    return found


def needs_resolver(action: Action) -> bool:
    """Whether the row is one the resolver may settle (then `explain` wants to know whether
    its provider can be asked)."""
    return action.status == "failed" and action.error_code in UNSETTLED


# ------------------------------------------------------------------------------- words


@dataclass(frozen=True)
class _Words:
    """How times read in the sentences: in the zone the action was scheduled in (else the
    workspace's), with `now` for durations."""

    tz: ZoneInfo
    now: datetime

    def when(self, instant: datetime) -> str:
        return instant.astimezone(self.tz).strftime("%Y-%m-%d %H:%M:%S %Z")

    def until(self, instant: datetime) -> str:
        return span((instant - self.now).total_seconds())


def span(seconds: float) -> str:
    """A duration for people: 45 s, 3 min, 2 h 5 min, 3 days 4 h."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, _ = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} days {hours} h" if hours else f"{days} days"


def who(actor: str) -> str:
    """A change log's actor in words: a person's id as it is, the system by its part."""
    if actor.startswith("system:"):
        source = actor.removeprefix("system:")
        return _SYSTEM_ACTORS.get(source, f"the system ({source})")
    return actor


def _because(reason: str | None) -> str:
    return f": {reason}" if reason else ""


# ----------------------------------------------------------------------------- history


def _created(facts: Facts, words: _Words) -> Step:
    a = facts.action
    how = _SOURCES.get(a.source, f"by {a.source}")
    details: dict[str, Any] = {"source": a.source}
    if a.source in ("api", "send_now") and a.created_by:
        how += f" by {a.created_by}"
        details["created_by"] = a.created_by
    if a.recurring_schedule_id is not None:
        how += f" ({a.recurring_schedule_id})"
        details["recurring_schedule_id"] = a.recurring_schedule_id
    if "rule_id" in facts.origin:
        on = "an event" if facts.origin["rule_kind"] == "event" else "a date"
        how += f" ({facts.origin['rule_id']}, on {on})"
        loaded = facts.origin.get("loaded") or []
        if loaded:
            named = ", ".join(f"{e['entity_type']} {e['entity_id']}" for e in loaded)
            how += f", with the stored {named} as of the event"
    if "enrollment_id" in facts.origin:
        how += (
            f" (step {facts.origin['step_index']} of campaign {facts.origin['campaign_id']},"
            f" enrollment {facts.origin['enrollment_id']})"
        )
    if a.source == "intent" and a.thing_id is not None:
        how += f" {a.thing_id!r}"
        details["thing_id"] = a.thing_id
    details |= facts.origin
    asked = a.original_publish_at or a.publish_at
    text = f"Created {how}, for {words.when(asked)}."
    return Step("created", a.created_at, text, details)


def _predecessor(facts: Facts, words: _Words) -> Step | None:
    """The reschedule that made this row, from its predecessor's change log entry."""
    a = facts.action
    if a.rescheduled_from is None:
        return None
    entry = next((c for c in facts.changes if c.action_id == a.rescheduled_from), None)
    details: dict[str, Any] = {"rescheduled_from": a.rescheduled_from}
    if entry is None:
        return Step(
            "rescheduled_from",
            a.created_at,
            f"It replaces action {a.rescheduled_from}, rescheduled.",
            details,
        )
    details |= {"actor": entry.actor, "old_at": entry.old_at, "new_at": entry.new_at}
    moved = ""
    if entry.old_at is not None and entry.new_at is not None:
        moved = f" from {words.when(entry.old_at)} to {words.when(entry.new_at)}"
    text = f"It replaces action {a.rescheduled_from}, which {who(entry.actor)} rescheduled{moved}."
    return Step("rescheduled_from", entry.created_at, text, details)


def _quiet_hours(facts: Facts, words: _Words) -> Step | None:
    a = facts.action
    if a.original_publish_at is None or a.original_publish_at == a.publish_at:
        return None
    entry = next((c for c in facts.changes if c.kind == "quiet_hours"), None)
    text = (
        f"Moved by the recipient's quiet hours from {words.when(a.original_publish_at)} to"
        f" {words.when(a.publish_at)}."
    )
    details = {
        "recipient_id": a.recipient_id,
        "old_at": a.original_publish_at,
        "new_at": a.publish_at,
    }
    return Step("quiet_hours", entry.created_at if entry else a.created_at, text, details)


def _deferred(c: Change, words: _Words) -> Step:
    reason = c.reason or ""
    by = "cap" if "cap of" in reason else "quiet_hours" if "quiet hours" in reason else None
    code = f"deferred_{by}" if by else "deferred"
    moved = f" to {words.when(c.new_at)}" if c.new_at else ""
    text = f"Deferred when it fell due{moved}{_because(c.reason)}."
    return Step(
        code, c.created_at, text, {"old_at": c.old_at, "new_at": c.new_at, "reason": c.reason}
    )


# How the claim's cancel of a suppressed row begins its reason (platform/sql/actions.sql).
SUPPRESSED = "suppressed: "


def _change(c: Change, words: _Words) -> Step:
    """One entry of the action's own change log (quiet-hours moves are told elsewhere)."""
    details: dict[str, Any] = {"actor": c.actor, "reason": c.reason}
    if c.kind == "defer":
        return _deferred(c, words)
    if c.kind == "throttled":
        again = f"; due again at {words.when(c.new_at)}" if c.new_at else ""
        text = f"Held back by a rate limit when it fell due: {c.reason}{again}."
        details |= {"old_at": c.old_at, "new_at": c.new_at}
        return Step("throttled", c.created_at, text, details)
    if c.kind == "retry":
        # Written by the retry itself (migration 0041): the reason says which retry, of how
        # many, and the failure it retried.
        said = f" ({c.reason})" if c.reason else ""
        again = f": due again at {words.when(c.new_at)}" if c.new_at else ""
        text = f"Retried by {who(c.actor)}{said}{again}."
        details |= {"old_at": c.old_at, "new_at": c.new_at}
        return Step("retried", c.created_at, text, details)
    if c.kind == "reschedule":
        details |= {"old_at": c.old_at, "new_at": c.new_at, "rescheduled_to": c.new_action_id}
        to = f" to {words.when(c.new_at)}" if c.new_at else ""
        text = f"Rescheduled by {who(c.actor)}{to}: replaced by action {c.new_action_id}."
        return Step("rescheduled", c.created_at, text, details)
    if c.kind == "cancel" and (c.reason or "").startswith(SUPPRESSED):
        # The claim's own cancel (migration 0025): the reason names the address masked.
        said = (c.reason or "").removeprefix(SUPPRESSED)
        return Step("suppressed", c.created_at, f"Not sent when it fell due: {said}.", details)
    texts = {
        "cancel": ("cancelled", f"Cancelled by {who(c.actor)}{_because(c.reason)}."),
        "skip": ("skipped", f"Skipped when it fell due{_because(c.reason)}."),
        "drop": ("dropped_cap", f"Dropped when it fell due{_because(c.reason)}."),
        "exit": ("exited", f"Cancelled: its enrollment exited{_because(c.reason)}."),
        # A digest's action (tickwork.digests): made as one, moved by its debounce, flushed.
        "digest": ("digest", _digest_text(c, words)),
        "flush": ("digest_flushed", f"Sent early: its digest was flushed by {who(c.actor)}."),
    }
    code, text = texts.get(c.kind, (c.kind, f"{c.kind} by {who(c.actor)}."))
    return Step(code, c.created_at, text, details)


def _digest_text(c: Change, words: _Words) -> str:
    if c.new_at is None:
        return f"It is {c.reason or 'a digest'}; events join it until it is claimed."
    return f"A new event moved its debounced digest to {words.when(c.new_at)}."


_OUTCOMES = {
    "transient": "did not go through (the provider provably did not take it)",
    "rejected": "was refused by the provider",
    "ambiguous": "may or may not have arrived (no clear answer from the provider)",
    "stuck": "got no outcome: its dispatcher stopped answering, so it is not sent again",
    "delivered": "was delivered",
}

# What a provider said later of a message it took (its status callbacks: feedback).
_DELIVERIES = {
    "sent": "handed it on",
    "delivered": "delivered it",
    "undelivered": "could not deliver it",
    "bounced": "got it back (a bounce)",
    "complained": "was told the recipient marked it as spam",
}

_RESOLUTIONS = {
    "delivered": ("resolved_delivered", "The resolver found it at the provider"),
    "requeued": ("resolved_requeued", "The resolver found no such message: it is sent once more"),
    "unresolved": ("resolver_unsure", "The resolver could not tell"),
}


# Why an attempt went to a fallback provider (docs/failover.md).
_FAILOVER_REASONS = {
    "threshold": "the first provider answered this row transiently too often",
    "circuit_open": "the first provider's circuit was open",
}


def _attempt(t: AttemptRow, words: _Words) -> list[Step]:
    said = [part for part in (t.provider_code, t.excerpt) if part]
    text = f"Attempt {t.attempt} {_OUTCOMES.get(t.outcome, t.outcome)}"
    if t.provider is not None:
        text += f" through {t.provider}"
    if t.failover_reason is not None:
        text += f" (failed over: {_FAILOVER_REASONS.get(t.failover_reason, t.failover_reason)})"
    text += f": {'; '.join(said)}." if said else "."
    details = {
        "provider": t.provider,
        "failover_reason": t.failover_reason,
        "attempt": t.attempt,
        "outcome": t.outcome,
        "provider_code": t.provider_code,
        "excerpt": t.excerpt,
        "latency_ms": t.latency_ms,
        "provider_message_id": t.provider_message_id,
    }
    steps = [Step("attempt", t.finished_at or t.started_at, text, details)]
    if t.resolution is not None:
        code, said_by = _RESOLUTIONS.get(t.resolution, ("resolved", "The resolver"))
        steps.append(
            Step(
                code,
                t.resolved_at,
                f"{said_by}{_because(t.resolution_detail)}.",
                {"attempt": t.attempt, "detail": t.resolution_detail},
            )
        )
    if t.delivery_status is not None:
        kind = f" {t.delivery_bounce}" if t.delivery_bounce else ""
        later = _DELIVERIES.get(t.delivery_status, t.delivery_status).replace(
            "(a bounce)", f"(a{kind} bounce)"
        )
        steps.append(
            Step(
                "delivery",
                t.delivery_at,
                f"The provider later said it {later}{_because(t.delivery_detail)}.",
                {
                    "attempt": t.attempt,
                    "status": t.delivery_status,
                    "bounce": t.delivery_bounce,
                    "detail": t.delivery_detail,
                },
            )
        )
    return steps


def history(facts: Facts, words: _Words) -> list[Step]:
    """What happened, oldest first (steps of unknown time after the ones before them)."""
    steps = [_created(facts, words)]
    steps += [s for s in (_predecessor(facts, words), _quiet_hours(facts, words)) if s]
    own = [c for c in facts.changes if c.action_id == facts.action.id and c.kind != "quiet_hours"]
    later = [_change(c, words) for c in own]
    for t in facts.attempts:
        later += _attempt(t, words)
    later.sort(key=lambda s: s.at or facts.action.updated_at)
    return steps + later


# -------------------------------------------------------------------------------- now


@dataclass(frozen=True)
class _Context:
    facts: Facts
    settings: Settings
    words: _Words
    lookup_retention: timedelta | None

    @property
    def action(self) -> Action:
        return self.facts.action


def _hold(c: _Context) -> Step | None:
    """The kill switch, or the action type paused."""
    s, a = c.settings, c.action
    if not s.dispatch_enabled:
        return Step(
            "held_kill_switch",
            None,
            "Dispatch is switched off for the whole deployment (kill switch"
            " TICKWORK_DISPATCH_ENABLED=false): it stays queued until it is switched"
            " back on.",
            {"dispatch_enabled": False},
        )
    if not s.dispatch_allowed(a.action_type):
        return Step(
            "held_paused_type",
            None,
            f"Its action type {a.action_type!r} is paused"
            " (TICKWORK_PAUSED_ACTION_TYPES): it stays queued until the type is"
            " resumed.",
            {"action_type": a.action_type},
        )
    return None


def _why_again(c: _Context) -> Step | None:
    """Why a queued row has a next_attempt_at other than a defer or the resolver's retry
    (which the history tells): a backoff after a call, or an admin's retry."""
    a, words = c.action, c.words
    if a.next_attempt_at is None:
        return None
    last_defer = next(
        (x for x in reversed(c.facts.changes) if x.kind in ("defer", "throttled")), None
    )
    if last_defer is not None and last_defer.new_at == a.next_attempt_at:
        return None
    last = c.facts.attempts[-1] if c.facts.attempts else None
    if last is not None and last.resolution == "requeued":
        return None
    if a.last_error is None and a.manual_retries > 0:
        logged = next((x for x in reversed(c.facts.changes) if x.kind == "retry"), None)
        if logged is not None and logged.new_at == a.next_attempt_at:
            return None  # the history tells it, with who and when
        # A retry from before the change log recorded them: who is not known.
        return Step(
            "retried",
            None,
            f"An admin retried it (retry {a.manual_retries} of"
            f" {c.settings.max_manual_retries}): due again at"
            f" {words.when(a.next_attempt_at)}.",
            {"manual_retries": a.manual_retries},
        )
    code = last.provider_code if last is not None and last.attempt == a.attempt_count else None
    text = (
        f"Backing off after attempt {a.attempt_count}{_because(a.last_error)}; the next"
        f" attempt is due at {words.when(a.next_attempt_at)}."
        if a.attempt_count
        else f"Handed back before any call{_because(a.last_error)}; due again at"
        f" {words.when(a.next_attempt_at)}."
    )
    details = {
        "attempt_count": a.attempt_count,
        "next_attempt_at": a.next_attempt_at,
        "last_error": a.last_error,
        "error_code": code,
    }
    return Step("backing_off", a.next_attempt_at, text, details)


def _waiting(c: _Context) -> list[Step]:
    """Where a queued row waits: for its time, for the tick, or on its queue."""
    a, words, s = c.action, c.words, c.settings
    handed, handed_at = c.facts.handed, c.facts.handed_at
    due = a.due_at
    if due > words.now:
        text = f"Due at {words.when(due)}, in {words.until(due)}."
        if handed:
            since = f" since {words.when(handed_at)}" if handed_at is not None else ""
            text += f" Its message is on the {a.action_type} queue{since}, delayed until then."
        return [Step("due_later", due, text, {"due_at": due, "enqueued_at": handed_at})]
    steps = []
    if not handed:
        steps.append(
            Step(
                "waiting_for_tick",
                due,
                f"Due since {words.when(due)}; the next tick (every minute) sends it to its queue.",
                {"due_at": due},
            )
        )
    else:
        since = (
            f"since {words.when(handed_at)}"
            if handed_at is not None
            else "(the tick handed it over before it was due)"
        )
        text = (
            f"Due since {words.when(due)}; in the {a.action_type} queue {since},"
            " waiting for a dispatcher to claim it."
        )
        waited = words.now - (handed_at or due)
        if waited.total_seconds() > s.redelivery_timeout_seconds:
            text += " Its message is overdue: the next tick sends it again."
        steps.append(
            Step("in_queue", handed_at or due, text, {"due_at": due, "enqueued_at": handed_at})
        )
    type_config = s.action_type(a.action_type)
    lateness = type_config.max_lateness if type_config is not None else None
    if lateness is not None and words.now - due > lateness:
        steps.append(
            Step(
                "too_late",
                due + lateness,
                f"It is later than its type's max lateness ({span(lateness.total_seconds())}):"
                " the next tick fails it as expired.",
                {"max_lateness_seconds": lateness.total_seconds()},
            )
        )
    return steps


def _queued(c: _Context) -> list[Step]:
    steps = [s for s in (_why_again(c),) if s]
    steps += _waiting(c)
    held = _hold(c)
    return [*steps, held] if held else steps


def _submitted(c: _Context) -> list[Step]:
    a, words = c.action, c.words
    claimed = a.submitted_at or a.updated_at
    steps = [
        Step(
            "claimed",
            claimed,
            f"Claimed by a dispatcher at {words.when(claimed)} (attempt"
            f" {a.attempt_count}): waiting for the provider's answer.",
            {"attempt_count": a.attempt_count, "enqueued_at": a.enqueued_at},
        )
    ]
    stuck = timedelta(seconds=c.settings.stuck_timeout_seconds)
    if words.now - claimed > stuck:
        steps.append(
            Step(
                "stuck_soon",
                claimed + stuck,
                f"No outcome for longer than the stuck timeout ({span(stuck.total_seconds())}):"
                " the next tick fails it as stuck, and it is not sent again.",
                {"stuck_timeout_seconds": c.settings.stuck_timeout_seconds},
            )
        )
    return steps


def _published(c: _Context) -> list[Step]:
    a, words = c.action, c.words
    settled = next((t for t in c.facts.attempts if t.resolution == "delivered"), None)
    at = (settled.resolved_at if settled else None) or a.finished_at
    by = (
        "by the resolver, which found it at the provider"
        if settled
        else f"by attempt {a.attempt_count}"
    )
    shown = f" at {words.when(at)}" if at else ""
    provider = f" (provider id {a.provider_id})" if a.provider_id else ""
    details = {
        "provider_id": a.provider_id,
        "finished_at": a.finished_at,
        "attempt_count": a.attempt_count,
        "submitted_at": a.submitted_at,
    }
    return [Step("published", at, f"Published{shown} {by}{provider}.", details)]


def _unsettled(c: _Context) -> Step:
    """What becomes of a row failed ambiguous or stuck: the resolver's part, or a person's."""
    a, words, s = c.action, c.words, c.settings
    person = "a person decides (see the runbook); an admin may retry it"
    if c.lookup_retention is None:
        config = s.action_type(a.action_type)
        last = next((t for t in reversed(c.facts.attempts) if t.attempt == a.attempt_count), None)
        if config is not None and config.failover is not None and last is not None:
            if last.provider is None:
                return Step(
                    "needs_person",
                    None,
                    f"Its attempt was recorded without the provider it called (its type fails"
                    f" over between providers), so the resolver cannot tell whom to ask:"
                    f" {person}.",
                    {"lookup": False, "provider": None},
                )
            return Step(
                "needs_person",
                None,
                f"Its attempt went to {last.provider}, which the resolver cannot ask about it"
                f" (no lookup, or the connection it went through is not recorded): {person}.",
                {"lookup": False, "provider": last.provider},
            )
        return Step(
            "needs_person",
            None,
            f"Its provider offers no lookup, so the resolver cannot ask whether it"
            f" arrived: {person}.",
            {"lookup": False},
        )
    if not s.resolve_enabled:
        return Step(
            "needs_person",
            None,
            f"The resolver is switched off (TICKWORK_RESOLVE_ENABLED=false): {person}.",
            {"resolve_enabled": False},
        )
    asked = a.submitted_at or a.finished_at or a.updated_at
    if words.now - asked > c.lookup_retention:
        return Step(
            "needs_person",
            asked + c.lookup_retention,
            f"Its provider keeps attempts for {span(c.lookup_retention.total_seconds())}"
            f" and this one is older: the resolver cannot tell any more; {person}.",
            {"lookup_retention_seconds": c.lookup_retention.total_seconds()},
        )
    last = next((t for t in reversed(c.facts.attempts) if t.attempt == a.attempt_count), None)
    if last is not None and last.resolution == "unresolved" and last.resolved_at is not None:
        again = last.resolved_at + timedelta(seconds=s.resolve_recheck_seconds)
        return Step(
            "awaiting_resolver",
            again,
            f"The resolver asks its provider again after {words.when(again)}.",
            {"recheck_seconds": s.resolve_recheck_seconds},
        )
    return Step(
        "awaiting_resolver",
        None,
        "Waiting for the resolver (every minute) to ask its provider whether it"
        " arrived: found, it becomes published; provably absent, it is sent once"
        " more.",
        {},
    )


def _failed(c: _Context) -> list[Step]:
    a, words = c.action, c.words
    shown = f" at {words.when(a.finished_at)}" if a.finished_at else ""
    code = f" ({a.error_code})" if a.error_code else ""
    text = f"Failed{shown} after attempt {a.attempt_count}{code}{_because(a.last_error)}."
    steps = [
        Step(
            "failed",
            a.finished_at,
            text,
            {
                "error_code": a.error_code,
                "last_error": a.last_error,
                "attempt_count": a.attempt_count,
            },
        )
    ]
    if needs_resolver(a):
        steps.append(_unsettled(c))
        return steps
    left = c.settings.max_manual_retries - a.manual_retries
    if left > 0:
        steps.append(
            Step(
                "retry_possible",
                None,
                f"An admin may retry it (POST /v1/actions/{a.id}/retry):"
                f" {a.manual_retries} of {c.settings.max_manual_retries} retries"
                " used.",
                {"manual_retries": a.manual_retries},
            )
        )
    return steps


def _cancelled(c: _Context) -> list[Step]:
    """A cancelled row's change log says who and why; a row without one still says it."""
    a, words = c.action, c.words
    logged = {"cancel", "reschedule", "skip", "drop", "exit"}
    if any(x.kind in logged and x.action_id == a.id for x in c.facts.changes):
        return []
    shown = f" at {words.when(a.finished_at)}" if a.finished_at else ""
    reason = a.last_error or a.error_code
    return [
        Step(
            "cancelled",
            a.finished_at,
            f"Cancelled{shown}{_because(reason)}.",
            {"error_code": a.error_code},
        )
    ]


_NOW = {
    "queued": _queued,
    "submitted": _submitted,
    "published": _published,
    "failed": _failed,
    "cancelled": _cancelled,
}


def sentence_zone(action: Action, default: ZoneInfo) -> ZoneInfo:
    """The zone the sentences give times in when the viewer names none: the one the action
    was scheduled in, else `default` (the workspace's)."""
    return ZoneInfo(action.timezone) if action.timezone else default


def explain(
    facts: Facts,
    settings: Settings,
    now: datetime,
    tz: ZoneInfo,
    *,
    lookup_retention: timedelta | None = None,
    viewer: ZoneInfo | None = None,
) -> list[Step]:
    """The steps that explain the action's status: its history, then where it stands.
    `tz`: the workspace's zone; the sentences give times in `viewer`'s when given, else in
    `sentence_zone`'s; `lookup_retention`: how long its provider can say whether a message
    arrived (None: it cannot), for a row the resolver may settle."""
    words = _Words(viewer or sentence_zone(facts.action, tz), now)
    context = _Context(facts, settings, words, lookup_retention)
    return history(facts, words) + _NOW[facts.action.status](context)
