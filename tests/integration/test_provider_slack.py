"""Slack chat.postMessage over real HTTP on loopback against a fake speaking its wire
format: one test per row of the error table, the request as documented, verify."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.server import Answer
from tests.fakes.slack import TOKEN, FakeSlack, error
from tickwork.providers.base import (
    Absent,
    Ambiguous,
    Delivered,
    Found,
    Rejected,
    Transient,
    Unknown,
    lookup_of,
)
from tickwork.providers.slack import SlackProvider

PAYLOAD = {"channel": "C0123456", "text": "Standup in 5 minutes"}


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


def provider(fake: FakeSlack) -> SlackProvider:
    return SlackProvider({"api_url": fake.url}, timeout=2.0, policy=LOOPBACK)


def via(token: str = TOKEN):
    return a_via("slack", {"default_channel": "C999"}, {"bot_token": token})


def test_the_documented_request_and_its_ts(slack):
    action = an_action(payload=PAYLOAD)
    outcome = provider(slack).send(action, via())
    assert isinstance(outcome, Delivered)
    [sent] = slack.posts()
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    body = sent.json()
    assert (body["channel"], body["text"]) == ("C0123456", "Standup in 5 minutes")
    assert body["metadata"]["event_payload"] == {"tickwork_action_id": str(action.id)}
    assert outcome.provider_id is not None
    assert "." in outcome.provider_id


def test_the_connections_default_channel(slack):
    provider(slack).send(an_action(payload={"text": "hi"}), via())
    assert slack.posts()[0].json()["channel"] == "C999"


REJECTED = ["channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text",
            "too_many_attachments", "restricted_action", "invalid_blocks",
            "invalid_metadata_format", "cannot_reply_to_message", "duplicate_channel_not_found",
            "invalid_arguments"]  # fmt: skip
AUTH = ["invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
        "missing_scope", "no_permission", "ekm_access_denied"]  # fmt: skip


@pytest.mark.parametrize("code", REJECTED)
def test_rejections_keep_slacks_code(slack, code):
    slack.then("/chat.postMessage", error(code))
    outcome = provider(slack).send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, Rejected)
    assert outcome.code == code


@pytest.mark.parametrize("code", AUTH)
def test_token_problems_are_auth_failed(slack, code):
    slack.then("/chat.postMessage", error(code))
    outcome = provider(slack).send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, Rejected)
    assert outcome.code == "auth_failed"


@pytest.mark.parametrize(
    ("answer", "kind", "retry_after"),
    [
        (error("ratelimited", 429, {"retry-after": "30"}), Transient, 30.0),
        (error("ratelimited", 200, {"retry-after": "5"}), Transient, 5.0),
        (error("rate_limited"), Transient, None),
        (error("service_unavailable"), Transient, None),
        (error("fatal_error"), Ambiguous, None),
        (error("internal_error"), Ambiguous, None),
        (error("request_timeout"), Ambiguous, None),
        (Answer(500, "oops"), Ambiguous, None),
        (Answer(200, {"ok": True}), Ambiguous, None),  # no ts: not an answer we understand
        (error("something_new"), Rejected, None),
    ],
)  # fmt: skip
def test_error_table(slack, answer, kind, retry_after):
    slack.then("/chat.postMessage", answer)
    outcome = provider(slack).send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, kind), outcome
    if kind is Transient:
        assert isinstance(outcome, Transient)
        assert outcome.retry_after == retry_after
    if kind is Rejected:
        assert isinstance(outcome, Rejected)
        assert outcome.code == "provider_rejected"


def test_verify_calls_auth_test(slack):
    ok = provider(slack).verify(via())
    assert (ok.ok, ok.account) == (True, "Fake Team")
    bad = provider(slack).verify(via("xoxb-wrong-token-000"))
    assert not bad.ok
    assert "invalid_auth" in bad.message


# ------------------------------------------------------------------------------ lookup
# The fake keeps every posted message per channel and serves conversations.history and
# conversations.replies over them (newest first, cursor pages, metadata only when asked
# for), so found and absent come from what was really posted.


def test_lookup_finds_a_posted_message_by_its_metadata(slack):
    sl = provider(slack)
    action = an_action(payload=PAYLOAD)
    slack.lose_answers = 1  # posted, but the answer is a 500: the send is ambiguous
    assert isinstance(sl.send(action, via()), Ambiguous)
    found = sl.lookup(action, via())
    assert isinstance(found, Found), found
    assert found.provider_id == slack.channels["C0123456"][0]["ts"]
    [read] = slack.reads()
    assert read.path == "/conversations.history"
    assert read.headers["authorization"] == f"Bearer {TOKEN}"
    assert read.query["channel"] == ["C0123456"]
    assert read.query["include_all_metadata"] == ["true"]
    assert float(read.query["oldest"][0]) < action.publish_at.timestamp()


def test_lookup_of_a_message_never_posted_is_absent(slack):
    sl = provider(slack)
    sl.send(an_action(payload=PAYLOAD), via())  # another action's message is there
    assert isinstance(sl.lookup(an_action(payload=PAYLOAD), via()), Absent)


def test_lookup_reads_every_page_of_the_window(slack):
    # Given our message and, after it, more messages than fit on a page (15, as Slack caps
    # apps outside the Marketplace)
    sl = provider(slack)
    slack.page_cap = 15
    action = an_action(payload=PAYLOAD)
    sl.send(action, via())
    for _ in range(40):
        sl.send(an_action(payload=PAYLOAD), via())
    found = sl.lookup(action, via())
    assert isinstance(found, Found)
    reads = slack.reads()
    assert len(reads) == 3
    assert "cursor" not in reads[0].query
    assert reads[1].query["cursor"] != reads[2].query["cursor"]
    # And an absent answer too reads to the last page
    assert isinstance(sl.lookup(an_action(payload=PAYLOAD), via()), Absent)
    assert len(slack.reads()) == 6


def test_lookup_of_a_thread_reply_reads_the_thread(slack):
    sl = provider(slack)
    parent = an_action(payload=PAYLOAD)
    sl.send(parent, via())
    thread_ts = slack.channels["C0123456"][0]["ts"]
    reply = an_action(payload={**PAYLOAD, "thread_ts": thread_ts})
    sl.send(reply, via())
    assert isinstance(sl.lookup(reply, via()), Found)
    assert slack.reads()[-1].path == "/conversations.replies"
    assert slack.reads()[-1].query["ts"] == [thread_ts]
    assert isinstance(sl.lookup(an_action(payload=reply.payload), via()), Absent)


def test_lookup_gives_up_past_the_page_budget(slack):
    sl = provider(slack)
    slack.page_cap = 1
    for _ in range(12):
        sl.send(an_action(payload=PAYLOAD), via())
    result = sl.lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown)
    assert "pages" in result.reason


@pytest.mark.parametrize(
    "answer",
    [
        Answer(500, "<html>oops</html>"),
        error("ratelimited", 429, {"retry-after": "60"}),
        error("missing_scope"),
        error("channel_not_found"),
        Answer(200, "not json"),
        Answer(200, {"ok": True}),  # no messages
        Answer(200, {"ok": True, "messages": [], "has_more": True}),  # more, but no cursor
    ],
)
def test_lookup_that_cannot_tell_is_unknown(slack, answer):
    slack.then("/conversations.history", answer)
    result = provider(slack).lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown), result


def test_lookup_by_channel_name_or_with_bad_credentials_is_unknown_without_the_token(slack):
    sl = provider(slack)
    by_name = sl.lookup(an_action(payload={"channel": "#general", "text": "x"}), via())
    assert isinstance(by_name, Unknown)
    assert "id" in by_name.reason
    assert slack.reads() == []
    bad = sl.lookup(an_action(payload=PAYLOAD), via("xoxb-wrong-token-00000"))
    assert isinstance(bad, Unknown)
    assert "invalid_auth" in bad.reason
    assert "xoxb" not in bad.reason


def test_lookup_is_bounded_by_one_deadline_across_pages(slack):
    # Every page answers slowly but within the per-call timeout: the lookup as a whole
    # still ends within one deadline.
    slack.page_cap = 1
    fast = SlackProvider({"api_url": slack.url}, timeout=1.0, policy=LOOPBACK)
    for _ in range(5):
        fast.send(an_action(payload=PAYLOAD), via())
    page = {"ok": True, "messages": [], "has_more": True,
            "response_metadata": {"next_cursor": "bmV4dDo=1"}}  # fmt: skip
    slack.then("/conversations.history", *[Answer(200, page, delay=0.4) for _ in range(5)])
    started = time.monotonic()
    result = fast.lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown)
    assert time.monotonic() - started < 1.6
    assert isinstance(fast.lookup(an_action(payload=PAYLOAD), None), Unknown)


def test_lookup_windows():
    sl = SlackProvider({}, policy=LOOPBACK)
    assert lookup_of(sl) is sl
    assert sl.lookup_retention == timedelta(days=1)
    assert timedelta(0) < sl.lookup_grace < sl.lookup_retention
