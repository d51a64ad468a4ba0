"""A scripted webhook receiver over real HTTP on loopback.

Each request takes the next scripted reply (status, headers, body, delay before answering);
when the script runs out it answers 204. Requests are recorded with their arrival time and
whether their Standard Webhooks signature verified.

It also serves the receiver status endpoint the docs describe, `GET /status/{webhook_id}`
(signed like a delivery, over an empty body): `200 {"received": true}` for a webhook-id it
received, `404 {"received": false}` otherwise, 401 to a bad signature; `status_script`
queues other replies.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tickwork.providers.webhook import decode_secret, verify

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Reply:
    status: int = 204
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    delay: float = 0.0


@dataclass
class Request:
    arrived_at: float
    headers: dict[str, str]
    body: dict[str, Any]
    verified: bool

    @property
    def action_id(self) -> str:
        return str(self.body["data"]["id"])


class FakeWebhookServer:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.status_script: list[Reply] = []
        self.requests: list[Request] = []
        self.status_checks: list[dict[str, str]] = []  # headers of each status GET
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                arrived = time.time()
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append(
                        Request(arrived, headers, json.loads(raw),
                                verify(decode_secret(SECRET), headers, raw))
                    )  # fmt: skip
                    reply = server.script.pop(0) if server.script else Reply()
                if reply.delay:
                    time.sleep(reply.delay)  # a slow receiver, deliberately: what a test asked
                payload = reply.body.encode()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.status_checks.append(headers)
                    scripted = server.status_script.pop(0) if server.status_script else None
                    received = {r.headers.get("webhook-id") for r in server.requests}
                wanted = self.path.removeprefix("/status/")
                if scripted is not None:
                    reply = scripted
                elif not self.path.startswith("/status/"):
                    reply = Reply(404, body="no such page")
                elif not verify(decode_secret(SECRET), headers, b"") or (
                    headers.get("webhook-id") != wanted
                ):
                    reply = Reply(401, body='{"error": "bad signature"}')
                elif wanted in received:
                    reply = Reply(200, body='{"received": true}')
                else:
                    reply = Reply(404, body='{"received": false}')
                if reply.delay:
                    time.sleep(reply.delay)  # a slow status page, deliberately: what a test asked
                payload = reply.body.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the caller gave up (a deadline test)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        self.status_url = f"http://127.0.0.1:{self.httpd.server_port}/status/{{webhook_id}}"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def then(self, *replies: Reply) -> FakeWebhookServer:
        with self._lock:
            self.script.extend(replies)
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def fake_webhook_server() -> Iterator[FakeWebhookServer]:
    server = FakeWebhookServer()
    try:
        yield server
    finally:
        server.close()
