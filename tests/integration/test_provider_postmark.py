"""Postmark over real HTTP on loopback against a fake speaking its wire format: one test per
row of the error table, the request as documented, verify."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.postmark import TOKEN, FakePostmark, error
from tests.fakes.server import Answer
from tickwork.providers.base import (
    Absent,
    Ambiguous,
    Delivered,
    Found,
    ProviderError,
    Rejected,
    Transient,
    Unknown,
    lookup_of,
)
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
    action = an_action(action_type="email", payload=PAYLOAD)
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


# ------------------------------------------------------------------------------ lookup
# The fake keeps every email it accepted and searches them as Postmark documents
# (`GET /messages/outbound?count&offset&metadata_<key>=<value>`), so found and absent come
# from what was really sent.


def test_lookup_finds_a_sent_email_by_the_action_id_in_its_metadata(postmark):
    pm = provider(postmark)
    action = an_action(action_type="email", payload=PAYLOAD)
    postmark.lose_answers = 1  # accepted, but the answer is a 500: the send is ambiguous
    assert isinstance(pm.send(action, via()), Ambiguous)
    found = pm.lookup(action, via())
    assert isinstance(found, Found), found
    assert found.provider_id == postmark.sent[0]["MessageID"]
    [search] = postmark.searches()
    assert search.headers["x-postmark-server-token"] == TOKEN
    assert search.query["metadata_tickwork_action_id"] == [str(action.id)]
    assert (search.query["count"], search.query["offset"]) == (["50"], ["0"])
    assert search.query["messagestream"] == ["outbound"]  # the connection's stream


def test_lookup_of_an_email_never_sent_is_absent(postmark):
    pm = provider(postmark)
    pm.send(an_action(payload=PAYLOAD), via())  # another action's email is there
    assert isinstance(pm.lookup(an_action(payload=PAYLOAD), via()), Absent)


def test_lookup_searches_the_stream_the_email_went_to(postmark):
    pm = provider(postmark)
    action = an_action(payload={**PAYLOAD, "message_stream": "broadcasts"})
    pm.send(action, via())
    assert isinstance(pm.lookup(action, via()), Found)
    assert postmark.searches()[0].query["messagestream"] == ["broadcasts"]


@pytest.mark.parametrize(
    "answer",
    [
        Answer(500, {"ErrorCode": 0, "Message": "Internal server error"}),
        Answer(503, "maintenance"),
        Answer(429, {"ErrorCode": 429, "Message": "Rate limit exceeded"}),
        Answer(200, "<html>not json</html>"),
        Answer(200, {"TotalCount": 0}),  # no Messages list
        Answer(200, {"TotalCount": 3, "Messages": []}),  # a count without the messages
    ],
)
def test_lookup_that_cannot_tell_is_unknown(postmark, answer):
    postmark.then("/messages/outbound", answer)
    result = provider(postmark).lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown), result


def test_lookup_refused_credentials_are_unknown_without_the_token(postmark):
    result = provider(postmark).lookup(an_action(payload=PAYLOAD), via("wrong-token-123"))
    assert isinstance(result, Unknown)
    assert "401" in result.reason
    assert "wrong-token-123" not in result.reason


def test_lookup_answers_that_are_not_ours_are_not_taken_for_ours(postmark):
    # A search that ignored the filter would list other messages: that proves nothing.
    other = {"MessageID": "m-1", "Metadata": {"tickwork_action_id": "someone-else"}}
    postmark.then("/messages/outbound", Answer(200, {"TotalCount": 1, "Messages": [other]}))
    assert isinstance(provider(postmark).lookup(an_action(payload=PAYLOAD), via()), Unknown)


def test_lookup_is_bounded_by_the_deadline_and_never_raises(postmark):
    postmark.then("/messages/outbound", Answer(200, {"TotalCount": 0, "Messages": []}, delay=2))
    fast = PostmarkProvider({"api_url": postmark.url}, timeout=0.5, policy=LOOPBACK)
    started = time.monotonic()
    result = fast.lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown)
    assert time.monotonic() - started < 1.5
    # A payload the search cannot read, or no connection: unknown too, not an exception.
    assert isinstance(fast.lookup(an_action(payload={"to": 5}), via()), Unknown)
    assert isinstance(fast.lookup(an_action(payload=PAYLOAD), None), Unknown)


def test_lookup_windows_follow_postmarks_retention():
    pm = PostmarkProvider({}, policy=LOOPBACK)
    assert lookup_of(pm) is pm
    assert pm.lookup_retention == timedelta(days=45)
    assert pm.lookup_grace > timedelta(0)
    custom = PostmarkProvider({"retention_days": 7}, policy=LOOPBACK)
    assert custom.lookup_retention == timedelta(days=7)
    with pytest.raises(ProviderError, match="retention_days"):
        PostmarkProvider({"retention_days": 3}, policy=LOOPBACK)
