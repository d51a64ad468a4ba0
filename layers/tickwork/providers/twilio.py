"""Twilio Programmable Messaging: `POST /2010-04-01/Accounts/{AccountSid}/Messages.json`,
HTTP basic auth (Account SID or API key SID, and its secret), form-encoded `To`, `From` or
`MessagingServiceSid`, `Body`. The created message's `sid` is the provider id. Twilio has no
idempotency key: an ambiguous attempt fails as `ambiguous` rather than risk a second SMS.

| answer | outcome |
|---|---|
| 200/201 with `sid` | delivered (sid) |
| 400 code 21211, 21614 | rejected `invalid_number` |
| 400 code 21610 | rejected `recipient_unsubscribed` (the recipient replied STOP) |
| 400 code 21408, 21612 | rejected `region_not_enabled` |
| 400 code 21212, 21606, 21659 | rejected `invalid_sender` |
| 400 code 21602, 21617 | rejected `invalid_request` |
| 401 (code 20003) | rejected `auth_failed` |
| 404 (code 20404) | rejected `not_found` (account or messaging service) |
| other 4xx | rejected `provider_rejected` |
| 429 (code 20429) | transient: documented as never processed (Retry-After honoured) |
| 5xx, timeouts after sending | ambiguous |

Lookup (`lookup`): Twilio keeps no id of ours on a message (no metadata or client
reference, and the status callback URL is not returned), so an ambiguous or stuck SMS is
looked for by what was sent: `GET .../Messages.json?To=<to>&From=<from>&PageSize=20`
(`To` alone with a Messaging Service, matched on `messaging_service_sid`), every page
(`next_page_uri`), newest first. The list is not filtered by `DateSent`: Twilio sets
`date_sent` only when it hands the message on, so a message still in Twilio's queue would
not be listed. A message is in the attempt's window when its `date_created` is from
5 minutes before the attempt's claim to 20 minutes after (the call is made within the
dispatcher's run).

| in the window (outbound-api, this sender, this recipient) | answer |
|---|---|
| one message with our exact body (any status: Twilio accepted it) | found (its sid) |
| several with our exact body (a reminder sent twice in minutes) | unknown |
| none with our body, one that may be ours rewritten (see below) | unknown |
| none at all, every page read | absent (after `lookup_grace`) |
| an error, a 5xx, more than 25 pages, a next page elsewhere | unknown |

A body may be ours rewritten when it is empty (redacted), or when ours has non-ASCII
characters (Smart Encoding replaces them) or a link (link shortening replaces it).

A found sid already recorded for another action of the connection is not taken (the
resolver checks); a message with the same text sent by something other than Tickwork in
those minutes would be taken for ours (the row is then published, not sent twice).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tickwork.actions.model import Claimed
from tickwork.providers.base import (
    Absent,
    Ambiguous,
    Delivered,
    Found,
    LookupResult,
    Outcome,
    Rejected,
    Transient,
    Unknown,
    Verified,
    Via,
    attempt_claimed_at,
)
from tickwork.providers.http import Redactor, Reply, retry_after_seconds
from tickwork.providers.rest import RestProvider, field, safe_lookup, unanswered
from tickwork.providers.schema import Schema, phone

REJECTIONS = {
    21211: "invalid_number",
    21614: "invalid_number",
    21610: "recipient_unsubscribed",
    21408: "region_not_enabled",
    21612: "region_not_enabled",
    21212: "invalid_sender",
    21606: "invalid_sender",
    21659: "invalid_sender",
    21602: "invalid_request",
    21617: "invalid_request",
    20003: "auth_failed",
    20404: "not_found",
}

# The attempt's window: Twilio's clock is not ours, and a claim may wait a moment before
# its call; the call is made within the dispatcher's run (at most 15 minutes on Lambda).
WINDOW_BEFORE = timedelta(minutes=5)
WINDOW_AFTER = timedelta(minutes=20)
# Twilio allows up to 1,000 a page; a message listed is up to ~2.5 KB (a 1,600-character
# body), and answers are read up to provider_max_response_bytes (64 KB by default).
PAGE_SIZE = 20
MAX_PAGES = 25
# The message direction of one created through the REST API.
OUTBOUND_API = "outbound-api"

Match = Literal["ours", "maybe", "unrelated"]


class Settings(Schema):
    account_sid: str = Field(pattern=r"^AC[0-9a-fA-F]{32}$")
    from_number: str | None = Field(default=None, alias="from")
    messaging_service_sid: str | None = Field(default=None, pattern=r"^MG[0-9a-fA-F]{32}$")

    @field_validator("from_number")
    @classmethod
    def _from(cls, value: str | None) -> str | None:
        # A sender may also be an alphanumeric id or a short code; only shape is checked.
        if value is not None and not (1 <= len(value) <= 20):
            raise ValueError("is not a sender (a number, short code or alphanumeric id)")
        return value

    @model_validator(mode="after")
    def _sender(self) -> Settings:
        if self.from_number is None and self.messaging_service_sid is None:
            raise ValueError("give from (a Twilio number) or messaging_service_sid")
        return self


class Credentials(Schema):
    auth_token: str = Field(min_length=8, max_length=200)
    # With an API key, api_key_sid is the username and auth_token its secret.
    api_key_sid: str | None = Field(default=None, pattern=r"^SK[0-9a-fA-F]{32}$")
    # Twilio signs callbacks with the account's auth token, not an API key's secret: with
    # an API key, give the account's auth token here for status callbacks and STOP replies.
    callback_auth_token: str | None = Field(default=None, min_length=8, max_length=200)


class Payload(Schema):
    to: str = Field(description="E.164, e.g. +14155550100")
    body: str = Field(min_length=1, max_length=1600)

    @field_validator("to")
    @classmethod
    def _to(cls, value: str) -> str:
        return phone(value)


def redacted_status(status: Any) -> str:
    """A message status as shown: one of Twilio's lower-case words, nothing else."""
    text = str(status or "")
    return text if text.isascii() and text.replace("-", "").isalpha() and len(text) < 20 else "?"


def outcome(reply: Reply, redactor: Redactor) -> Outcome:
    body = reply.json()
    code = field(body, "code")
    # Twilio documents its error body as {code, message, more_info, status}: code and
    # message are shown.
    shown, message = redactor.code(code), redactor.message(field(body, "message"))
    detail = f"Twilio HTTP {reply.status}" + (f" code {shown}" if shown else "")
    detail += f": {message}" if message else ""
    if reply.status in (200, 201) and field(body, "sid"):
        return Delivered(str(field(body, "sid")))
    if reply.status == 429 or code == 20429:
        return Transient(detail, retry_after_seconds(reply.headers.get("retry-after")))
    if reply.status >= 500 or reply.status < 300:
        return Ambiguous(detail)
    if isinstance(code, int) and code in REJECTIONS:
        return Rejected(REJECTIONS[code], detail)
    if reply.status == 401:
        return Rejected("auth_failed", detail)
    if reply.status == 404:
        return Rejected("not_found", detail)
    return Rejected("provider_rejected", detail)


def created_at(message: Any) -> datetime | None:
    """A listed message's `date_created` (RFC 2822, as Twilio writes its dates)."""
    try:
        value = parsedate_to_datetime(str(field(message, "date_created")))
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)  # "-0000": UTC, unstated


def rewritable(body: str) -> bool:
    """Whether Twilio may have stored this body changed: Smart Encoding replaces non-ASCII
    look-alikes, link shortening replaces URLs."""
    return not body.isascii() or "://" in body


def compare(message: Any, payload: Payload, via: Via, start: datetime, end: datetime) -> Match:
    """Whether a listed message is our attempt's SMS, may be, or is not."""
    service = via.settings.get("messaging_service_sid")
    sender_matches = (
        field(message, "messaging_service_sid") == service
        if service
        else field(message, "from") == via.settings.get("from")
    )
    if field(message, "direction") != OUTBOUND_API or field(message, "to") != payload.to:
        return "unrelated"
    if not sender_matches:
        return "unrelated"
    created = created_at(message)
    if created is None:
        return "maybe"  # a message we cannot place in time may be ours
    if not start <= created <= end:
        return "unrelated"
    body = field(message, "body")
    if body == payload.body:
        return "ours"
    if not body or rewritable(payload.body):
        return "maybe"
    return "unrelated"


class TwilioProvider(RestProvider):
    name = "twilio"
    default_api_url = "https://api.twilio.com"
    idempotent = False
    # A message deleted (or its body redacted) later reads as absent (or unknown): the
    # lookup is asked in the first day only, when the resolver settles a row in minutes.
    lookup_retention = timedelta(days=1)
    # Twilio does not document how soon a created message is listed; absent is trusted
    # only after this.
    lookup_grace = timedelta(minutes=10)

    def __init__(self, options: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(options, *args, **kwargs)
        # The API's public URL (TICKWORK_PUBLIC_API_URL): when known, each SMS asks Twilio
        # for status callbacks to its connection's endpoint.
        base = options.get("status_callback_base")
        self.callback_base = str(base).rstrip("/") if base else None

    @staticmethod
    def _auth(via: Via) -> tuple[str, str]:
        user = via.credentials.get("api_key_sid") or via.settings["account_sid"]
        return user, via.credentials["auth_token"]

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_required", "Twilio sends only through a connection")
        payload = Payload.model_validate(action.payload)
        form: dict[str, Any] = {"To": payload.to, "Body": payload.body}
        if self.callback_base:
            # Status callbacks come back to the connection's endpoint (tickwork.feedback).
            form["StatusCallback"] = f"{self.callback_base}/v1/callbacks/{via.id}"
        if via.settings.get("messaging_service_sid"):
            form["MessagingServiceSid"] = via.settings["messaging_service_sid"]
        else:
            form["From"] = via.settings["from"]
        redactor = Redactor.of(via.credentials)
        url = f"{self.api_url}/2010-04-01/Accounts/{via.settings['account_sid']}/Messages.json"
        return self.deliver(action, "POST", url, redactor, outcome, data=form, auth=self._auth(via))

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult:
        return safe_lookup(self.name, action, self.timeout, lambda: self._lookup(action, via))

    def _lookup(self, action: Claimed, via: Via | None) -> LookupResult:
        if via is None:
            return Unknown("Twilio is asked only through the action's connection")
        payload = Payload.model_validate(action.payload)
        claimed = attempt_claimed_at(action)
        start, end = claimed - WINDOW_BEFORE, claimed + WINDOW_AFTER
        path = f"/2010-04-01/Accounts/{via.settings['account_sid']}/Messages.json"
        first = {"To": payload.to, "PageSize": str(PAGE_SIZE)}
        if not via.settings.get("messaging_service_sid"):
            first["From"] = str(via.settings["from"])
        params: dict[str, str] | None = first  # the next pages' URIs carry their own
        url, redactor = f"{self.api_url}{path}", Redactor.of(via.credentials)
        ours: list[Any] = []
        maybe = listed = 0
        for _ in range(MAX_PAGES):
            reply = self.request(action.id, "GET", url, redactor, params=params,
                                 auth=self._auth(via))  # fmt: skip
            if not isinstance(reply, Reply):
                return Unknown(f"Twilio Messages list: {unanswered(reply)}")
            body = reply.json()
            messages = field(body, "messages")
            if reply.status != 200 or not isinstance(messages, list):
                self.log(action.id, url, reply, redactor)
                code = redactor.code(field(body, "code"))
                return Unknown(f"Twilio Messages list answered HTTP {reply.status}"
                               + (f" code {code}" if code else ""))  # fmt: skip
            listed += len(messages)
            for message in messages:
                match = compare(message, payload, via, start, end)
                if match == "ours" and field(message, "sid"):
                    ours.append(message)
                elif match != "unrelated":
                    maybe += 1
            following = field(body, "next_page_uri")
            if not following:
                return self._settled(ours, maybe, listed)
            if not str(following).startswith(path + "?"):
                return Unknown("Twilio's next page is not a page of this Messages list")
            url, params = f"{self.api_url}{following}", None
        return Unknown(f"more than {MAX_PAGES} pages of messages to this number")

    @staticmethod
    def _settled(ours: list[Any], maybe: int, listed: int) -> LookupResult:
        if len(ours) == 1:
            status = redacted_status(field(ours[0], "status"))
            return Found(str(ours[0]["sid"]), f"Twilio has it ({status})")
        if ours:
            return Unknown(f"Twilio has {len(ours)} messages with this text to this number in"
                           " the attempt's minutes: which one is ours cannot be told")  # fmt: skip
        if maybe:
            return Unknown(f"Twilio has {maybe} message(s) to this number in the attempt's"
                           " minutes whose text may be ours rewritten or redacted")  # fmt: skip
        return Absent(f"no message to this number in the attempt's minutes ({listed} listed)")

    def verify(self, via: Via) -> Verified:
        redactor = Redactor.of(via.credentials)
        url = f"{self.api_url}/2010-04-01/Accounts/{via.settings['account_sid']}.json"
        reply = self.request("verify", "GET", url, redactor, auth=self._auth(via))
        if not isinstance(reply, Reply):
            return Verified(False, f"Twilio could not be reached: {unanswered(reply)}")
        body = reply.json()
        if reply.status == 200:
            status = field(body, "status")
            if status not in (None, "active"):
                return Verified(False, f"the Twilio account is {status}")
            return Verified(True, "the credentials work", str(field(body, "friendly_name") or ""))
        if reply.status == 401:
            return Verified(False, "Twilio refused the credentials: check the account SID"
                            " (or API key SID) and its auth token/secret")  # fmt: skip
        if reply.status == 404:
            return Verified(False, "Twilio has no account with this account_sid")
        return Verified(False, f"Twilio answered HTTP {reply.status}:"
                        f" {redactor.message(field(body, 'message'))}")  # fmt: skip
