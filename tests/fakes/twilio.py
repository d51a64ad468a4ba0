"""A fake Twilio: Messages.json (form-encoded, basic auth) and the account fetch, answering
as Twilio documents (201 with `sid`; 400/401/404/429 with `code`, `message`, `more_info`)."""

from __future__ import annotations

import base64
import uuid

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


class FakeTwilio(FakeServer):
    def answer(self, seen: Seen) -> Answer:
        expected = "Basic " + base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
        if seen.headers.get("authorization") != expected:
            return error(20003, 401)
        if seen.method == "GET" and seen.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}.json":
            return Answer(200, {"sid": ACCOUNT_SID, "friendly_name": "Fake account",
                                "status": "active"})  # fmt: skip
        if seen.method == "POST" and seen.path == MESSAGES:
            form = seen.form()
            return Answer(201, {"sid": "SM" + uuid.uuid4().hex, "status": "queued",
                                "to": form.get("To"), "from": form.get("From"),
                                "body": form.get("Body")})  # fmt: skip
        return error(20404, 404)

    def messages(self) -> list[Seen]:
        return [seen for seen in self.to(MESSAGES) if seen.method == "POST"]
