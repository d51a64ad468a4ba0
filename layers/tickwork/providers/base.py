"""The provider port: send one action, say what happened.

Outcomes separate what a provider knows from what the dispatcher decides: a provider reports
whether the action was delivered, refused, provably not delivered, or perhaps delivered; the
dispatcher turns that into a state transition, a backoff or a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from tickwork.actions import Action


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

    def send(self, action: Action, via: Via | None = None) -> Outcome: ...


class ProviderError(Exception):
    """A provider cannot be built from its configuration."""
