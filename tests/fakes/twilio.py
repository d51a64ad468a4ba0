"""A fake Twilio: Messages.json (form-encoded, basic auth) and the account fetch, answering
as Twilio documents (201 with `sid`; 400/401/404/429 with `code`, `message`, `more_info`).

It keeps the messages created, and lists them as Twilio's Messages list resource does:
`GET Messages.json` filtered by `To` and `From`, newest first, `PageSize` a page, each page
naming the next by `next_page_uri` (with `Page` and `PageToken`), dates in RFC 2822."""

from __future__ import annotations

import base64
import threading
import uuid
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlencode

from tests.fakes.server import Answer, FakeServer, Seen

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "twilio-auth-token-9f8e7d6c"
FROM = "+15005550006"
MESSAGES = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"
ERRORS = {
    21211: "The 'To' number is not a valid phone number.",
    21614: "'To' number is not a valid mobile number",
    21610: "Attempt to send to unsubscribed recipient",
    21408: "Permission to send an SMS has not been enabled for the region indicated by the"
    " 'To' number",
    21612: "The 'To' phone number is not currently reachable via SMS",
    21212: "The 'From' number is not a valid phone number, shortcode, or alphanumeric sender ID.",
    21606: "The 'From' phone number provided is not a valid message-capable Twilio phone number.",
    21659: "'From' is not a Twilio phone number or Short Code country mismatch",
    21602: "Message body is required.",
    21617: "The concatenated message body exceeds the 1600 character limit.",
    20003: "Authenticate",
    20404: "The requested resource was not found",
    20429: "Too Many Requests",
    21999: "some other documented refusal",
}


def error(code: int, status: int = 400, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, {"code": code, "message": ERRORS.get(code, "error"), "status": status,
                           "more_info": f"https://www.twilio.com/docs/errors/{code}"},
                  headers or {})  # fmt: skip


def message(to: str, body: str, *, sender: str = FROM, created: datetime | None = None,
            direction: str = "outbound-api", status: str = "sent",
            service: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A Message resource as Twilio lists it."""
    when = format_datetime((created or datetime.now(UTC)).astimezone(UTC))
    sid = "SM" + uuid.uuid4().hex
    return {"sid": sid, "account_sid": ACCOUNT_SID, "to": to, "from": sender, "body": body,
            "messaging_service_sid": service, "direction": direction, "status": status,
            "date_created": when, "date_updated": when,
            "date_sent": when if status not in ("accepted", "queued") else None,
            "num_segments": "1", "error_code": None, "error_message": None,
            "uri": f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{sid}.json"}  # fmt: skip


class FakeTwilio(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.kept: list[dict[str, Any]] = []  # oldest first, as created
        self._keeping = threading.Lock()
        # Create the message, then answer this many sends with a 500 (the answer is lost).
        self.lose_answers = 0

    def keep(self, *messages: dict[str, Any]) -> None:
        """Messages the account has (sent by something else, or earlier)."""
        with self._keeping:
            self.kept.extend(messages)

    def answer(self, seen: Seen) -> Answer:
        expected = "Basic " + base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
        if seen.headers.get("authorization") != expected:
            return error(20003, 401)
        if seen.method == "GET" and seen.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}.json":
            return Answer(200, {"sid": ACCOUNT_SID, "friendly_name": "Fake account",
                                "status": "active"})  # fmt: skip
        if seen.method == "POST" and seen.path == MESSAGES:
            return self._create(seen.form())
        if seen.method == "GET" and seen.path == MESSAGES:
            return self._list(seen.query)
        return error(20404, 404)

    def _create(self, form: dict[str, str]) -> Answer:
        created = message(str(form.get("To")), str(form.get("Body")), status="queued",
                          sender=form.get("From") or FROM,
                          service=form.get("MessagingServiceSid"))  # fmt: skip
        with self._keeping:
            self.kept.append(created)
            if self.lose_answers:
                self.lose_answers -= 1
                return Answer(500, {"code": 20500, "message": "Internal Server Error"})
        return Answer(201, created)

    def _list(self, query: dict[str, list[str]]) -> Answer:
        args = {k: v[0] for k, v in query.items()}
        size = min(int(args.get("PageSize", "50")), 1000)
        page = int(args.get("Page", "0"))
        with self._keeping:
            hits = [m for m in reversed(self.kept)
                    if m["to"] == args.get("To", m["to"])
                    and m["from"] == args.get("From", m["from"])]  # fmt: skip
        chunk = hits[page * size : (page + 1) * size]
        filters = {k: v for k, v in args.items() if k in ("To", "From")}

        def uri(number: int) -> str:
            token = f"PASM{uuid.uuid4().hex}"
            query = {**filters, "PageSize": size, "Page": number, "PageToken": token}
            return f"{MESSAGES}?{urlencode(query)}"

        following = uri(page + 1) if (page + 1) * size < len(hits) else None
        return Answer(200, {"messages": chunk, "page": page, "page_size": size,
                            "start": page * size, "end": page * size + len(chunk) - 1,
                            "first_page_uri": uri(0), "next_page_uri": following,
                            "previous_page_uri": uri(page - 1) if page else None,
                            "uri": uri(page)})  # fmt: skip

    def messages(self) -> list[Seen]:
        """The send calls (POST), answered or not."""
        return [seen for seen in self.to(MESSAGES) if seen.method == "POST"]

    def lists(self) -> list[Seen]:
        return [seen for seen in self.to(MESSAGES) if seen.method == "GET"]
