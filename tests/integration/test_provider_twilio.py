"""Twilio Programmable Messaging over real HTTP on loopback against a fake speaking its wire
format: one test per row of the error table, the request as documented, verify."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.server import Answer
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FROM, FakeTwilio, error
from tickwork.providers.base import Ambiguous, Delivered, Rejected, Transient
from tickwork.providers.twilio import TwilioProvider

PAYLOAD = {"to": "+14155550100", "body": "Your table is ready"}
MESSAGES = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"


@pytest.fixture
def twilio() -> Iterator[FakeTwilio]:
    fake = FakeTwilio()
    yield fake
    fake.close()


def provider(fake: FakeTwilio) -> TwilioProvider:
    return TwilioProvider({"api_url": fake.url}, timeout=2.0, policy=LOOPBACK)


def via(token: str = AUTH_TOKEN, **settings: str):
    return a_via("twilio", {"account_sid": ACCOUNT_SID, "from": FROM, **settings},
                 {"auth_token": token})  # fmt: skip


def test_the_documented_request_and_its_sid(twilio):
    outcome = provider(twilio).send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, Delivered)
    assert outcome.provider_id is not None
    assert outcome.provider_id.startswith("SM")
    [sent] = twilio.messages()
    assert sent.headers["content-type"].startswith("application/x-www-form-urlencoded")
    expected = base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
    assert sent.headers["authorization"] == f"Basic {expected}"
    assert sent.form() == {"To": "+14155550100", "From": FROM, "Body": "Your table is ready"}


def test_a_messaging_service_replaces_from(twilio):
    service = "MG" + "ab" * 16
    provider(twilio).send(an_action(payload=PAYLOAD), via(messaging_service_sid=service))
    [sent] = twilio.messages()
    assert sent.form()["MessagingServiceSid"] == service


@pytest.mark.parametrize(
    ("answer", "kind", "code"),
    [
        (error(21211), Rejected, "invalid_number"),
        (error(21614), Rejected, "invalid_number"),
        (error(21610), Rejected, "recipient_unsubscribed"),
        (error(21408), Rejected, "region_not_enabled"),
        (error(21612), Rejected, "region_not_enabled"),
        (error(21212), Rejected, "invalid_sender"),
        (error(21606), Rejected, "invalid_sender"),
        (error(21659), Rejected, "invalid_sender"),
        (error(21602), Rejected, "invalid_request"),
        (error(21617), Rejected, "invalid_request"),
        (error(20003, 401), Rejected, "auth_failed"),
        (error(20404, 404), Rejected, "not_found"),
        (error(21999), Rejected, "provider_rejected"),
        (error(20429, 429, {"retry-after": "3"}), Transient, None),
        (Answer(500, {"code": 20500, "message": "Internal Server Error"}), Ambiguous, None),
        (Answer(503, "unavailable"), Ambiguous, None),
    ],
)  # fmt: skip
def test_error_table(twilio, answer, kind, code):
    twilio.then(MESSAGES, answer)
    outcome = provider(twilio).send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, kind), outcome
    if code is not None:
        assert isinstance(outcome, Rejected)
        assert outcome.code == code
    if kind is Transient:
        assert isinstance(outcome, Transient)
        assert outcome.retry_after == 3.0


def test_verify_fetches_the_account(twilio):
    ok = provider(twilio).verify(via())
    assert (ok.ok, ok.account) == (True, "Fake account")
    bad = provider(twilio).verify(via("wrong-token-xyz"))
    assert not bad.ok
    assert "refused the credentials" in bad.message
