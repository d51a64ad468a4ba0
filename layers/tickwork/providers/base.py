"""The provider port: send one action, say what happened.

Outcomes separate what a provider knows from what the dispatcher decides: a provider reports
whether the action was delivered, refused, provably not delivered, or perhaps delivered; the
dispatcher turns that into a state transition, a backoff or a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from tickwork.actions.model import Action, Claimed


@dataclass(frozen=True)
class Delivered:
    provider_id: str | None = None


@dataclass(frozen=True)
class Rejected:
    """The provider refused the action; sending it again would be refused again."""

    code: str
    message: str


@dataclass(frozen=True)
class Transient:
    """Not delivered, provably (connect error, 429, 503): safe to send again later."""

    message: str
    retry_after: float | None = None


@dataclass(frozen=True)
class Ambiguous:
    """The request left but no answer came back (read timeout, 5xx): it may have arrived."""

    message: str
    retry_after: float | None = None


@dataclass(frozen=True)
class NotSent:
    """Nothing left this process (shutting down, paused): undo the claim."""

    message: str


Outcome = Delivered | Rejected | Transient | Ambiguous | NotSent


@dataclass(frozen=True)
class Via:
    """The workspace connection an action is sent through: its settings and credentials
    (read from the secret store just before the call; never logged, never shown)."""

    id: UUID
    workspace_id: UUID
    provider: str
    settings: dict[str, Any]
    credentials: dict[str, str] = field(repr=False)
    # The one-click unsubscribe link of the action sent through it (RFC 8058), made by the
    # dispatcher for this action's recipient; email providers put it in the headers.
    unsubscribe_url: str | None = None


@dataclass(frozen=True)
class Verified:
    """What `verify` found: whether the credentials work, and what a person should fix."""

    ok: bool
    message: str
    account: str | None = None  # the account, server or handle the credentials belong to


class Provider(Protocol):
    # True when the receiver deduplicates on a key we send (the action id), so an ambiguous
    # outcome may be retried without risking a second delivery.
    idempotent: bool
    # True when send() waits on the network: the dispatcher then runs calls concurrently.
    io_bound: bool

    def send(self, action: Claimed, via: Via | None = None) -> Outcome: ...


@dataclass(frozen=True)
class Found:
    """The provider has the message: it was delivered, under `provider_id`."""

    provider_id: str | None
    detail: str = ""


@dataclass(frozen=True)
class Absent:
    """The provider answered, authoritatively, that it has no such message."""

    detail: str = ""


@dataclass(frozen=True)
class Unknown:
    """The lookup could not tell (it failed, timed out, or the record is out of reach)."""

    reason: str


LookupResult = Found | Absent | Unknown


@runtime_checkable
class Lookup(Protocol):
    """Optional capability of a provider: ask it whether an action's message arrived.

    The resolver uses it for rows left `ambiguous` or `stuck`. Providers without a way to
    ask (SES) do not implement it, and such rows stay for a person to decide."""

    # How long after an attempt the provider can still answer for it.
    lookup_retention: timedelta
    # How long after an attempt an `Absent` may be trusted (search indexes lag behind).
    lookup_grace: timedelta

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult: ...


def attempt_claimed_at(action: Claimed) -> datetime:
    """When the attempt a lookup asks about was claimed: the row's `submitted_at` when the
    resolver hands the whole row, else when it was due. Lookups that match by content and
    time (no id of ours travels with the message) search a window around it."""
    claimed = action.submitted_at if isinstance(action, Action) else None
    return (claimed or action.due_at).astimezone(UTC)


def lookup_of(provider: Provider) -> Lookup | None:
    """The provider's lookup, or None when it has none."""
    return provider if isinstance(provider, Lookup) else None


class ProviderError(Exception):
    """A provider cannot be built from its configuration."""
