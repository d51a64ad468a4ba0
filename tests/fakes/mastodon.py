"""A fake Mastodon instance: `POST /api/v1/statuses` (bearer token, Idempotency-Key kept as
Mastodon keeps it: a repeated key answers the first status without posting again) and
`GET /api/v1/accounts/verify_credentials`. It counts the statuses actually posted."""

from __future__ import annotations

import itertools
import json
import threading

from tests.fakes.server import Answer, FakeServer, Seen

TOKEN = "mastodon-access-token-abcdef123"


class FakeMastodon(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[dict[str, object]] = []
        self.by_key: dict[str, dict[str, object]] = {}
        self._ids = itertools.count(109_000_000)
        self._posting = threading.Lock()
        # Post, then answer this instead (the status exists; the answer is lost or an error).
        self.lose_answers = 0

    def answer(self, seen: Seen) -> Answer:
        if seen.headers.get("authorization") != f"Bearer {TOKEN}":
            return Answer(401, {"error": "The access token is invalid"})
        if seen.path == "/api/v1/accounts/verify_credentials":
            return Answer(200, {"id": "1", "username": "tickwork", "acct": "tickwork"})
        if seen.path == "/api/v1/statuses" and seen.method == "POST":
            return self._post(seen)
        return Answer(404, {"error": "Record not found"})

    def _post(self, seen: Seen) -> Answer:
        body = json.loads(seen.raw) if seen.raw.startswith(b"{") else seen.form()
        key = seen.headers.get("idempotency-key")
        with self._posting:
            if key and key in self.by_key:
                return Answer(200, self.by_key[key])
            if not body.get("status"):
                return Answer(422, {"error": "Validation failed: Text can't be blank"})
            status = {"id": str(next(self._ids)), "content": f"<p>{body['status']}</p>",
                      "visibility": body.get("visibility", "public"),
                      "url": f"{self.url}/@tickwork/1"}  # fmt: skip
            self.statuses.append(status)
            if key:
                self.by_key[key] = status
            if self.lose_answers:
                self.lose_answers -= 1
                return Answer(503, "<html>upstream timed out</html>")
        return Answer(200, status)
