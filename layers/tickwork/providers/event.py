"""The `event` provider: outcome events to a workspace's endpoints (tickwork.events).

Signed as the `webhook` provider signs (Standard Webhooks): `webhook-id` is the event's id
(`evt_...`, the same on every attempt, so a receiver deduplicates by it), `webhook-timestamp`
the Unix time of this attempt, `webhook-signature` `v1,<base64 HMAC-SHA256>` of
`{id}.{timestamp}.{body}` keyed with the endpoint's `whsec_` secret. The body is the event
itself, `{"id", "type", "timestamp", "data"}`, as it was made when the outcome happened.
The endpoint (URL and secret) is the row's connection; status codes map to outcomes as for
webhooks (the receiver's body is never read).
"""

from __future__ import annotations

import json
import time
from typing import Any

from tickwork.actions.model import Claimed
from tickwork.providers import http
from tickwork.providers.base import Outcome, Rejected, Via
from tickwork.providers.webhook import Endpoint, WebhookProvider, sign


def event_id_of(action: Claimed) -> str:
    value = action.payload.get("id")
    return value if isinstance(value, str) and value else f"evt_{action.id.hex}"


def event_body(action: Claimed) -> bytes:
    event: dict[str, Any] = {
        "id": event_id_of(action),
        "type": action.payload.get("type"),
        "timestamp": action.payload.get("timestamp"),
        "data": action.payload.get("data", {}),
    }
    return json.dumps(event, separators=(",", ":")).encode()


class EventProvider(WebhookProvider):
    """A webhook whose body is the row's event and whose endpoint is its connection."""

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_invalid", "an event row names its endpoint's connection")
        endpoint = self._endpoint_of(action, via)
        if isinstance(endpoint, Rejected):
            return endpoint
        return self._post(action, endpoint)

    def _post(self, action: Claimed, endpoint: Endpoint) -> Outcome:
        body = event_body(action)
        timestamp = int(time.time())
        message_id = event_id_of(action)
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
            http.log_answer("event", action.id, endpoint.url, None, redactor, exc)
            return http.outcome_of_error(exc, http.mask_url(endpoint.url), redactor)
        if 200 <= reply.status < 300:
            return self.outcome(reply)
        outcome = self.outcome(reply, http.mask_url(endpoint.url))
        http.log_answer("event", action.id, endpoint.url, reply, self._redactor(endpoint))
        return outcome
