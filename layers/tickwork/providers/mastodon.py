"""Mastodon: `POST /api/v1/statuses` on the account's instance, with its access token
(`Authorization: Bearer`). The action id is the `Idempotency-Key`: Mastodon keeps keys about
an hour and answers a repeated key with the first status, so an ambiguous attempt is retried
without a second post (the default backoff budget keeps retries well inside that hour).
The status `id` is the provider id.

| answer | outcome |
|---|---|
| 200 with `id` | delivered (id) |
| 401 | rejected `auth_failed` (the token was revoked or lacks write:statuses) |
| 403 | rejected `forbidden` (e.g. the account is suspended or limited) |
| 404 | rejected `not_found` (e.g. `in_reply_to_id`) |
| 422 | rejected `validation_failed` (Mastodon's message says which field) |
| other 4xx | rejected `provider_rejected` |
| 429 | transient (`X-RateLimit-Reset` or Retry-After honoured) |
| 5xx, timeouts after sending | ambiguous, retried with the same Idempotency-Key |

No lookup: Mastodon cannot be asked for a status by its Idempotency-Key (the key only
makes a repeated create answer with the first status, for about an hour), and a status
carries nothing of ours to search for; matching the account's recent statuses by text
cannot tell two identical posts apart. Retries inside that hour are safe instead; a row
left `stuck` or `ambiguous` after it stays for a person.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

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
from tickwork.providers.http import Redactor, Reply, reset_after_seconds, retry_after_seconds
from tickwork.providers.rest import RestProvider, field, unanswered
from tickwork.providers.schema import Schema

# Mastodon's default status limit; instances may allow more (max_characters).
DEFAULT_MAX_CHARACTERS = 500


class Settings(Schema):
    instance_url: str = Field(min_length=8, max_length=300, description="https://mastodon.social")
    max_characters: int = Field(default=DEFAULT_MAX_CHARACTERS, ge=100, le=100_000)


class Credentials(Schema):
    access_token: str = Field(min_length=10, max_length=300)


class Payload(Schema):
    status: str = Field(min_length=1, max_length=100_000)
    visibility: Literal["public", "unlisted", "private", "direct"] | None = None
    spoiler_text: str | None = Field(default=None, max_length=1000)
    sensitive: bool | None = None
    language: str | None = Field(default=None, pattern=r"^[a-z]{2,3}$")
    in_reply_to_id: str | None = Field(default=None, max_length=64, pattern=r"^[0-9A-Za-z]+$")


def outcome(reply: Reply, redactor: Redactor) -> Outcome:
    body = reply.json()
    # Mastodon documents its error body as {error, error_description}: `error` is shown.
    message = redactor.message(field(body, "error"))
    detail = f"Mastodon HTTP {reply.status}" + (f": {message}" if message else "")
    if reply.status == 200 and field(body, "id"):
        return Delivered(str(field(body, "id")))
    if reply.status == 429:
        wait = reset_after_seconds(reply.headers.get("x-ratelimit-reset"))
        if wait is None:
            wait = retry_after_seconds(reply.headers.get("retry-after"))
        return Transient(detail, wait)
    if reply.status >= 500 or reply.status < 300:
        return Ambiguous(detail)
    codes = {401: "auth_failed", 403: "forbidden", 404: "not_found", 422: "validation_failed"}
    return Rejected(codes.get(reply.status, "provider_rejected"), detail)


class MastodonProvider(RestProvider):
    name = "mastodon"
    default_api_url = "https://mastodon.invalid"  # each connection names its instance
    idempotent = True

    def _base(self, via: Via) -> str:
        return str(via.settings["instance_url"]).rstrip("/")

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_required", "Mastodon posts only through a connection")
        payload = Payload.model_validate(action.payload)
        limit = int(via.settings.get("max_characters") or DEFAULT_MAX_CHARACTERS)
        if len(payload.status) > limit:
            return Rejected("validation_failed", f"the status is longer than {limit} characters")
        headers = {"authorization": f"Bearer {via.credentials['access_token']}",
                   "idempotency-key": str(action.id)}  # fmt: skip
        redactor = Redactor.of(via.credentials, via.settings.get("instance_url"))
        url = f"{self._base(via)}/api/v1/statuses"
        body = payload.model_dump(exclude_none=True)
        return self.deliver(action, "POST", url, redactor, outcome, json=body, headers=headers)

    def verify(self, via: Via) -> Verified:
        redactor = Redactor.of(via.credentials, via.settings.get("instance_url"))
        url = f"{self._base(via)}/api/v1/accounts/verify_credentials"
        headers = {"authorization": f"Bearer {via.credentials['access_token']}"}
        reply = self.request("verify", "GET", url, redactor, headers=headers)
        if not isinstance(reply, Reply):
            return Verified(False, f"the instance could not be reached: {unanswered(reply)}")
        body = reply.json()
        if reply.status == 200:
            return Verified(True, "the access token works", str(field(body, "acct") or ""))
        if reply.status == 401:
            return Verified(False, "the instance refused the access token: create a new one"
                            " with the write:statuses scope")  # fmt: skip
        return Verified(False, f"the instance answered HTTP {reply.status}:"
                        f" {redactor.message(field(body, 'error'))}")  # fmt: skip
