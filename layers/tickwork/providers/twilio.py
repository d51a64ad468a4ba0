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

No lookup: `GET .../Messages.json` lists messages by `To`, `From` and `DateSent` only, and a
message carries nothing of ours (no metadata or client reference; the status callback URL
is not returned). Matching on recipient, body and time cannot tell our SMS from another
with the same text to the same number (a recurring reminder sends exactly that), and
accounts that redact message bodies return none to match. So a row left `ambiguous` or
`stuck` stays for a person, as before.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from tickwork.actions.model import Claimed
from tickwork.providers.base import (
    Ambiguous,
    Delivered,
    Outcome,
    Rejected,
    Transient,
    Verified,
    Via,
)
from tickwork.providers.http import Redactor, Reply, retry_after_seconds
from tickwork.providers.rest import RestProvider, field, unanswered
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


class Payload(Schema):
    to: str = Field(description="E.164, e.g. +14155550100")
    body: str = Field(min_length=1, max_length=1600)

    @field_validator("to")
    @classmethod
    def _to(cls, value: str) -> str:
        return phone(value)


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


class TwilioProvider(RestProvider):
    name = "twilio"
    default_api_url = "https://api.twilio.com"
    idempotent = False

    @staticmethod
    def _auth(via: Via) -> tuple[str, str]:
        user = via.credentials.get("api_key_sid") or via.settings["account_sid"]
        return user, via.credentials["auth_token"]

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_required", "Twilio sends only through a connection")
        payload = Payload.model_validate(action.payload)
        form: dict[str, Any] = {"To": payload.to, "Body": payload.body}
        if via.settings.get("messaging_service_sid"):
            form["MessagingServiceSid"] = via.settings["messaging_service_sid"]
        else:
            form["From"] = via.settings["from"]
        redactor = Redactor.of(via.credentials)
        url = f"{self.api_url}/2010-04-01/Accounts/{via.settings['account_sid']}/Messages.json"
        return self.deliver(action, "POST", url, redactor, outcome, data=form, auth=self._auth(via))

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
