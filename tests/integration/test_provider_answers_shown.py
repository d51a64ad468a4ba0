"""Of a provider API's answer, only its documented error code (when it is shaped like one)
and its message field (sanitized) are shown and logged: over real HTTP on loopback against
each provider's fake, answering with undocumented or hostile content in those fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes import LOOPBACK, OperatorLog, a_via, an_action
from tests.fakes.bluesky import APP_PASSWORD, HANDLE, FakeBluesky
from tests.fakes.postmark import TOKEN as POSTMARK_TOKEN
from tests.fakes.postmark import FakePostmark
from tests.fakes.server import Answer, FakeServer
from tests.fakes.slack import TOKEN as SLACK_TOKEN
from tests.fakes.slack import FakeSlack
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FROM, MESSAGES, FakeTwilio
from tickwork.providers.base import Provider, Rejected, Via
from tickwork.providers.bluesky import BlueskyProvider
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.slack import SlackProvider
from tickwork.providers.twilio import TwilioProvider

LEAK = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
EMAIL = {"to": "ann@example.com", "subject": "Hello", "text": "Hi"}


def postmark(fake: FakeServer) -> tuple[Provider, Via, dict[str, Any]]:
    via = a_via("postmark", {"from": "news@example.com"}, {"server_token": POSTMARK_TOKEN})
    return PostmarkProvider({"api_url": fake.url}, 2.0, LOOPBACK), via, EMAIL


def twilio(fake: FakeServer) -> tuple[Provider, Via, dict[str, Any]]:
    via = a_via("twilio", {"account_sid": ACCOUNT_SID, "from": FROM}, {"auth_token": AUTH_TOKEN})
    payload = {"to": "+14155550100", "body": "Hi"}
    return TwilioProvider({"api_url": fake.url}, 2.0, LOOPBACK), via, payload


def slack(fake: FakeServer) -> tuple[Provider, Via, dict[str, Any]]:
    via = a_via("slack", {"default_channel": "C999"}, {"bot_token": SLACK_TOKEN})
    return SlackProvider({"api_url": fake.url}, 2.0, LOOPBACK), via, {"text": "Hi"}


def bluesky(fake: FakeServer) -> tuple[Provider, Via, dict[str, Any]]:
    via = a_via("bluesky", {"handle": HANDLE, "service_url": fake.url},
                {"app_password": APP_PASSWORD})  # fmt: skip
    return BlueskyProvider({}, 2.0, LOOPBACK), via, {"text": "Hi"}


Setup = Callable[[FakeServer], tuple[Provider, Via, dict[str, Any]]]
CASES: list[tuple[type[FakeServer], Setup, str, Answer, str]] = [
    # A code field holding something other than a code
    (FakePostmark, postmark, "/email",
     Answer(422, {"ErrorCode": f"300 {LEAK}", "Message": "Invalid"}), "Postmark HTTP 422: Invalid"),
    (FakeTwilio, twilio, MESSAGES,
     Answer(400, {"code": LEAK + " x", "message": "bad"}), "Twilio HTTP 400: bad"),
    (FakeSlack, slack, "/chat.postMessage",
     Answer(200, {"ok": False, "error": f"invalid_auth {LEAK}"}),
     "Slack error not a Slack error code"),
    (FakeBluesky, bluesky, "/xrpc/com.atproto.repo.createRecord",
     Answer(400, {"error": f"InvalidRequest {LEAK}", "message": "too long"}),
     "Bluesky HTTP 400: too long"),
    # Content outside the documented fields
    (FakePostmark, postmark, "/email",
     Answer(422, {"ErrorCode": 300, "Message": "Invalid", "Debug": LEAK}),
     "Postmark HTTP 422 ErrorCode 300: Invalid"),
    (FakeTwilio, twilio, MESSAGES,
     Answer(400, {"code": 21211, "message": "bad number", "more_info": LEAK}),
     "Twilio HTTP 400 code 21211: bad number"),
]  # fmt: skip


@pytest.mark.parametrize(("fake_class", "setup", "path", "answer", "shown"), CASES)
def test_only_the_documented_fields_of_an_answer_are_shown(fake_class, setup, path, answer, shown):
    fake = fake_class()
    try:
        provider, via, payload = setup(fake)
        fake.then(path, answer)
        with OperatorLog() as log:
            outcome = provider.send(an_action(payload=payload), via)
    finally:
        fake.close()
    assert isinstance(outcome, Rejected), outcome
    assert outcome.message == shown
    assert LEAK not in log.text
    assert "provider call did not succeed" in log.text
