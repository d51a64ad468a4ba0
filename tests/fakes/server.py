"""A scripted HTTP server on loopback that fake providers build on.

Each request is recorded (method, path, query, headers, raw body). A reply is taken from
the script of its path when one is queued (status, headers, body, delay), else from the
fake's own `answer` (its documented success or auth failure).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # JSON-serialized unless bytes or str
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drip: float = 0.0  # seconds between the body's bytes, each sent on its own


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    raw: bytes

    def json(self) -> Any:
        return json.loads(self.raw)

    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.raw.decode()).items()}


class FakeServer:
    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.scripts: dict[str, list[Answer]] = defaultdict(list)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                seen = Seen(self.command, parts.path, parse_qs(parts.query),
                            {k.lower(): v for k, v in self.headers.items()}, raw)  # fmt: skip
                with fake._lock:
                    fake.requests.append(seen)
                    script = fake.scripts.get(parts.path)
                    scripted = script.pop(0) if script else None
                answer = scripted or fake.answer(seen)
                if answer.delay:
                    time.sleep(answer.delay)  # a slow provider, deliberately: what a test asked
                if isinstance(answer.body, bytes):
                    payload = answer.body
                elif isinstance(answer.body, str):
                    payload = answer.body.encode()
                else:
                    payload = json.dumps(answer.body).encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("content-type", "application/json; charset=utf-8")
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    if answer.drip:
                        for i in range(len(payload)):
                            self.wfile.write(payload[i : i + 1])
                            self.wfile.flush()
                            time.sleep(answer.drip)  # a trickled answer, deliberately
                    else:
                        self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (a deadline test)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def answer(self, seen: Seen) -> Answer:  # overridden by each provider's fake
        return Answer(404, {"error": "not found"})

    def then(self, path: str, *answers: Answer) -> FakeServer:
        with self._lock:
            self.scripts[path].extend(answers)
        return self

    def to(self, path: str) -> list[Seen]:
        with self._lock:
            return [seen for seen in self.requests if seen.path == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
