"""A fake Amazon SES v2 on loopback: `SendEmail` (POST /v2/email/outbound-emails, REST-JSON,
SigV4-signed) answering as SES documents: 200 `{"MessageId": ...}`; errors carry their code
in `x-amzn-ErrorType` and a `message`."""

from __future__ import annotations

import uuid

from tests.fakes.server import Answer, FakeServer, Seen

SEND = "/v2/email/outbound-emails"


def error(code: str, status: int, message: str) -> Answer:
    return Answer(status, {"message": message}, {"x-amzn-ErrorType": code})


class FakeSes(FakeServer):
    def answer(self, seen: Seen) -> Answer:
        if not seen.headers.get("authorization", "").startswith("AWS4-HMAC-SHA256 Credential="):
            return error("UnrecognizedClientException", 403, "The security token is invalid")
        if seen.method == "POST" and seen.path == SEND:
            return Answer(200, {"MessageId": f"0100-{uuid.uuid4()}"})
        return error("NotFoundException", 404, "no such resource")
