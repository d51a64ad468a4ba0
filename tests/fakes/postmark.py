"""A fake Postmark: `POST /email`, `GET /server` and the outbound message search
`GET /messages/outbound` with `X-Postmark-Server-Token`, answering as Postmark documents
(200 with MessageID and ErrorCode 0; 401 with ErrorCode 10; 422 with an ErrorCode; 429 and
5xx). Every accepted email is kept, so the search finds what was really sent.

An outage by the clock (`outage(seconds)`): every email is answered 503 until an instant,
then accepted again; the 503s are kept with their time and recipient. Recipients marked
`inactive` are refused (422, ErrorCode 406) as Postmark refuses a suppressed address."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from tests.fakes.server import Answer, FakeServer, Seen

TOKEN = "pm-server-token-0f1e2d3c4b5a"
ERRORS = {
    300: "Invalid email request: 'To' address is not valid.",
    406: "You tried to send to recipient(s) that have been marked as inactive.",
    400: "The 'From' address you supplied is not a Sender Signature on your account.",
    401: "The 'From' address has not been confirmed.",
    405: "Your account has run out of credits.",
    412: "Your account is pending approval: only same-domain recipients.",
    413: "Your account may not send.",
    1235: "The message stream for the provided 'MessageStream' was not found.",
}


def error(code: int, status: int = 422) -> Answer:
    return Answer(status, {"ErrorCode": code, "Message": ERRORS.get(code, "error")})


class FakePostmark(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, Any]] = []  # the search's view of each accepted email
        self._sent_lock = threading.Lock()
        self.lose_answers = 0  # accept the email, then answer 500
        self.down_until: float | None = None  # time.time() until which emails get a 503
        self.outage_answers: list[tuple[float, dict[str, Any]]] = []  # (when, the email)
        self.inactive: set[str] = set()  # recipients refused as inactive

    def outage(self, seconds: float) -> float:
        """Answer every email 503 for `seconds` from now; returns when it ends (time.time())."""
        self.down_until = time.time() + seconds
        return self.down_until

    def answer(self, seen: Seen) -> Answer:
        if seen.headers.get("x-postmark-server-token") != TOKEN:
            return Answer(401, {"ErrorCode": 10, "Message": "Bad or missing Server API token."})
        if seen.method == "GET" and seen.path == "/server":
            return Answer(200, {"ID": 1, "Name": "Fake server", "Color": "blue"})
        if seen.method == "POST" and seen.path == "/email":
            now = time.time()
            if self.down_until is not None and now < self.down_until:
                with self._sent_lock:
                    self.outage_answers.append((now, seen.json()))
                return Answer(503, {"ErrorCode": 100, "Message": "Maintenance"})
            if seen.json().get("To") in self.inactive:
                return error(406)
            return self._accept(seen.json())
        if seen.method == "GET" and seen.path == "/messages/outbound":
            return self._search(seen.query)
        return Answer(404, {"ErrorCode": 404, "Message": "not found"})

    def _accept(self, body: dict[str, Any]) -> Answer:
        message_id = str(uuid.uuid4())
        now = datetime.now(UTC).isoformat()
        with self._sent_lock:
            self.sent.append({
                "MessageID": message_id, "MessageStream": body.get("MessageStream") or "outbound",
                "To": [{"Email": body.get("To"), "Name": None}], "Recipients": [body.get("To")],
                "From": body.get("From"), "Subject": body.get("Subject"), "Tag": body.get("Tag"),
                "ReceivedAt": now, "Status": "Sent", "Metadata": body.get("Metadata") or {},
                "Attachments": [], "Cc": [], "Bcc": [], "TrackOpens": False,
                "TrackLinks": "None", "Sandboxed": False,
            })  # fmt: skip
            if self.lose_answers:
                self.lose_answers -= 1
                return Answer(500, {"ErrorCode": 0, "Message": "Internal server error"})
        return Answer(200, {"To": body.get("To"), "ErrorCode": 0, "Message": "OK",
                            "SubmittedAt": now, "MessageID": message_id})  # fmt: skip

    def _search(self, query: dict[str, list[str]]) -> Answer:
        try:
            count, offset = int(query["count"][0]), int(query["offset"][0])
        except (KeyError, ValueError):
            return Answer(422, {"ErrorCode": 0, "Message": "count and offset are required."})
        if not 0 < count <= 500 or offset < 0 or count + offset > 10_000:
            return Answer(422, {"ErrorCode": 0, "Message": "count is at most 500."})
        stream = query.get("messagestream", ["outbound"])[0]
        filters = {k.removeprefix("metadata_"): v[0] for k, v in query.items()
                   if k.startswith("metadata_")}  # fmt: skip
        if len(filters) > 1:  # "you can currently only search by a single metadata field"
            return Answer(422, {"ErrorCode": 0, "Message": "one metadata filter at a time"})
        with self._sent_lock:
            matches = [m for m in reversed(self.sent)  # newest first
                       if m["MessageStream"] == stream
                       and all(m["Metadata"].get(k) == v for k, v in filters.items())]  # fmt: skip
        return Answer(
            200, {"TotalCount": len(matches), "Messages": matches[offset : offset + count]}
        )

    def emails(self) -> list[Seen]:
        return [seen for seen in self.to("/email") if seen.method == "POST"]

    def searches(self) -> list[Seen]:
        return [seen for seen in self.to("/messages/outbound") if seen.method == "GET"]
