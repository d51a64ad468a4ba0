"""A local stand-in for the providers' APIs, so the local runtime delivers emails, SMS,
chat messages and posts somewhere visible: it answers each provider's send call as the
provider would on success (any credentials are accepted) and prints what arrived.

Paths: `/postmark/email`, `/twilio/2010-04-01/Accounts/<sid>/Messages.json`,
`/slack/api/chat.postMessage`, `/mastodon/api/v1/statuses`, `/bluesky/xrpc/...`, and each
provider's verify call. It keeps what arrived, so the lookups work locally too: Postmark's
`/messages/outbound` search by metadata, Slack's `conversations.history` and
`conversations.replies` (one page), Bluesky's `getRecord`, Twilio's Messages list (one
page), Mastodon's account statuses (with `max_id`) and a status's source.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from tickwork.local.loopback import LoopbackServer

# Answers that do not depend on the request: the connection checks and a session refresh.
FIXED_ANSWERS: dict[str, dict[str, Any]] = {
    "/postmark/server": {"ID": 1, "Name": "Local sandbox"},
    "/slack/api/auth.test": {"ok": True, "team": "Local sandbox", "user": "tickwork"},
    "/mastodon/api/v1/accounts/verify_credentials": {
        "id": "1",
        "username": "local",
        "acct": "local",
    },
    "/bluesky/xrpc/com.atproto.server.refreshSession": {
        "did": "did:plc:localsandbox",
        "handle": "local.bsky.social",
        "accessJwt": "local-access",
        "refreshJwt": "local-refresh",
    },
}


@dataclass(frozen=True)
class Arrival:
    provider: str
    arrived_at: float
    summary: str  # who it is for and what it says, shortened
    action_id: str | None


def _short(text: Any, limit: int = 60) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class ProviderSandbox:
    def __init__(
        self, host: str = "127.0.0.1", port: int = 0,
        on_arrival: Callable[[Arrival], None] | None = None,
    ) -> None:  # fmt: skip
        self.arrivals: list[Arrival] = []
        self.on_arrival = on_arrival
        self._ids = itertools.count(1)
        # What arrived, as each provider's lookup reads it back.
        self._emails: list[dict[str, Any]] = []
        self._slack: list[dict[str, Any]] = []
        self._records: dict[tuple[str, str], dict[str, Any]] = {}
        self._sms: list[dict[str, Any]] = []
        self._statuses: list[dict[str, Any]] = []  # each with its source text under "_text"
        self._kept = threading.Lock()
        sandbox = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                path, _, query = self.path.partition("?")
                status, body = sandbox.answer(self.command, path, raw, query)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

            def log_message(self, *args: object) -> None:
                pass

        self.server = LoopbackServer((host, port), Handler)
        self.url = f"http://{host}:{self.server.server_port}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def start(self) -> ProviderSandbox:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _arrived(self, provider: str, summary: str, action_id: str | None) -> None:
        arrival = Arrival(provider, time.time(), summary, action_id)
        self.arrivals.append(arrival)
        if self.on_arrival is not None:
            self.on_arrival(arrival)

    def answer(self, method: str, path: str, raw: bytes, query: str = "") -> tuple[int, Any]:
        args = {k: v[0] for k, v in parse_qs(query).items()}
        with self._kept:
            found = self._lookup(path, args) if method == "GET" else None
        return found if found is not None else self.route(method, path, raw)

    def route(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        try:
            body: Any = json.loads(raw) if raw.startswith((b"{", b"[")) else {}
        except ValueError:
            body = {}
        form = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}
        now = datetime.now(UTC).isoformat()
        if path in FIXED_ANSWERS:
            return 200, FIXED_ANSWERS[path]
        if path == "/postmark/email":
            summary = f"to {_short(body.get('To'), 40)}: {_short(body.get('Subject'))}"
            # The one-click unsubscribe link, whole, so that it can be tried locally.
            headers = {h.get("Name"): h.get("Value") for h in body.get("Headers") or []
                       if isinstance(h, dict)}  # fmt: skip
            link = headers.get("List-Unsubscribe")
            if isinstance(link, str):
                summary += f" (unsubscribe: {link.strip('<>')})"
            meta = body.get("Metadata") or {}
            self._arrived("email", summary, meta.get("tickwork_action_id"))
            message_id = str(uuid.uuid4())
            with self._kept:
                self._emails.append({"MessageID": message_id, "Metadata": meta,
                                     "MessageStream": body.get("MessageStream") or "outbound",
                                     "Subject": body.get("Subject"), "ReceivedAt": now,
                                     "Status": "Sent"})  # fmt: skip
            return 200, {"To": body.get("To"), "SubmittedAt": now, "MessageID": message_id,
                         "ErrorCode": 0, "Message": "OK"}  # fmt: skip
        if re.fullmatch(r"/twilio/2010-04-01/Accounts/[^/]+/Messages\.json", path):
            self._arrived("sms", f"to {form.get('To')}: {_short(form.get('Body'))}", None)
            sms = {"sid": "SM" + uuid.uuid4().hex, "status": "sent", "to": form.get("To"),
                   "from": form.get("From") or "+15005550006", "body": form.get("Body"),
                   "messaging_service_sid": form.get("MessagingServiceSid"),
                   "direction": "outbound-api",
                   "date_created": format_datetime(datetime.now(UTC))}  # fmt: skip
            with self._kept:
                self._sms.append(sms)
            return 201, sms
        if re.fullmatch(r"/twilio/2010-04-01/Accounts/[^/]+\.json", path):
            return 200, {"sid": path.rsplit("/", 1)[1][:-5], "friendly_name": "Local sandbox",
                         "status": "active"}  # fmt: skip
        if path == "/slack/api/chat.postMessage":
            meta = (body.get("metadata") or {}).get("event_payload") or {}
            self._arrived("slack", f"in {body.get('channel')}: {_short(body.get('text'))}",
                          meta.get("tickwork_action_id"))  # fmt: skip
            ts = f"{int(time.time())}.{next(self._ids):06d}"
            with self._kept:
                self._slack.append({"type": "message", "channel": body.get("channel"), "ts": ts,
                                    "text": body.get("text"), "thread_ts": body.get("thread_ts"),
                                    "metadata": body.get("metadata")})  # fmt: skip
            return 200, {"ok": True, "channel": body.get("channel"), "ts": ts}
        if path == "/mastodon/api/v1/statuses":
            text = body.get("status") or form.get("status")
            self._arrived("mastodon", f"posted: {_short(text)}", None)
            status_id = str(next(self._ids))
            status = {"id": status_id, "content": text, "created_at": now,
                      "visibility": body.get("visibility") or "public",
                      "spoiler_text": body.get("spoiler_text") or "",
                      "in_reply_to_id": body.get("in_reply_to_id"), "edited_at": None,
                      "reblog": None, "url": f"{self.url}/mastodon/@local/{status_id}"}  # fmt: skip
            with self._kept:
                self._statuses.append({**status, "_text": text})
            return 200, status
        if path == "/bluesky/xrpc/com.atproto.server.createSession":
            return 200, {"did": "did:plc:localsandbox", "handle": body.get("identifier"),
                         "accessJwt": "local-access", "refreshJwt": "local-refresh"}  # fmt: skip
        if path == "/bluesky/xrpc/com.atproto.repo.createRecord":
            record = body.get("record") or {}
            self._arrived("bluesky", f"posted: {_short(record.get('text'))}", None)
            rkey = body.get("rkey") or str(next(self._ids))
            uri = f"at://{body.get('repo')}/app.bsky.feed.post/{rkey}"
            cid = "bafylocal" + uuid.uuid4().hex[:16]
            with self._kept:
                self._records[(str(body.get("repo")), rkey)] = {"uri": uri, "cid": cid,
                                                                "value": record}  # fmt: skip
            return 200, {"uri": uri, "cid": cid}
        return 404, {"error": f"the local sandbox has no {method} {path}"}

    def _lookup(self, path: str, args: dict[str, str]) -> tuple[int, Any] | None:
        """The providers' lookups over what arrived (under `_kept`), or None for other paths."""
        if path == "/postmark/messages/outbound":
            stream = args.get("messagestream", "outbound")
            wanted = {k.removeprefix("metadata_"): v for k, v in args.items()
                      if k.startswith("metadata_")}  # fmt: skip
            hits = [m for m in reversed(self._emails) if m["MessageStream"] == stream
                    and all(m["Metadata"].get(k) == v for k, v in wanted.items())]  # fmt: skip
            return 200, {"TotalCount": len(hits), "Messages": hits[: int(args.get("count", 50))]}
        if path in ("/slack/api/conversations.history", "/slack/api/conversations.replies"):
            oldest = float(args.get("oldest") or 0)
            thread = args.get("ts") if path.endswith("replies") else None
            hits = [
                {k: v for k, v in m.items() if k != "channel" and v is not None}
                for m in reversed(self._slack)
                if m["channel"] == args.get("channel") and float(m["ts"]) >= oldest
                and (m["thread_ts"] == thread or (thread is not None and m["ts"] == thread))
            ]  # fmt: skip
            return 200, {"ok": True, "messages": hits, "has_more": False}
        if re.fullmatch(r"/twilio/2010-04-01/Accounts/[^/]+/Messages\.json", path):
            hits = [m for m in reversed(self._sms) if m["to"] == args.get("To", m["to"])
                    and m["from"] == args.get("From", m["from"])]  # fmt: skip
            return 200, {"messages": hits, "page": 0, "next_page_uri": None}
        if path == "/mastodon/api/v1/accounts/1/statuses":
            older = [s for s in reversed(self._statuses)
                     if "max_id" not in args or int(s["id"]) < int(args["max_id"])]  # fmt: skip
            shown = [{k: v for k, v in s.items() if k != "_text"} for s in older]
            return 200, shown[: int(args.get("limit", 20))]
        source = re.fullmatch(r"/mastodon/api/v1/statuses/([0-9]+)/source", path)
        if source:
            kept = next((s for s in self._statuses if s["id"] == source.group(1)), None)
            if kept is None:
                return 404, {"error": "Record not found"}
            return 200, {"id": kept["id"], "text": kept["_text"],
                         "spoiler_text": kept["spoiler_text"]}  # fmt: skip
        if path == "/bluesky/xrpc/com.atproto.repo.getRecord":
            record = self._records.get((args.get("repo", ""), args.get("rkey", "")))
            if record is None:
                return 400, {"error": "RecordNotFound", "message": "Could not locate record"}
            return 200, record
        return None


def describe(arrival: Arrival) -> str:
    clock = datetime.fromtimestamp(arrival.arrived_at).strftime("%H:%M:%S.%f")[:-3]
    action = f" {arrival.action_id[:8]}" if arrival.action_id else ""
    return f"{clock}  {arrival.provider}{action}  {arrival.summary}"


def sandbox_action_types(url: str) -> dict[str, dict[str, Any]]:
    """Options of the default provider action types, pointed at the sandbox."""
    return {
        "email": {"provider": "postmark", "options": {"api_url": f"{url}/postmark"}},
        "sms": {"provider": "twilio", "options": {"api_url": f"{url}/twilio"}},
        "slack": {"provider": "slack", "options": {"api_url": f"{url}/slack/api"}},
        # Mastodon and Bluesky call the instance or PDS each connection names.
        "mastodon": {"provider": "mastodon"},
        "bluesky": {"provider": "bluesky"},
    }
