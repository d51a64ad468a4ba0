"""A fake Postmark: `POST /email` and `GET /server` with `X-Postmark-Server-Token`, answering
as Postmark documents (200 with MessageID and ErrorCode 0; 401 with ErrorCode 10; 422 with
an ErrorCode; 429 and 5xx)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

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
    def answer(self, seen: Seen) -> Answer:
        if seen.headers.get("x-postmark-server-token") != TOKEN:
            return Answer(401, {"ErrorCode": 10, "Message": "Bad or missing Server API token."})
        if seen.method == "GET" and seen.path == "/server":
            return Answer(200, {"ID": 1, "Name": "Fake server", "Color": "blue"})
        if seen.method == "POST" and seen.path == "/email":
            body = seen.json()
            return Answer(200, {"To": body.get("To"), "ErrorCode": 0, "Message": "OK",
                                "SubmittedAt": datetime.now(UTC).isoformat(),
                                "MessageID": str(uuid.uuid4())})  # fmt: skip
        return Answer(404, {"ErrorCode": 404, "Message": "not found"})

    def emails(self) -> list[Seen]:
        return [seen for seen in self.to("/email") if seen.method == "POST"]
