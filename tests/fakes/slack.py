"""A fake Slack Web API: `chat.postMessage`, `auth.test`, `conversations.history` and
`conversations.replies` with a bearer bot token, answering as Slack documents (HTTP 200 with
`ok`/`error`; 429 with Retry-After; cursor pagination with `has_more` and
`response_metadata.next_cursor`; message `metadata` only with `include_all_metadata`).
Every posted message is kept per channel, so history shows what was really posted."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from tests.fakes.server import Answer, FakeServer, Seen

TOKEN = "xoxb-1111-2222-fakeSlackBotToken"
_ts = itertools.count(1)


def error(code: str, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, {"ok": False, "error": code}, headers or {})


def _truthy(value: str | None) -> bool:
    return value in ("true", "1")


class FakeSlack(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.channels: dict[str, list[dict[str, Any]]] = {"C0123456": [], "C999": []}
        self.page_cap = 999  # 15 for apps outside the Marketplace since 2025
        self.lose_answers = 0  # post the message, then answer 500
        self._lock_posts = threading.Lock()

    def answer(self, seen: Seen) -> Answer:
        if seen.headers.get("authorization") != f"Bearer {TOKEN}":
            return error("invalid_auth")
        if seen.path == "/auth.test":
            return Answer(200, {"ok": True, "url": "https://fake.slack.com/", "team": "Fake Team",
                                "user": "tickwork", "team_id": "T1", "user_id": "U1"})  # fmt: skip
        if seen.path == "/chat.postMessage":
            return self._post(seen.json())
        if seen.path in ("/conversations.history", "/conversations.replies"):
            return self._read(seen.path, {k: v[0] for k, v in seen.query.items()})
        return error("unknown_method", 404)

    def _post(self, body: dict[str, Any]) -> Answer:
        channel = str(body.get("channel"))
        ts = f"{int(time.time())}.{next(_ts):06d}"
        message = {"type": "message", "user": "U1", "bot_id": "B1", "app_id": "A1",
                   "text": body.get("text"), "ts": ts}  # fmt: skip
        if body.get("thread_ts"):
            message["thread_ts"] = body["thread_ts"]
        if body.get("metadata"):
            message["metadata"] = body["metadata"]
        with self._lock_posts:
            self.channels.setdefault(channel, []).append(message)
            if self.lose_answers:
                self.lose_answers -= 1
                return Answer(500, "<html>Internal Server Error</html>")
        return Answer(200, {"ok": True, "channel": channel, "ts": ts,
                            "message": {"text": body.get("text"), "ts": ts}})  # fmt: skip

    def _read(self, path: str, args: dict[str, str]) -> Answer:
        channel = args.get("channel", "")
        with self._lock_posts:
            if channel not in self.channels:
                return error("channel_not_found")
            messages = list(self.channels[channel])
        oldest, latest = float(args.get("oldest") or 0), float(args.get("latest") or time.time())
        inclusive = _truthy(args.get("inclusive"))

        def within(m: dict[str, Any]) -> bool:
            ts = float(m["ts"])
            return oldest <= ts <= latest if inclusive else oldest < ts < latest

        if path == "/conversations.replies":  # the thread, parent first
            parent = args.get("ts")
            if not parent:
                return error("invalid_arguments")
            picked = [m for m in messages if within(m)
                      and (m["ts"] == parent or m.get("thread_ts") == parent)]  # fmt: skip
        else:  # the channel, newest first; replies stay in their thread
            picked = [m for m in reversed(messages) if within(m) and not m.get("thread_ts")]
        if not _truthy(args.get("include_all_metadata")):
            picked = [{k: v for k, v in m.items() if k != "metadata"} for m in picked]
        limit = min(int(args.get("limit") or 100), self.page_cap)
        start = int(args["cursor"].removeprefix("bmV4dDo=")) if args.get("cursor") else 0
        page, more = picked[start : start + limit], start + limit < len(picked)
        cursor = f"bmV4dDo={start + limit}" if more else ""
        return Answer(200, {"ok": True, "messages": page, "has_more": more, "pin_count": 0,
                            "response_metadata": {"next_cursor": cursor}})  # fmt: skip

    def posts(self) -> list[Seen]:
        return self.to("/chat.postMessage")

    def reads(self) -> list[Seen]:
        return [s for s in self.requests if s.path.startswith("/conversations.")]
