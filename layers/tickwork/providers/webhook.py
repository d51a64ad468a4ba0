"""The `webhook` provider: an HTTP POST signed per the Standard Webhooks scheme.

Headers: `webhook-id` (the action id, the same on every attempt, so receivers deduplicate),
`webhook-timestamp` (Unix seconds) and `webhook-signature` (`v1,<base64 HMAC-SHA256>` of
`{id}.{timestamp}.{body}` keyed with the base64 bytes after `whsec_`).

Endpoints: the operator's, per action type (`endpoints`, a map from target_key to
`{url, secret}` or `secret_arn`, read from Secrets Manager), or a workspace's own webhook
connection (settings `url`, credentials `signing_secret`). Status codes map to outcomes:
2xx delivered; 429, 503 and 408 provably not processed (Retry-After honoured); other 5xx,
read timeouts and dropped connections ambiguous (retried, since receivers deduplicate);
any other status rejected.

Receiver status endpoint (optional; the `Lookup`): an endpoint (or connection) may name a
`status_url`, a URL template holding `{webhook_id}` in its path or query. Asked whether a
message arrived, Tickwork sends `GET` to it with the webhook-id put in, signed like a
delivery (`webhook-id`, `webhook-timestamp`, `webhook-signature` over `{id}.{timestamp}.`
and an empty body). The receiver answers `200 {"received": true}` when it has that
webhook-id (found), `404` or `200` with `{"received": false}` when it has not (absent; a
404 without that body is not an answer, e.g. a wrong path). Anything else is unknown. The
URL is checked like the delivery URL: http(s), public addresses, at configuration and at
every connect.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from tickwork.actions.model import Claimed
from tickwork.platform.errors import InputError
from tickwork.providers import http
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
from tickwork.providers.http import OutboundPolicy, retry_after_seconds
from tickwork.providers.schema import Schema

__all__ = ["WebhookProvider", "decode_secret", "retry_after_seconds", "sign", "verify"]

SECRET_PREFIX = "whsec_"
NOT_PROCESSED = frozenset({408, 429, 503})
PLACEHOLDER = "{webhook_id}"


def status_template(template: str) -> str:
    """A valid status_url template: `{webhook_id}` in its path or query (never the host)."""
    if PLACEHOLDER not in template:
        raise ValueError(f"status_url must hold {PLACEHOLDER} where the webhook-id goes")
    if PLACEHOLDER in urlsplit(template).netloc:
        raise ValueError(f"status_url may hold {PLACEHOLDER} only in its path or query")
    return template


def status_url_for(template: str, message_id: str) -> str:
    return template.replace(PLACEHOLDER, message_id)


# A receiver's `x-request-id`, kept as the provider id when it looks like an id (it is shown).
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id(reply: http.Reply) -> str | None:
    value = reply.headers.get("x-request-id", "")
    return value if REQUEST_ID.fullmatch(value) else None


def message_id_of(action: Claimed) -> str:
    return f"msg_{action.id.hex}"


def decode_secret(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ProviderError("webhook secrets look like whsec_<base64>")
    try:
        return base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except ValueError as exc:
        raise ProviderError("webhook secret is not valid base64 after whsec_") from exc


def sign(secret: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(secret: bytes, headers: dict[str, str], body: bytes, tolerance: int = 300) -> bool:
    """Receiver-side check (used by the local receiver and tests)."""
    try:
        message_id = headers["webhook-id"]
        timestamp = int(headers["webhook-timestamp"])
        offered = headers["webhook-signature"].split()
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance:
        return False
    expected = sign(secret, message_id, timestamp, body)
    return any(hmac.compare_digest(expected, candidate) for candidate in offered)


class WebhookSettings(Schema):
    url: str = Field(min_length=1, max_length=2000, description="http(s), a public address")
    status_url: str | None = Field(
        default=None, min_length=1, max_length=2000,
        description="optional: where to ask whether a webhook-id arrived ({webhook_id} in it)",
    )  # fmt: skip

    @field_validator("status_url")
    @classmethod
    def _status(cls, value: str | None) -> str | None:
        return None if value is None else status_template(value)


class WebhookCredentials(Schema):
    signing_secret: str = Field(min_length=10, max_length=200, description="whsec_<base64>")

    @field_validator("signing_secret")
    @classmethod
    def _secret(cls, value: str) -> str:
        try:
            decode_secret(value)
        except ProviderError as exc:
            raise ValueError(str(exc)) from exc
        return value


@dataclass(frozen=True)
class Endpoint:
    url: str
    secret: bytes
    status_url: str | None = None


def envelope(action: Claimed) -> dict[str, Any]:
    return {
        "type": f"tickwork.{action.action_type}",
        "timestamp": action.publish_at.isoformat(),
        "data": {
            "id": str(action.id),
            "action_type": action.action_type,
            "thing_id": action.thing_id,
            "target_key": action.target_key,
            "publish_at": action.publish_at.isoformat(),
            "attempt": action.attempt_count,
            "payload": action.payload,
        },
    }


class WebhookProvider:
    idempotent = True
    io_bound = True
    # Receivers choose how long they keep webhook-ids; Standard Webhooks sets no period. The
    # The docs (providers.md) ask a status endpoint to answer for at least this long.
    lookup_retention = timedelta(days=7)
    # A delivery cut off by our deadline may still be processing at the receiver.
    lookup_grace = timedelta(minutes=5)

    def __init__(
        self,
        options: dict[str, Any],
        timeout: float = 10.0,
        policy: OutboundPolicy | None = None,
        max_body_bytes: int = http.DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        raw = options.get("endpoints") or {}
        if not isinstance(raw, dict):
            raise ProviderError("webhook options.endpoints is a map {target: {url, secret}}")
        self.policy = policy or OutboundPolicy()
        self.endpoints = {name: self._endpoint(name, spec) for name, spec in raw.items()}
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.client = http.client(self.policy, timeout)

    def _endpoint(self, name: str, spec: Any) -> Endpoint:
        if not isinstance(spec, dict) or "url" not in spec:
            raise ProviderError(f"webhook endpoint {name!r} needs a url")
        secret = spec.get("secret")
        if secret is None and spec.get("secret_arn"):
            from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415 - lazy: Parameters builds boto3 clients (cold start)

            secret = parameters.get_secret(spec["secret_arn"], max_age=300)
        if not isinstance(secret, str):
            raise ProviderError(f"webhook endpoint {name!r} needs a secret or secret_arn")
        try:
            # The scheme is checked now; addresses when each call connects.
            url = http.check_url(str(spec["url"]), self.policy, resolve=False)
            status = spec.get("status_url")
            if status is not None:
                http.check_url(status_template(str(status)), self.policy, resolve=False)
        except InputError as exc:
            raise ProviderError(f"webhook endpoint {name!r}: {exc.message}") from exc
        except ValueError as exc:
            raise ProviderError(f"webhook endpoint {name!r}: {exc}") from exc
        return Endpoint(url=str(url), secret=decode_secret(secret),
                        status_url=None if status is None else str(status))  # fmt: skip

    def _endpoint_of(self, action: Claimed, via: Via | None) -> Endpoint | Rejected:
        if via is not None:
            try:
                return Endpoint(
                    via.settings["url"], decode_secret(via.credentials["signing_secret"]),
                    via.settings.get("status_url"),
                )  # fmt: skip
            except (KeyError, ProviderError):
                return Rejected(
                    "connection_invalid", "the webhook connection lacks a url or secret"
                )
        found = self.endpoints.get(action.target_key)
        if found is None:
            return Rejected("not_configured", f"no webhook endpoint named {action.target_key!r}")
        return found

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        endpoint = self._endpoint_of(action, via)
        if isinstance(endpoint, Rejected):
            return endpoint
        body = json.dumps(envelope(action), separators=(",", ":")).encode()
        timestamp = int(time.time())
        message_id = message_id_of(action)
        headers = {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(endpoint.secret, message_id, timestamp, body),
        }
        try:
            reply = http.call(
                self.client, "POST", endpoint.url, content=body, headers=headers,
                total_seconds=self.timeout, max_body_bytes=self.max_body_bytes,
            )  # fmt: skip
        except Exception as exc:
            redactor = self._redactor(endpoint)
            http.log_answer("webhook", action.id, endpoint.url, None, redactor, exc)
            return http.outcome_of_error(exc, http.mask_url(endpoint.url), redactor)
        if 200 <= reply.status < 300:  # the common case: nothing to mask or log
            return self.outcome(reply)
        outcome = self.outcome(reply, http.mask_url(endpoint.url))
        http.log_answer("webhook", action.id, endpoint.url, reply, self._redactor(endpoint))
        return outcome

    @staticmethod
    def _redactor(endpoint: Endpoint) -> http.Redactor:
        return http.Redactor.of(endpoint.url, base64.b64encode(endpoint.secret).decode())

    @staticmethod
    def outcome(reply: http.Reply, where: str = "the endpoint") -> Outcome:
        """The status alone decides, and is all that is said: a receiver's body is its own
        (it may echo secrets, internals, anything) and is never read, kept or logged."""
        status = reply.status
        if 200 <= status < 300:
            return Delivered(provider_id=request_id(reply) or f"http-{status}")
        retry_after = retry_after_seconds(reply.headers.get("retry-after"))
        answered = f"{http.status_text(status)} from {where}"
        if status in NOT_PROCESSED:
            return Transient(f"{answered}: not processed by the receiver", retry_after)
        if status >= 500:
            return Ambiguous(f"{answered}: the receiver failed; it may have processed it",
                             retry_after)  # fmt: skip
        if 300 <= status < 400:
            moved = f"{answered}: redirects are not followed; give the final URL"
            return Rejected("provider_rejected", moved)
        return Rejected("provider_rejected", f"{answered}: refused by the receiver")

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult:
        """Ask the receiver's status endpoint, when it has one (see the module's notes)."""
        try:
            return self._lookup(action, via)
        except Exception as exc:  # a lookup must answer, whatever went wrong
            return Unknown(f"webhook lookup failed ({type(exc).__name__})")

    def _lookup(self, action: Claimed, via: Via | None) -> LookupResult:
        endpoint = self._endpoint_of(action, via)
        if isinstance(endpoint, Rejected):
            return Unknown(endpoint.message)
        if not endpoint.status_url:
            return Unknown("the webhook endpoint has no status_url to ask")
        message_id = message_id_of(action)
        url = status_url_for(endpoint.status_url, message_id)
        where = http.mask_url(url)
        timestamp = int(time.time())
        headers = {
            "accept": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(endpoint.secret, message_id, timestamp, b""),
        }
        redactor = http.Redactor.of(url, endpoint.url,
                                    base64.b64encode(endpoint.secret).decode())  # fmt: skip
        try:
            reply = http.call(
                self.client, "GET", url, headers=headers,
                total_seconds=self.timeout, max_body_bytes=self.max_body_bytes,
            )  # fmt: skip
        except Exception as exc:
            http.log_answer("webhook", action.id, url, None, redactor, exc)
            failed = http.outcome_of_error(exc, where, redactor)
            return Unknown(f"the status endpoint: {getattr(failed, 'message', 'no answer')}")
        body = reply.json()
        received = body.get("received") if isinstance(body, dict) else None
        if reply.status == 200 and received is True:
            return Found(request_id(reply) or message_id, f"{where} has it")
        if reply.status in (200, 404) and received is False:
            return Absent(f"{where} has no {message_id}")
        http.log_answer("webhook", action.id, url, reply, redactor)
        return Unknown(
            f"the status endpoint {where} answered HTTP {reply.status}"
            + ("" if reply.status != 200 else " without received true or false")
        )

    def verify(self, via: Via) -> Verified:
        """A webhook has no authenticated no-op call: check the URL's addresses now."""
        try:
            http.check_url(str(via.settings.get("url", "")), self.policy)
            if via.settings.get("status_url"):
                http.check_url(str(via.settings["status_url"]), self.policy)
        except InputError as exc:
            # Members read the verification: the host is named masked, like the URL.
            return Verified(False, http.Redactor.of(via.settings).tenant(exc.message))
        return Verified(True, "the URL is callable; deliveries are signed with your secret")
