"""Scheduled actions and their state machine (docs/concepts.md#the-state-machine).

    queued ──▶ submitted ──▶ published
      │            ├───────▶ failed ──(admin retry)──▶ queued
      │            └───────▶ queued   (never reached the provider, or a provable transient)
      └──────────────────▶ cancelled

Every transition is one conditional UPDATE naming the status it expects (`store`). A
transition asked of a row in another state changes nothing and returns the row as it is, so
callers can say why (`Transition.changed` is False); only a missing row comes back as
`action=None`. Reschedule is cancel + insert with lineage; `publish_at` is never edited in
place. This module holds the values only: providers and the engine depend on it, not on SQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, make_dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple, cast
from uuid import UUID

from tickwork.platform.errors import (
    ConflictError,
    InputError,
    NotFoundError,
)

Status = Literal["queued", "submitted", "published", "failed", "cancelled"]
ACTIVE: frozenset[str] = frozenset({"queued", "submitted"})
TERMINAL: frozenset[str] = frozenset({"published", "failed", "cancelled"})

# Mirrors the CHECK constraint on scheduled_actions.payload (bytes of its JSON text).
PAYLOAD_MAX_BYTES = 65536
MAX_KEY_LENGTH = 200

# Tags: a few labels of the tenant's own per action ("podcast:42"), mirrored by the CHECK
# constraint tickwork_tags_valid (migration 0027).
MAX_TAGS = 10
MAX_TAG_LENGTH = 64
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@=-]{0,63}")


def check_tags(tags: Sequence[str] | None, *, field: str = "tags") -> tuple[str, ...]:
    """The tags as stored (duplicates dropped, first order kept), or InputError naming the
    bad one: at most MAX_TAGS, each 1-64 letters, digits or `_ . : / @ = -`, starting with
    a letter or digit."""
    if not tags:
        return ()
    unique = tuple(dict.fromkeys(tags))
    if len(unique) > MAX_TAGS:
        raise InputError(
            f"{field}: at most {MAX_TAGS} tags an action, {len(unique)} given",
            field=field, details={"max_tags": MAX_TAGS},
        )  # fmt: skip
    for index, tag in enumerate(unique):
        if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
            raise InputError(
                f"{field}[{index}]: a tag is 1-{MAX_TAG_LENGTH} letters, digits or"
                " `_ . : / @ = -`, starting with a letter or digit, e.g. 'podcast:42'",
                field=f"{field}[{index}]",
                details={"max_length": MAX_TAG_LENGTH},
            )
    return unique


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a dispatcher, its providers and the admission policies read of a row: the claim
    returns these columns alone. A claimed wave is the hot path, where loading a row's
    history and bookkeeping columns as well cost more than the claim's own update."""

    id: UUID
    workspace_id: UUID
    action_type: str
    thing_id: str | None
    target_key: str
    payload: dict[str, Any]
    publish_at: datetime
    status: Status
    attempt_count: int
    manual_retries: int
    next_attempt_at: datetime | None
    source: str
    connection_id: UUID | None  # the workspace connection it is sent through
    recipient_id: str | None
    transactional: bool

    @property
    def due_at(self) -> datetime:
        """When the row is next due: a backoff or retry time if set, else publish_at."""
        return self.next_attempt_at or self.publish_at


# A frozen dataclass's __init__ sets each field through object.__setattr__, at several
# times the cost of a plain one: for a claimed wave, more than the claim's statement. A
# claimed row is built as a plain twin with the same slots, then made a Claimed (the same
# layout, so Python allows the class change); from then on it is as frozen as any other.
_ClaimedTwin = make_dataclass(
    "_ClaimedTwin", list(Claimed.__dataclass_fields__), slots=True, eq=False, match_args=False
)


def claimed_of(values: Sequence[Any]) -> Claimed:
    """A Claimed of its fields' values, in field order."""
    row = _ClaimedTwin(*values)
    row.__class__ = Claimed
    return cast(Claimed, row)


@dataclass(frozen=True, slots=True)
class Action(Claimed):
    """One row of scheduled_actions, column for column."""

    created_by: str | None
    error_code: str | None
    last_error: str | None
    enqueued_at: datetime | None
    provider_id: str | None
    submitted_at: datetime | None
    finished_at: datetime | None
    dedupe_key: str | None
    rescheduled_from: UUID | None
    recurring_schedule_id: UUID | None
    created_at: datetime
    updated_at: datetime
    original_publish_at: datetime | None = None
    timezone: str | None = None  # the zone of the wall time it was scheduled at, if any
    tags: tuple[str, ...] = ()  # the tenant's labels (a bulk cancel can take them by one)
    # A type with fallback providers: where its attempt `routed_attempt` was sent (provider,
    # connection; None: the provider's options), recorded before the call (migration 0034).
    routed_provider: str | None = None
    routed_connection_id: UUID | None = None
    routed_attempt: int | None = None


def action_from_row(row: Mapping[str, Any]) -> Action:
    values = {name: row[name] for name in Action.__dataclass_fields__ if name not in _READ_IF_ANY}
    routed: dict[str, Any] = {name: row.get(name) for name in _ROUTED}
    return Action(**values, **routed, tags=tuple(row.get("tags") or ()))


# The route columns (migration 0034) are the engine's: a query answering an action may leave
# them out.
_ROUTED = ("routed_provider", "routed_connection_id", "routed_attempt")
_READ_IF_ANY = frozenset({"tags", *_ROUTED})


@dataclass(frozen=True)
class NewAction:
    action_type: str
    target_key: str
    publish_at: datetime
    payload: dict[str, Any] = field(default_factory=dict)
    thing_id: str | None = None
    dedupe_key: str | None = None
    source: str = "api"
    created_by: str | None = None
    rescheduled_from: UUID | None = None
    recurring_schedule_id: UUID | None = None
    connection_id: UUID | None = None
    # A message to a recipient: their quiet hours and caps apply unless transactional.
    recipient_id: str | None = None
    transactional: bool = False
    original_publish_at: datetime | None = None
    timezone: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scheduled:
    action: Action
    created: bool  # False when an earlier request with the same dedupe key made the row


@dataclass(frozen=True)
class Transition:
    """What a transition did: `changed` and the row after, or the row untouched and why not."""

    changed: bool
    action: Action | None

    @property
    def found(self) -> bool:
        return self.action is not None


# ---------------------------------------------------------------------------- validation


def payload_size(payload: Mapping[str, Any]) -> int:
    """Bytes of the payload as Postgres measures jsonb::text (a space after ':' and ',')."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
    except (TypeError, ValueError) as exc:
        raise InputError(f"payload is not plain JSON: {exc}", field="payload") from exc
    return len(text.encode("utf-8"))


def fields_of(new: NewAction) -> dict[str, Any]:
    return {name: getattr(new, name) for name in NewAction.__dataclass_fields__}


def expect(
    transition: Transition, action_id: UUID, verb: str, from_status: str, *, done: str | None = None
) -> Action:
    """The row a transition changed, or the reason it did not: NotFoundError for a row that
    is not there (or another workspace's), ConflictError naming the status it is in.
    A row already in `done` (cancelling a cancelled row) counts as success."""
    action = transition.action
    if action is None:
        raise NotFoundError(f"no action {action_id} in this workspace")
    if transition.changed or action.status == done:
        return action
    raise ConflictError(
        f"only {from_status} actions can be {verb}; this one is {action.status}",
        details={"status": action.status},
    )


def expect_retried(transition: Transition, action_id: UUID) -> Action:
    """`expect` for retry, which also refuses a failed row that used up its retries."""
    action = transition.action
    if action is not None and not transition.changed and action.status == "failed":
        raise ConflictError(
            f"this action was retried {action.manual_retries} times, the most allowed",
            details={"manual_retries": action.manual_retries},
        )
    return expect(transition, action_id, "retried", "failed")


AttemptOutcome = Literal["delivered", "rejected", "transient", "ambiguous", "stuck"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """A provider call that did not deliver, for the ledger (action_attempts): written with
    its outcome. A delivery needs none: the row it publishes records it."""

    number: int  # the row's attempt_count after its claim
    started: float  # epoch seconds
    finished: float
    outcome: AttemptOutcome
    code: str | None = None  # the provider's refusal code, if it gave one
    excerpt: str | None = None  # sanitized: no secrets, no receiver's body
    # Types with fallback providers: which one was called, and why not the first (None:
    # it was the first, or the one an earlier attempt of the row may have reached).
    provider: str | None = None
    failover_reason: str | None = None


class Finalization(NamedTuple):
    """Where a submitted row goes next (and, when the provider was called, the call). A
    tuple, not a dataclass: a dispatcher builds one per row it sends."""

    action_id: UUID
    status: Literal["published", "failed", "queued"]
    provider_id: str | None = None
    error_code: str | None = None
    last_error: str | None = None
    next_attempt_at: datetime | None = None
    attempt_delta: int = 0
    attempt: Attempt | None = None


def published(action_id: UUID, provider_id: str | None) -> Finalization:
    return Finalization(action_id, "published", provider_id)


def failed(action_id: UUID, error_code: str, message: str) -> Finalization:
    return Finalization(action_id, "failed", error_code=error_code, last_error=message)


def requeued(action_id: UUID, next_attempt_at: datetime, message: str) -> Finalization:
    """Back to queued after a transient error that provably did not deliver."""
    return Finalization(action_id, "queued", last_error=message, next_attempt_at=next_attempt_at)


def reverted(action_id: UUID, next_attempt_at: datetime | None, message: str) -> Finalization:
    """Undo a claim that never reached the provider: the attempt is not counted."""
    return Finalization(
        action_id, "queued", last_error=message, next_attempt_at=next_attempt_at, attempt_delta=-1
    )
