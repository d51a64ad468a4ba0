"""A fake Mastodon instance: `POST /api/v1/statuses` (bearer token, Idempotency-Key kept as
Mastodon keeps it: a repeated key answers the first status without posting again) and
`GET /api/v1/accounts/verify_credentials`. It counts the statuses actually posted.

It lists the account's statuses as Mastodon documents them: `GET /api/v1/accounts/:id/
statuses` newest first (by id), `limit` (at most 40) and `max_id` paging, `created_at` in
ISO 8601, `content` rendered as HTML; and `GET /api/v1/statuses/:id/source`, the text as
written."""

from __future__ import annotations

import html
import itertools
import json
import threading
from datetime import UTC, datetime
from typing import Any

from tests.fakes.server import Answer, FakeServer, Seen

TOKEN = "mastodon-access-token-abcdef123"
ACCOUNT = {"id": "1", "username": "tickwork", "acct": "tickwork",
           "url": "https://fake.example/@tickwork"}  # fmt: skip
STATUSES = "/api/v1/accounts/1/statuses"


class FakeMastodon(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[dict[str, object]] = []
        self.by_key: dict[str, dict[str, object]] = {}
        self._ids = itertools.count(1)
        self._posting = threading.Lock()
        # Post, then answer this instead (the status exists; the answer is lost or an error).
        self.lose_answers = 0
        self.sources: dict[str, str] = {}

    def _id(self, when: datetime) -> str:
        """Mastodon's ids grow with time (milliseconds, then a sequence in 16 bits)."""
        return str((int(when.timestamp() * 1000) << 16) + next(self._ids) % 65536)

    def status(
        self, text: str, *, created: datetime | None = None, visibility: str = "public",
        spoiler_text: str = "", in_reply_to_id: str | None = None, edited: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        """A status of the account, kept as if posted (at `created`, by default now)."""
        when = (created or datetime.now(UTC)).astimezone(UTC)
        with self._posting:
            status_id = self._id(when)
            status = {
                "id": status_id, "created_at": when.isoformat(timespec="milliseconds")
                .replace("+00:00", "Z"),
                "content": "<p>" + html.escape(text).replace("\n", "<br />") + "</p>",
                "visibility": visibility, "spoiler_text": spoiler_text,
                "in_reply_to_id": in_reply_to_id, "reblog": None,
                "edited_at": when.isoformat() if edited else None, "account": ACCOUNT,
                "url": f"{self.url}/@tickwork/{status_id}",
            }  # fmt: skip
            self.statuses.append(status)
            self.sources[status_id] = text
        return status

    def answer(self, seen: Seen) -> Answer:
        if seen.headers.get("authorization") != f"Bearer {TOKEN}":
            return Answer(401, {"error": "The access token is invalid"})
        if seen.path == "/api/v1/accounts/verify_credentials":
            return Answer(200, ACCOUNT)
        if seen.path == "/api/v1/statuses" and seen.method == "POST":
            return self._post(seen)
        if seen.path == STATUSES and seen.method == "GET":
            return self._list({k: v[0] for k, v in seen.query.items()})
        parts = seen.path.split("/")
        if (
            seen.method == "GET"
            and len(parts) == 6
            and parts[3] == "statuses"
            and parts[5] == ("source")
        ):
            return self._source(parts[4])
        return Answer(404, {"error": "Record not found"})

    def _list(self, args: dict[str, str]) -> Answer:
        limit = min(int(args.get("limit", "20")), 40)
        with self._posting:
            newest = sorted(self.statuses, key=lambda s: int(str(s["id"])), reverse=True)
        if "max_id" in args:
            newest = [s for s in newest if int(str(s["id"])) < int(args["max_id"])]
        return Answer(200, newest[:limit])

    def _source(self, status_id: str) -> Answer:
        with self._posting:
            text = self.sources.get(status_id)
            status = next((s for s in self.statuses if s["id"] == status_id), None)
        if text is None or status is None:
            return Answer(404, {"error": "Record not found"})
        return Answer(200, {"id": status_id, "text": text,
                            "spoiler_text": status["spoiler_text"]})  # fmt: skip

    def _post(self, seen: Seen) -> Answer:
        body = json.loads(seen.raw) if seen.raw.startswith(b"{") else seen.form()
        key = seen.headers.get("idempotency-key")
        with self._posting:
            if key and key in self.by_key:
                return Answer(200, self.by_key[key])
            if not body.get("status"):
                return Answer(422, {"error": "Validation failed: Text can't be blank"})
            now = datetime.now(UTC)
            status_id = self._id(now)
            status = {"id": status_id, "content": f"<p>{html.escape(body['status'])}</p>",
                      "created_at": now.isoformat(timespec="milliseconds")
                      .replace("+00:00", "Z"),
                      "visibility": body.get("visibility", "public"),
                      "spoiler_text": body.get("spoiler_text") or "",
                      "in_reply_to_id": body.get("in_reply_to_id"), "reblog": None,
                      "edited_at": None, "account": ACCOUNT,
                      "url": f"{self.url}/@tickwork/{status_id}"}  # fmt: skip
            self.statuses.append(status)
            self.sources[status_id] = str(body["status"])
            if key:
                self.by_key[key] = status
            if self.lose_answers:
                self.lose_answers -= 1
                return Answer(503, "<html>upstream timed out</html>")
        return Answer(200, status)
