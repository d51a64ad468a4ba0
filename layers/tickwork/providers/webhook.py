"""The `webhook` provider: an HTTP POST signed per the Standard Webhooks scheme.

Headers: `webhook-id` (the action id, the same on every attempt, so receivers deduplicate),
`webhook-timestamp` (Unix seconds) and `webhook-signature` (`v1,<base64 HMAC-SHA256>` of
`{id}.{timestamp}.{body}` keyed with the base64 bytes after `whsec_`).

Options (per action type): `endpoints`, a map from target_key to `{url, secret}` (or
`secret_arn`, read from Secrets Manager). Status codes map to outcomes:
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
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from tickwork.actions import Action
from tickwork.providers.base import (
    Ambiguous,
    Delivered,
    Outcome,
    ProviderError,
    Rejected,
    Transient,
)

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


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: either delay-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


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

    def __init__(self, options: dict[str, Any], timeout: float = 10.0) -> None:
        raw = options.get("endpoints")
        if not isinstance(raw, dict) or not raw:
            raise ProviderError("webhook provider needs options.endpoints: {target: {url, secret}}")
        self.endpoints = {name: self._endpoint(name, spec) for name, spec in raw.items()}
        # No redirects: a 3xx is an answer about the endpoint, not a place to send the body.
        self.client = httpx.Client(timeout=timeout, follow_redirects=False)

    @staticmethod
    def _endpoint(name: str, spec: Any) -> Endpoint:
        if not isinstance(spec, dict) or "url" not in spec:
            raise ProviderError(f"webhook endpoint {name!r} needs a url")
        secret = spec.get("secret")
        if secret is None and spec.get("secret_arn"):
            from aws_lambda_powertools.utilities import parameters

            secret = parameters.get_secret(spec["secret_arn"], max_age=300)
        if not isinstance(secret, str):
            raise ProviderError(f"webhook endpoint {name!r} needs a secret or secret_arn")
        return Endpoint(url=str(spec["url"]), secret=decode_secret(secret))

    def send(self, action: Action) -> Outcome:
        endpoint = self.endpoints.get(action.target_key)
        if endpoint is None:
            return Rejected("not_configured", f"no webhook endpoint named {action.target_key!r}")
        body = json.dumps(envelope(action), separators=(",", ":")).encode()
        timestamp = int(time.time())
        message_id = f"msg_{action.id.hex}"
        headers = {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(endpoint.secret, message_id, timestamp, body),
        }
        try:
            response = self.client.post(endpoint.url, content=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return Transient(f"could not connect to {endpoint.url}: {exc}")
        except httpx.TransportError as exc:
            return Ambiguous(f"request to {endpoint.url} may have arrived: {exc!r}")
        return self.outcome(response)

    @staticmethod
    def outcome(response: httpx.Response) -> Outcome:
        status = response.status_code
        if 200 <= status < 300:
            return Delivered(provider_id=response.headers.get("x-request-id") or f"http-{status}")
        detail = f"HTTP {status}: {response.text[:300]}"
        retry_after = retry_after_seconds(response.headers.get("retry-after"))
        if status in NOT_PROCESSED:
            return Transient(detail, retry_after)
        if status >= 500:
            return Ambiguous(detail, retry_after)
        return Rejected("provider_rejected", detail)
