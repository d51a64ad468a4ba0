"""Slack chat.postMessage over real HTTP on loopback against a fake speaking its wire
format: one test per row of the error table, the request as documented, verify."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.server import Answer
from tests.fakes.slack import TOKEN, FakeSlack, error
from tickwork.providers.base import Ambiguous, Delivered, Rejected, Transient
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
