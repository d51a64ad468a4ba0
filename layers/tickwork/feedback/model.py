"""Values of delivery feedback: the states a message reaches after the provider accepted
it, their ranks, and the events providers' callbacks are read into."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal
from uuid import UUID

from tickwork.platform.errors import (
    AuthenticationError,
    BadRequestError,
    InputError,
    NotFoundError,
)

DeliveryStatus = Literal["sent", "delivered", "undelivered", "bounced", "complained"]
Bounce = Literal["hard", "soft"]
CallbackOutcome = Literal["applied", "stale", "duplicate", "unmatched", "ignored", "unverified"]
OUTCOMES: Final = ("applied", "stale", "duplicate", "unmatched", "ignored", "unverified")

# Providers whose callbacks Tickwork reads; the others send nothing back.
SUPPORTED: Final = frozenset({"twilio", "postmark", "ses"})
# Providers whose callbacks carry the connection's callback secret (Postmark's webhook URL);
# Twilio signs with the auth token, SNS with its own key.
USES_SECRET: Final = frozenset({"postmark"})
UNSUPPORTED_NOTE: Final = (
    "this provider sends no delivery status back: `published` (the provider accepted it)"
    " is all Tickwork can know"
)


def rank(status: DeliveryStatus, bounce: Bounce | None = None) -> int:
    """An attempt's state only moves up this order, so a reordered or repeated callback
    never moves it back: handed on (sent), then delivered, then what can follow a delivery
    or replace it (undelivered, a soft bounce, a hard bounce), a complaint last (a person
    received it and marked it as spam)."""
    if status == "bounced":
        return 5 if bounce == "hard" else 4
    return {"sent": 1, "delivered": 2, "undelivered": 3, "complained": 6}[status]


@dataclass(frozen=True)
class Suppress:
    """An address the event says must not be messaged again."""

    channel: Literal["email", "sms"]
    address: str
    reason: Literal["hard_bounce", "complaint", "stop_reply"]


@dataclass(frozen=True)
class DeliveryEvent:
    """One thing a provider said, read from its callback.

    `key` is the provider's identity of the event (a retry carries the same one);
    `message_id` the id the provider gave the message when it accepted it (the row's
    provider_id), None for an event about no message (an inbound STOP reply). `status`
    None: an event Tickwork does not track (opens, clicks), counted as ignored."""

    key: str
    message_id: str | None
    status: DeliveryStatus | None
    at: datetime | None
    bounce: Bounce | None = None
    detail: str | None = None
    suppress: tuple[Suppress, ...] = ()


@dataclass(frozen=True)
class Delivery:
    status: DeliveryStatus
    bounce: Bounce | None
    at: datetime | None
    detail: str | None


@dataclass(frozen=True)
class Recorded:
    """What one event changed: its outcome; the attempt it is about (when found); the
    delivery state before and after (`after` is None when nothing moved); the addresses it
    newly suppressed. Outcome events hook in here: `changed` says whether to tell."""

    outcome: CallbackOutcome
    action_id: UUID | None = None
    attempt: int | None = None
    before: Delivery | None = None
    after: Delivery | None = None
    suppressed: tuple[Suppress, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return self.after is not None


class CallbackUnverifiedError(AuthenticationError):
    """The callback could not be verified the provider's way: nothing changed."""

    code = "callback_unverified"


class CallbacksUnsupportedError(NotFoundError):
    """The connection's provider sends no status callbacks."""

    code = "callbacks_unsupported"


class MalformedCallbackError(BadRequestError):
    """Verified (or verifiable) but not a body the provider documents."""


class CallbackSecretUnusedError(InputError):
    """A callback secret asked for a connection whose provider never sends one."""

    code = "callback_secret_unused"
