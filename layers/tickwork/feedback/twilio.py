"""Twilio's status callbacks and incoming messages, verified by `X-Twilio-Signature`.

Twilio signs each request with the account's auth token: base64 of HMAC-SHA1 over the
full URL it called (query included) followed by every POST parameter, sorted by name, as
name and value concatenated. Bodies are form-encoded.

- `MessageStatus` delivered (or read): delivered; sent: sent (handed to the carrier);
  undelivered or failed: undelivered, with the `ErrorCode` (21610, the recipient had
  replied STOP, suppresses `To` as `stop_reply`); queued, accepted, sending, scheduled:
  ignored (they come before `sent`).
- An incoming message whose `Body` is an opt-out keyword (STOP, STOPALL, UNSUBSCRIBE,
  CANCEL, END, QUIT, OPTOUT, REVOKE) or whose `OptOutType` is STOP: `From` is suppressed
  on sms (`stop_reply`). Another incoming message is ignored.

The event's identity: the message's sid and status (an incoming message's sid). A status
callback carries no time of its own; `RawDlrDoneDate` (the carrier's, YYMMDDhhmm UTC) is
used when present, else the time it reached us."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime
from urllib.parse import parse_qsl

from tickwork.feedback.common import CallbackRequest, detail, storable
from tickwork.feedback.model import (
    CallbackUnverifiedError,
    DeliveryEvent,
    DeliveryStatus,
    MalformedCallbackError,
    Suppress,
)

STOP_WORDS = frozenset({"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "OPTOUT",
                        "REVOKE"})  # fmt: skip
STATUSES: dict[str, DeliveryStatus | None] = {
    "delivered": "delivered", "read": "delivered", "sent": "sent",
    "undelivered": "undelivered", "failed": "undelivered",
    "queued": None, "accepted": None, "sending": None, "scheduled": None,
    "canceled": None, "receiving": None, "received": None,
}  # fmt: skip
UNSUBSCRIBED = "21610"


def signature(url: str, params: list[tuple[str, str]], auth_token: str) -> str:
    """Twilio's request signature (as its helper libraries compute it)."""
    names = sorted({name for name, _ in params})
    text = url + "".join(
        name + value for name in names for value in sorted(v for n, v in params if n == name)
    )
    digest = hmac.new(auth_token.encode(), text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def verify(request: CallbackRequest, auth_token: str | None, account_sid: str) -> dict[str, str]:
    """The form, once its signature is the one the connection's auth token makes."""
    if not auth_token:
        raise CallbackUnverifiedError("the connection's auth token cannot be read")
    given = request.headers.get("x-twilio-signature", "")
    try:
        params = parse_qsl(request.body, keep_blank_values=True, strict_parsing=bool(request.body))
    except ValueError:
        params = None
    if params is None or not given:
        raise CallbackUnverifiedError("the callback carries no valid X-Twilio-Signature")
    expected = signature(request.url, params, auth_token)
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise CallbackUnverifiedError(
            "X-Twilio-Signature does not match: the callback was not signed with this"
            " connection's auth token for this URL"
        )
    for name, value in params:
        # Percent-decoding can make a NUL (`SM%00x`), which nothing may store
        storable(name + value, "Twilio callback")
    form = dict(params)
    if account_sid and form.get("AccountSid") not in (None, account_sid):
        raise CallbackUnverifiedError("the callback is about another Twilio account")
    return form


def _carrier_time(raw: str | None) -> datetime | None:
    if not raw or len(raw) != 10 or not raw.isdigit():
        return None
    try:
        return datetime.strptime(raw, "%y%m%d%H%M").replace(tzinfo=UTC)
    except ValueError:
        return None


def events(request: CallbackRequest, form: dict[str, str]) -> tuple[list[DeliveryEvent], bool]:
    """The events of a verified request, and whether it was an incoming message (Twilio
    reads the answer to one as TwiML)."""
    sid = form.get("MessageSid") or form.get("SmsSid") or ""
    if not sid or len(sid) > 64:
        raise MalformedCallbackError("the Twilio callback has no MessageSid", field="MessageSid")
    status = (form.get("MessageStatus") or form.get("SmsStatus") or "").lower()
    if "Body" in form and status in ("", "received", "receiving"):
        return [_inbound(sid, form)], True
    if status not in STATUSES:
        raise MalformedCallbackError(
            f"the Twilio callback's MessageStatus {status[:40]!r} is not one Twilio documents",
            field="MessageStatus",
        )
    mapped = STATUSES[status]
    code = form.get("ErrorCode") or None
    suppress: tuple[Suppress, ...] = ()
    if code == UNSUBSCRIBED and form.get("To"):
        suppress = (Suppress("sms", form["To"], "stop_reply"),)
    return [DeliveryEvent(
        key=f"twilio:{sid}:{status}", message_id=sid, status=mapped,
        at=_carrier_time(form.get("RawDlrDoneDate")),
        detail=detail(status, f"ErrorCode {code}" if code else None),
        suppress=suppress,
    )], False  # fmt: skip


def _inbound(sid: str, form: dict[str, str]) -> DeliveryEvent:
    word = (form.get("Body") or "").strip().upper()
    stop = word in STOP_WORDS or (form.get("OptOutType") or "").upper() == "STOP"
    sender = form.get("From") or ""
    suppress = (Suppress("sms", sender, "stop_reply"),) if stop and sender else ()
    return DeliveryEvent(key=f"twilio:inbound:{sid}", message_id=None, status=None, at=None,
                         detail="replied with an opt-out keyword" if stop else None,
                         suppress=suppress)  # fmt: skip
