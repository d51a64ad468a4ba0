"""Postmark over real HTTP on loopback against a fake speaking its wire format: one test per
row of the error table, the request as documented, verify."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.postmark import TOKEN, FakePostmark, error
from tests.fakes.server import Answer
from tickwork.providers.base import Ambiguous, Delivered, Rejected, Transient
from tickwork.providers.postmark import PostmarkProvider

PAYLOAD = {"to": "ann@example.com", "subject": "Hello", "text": "Hi Ann", "html": "<p>Hi</p>",
           "tag": "welcome"}  # fmt: skip


@pytest.fixture
def postmark() -> Iterator[FakePostmark]:
    fake = FakePostmark()
    yield fake
    fake.close()


def provider(fake: FakePostmark) -> PostmarkProvider:
    return PostmarkProvider({"api_url": fake.url}, timeout=2.0, policy=LOOPBACK)


def via(token: str = TOKEN):
    return a_via("postmark", {"from": "Tickwork <news@example.com>", "message_stream": "outbound"},
                 {"server_token": token})  # fmt: skip


def test_the_documented_request_and_its_message_id(postmark):
    action = an_action(action_type="send_email", payload=PAYLOAD)
    outcome = provider(postmark).send(action, via())
    assert isinstance(outcome, Delivered)
    [sent] = postmark.emails()
    assert sent.headers["x-postmark-server-token"] == TOKEN
    body = sent.json()
    assert body["From"] == "Tickwork <news@example.com>"
    assert (body["To"], body["Subject"], body["TextBody"], body["HtmlBody"], body["Tag"]) == (
        "ann@example.com", "Hello", "Hi Ann", "<p>Hi</p>", "welcome")  # fmt: skip
    assert body["MessageStream"] == "outbound"
    assert body["Metadata"] == {"tickwork_action_id": str(action.id)}
    assert outcome.provider_id is not None
    assert len(outcome.provider_id) == 36


@pytest.mark.parametrize(
    ("answer", "kind", "code"),
    [
        (Answer(401, {"ErrorCode": 10, "Message": "Bad or missing Server API token."}),
         Rejected, "auth_failed"),
        (error(300), Rejected, "invalid_request"),
        (error(406), Rejected, "inactive_recipient"),
        (error(400), Rejected, "sender_not_confirmed"),
        (error(401), Rejected, "sender_not_confirmed"),
        (error(405), Rejected, "account_cannot_send"),
        (error(412), Rejected, "account_cannot_send"),
        (error(413), Rejected, "account_cannot_send"),
        (error(1235), Rejected, "invalid_message_stream"),
        (error(999), Rejected, "provider_rejected"),
        (Answer(413, "request too large"), Rejected, "provider_rejected"),
        (Answer(429, {"ErrorCode": 429, "Message": "Rate limit exceeded"}, {"retry-after": "7"}),
         Transient, None),
        (Answer(503, {"ErrorCode": 100, "Message": "Maintenance"}), Transient, None),
        (Answer(500, {"ErrorCode": 0, "Message": "Internal server error"}), Ambiguous, None),
        (Answer(502, "bad gateway"), Ambiguous, None),
        (Answer(200, {"ErrorCode": 0, "Message": "OK"}), Ambiguous, None),  # no MessageID
    ],
)  # fmt: skip
def test_error_table(postmark, answer, kind, code):
    postmark.then("/email", answer)
    outcome = provider(postmark).send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, kind), outcome
    if code is not None:
        assert isinstance(outcome, Rejected)
        assert outcome.code == code
    if answer.headers.get("retry-after"):
        assert isinstance(outcome, Transient)
        assert outcome.retry_after == 7.0


def test_a_read_timeout_after_sending_is_ambiguous(postmark):
    postmark.then("/email", Answer(200, {"MessageID": "x", "ErrorCode": 0}, delay=1.5))
    fast = PostmarkProvider({"api_url": postmark.url}, timeout=0.5, policy=LOOPBACK)
    assert isinstance(fast.send(an_action(payload=PAYLOAD), via()), Ambiguous)


def test_verify_calls_get_server(postmark):
    ok = provider(postmark).verify(via())
    assert (ok.ok, ok.account) == (True, "Fake server")
    bad = provider(postmark).verify(via("wrong-token-123"))
    assert not bad.ok
    assert "server token" in bad.message
    assert [seen.path for seen in postmark.requests] == ["/server", "/server"]
