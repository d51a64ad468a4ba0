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

Lookup (`lookup`): Mastodon cannot be asked for a status by its Idempotency-Key (a
repeated create with the key answers the first status for about an hour, but creates one
when the first never landed: that is a send, not a question), and a status carries nothing
of ours. So a stuck row is looked for in the account's own statuses:
`GET /api/v1/accounts/verify_credentials` (the account id), then
`GET /api/v1/accounts/:id/statuses?limit=10&exclude_reblogs=true`, newest first, paging
with `max_id` until a status older than the attempt's window (5 minutes before its claim
to 20 minutes after, by `created_at`). A status in the window with the payload's
visibility and reply target is compared by its source text
(`GET /api/v1/statuses/:id/source`, Mastodon 3.5 and later; `content` is rendered HTML):

| in the window | answer |
|---|---|
| one status whose source is our text (and spoiler text) | found (its id) |
| several such statuses | unknown |
| none, but one edited since, or one whose source could not be read | unknown |
| none, every page to the window's start read | absent (after `lookup_grace`) |
| an error, more than 20 pages or 10 sources | unknown |

A status a person (or an automatic deletion policy) removed reads as absent, so the lookup
is asked in the first day only; a found id already recorded for another action of the
connection is not taken (the resolver checks).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import Field

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
from tickwork.providers.http import Redactor, Reply, reset_after_seconds, retry_after_seconds
from tickwork.providers.rest import RestProvider, field, safe_lookup, unanswered
from tickwork.providers.schema import Schema

# Mastodon's default status limit; instances may allow more (max_characters).
DEFAULT_MAX_CHARACTERS = 500
# The attempt's window: the instance's clock is not ours, and the call is made within the
# dispatcher's run (at most 15 minutes on Lambda).
WINDOW_BEFORE = timedelta(minutes=5)
WINDOW_AFTER = timedelta(minutes=20)
# Each status carries its account: a page of 10 stays well inside the answer size read
# (provider_max_response_bytes, 64 KB by default).
PAGE_LIMIT = 10
MAX_PAGES = 20
MAX_SOURCES = 10
# Ids go into paths: Mastodon's are strings of digits (letters on some other servers).
ID = re.compile(r"^[0-9A-Za-z]{1,64}$")

Match = Literal["ours", "maybe", "unrelated"]


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


def created_at(status: Any) -> datetime | None:
    """A status's `created_at` (ISO 8601)."""
    try:
        value = datetime.fromisoformat(str(field(status, "created_at")))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def same_text(a: Any, b: str | None) -> bool:
    """Texts equal but for line endings and the ends' whitespace."""

    def norm(text: Any) -> str:
        return str(text or "").replace("\r\n", "\n").strip()

    return norm(a) == norm(b)


def shape_matches(status: Any, payload: Payload) -> bool:
    """What can be told without the source: visibility (when the payload names one) and
    the reply target; a boost is never ours."""
    if field(status, "reblog"):
        return False
    if payload.visibility is not None and field(status, "visibility") != payload.visibility:
        return False
    return bool(field(status, "in_reply_to_id") == payload.in_reply_to_id)


class MastodonProvider(RestProvider):
    name = "mastodon"
    default_api_url = "https://mastodon.invalid"  # each connection names its instance
    idempotent = True
    # A status deleted later (by a person or an automatic deletion policy) reads as absent:
    # the lookup is asked in the first day only, when the resolver settles a row in minutes.
    lookup_retention = timedelta(days=1)
    # A create cut off by a timeout may still be completing on the instance.
    lookup_grace = timedelta(minutes=5)

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

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult:
        return safe_lookup(self.name, action, self.timeout, lambda: self._lookup(action, via))

    def _get(self, action: Claimed, via: Via, what: str, path: str, **params: str) -> Any:
        """The JSON of a 200 answer, or why there is none (`what`: the call, as shown)."""
        redactor = Redactor.of(via.credentials, via.settings.get("instance_url"))
        url = f"{self._base(via)}{path}"
        headers = {"authorization": f"Bearer {via.credentials['access_token']}"}
        reply = self.request(action.id, "GET", url, redactor, params=params, headers=headers)
        if not isinstance(reply, Reply):
            return Unknown(f"Mastodon {what}: {unanswered(reply)}")
        if reply.status != 200:
            self.log(action.id, url, reply, redactor)
            return Unknown(f"Mastodon {what} answered HTTP {reply.status}")
        return reply.json()

    def _lookup(self, action: Claimed, via: Via | None) -> LookupResult:
        if via is None:
            return Unknown("Mastodon is asked only through the action's connection")
        payload = Payload.model_validate(action.payload)
        claimed = attempt_claimed_at(action)
        start, end = claimed - WINDOW_BEFORE, claimed + WINDOW_AFTER
        account = self._get(action, via, "verify_credentials",
                            "/api/v1/accounts/verify_credentials")  # fmt: skip
        if isinstance(account, Unknown):
            return account
        if not ID.match(str(field(account, "id"))):
            return Unknown("Mastodon verify_credentials gave no account id")
        path = f"/api/v1/accounts/{account['id']}/statuses"
        params = {"limit": str(PAGE_LIMIT), "exclude_reblogs": "true"}
        window: list[Any] = []
        for _ in range(MAX_PAGES):
            page = self._get(action, via, "statuses", path, **params)
            if isinstance(page, Unknown):
                return page
            if not isinstance(page, list):
                return Unknown("Mastodon's statuses answer is not a list")
            times = [created_at(status) for status in page]
            if any(t is None for t in times):
                return Unknown("a status without a readable created_at")
            window += [s for s, t in zip(page, times, strict=True) if t and start <= t <= end]
            if not page or min(t for t in times if t) < start:
                return self._compare(action, via, payload, window)
            params["max_id"] = str(field(page[-1], "id"))
        return Unknown(f"more than {MAX_PAGES} pages of statuses since the attempt")

    def _compare(
        self, action: Claimed, via: Via, payload: Payload, window: list[Any]
    ) -> LookupResult:
        candidates = [status for status in window if shape_matches(status, payload)]
        if len(candidates) > MAX_SOURCES:
            return Unknown(f"{len(candidates)} statuses in the attempt's minutes to compare")
        ours: list[str] = []
        maybe = 0
        for status in candidates:
            match = self._match(action, via, payload, status)
            if match == "ours":
                ours.append(str(status["id"]))
            elif match == "maybe":
                maybe += 1
        if len(ours) == 1:
            return Found(ours[0], "the account has a status with this text")
        if ours:
            return Unknown(f"the account has {len(ours)} statuses with this text in the"
                           " attempt's minutes: which one is ours cannot be told")  # fmt: skip
        if maybe:
            return Unknown(f"{maybe} status(es) in the attempt's minutes could not be compared"
                           " (edited since, or their source unreadable)")  # fmt: skip
        return Absent(f"no status with this text in the attempt's minutes"
                      f" ({len(window)} in the window)")  # fmt: skip

    def _match(self, action: Claimed, via: Via, payload: Payload, status: Any) -> Match:
        if not ID.match(str(field(status, "id"))):
            return "maybe"
        if field(status, "edited_at"):
            return "maybe"  # its source is the edited text, which may have been ours
        if not same_text(field(status, "spoiler_text"), payload.spoiler_text):
            return "unrelated"
        source = self._get(action, via, "source", f"/api/v1/statuses/{status['id']}/source")
        if isinstance(source, Unknown) or field(source, "text") is None:
            return "maybe"
        return "ours" if same_text(field(source, "text"), payload.status) else "unrelated"

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
