"""Postmark: `POST /email` with the server token in `X-Postmark-Server-Token`.

Success is HTTP 200 with `ErrorCode: 0`; its `MessageID` is the provider id. Postmark has no
idempotency key, so the action id goes in `Metadata.tickwork_action_id`, where
`GET /messages/outbound?metadata_tickwork_action_id=...` finds the message later.

| answer | outcome |
|---|---|
| 200, ErrorCode 0 | delivered (MessageID) |
| 401, or ErrorCode 10 | rejected `auth_failed` |
| 422 ErrorCode 300 | rejected `invalid_request` |
| 422 ErrorCode 406 | rejected `inactive_recipient` |
| 422 ErrorCode 400, 401 | rejected `sender_not_confirmed` |
| 422 ErrorCode 405, 412, 413 | rejected `account_cannot_send` |
| 422 ErrorCode 1235 | rejected `invalid_message_stream` |
| 422 other codes, other 4xx | rejected `provider_rejected` |
| 429 | transient (rate limited; Retry-After honoured) |
| 503 | transient (maintenance: not accepted) |
| 500, other 5xx, timeouts after sending | ambiguous (no idempotency key: fails as `ambiguous`) |

Lookup (`lookup`): `GET /messages/outbound?count=50&offset=0&metadata_tickwork_action_id=<id>`
(and `messagestream` when the send named one), with the same server token. A message
carrying our id is found (its `MessageID`); an empty result is absent, authoritatively,
once the search has had time to index a message (`lookup_grace`) and while Postmark still
keeps it (`lookup_retention`: 45 days by default, 7 to 365 when the server's retention was
changed; the option `retention_days` says so). Anything else is unknown.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator, model_validator

from tickwork.actions.model import Claimed
from tickwork.providers import unsubscribe
from tickwork.providers.base import (
    Absent,
    Ambiguous,
    Delivered,
    Found,
    LookupResult,
    Outcome,
    ProviderError,
    Rejected,
    Transient,
    Unknown,
    Verified,
    Via,
)
from tickwork.providers.http import Redactor, Reply, retry_after_seconds
from tickwork.providers.rest import RestProvider, field, safe_lookup, unanswered
from tickwork.providers.schema import Schema, mailbox
from tickwork.providers.unsubscribe import Unsubscribe, single_recipient

MAX_RECIPIENTS = 50
METADATA_KEY = "tickwork_action_id"
# Messages API: "Messages expire after your retention period, which is 45 days by default
# (but retention can be customized from 7 to 365 days)".
# https://postmarkapp.com/developer/api/messages-api
DEFAULT_RETENTION_DAYS = 45
# Postmark does not document how soon a sent message is searchable; its activity feed
# shows messages within seconds. Absent is trusted only after this.
SEARCH_GRACE = timedelta(minutes=15)
REJECTIONS = {
    10: "auth_failed",
    300: "invalid_request",
    406: "inactive_recipient",
    400: "sender_not_confirmed",
    401: "sender_not_confirmed",
    405: "account_cannot_send",
    412: "account_cannot_send",
    413: "account_cannot_send",
    1235: "invalid_message_stream",
}


class Settings(Schema):
    from_address: str = Field(
        alias="from", min_length=3, max_length=300,
        description="default sender, a confirmed sender signature",
    )  # fmt: skip
    message_stream: str | None = Field(default=None, max_length=100)
    # Every message to one address carries a one-click unsubscribe link (RFC 8058).
    unsubscribe: bool | None = None

    @field_validator("from_address")
    @classmethod
    def _from(cls, value: str) -> str:
        return mailbox(value)


class Credentials(Schema):
    server_token: str = Field(min_length=8, max_length=200)


def _mailboxes(items: list[str]) -> list[str]:
    return [mailbox(item) for item in items]


class Payload(Schema):
    to: list[str] = Field(min_length=1, description="an address or a list (at most 50 in all)")
    cc: list[str] | None = None
    bcc: list[str] | None = None
    subject: str = Field(min_length=1, max_length=2000)
    text: str | None = Field(default=None, max_length=5_000_000)
    html: str | None = Field(default=None, max_length=5_000_000)
    tag: str | None = Field(default=None, max_length=1000)
    reply_to: str | None = None
    message_stream: str | None = Field(default=None, max_length=100)
    from_address: str | None = Field(default=None, alias="from")
    metadata: dict[str, str] | None = Field(default=None, max_length=10)
    # A one-click unsubscribe link (RFC 8058 headers): true, false (not even when the
    # connection adds them), or {"scope": "all" | "campaign" | "rule"}.
    unsubscribe: Unsubscribe = None

    @field_validator("to", "cc", "bcc", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return _mailboxes(value)
        return value

    @field_validator("reply_to", "from_address")
    @classmethod
    def _one(cls, value: str | None) -> str | None:
        return None if value is None else mailbox(value)

    @model_validator(mode="after")
    def _body_and_count(self) -> Payload:
        if not self.text and not self.html:
            raise ValueError("give text or html (or both): an email needs a body")
        count = sum(len(x) for x in (self.to, self.cc or [], self.bcc or []))
        if count > MAX_RECIPIENTS:
            raise ValueError(f"at most {MAX_RECIPIENTS} recipients in to, cc and bcc together")
        asks = self.unsubscribe is not None and self.unsubscribe is not False
        if asks and single_recipient(self.model_dump(include={"to", "cc", "bcc"})) is None:
            raise ValueError(
                "an unsubscribe link is per recipient: send to one address (one to, no cc"
                " or bcc), or leave unsubscribe out"
            )
        return self


def request_body(action: Claimed, via: Via) -> dict[str, Any]:
    payload = Payload.model_validate(action.payload)
    body: dict[str, Any] = {
        "From": payload.from_address or via.settings["from"],
        "To": ", ".join(payload.to),
        "Subject": payload.subject,
        "Metadata": {**(payload.metadata or {}), METADATA_KEY: str(action.id)},
    }
    optional = {
        "Cc": ", ".join(payload.cc) if payload.cc else None,
        "Bcc": ", ".join(payload.bcc) if payload.bcc else None,
        "TextBody": payload.text,
        "HtmlBody": payload.html,
        "Tag": payload.tag,
        "ReplyTo": payload.reply_to,
        "MessageStream": payload.message_stream or via.settings.get("message_stream"),
    }
    if via.unsubscribe_url:
        body["Headers"] = [
            {"Name": name, "Value": value}
            for name, value in unsubscribe.headers(via.unsubscribe_url)
        ]
    return body | {key: value for key, value in optional.items() if value is not None}


def outcome(reply: Reply, redactor: Redactor) -> Outcome:
    body = reply.json()
    code = field(body, "ErrorCode")
    # Postmark documents its error body as {ErrorCode, Message}: those two are shown.
    shown, message = redactor.code(code), redactor.message(field(body, "Message"))
    detail = f"Postmark HTTP {reply.status}" + (f" ErrorCode {shown}" if shown else "")
    detail += f": {message}" if message else ""
    if reply.status == 200 and code in (0, None) and field(body, "MessageID"):
        return Delivered(str(field(body, "MessageID")))
    if reply.status == 429:
        return Transient(detail, retry_after_seconds(reply.headers.get("retry-after")))
    if reply.status == 503:
        return Transient(detail, retry_after_seconds(reply.headers.get("retry-after")))
    if reply.status >= 500 or reply.status == 200:
        # A 200 without a MessageID is not an answer we understand: it may have gone.
        return Ambiguous(detail)
    if reply.status == 401 or code == 10:
        return Rejected("auth_failed", detail)
    if isinstance(code, int) and code in REJECTIONS:
        return Rejected(REJECTIONS[code], detail)
    return Rejected("provider_rejected", detail)


class PostmarkProvider(RestProvider):
    name = "postmark"
    default_api_url = "https://api.postmarkapp.com"
    idempotent = False
    lookup_grace = SEARCH_GRACE

    def __init__(self, options: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(options, *args, **kwargs)
        days = options.get("retention_days", DEFAULT_RETENTION_DAYS)
        if not isinstance(days, int) or isinstance(days, bool) or not 7 <= days <= 365:
            raise ProviderError("postmark options.retention_days is a whole number, 7 to 365")
        self.lookup_retention = timedelta(days=days)

    def _headers(self, via: Via) -> dict[str, str]:
        return {"accept": "application/json", "content-type": "application/json",
                "x-postmark-server-token": via.credentials["server_token"]}  # fmt: skip

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_required", "Postmark sends only through a connection")
        redactor = Redactor.of(via.credentials)
        url = f"{self.api_url}/email"
        body, headers = request_body(action, via), self._headers(via)
        return self.deliver(action, "POST", url, redactor, outcome, json=body, headers=headers)

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult:
        return safe_lookup(self.name, action, self.timeout, lambda: self._lookup(action, via))

    def _lookup(self, action: Claimed, via: Via | None) -> LookupResult:
        if via is None:
            return Unknown("Postmark is searched only through the action's connection")
        params = {"count": "50", "offset": "0", f"metadata_{METADATA_KEY}": str(action.id)}
        stream = Payload.model_validate(action.payload).message_stream or via.settings.get(
            "message_stream"
        )
        if stream:  # the search looks in one stream; the default is the transactional one
            params["messagestream"] = str(stream)
        redactor = Redactor.of(via.credentials)
        url = f"{self.api_url}/messages/outbound"
        reply = self.request(action.id, "GET", url, redactor, params=params,
                             headers=self._headers(via))  # fmt: skip
        if not isinstance(reply, Reply):
            return Unknown(f"Postmark search: {unanswered(reply)}")
        body = reply.json()
        messages = field(body, "Messages")
        if reply.status != 200 or not isinstance(messages, list):
            self.log(action.id, url, reply, redactor)
            code = field(body, "ErrorCode")
            return Unknown(f"Postmark search answered HTTP {reply.status}"
                           + (f" ErrorCode {code}" if isinstance(code, int) else ""))  # fmt: skip
        ours = [m for m in messages
                if str(field(field(m, "Metadata"), METADATA_KEY)) == str(action.id)
                and field(m, "MessageID")]  # fmt: skip
        if ours:
            # Newest first: the last is the first copy Postmark accepted.
            return Found(str(ours[-1]["MessageID"]), f"Postmark has {len(ours)} message(s)")
        if messages or field(body, "TotalCount") not in (0, None):
            # Messages, none of them ours: the filter did not apply; nothing can be said.
            return Unknown("Postmark search returned messages without this action's id")
        return Absent("Postmark has no message with this action's id")

    def verify(self, via: Via) -> Verified:
        redactor = Redactor.of(via.credentials)
        reply = self.request("verify", "GET", f"{self.api_url}/server", redactor,
                             headers=self._headers(via))  # fmt: skip
        if not isinstance(reply, Reply):
            return Verified(False, f"Postmark could not be reached: {unanswered(reply)}")
        body = reply.json()
        if reply.status == 200:
            return Verified(True, "the server token works", str(field(body, "Name") or ""))
        if reply.status == 401:
            return Verified(False, "Postmark refused the server token: check it is the"
                            " Server API token of the right server")  # fmt: skip
        return Verified(False, f"Postmark answered HTTP {reply.status}:"
                        f" {redactor.message(field(body, 'Message'))}")  # fmt: skip
