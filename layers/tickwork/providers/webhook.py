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
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from tickwork.actions import Action
from tickwork.errors import InputError
from tickwork.providers import http
from tickwork.providers.base import (
    Ambiguous,
    Delivered,
    Outcome,
    ProviderError,
    Rejected,
    Transient,
    Verified,
    Via,
)
from tickwork.providers.http import OutboundPolicy, retry_after_seconds
from tickwork.providers.schema import Schema

__all__ = ["WebhookProvider", "decode_secret", "retry_after_seconds", "sign", "verify"]

SECRET_PREFIX = "whsec_"
NOT_PROCESSED = frozenset({408, 429, 503})


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


def envelope(action: Action) -> dict[str, Any]:
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
            from aws_lambda_powertools.utilities import parameters

            secret = parameters.get_secret(spec["secret_arn"], max_age=300)
        if not isinstance(secret, str):
            raise ProviderError(f"webhook endpoint {name!r} needs a secret or secret_arn")
        try:
            # The scheme is checked now; addresses when each call connects.
            url = http.check_url(str(spec["url"]), self.policy, resolve=False)
        except InputError as exc:
            raise ProviderError(f"webhook endpoint {name!r}: {exc.message}") from exc
        return Endpoint(url=str(url), secret=decode_secret(secret))

    def send(self, action: Action, via: Via | None = None) -> Outcome:
        if via is not None:
            try:
                endpoint = Endpoint(
                    via.settings["url"], decode_secret(via.credentials["signing_secret"])
                )
            except (KeyError, ProviderError):
                return Rejected(
                    "connection_invalid", "the webhook connection lacks a url or secret"
                )
        else:
            found = self.endpoints.get(action.target_key)
            if found is None:
                return Rejected(
                    "not_configured", f"no webhook endpoint named {action.target_key!r}"
                )
            endpoint = found
        body = json.dumps(envelope(action), separators=(",", ":")).encode()
        timestamp = int(time.time())
        message_id = f"msg_{action.id.hex}"
        headers = {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(endpoint.secret, message_id, timestamp, body),
        }
        where = http.public_url(endpoint.url)
        redactor = http.Redactor.of(endpoint.url, base64.b64encode(endpoint.secret).decode())
        try:
            reply = http.call(
                self.client, "POST", endpoint.url, content=body, headers=headers,
                total_seconds=self.timeout, max_body_bytes=self.max_body_bytes,
            )  # fmt: skip
        except Exception as exc:
            http.log_answer("webhook", action.id, http.redacted_url(endpoint.url), None,
                            redactor, exc)  # fmt: skip
            return http.outcome_of_error(exc, where)
        outcome = self.outcome(reply, where, redactor)
        if not isinstance(outcome, Delivered):
            http.log_answer("webhook", action.id, http.redacted_url(endpoint.url), reply, redactor)
        return outcome

    @staticmethod
    def outcome(
        reply: http.Reply, where: str = "the endpoint", redactor: http.Redactor | None = None
    ) -> Outcome:
        status = reply.status
        if 200 <= status < 300:
            return Delivered(provider_id=reply.headers.get("x-request-id") or f"http-{status}")
        excerpt = (redactor or http.Redactor()).tenant(reply.text())
        detail = f"HTTP {status} from {where}" + (f": {excerpt}" if excerpt else "")
        retry_after = retry_after_seconds(reply.headers.get("retry-after"))
        if status in NOT_PROCESSED:
            return Transient(detail, retry_after)
        if status >= 500:
            return Ambiguous(detail, retry_after)
        return Rejected("provider_rejected", detail)

    def verify(self, via: Via) -> Verified:
        """A webhook has no authenticated no-op call: check the URL's addresses now."""
        try:
            http.check_url(str(via.settings.get("url", "")), self.policy)
        except InputError as exc:
            return Verified(False, exc.message)
        return Verified(True, "the URL is callable; deliveries are signed with your secret")
