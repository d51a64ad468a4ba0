"""A local webhook receiver: verifies Standard Webhooks signatures and prints each delivery
as it arrives, with how late it came."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from tickwork.local.loopback import LoopbackServer
from tickwork.platform.text import clock, lateness
from tickwork.providers.webhook import decode_secret, verify


@dataclass(frozen=True)
class ReceivedWebhook:
    message_id: str
    arrived_at: float
    verified: bool
    body: dict[str, Any]
    refused: int | None = None  # the error status the receiver answered, if it did

    @property
    def lag_seconds(self) -> float | None:
        try:
            due = datetime.fromisoformat(self.body["data"]["publish_at"]).timestamp()
        except (KeyError, TypeError, ValueError):
            return None
        return self.arrived_at - due


class WebhookReceiver:
    def __init__(
        self,
        secret: str,
        host: str = "127.0.0.1",
        port: int = 0,
        on_delivery: Callable[[ReceivedWebhook], None] | None = None,
    ) -> None:
        self.secret = decode_secret(secret)
        self.deliveries: list[ReceivedWebhook] = []
        # Webhooks already refused once for `"fail_once": true` in their payload.
        self._failed_once: set[str] = set()
        self.on_delivery = on_delivery
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as a real receiver has: a burst reuses the dispatchers' connections.
            protocol_version = "HTTP/1.1"
            timeout = 30.0  # an idle kept-alive connection is closed after this long

            def do_POST(self) -> None:
                arrived = time.time()
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {key.lower(): value for key, value in self.headers.items()}
                verified = verify(receiver.secret, headers, raw)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                delivery = ReceivedWebhook(headers.get("webhook-id", ""), arrived, verified, body)
                status = receiver.answer(delivery)
                if status != 204:
                    delivery = replace(delivery, refused=status)
                receiver.deliveries.append(delivery)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if receiver.on_delivery is not None:
                    receiver.on_delivery(delivery)

            def log_message(self, *args: object) -> None:
                pass

        self.server = LoopbackServer((host, port), Handler)
        self.url = f"http://{host}:{self.server.server_port}/hooks"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def answer(self, delivery: ReceivedWebhook) -> int:
        """204, or 401 for a bad signature; a payload with `"fail_once": true` is refused
        once with 400 (the provider records `provider_rejected`), to try a failure and a
        retry locally."""
        if not delivery.verified:
            return 401
        payload = delivery.body.get("data", {}).get("payload") or {}
        if payload.get("fail_once") is True and delivery.message_id not in self._failed_once:
            self._failed_once.add(delivery.message_id)
            return 400
        return 204

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


PAYLOAD_LIMIT = 60


def short_payload(payload: Any, limit: int = PAYLOAD_LIMIT) -> str:
    """A payload as compact JSON on one line, cut to `limit` characters."""
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(delivery: ReceivedWebhook) -> str:
    """One line per delivery, times in UTC; 'late by' is the arrival minus publish_at; then
    the payload, in short."""
    data = delivery.body.get("data", {})
    lag = delivery.lag_seconds
    try:
        due = clock(datetime.fromisoformat(data["publish_at"]))
    except (KeyError, TypeError, ValueError):
        due = "?"
    mark = "" if delivery.verified else "  (BAD SIGNATURE)"
    if delivery.refused and delivery.verified:
        mark = f"  answered {delivery.refused} (fail_once in the payload)"
    return (
        f"{clock(delivery.arrived_at)}  webhook {str(data.get('id', '?'))[:8]}"
        f"  {data.get('target_key', '?')}  thing={data.get('thing_id') or '-'}  due {due}"
        f"  arrived {lateness(lag) if lag is not None else '(no due time)'}{mark}"
        + (f"  payload {short_payload(data['payload'])}" if data.get("payload") else "")
    )
