"""A tenant's outcome-event endpoint over real HTTP on loopback: it verifies each request's
Standard Webhooks signature itself (the spec's algorithm: HMAC-SHA256 keyed with the base64
bytes after `whsec_`, over `{webhook-id}.{webhook-timestamp}.{raw body}`, compared with each
`v1,` signature of the header), and can be down (503) for as long as a test says."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def signature_ok(secret: str, headers: dict[str, str], body: bytes) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = [s.split(",", 1)[1] for s in headers["webhook-signature"].split() if "," in s]
    return any(hmac.compare_digest(expected, candidate) for candidate in offered)


@dataclass
class Received:
    headers: dict[str, str]
    event: dict[str, Any]
    verified: bool
    accepted: bool  # answered 2xx


class EventReceiver:
    def __init__(self) -> None:
        self.secret = ""
        self.down = False
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    accepted = not receiver.down
                    receiver.received.append(Received(
                        headers, json.loads(raw), signature_ok(receiver.secret, headers, raw),
                        accepted,
                    ))  # fmt: skip
                self.send_response(204 if accepted else 503)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/events"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def accepted(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.accepted]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def event_receiver() -> Iterator[EventReceiver]:
    receiver = EventReceiver()
    try:
        yield receiver
    finally:
        receiver.close()
