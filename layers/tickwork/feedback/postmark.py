"""Postmark's delivery, bounce and spam-complaint webhooks.

Postmark authenticates a webhook the documented way: HTTP basic auth credentials in the
webhook's URL (`https://tickwork:<secret>@<api>/v1/callbacks/<connection id>`), here the
connection's callback secret. Bodies are JSON with a `RecordType`:

- `Delivery`: delivered, at `DeliveredAt`.
- `Bounce` of `Type` HardBounce or BadEmailAddress: bounced hard, at `BouncedAt`; `Email`
  is suppressed (`hard_bounce`). Another bounce type (SoftBounce, Transient, DnsError,
  ...): bounced soft. A type that is no bounce (AutoResponder, AddressChange, ...): ignored.
- `SpamComplaint`: complained, at `BouncedAt`; `Email` is suppressed (`complaint`).
- Anything else (Open, Click, SubscriptionChange): ignored.

The event's identity (a retry carries the same): a bounce's or complaint's `ID`; a
delivery's `MessageID` and `Recipient`."""

from __future__ import annotations

from typing import Any

from tickwork.feedback.common import (
    CallbackRequest,
    check_basic_auth,
    detail,
    instant,
    json_object,
    text_field,
)
from tickwork.feedback.model import DeliveryEvent, Suppress

HARD = frozenset({"HardBounce", "BadEmailAddress"})
NOT_BOUNCES = frozenset({
    "AutoResponder", "AddressChange", "Subscribe", "Unsubscribe", "ChallengeVerification",
    "OpenRelayTest", "VirusNotification", "SpamNotification", "ManuallyDeactivated",
    "InboundError", "TemplateRenderingFailed",
})  # fmt: skip
WHAT = "Postmark webhook"


def verify(request: CallbackRequest, secret: str | None) -> None:
    check_basic_auth(request.headers, secret, "the webhook URL's credentials in Postmark")


def events(request: CallbackRequest) -> list[DeliveryEvent]:
    body = json_object(request.body, WHAT)
    record = text_field(body, "RecordType", WHAT, 64)
    if record == "Delivery":
        message_id = text_field(body, "MessageID", WHAT)
        recipient = str(body.get("Recipient") or "")
        return [DeliveryEvent(
            key=f"postmark:delivery:{message_id}:{recipient}"[:300], message_id=message_id,
            status="delivered", at=instant(body.get("DeliveredAt")),
            detail=detail("Delivery", body.get("Details")),
        )]  # fmt: skip
    if record == "Bounce":
        return [_bounce(body)]
    if record == "SpamComplaint":
        message_id = text_field(body, "MessageID", WHAT)
        ident = text_field(body, "ID", WHAT, 40)
        return [DeliveryEvent(
            key=f"postmark:complaint:{ident}", message_id=message_id, status="complained",
            at=instant(body.get("BouncedAt")), detail=detail("SpamComplaint"),
            suppress=_address(body, "complaint"),
        )]  # fmt: skip
    return [DeliveryEvent(key=f"postmark:{record}:{_ident(body)}"[:300], message_id=None,
                          status=None, at=None)]  # fmt: skip


def _ident(body: dict[str, Any]) -> str:
    return str(body.get("ID") or body.get("MessageID") or "")[:200]


def _address(body: dict[str, Any], reason: Any) -> tuple[Suppress, ...]:
    email = body.get("Email")
    if isinstance(email, str) and "@" in email and len(email) <= 320:
        return (Suppress("email", email, reason),)
    return ()


def _bounce(body: dict[str, Any]) -> DeliveryEvent:
    message_id = text_field(body, "MessageID", WHAT)
    ident = text_field(body, "ID", WHAT, 40)
    kind = str(body.get("Type") or "")
    key = f"postmark:bounce:{ident}"
    if kind in NOT_BOUNCES:
        return DeliveryEvent(key=key, message_id=message_id, status=None, at=None)
    hard = kind in HARD
    return DeliveryEvent(
        key=key, message_id=message_id, status="bounced", bounce="hard" if hard else "soft",
        at=instant(body.get("BouncedAt")), detail=detail(kind, body.get("Description")),
        suppress=_address(body, "hard_bounce") if hard else (),
    )  # fmt: skip
