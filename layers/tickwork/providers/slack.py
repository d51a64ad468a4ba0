"""Slack: `chat.postMessage` with a bot token (`Authorization: Bearer xoxb-...`). Slack answers
HTTP 200 with `ok` and, when false, an `error` string; `ts` of the posted message is the
provider id. Message `metadata` carries the action id (`tickwork_action_id`).

Outcomes:
- `ok: true`: delivered (ts).
- rejected with Slack's own code: channel_not_found, not_in_channel, is_archived,
  msg_too_long, no_text, too_many_attachments, restricted_action, invalid_blocks,
  invalid_metadata_format, cannot_reply_to_message, duplicate_channel_not_found,
  invalid_arguments.
- rejected `auth_failed`: invalid_auth, not_authed, account_inactive, token_revoked,
  token_expired, missing_scope, no_permission; other errors: rejected `provider_rejected`.
- transient: HTTP 429, ratelimited, rate_limited (Retry-After honoured), service_unavailable.
- ambiguous (Slack says the message may have posted; fails as `ambiguous`): fatal_error,
  internal_error, request_timeout, HTTP 5xx.

Lookup (`lookup`): `conversations.history` of the channel (`conversations.replies` of the
thread when the payload names `thread_ts`) with `include_all_metadata=true`, from shortly
before the action's publish time until now, page by page, for a message whose metadata is
`tickwork_action` with our id: found (its `ts`). It needs the channel's id (C…, G…, D…) and
the bot's `channels:history` (or `groups:history`, `im:history`) scope. Absent only when
every page of that window was read and none carries our id; a message a person (or a
retention policy) deleted reads as absent too, which is why `lookup_retention` is the
shortest retention a workspace may set (a day). Errors, rate limits (history is limited to
1 call a minute for apps outside the Marketplace) and windows longer than the page budget
are unknown.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field, model_validator

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
)
from tickwork.providers.http import Redactor, Reply, retry_after_seconds
from tickwork.providers.rest import RestProvider, field, safe_lookup, unanswered
from tickwork.providers.schema import Schema

MAX_TEXT = 40000
REJECTIONS = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text",
    "too_many_attachments", "restricted_action", "invalid_blocks", "invalid_metadata_format",
    "cannot_reply_to_message", "duplicate_channel_not_found", "invalid_arguments",
})  # fmt: skip
AUTH = frozenset({
    "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
    "missing_scope", "no_permission", "ekm_access_denied",
})  # fmt: skip
RATE_LIMITED = frozenset({"ratelimited", "rate_limited"})
NOT_PROCESSED = frozenset({"service_unavailable"})
MAYBE_POSTED = frozenset({"fatal_error", "internal_error", "request_timeout"})
EVENT_TYPE = "tickwork_action"
METADATA_KEY = "tickwork_action_id"
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{6,}$")
# History is read from this long before the publish time (claims may run a little early,
# and Slack's clock is not ours) ...
WINDOW_MARGIN = timedelta(minutes=10)
# ... in at most this many pages (200 messages each, or fewer where Slack caps `limit`).
MAX_PAGES = 10


class Settings(Schema):
    default_channel: str | None = Field(default=None, min_length=1, max_length=100)


class Credentials(Schema):
    bot_token: str = Field(min_length=10, max_length=300, pattern=r"^xox[bpe]-")


class Payload(Schema):
    channel: str | None = Field(
        default=None, min_length=1, max_length=100,
        description="channel id (C…) or name; default: the connection's",
    )  # fmt: skip
    text: str | None = Field(default=None, max_length=MAX_TEXT)
    blocks: list[dict[str, Any]] | None = Field(default=None, max_length=50)
    thread_ts: str | None = Field(default=None, pattern=r"^[0-9]+\.[0-9]+$")

    @model_validator(mode="after")
    def _content(self) -> Payload:
        if not self.text and not self.blocks:
            raise ValueError("give text (or blocks): a message needs content")
        return self


def outcome(reply: Reply, redactor: Redactor) -> Outcome:
    body = reply.json()
    retry_after = retry_after_seconds(reply.headers.get("retry-after"))
    if reply.status == 429:
        return Transient("Slack rate limited the call (HTTP 429)", retry_after)
    if reply.status >= 500:
        return Ambiguous(f"Slack HTTP {reply.status}")
    if reply.status == 200 and field(body, "ok") is True and field(body, "ts"):
        return Delivered(str(field(body, "ts")))
    # Slack answers {ok: false, error: <code>}: only a code-shaped error is shown.
    error = str(field(body, "error") or f"http_{reply.status}")
    detail = f"Slack error {redactor.code(error) or 'not a Slack error code'}"
    if error in RATE_LIMITED:
        return Transient(detail, retry_after)
    if error in NOT_PROCESSED:
        return Transient(detail, retry_after)
    if error in MAYBE_POSTED or (reply.status == 200 and field(body, "ok") is True):
        return Ambiguous(detail)
    if error in AUTH:
        return Rejected("auth_failed", detail)
    if error in REJECTIONS:
        return Rejected(error, detail)
    return Rejected("provider_rejected", detail)


def carries(message: Any, action_id: str) -> bool:
    metadata = field(message, "metadata")
    return bool(field(metadata, "event_type") == EVENT_TYPE
                and field(field(metadata, "event_payload"), METADATA_KEY) == action_id)  # fmt: skip


class SlackProvider(RestProvider):
    name = "slack"
    default_api_url = "https://slack.com/api"
    idempotent = False
    # Retention "can be as short as one day" when a workspace sets its own (deleted messages
    # read as absent): https://slack.com/help/articles/203457187-Customize-message-and-file-retention
    lookup_retention = timedelta(days=1)
    # chat.postMessage answers after the message is in the channel; an attempt cut off by a
    # timeout may still be completing on Slack's side for a while.
    lookup_grace = timedelta(minutes=5)

    @staticmethod
    def _headers(via: Via) -> dict[str, str]:
        return {"authorization": f"Bearer {via.credentials['bot_token']}",
                "content-type": "application/json; charset=utf-8"}  # fmt: skip

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_required", "Slack sends only through a connection")
        payload = Payload.model_validate(action.payload)
        channel = payload.channel or via.settings.get("default_channel")
        if not channel:
            return Rejected("channel_not_found", "no channel in the payload or the connection")
        message: dict[str, Any] = {
            "channel": channel,
            "metadata": {"event_type": "tickwork_action",
                         "event_payload": {"tickwork_action_id": str(action.id)}},
        }  # fmt: skip
        for key in ("text", "blocks", "thread_ts"):
            value = getattr(payload, key)
            if value is not None:
                message[key] = value
        redactor = Redactor.of(via.credentials)
        url = f"{self.api_url}/chat.postMessage"
        headers = self._headers(via)
        return self.deliver(action, "POST", url, redactor, outcome, json=message, headers=headers)

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult:
        return safe_lookup(self.name, action, self.timeout, lambda: self._lookup(action, via))

    def _lookup(self, action: Claimed, via: Via | None) -> LookupResult:
        if via is None:
            return Unknown("Slack is asked only through the action's connection")
        payload = Payload.model_validate(action.payload)
        channel = payload.channel or via.settings.get("default_channel")
        if not channel or not CHANNEL_ID.match(str(channel)):
            return Unknown("Slack history needs the channel's id (C…), not its name")
        oldest = action.publish_at.astimezone(UTC) - WINDOW_MARGIN
        params: dict[str, str] = {
            "channel": str(channel), "oldest": f"{oldest.timestamp():.6f}",
            "latest": f"{datetime.now(UTC).timestamp():.6f}", "inclusive": "true",
            "include_all_metadata": "true", "limit": "200",
        }  # fmt: skip
        method = "conversations.history"
        if payload.thread_ts:  # replies are not in the channel's history, only the thread's
            method, params["ts"] = "conversations.replies", payload.thread_ts
        url = f"{self.api_url}/{method}"
        redactor = Redactor.of(via.credentials)
        headers = {"authorization": f"Bearer {via.credentials['bot_token']}"}
        action_id = str(action.id)
        for _ in range(MAX_PAGES):
            reply = self.request(action.id, "GET", url, redactor, params=params, headers=headers)
            if not isinstance(reply, Reply):
                return Unknown(f"Slack {method}: {unanswered(reply)}")
            body = reply.json()
            messages = field(body, "messages")
            if (
                reply.status != 200
                or field(body, "ok") is not True
                or not isinstance(messages, list)
            ):
                self.log(action.id, url, reply, redactor)
                error = redactor.code(field(body, "error")) or f"HTTP {reply.status}"
                return Unknown(f"Slack {method} answered {error}")
            found = [m for m in messages if carries(m, action_id) and field(m, "ts")]
            if found:
                return Found(str(found[-1]["ts"]), f"in {channel}")
            if field(body, "has_more") is not True:
                return Absent(f"no message in {channel} carries this action's id")
            cursor = field(field(body, "response_metadata"), "next_cursor")
            if not cursor:
                return Unknown(f"Slack {method} has more messages but gave no cursor")
            params["cursor"] = str(cursor)
        return Unknown(f"Slack {method}: more than {MAX_PAGES} pages since the publish time")

    def verify(self, via: Via) -> Verified:
        redactor = Redactor.of(via.credentials)
        reply = self.request("verify", "POST", f"{self.api_url}/auth.test", redactor,
                             headers=self._headers(via))  # fmt: skip
        if not isinstance(reply, Reply):
            return Verified(False, f"Slack could not be reached: {unanswered(reply)}")
        body = reply.json()
        if reply.status == 200 and field(body, "ok") is True:
            return Verified(True, "the bot token works", str(field(body, "team") or ""))
        error = redactor.code(field(body, "error")) or f"HTTP {reply.status}"
        if error in AUTH:
            return Verified(False, f"Slack refused the bot token ({error}): reinstall the app"
                            " or copy its Bot User OAuth Token again")  # fmt: skip
        return Verified(False, f"Slack answered {error}")
