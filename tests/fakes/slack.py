"""A fake Slack Web API: `chat.postMessage` and `auth.test` with a bearer bot token,
answering as Slack documents (HTTP 200 with `ok`/`error`; 429 with Retry-After)."""

from __future__ import annotations

import itertools
import time

from tests.fakes.server import Answer, FakeServer, Seen

TOKEN = "xoxb-1111-2222-fakeSlackBotToken"
_ts = itertools.count(1)


def error(code: str, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, {"ok": False, "error": code}, headers or {})


class FakeSlack(FakeServer):
    def answer(self, seen: Seen) -> Answer:
        if seen.headers.get("authorization") != f"Bearer {TOKEN}":
            return error("invalid_auth")
        if seen.path == "/auth.test":
            return Answer(200, {"ok": True, "url": "https://fake.slack.com/", "team": "Fake Team",
                                "user": "tickwork", "team_id": "T1", "user_id": "U1"})  # fmt: skip
        if seen.path == "/chat.postMessage":
            body = seen.json()
            ts = f"{int(time.time())}.{next(_ts):06d}"
            return Answer(200, {"ok": True, "channel": body.get("channel"), "ts": ts,
                                "message": {"text": body.get("text"), "ts": ts}})  # fmt: skip
        return error("unknown_method", 404)

    def posts(self) -> list[Seen]:
        return self.to("/chat.postMessage")
