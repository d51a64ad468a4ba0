"""Twilio Programmable Messaging over real HTTP on loopback against a fake speaking its wire
format: one test per row of the error table, the request as documented, verify, and the
lookup over the Messages list (found, absent, unknown; paging)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.server import Answer
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FROM, FakeTwilio, error, message
from tickwork.platform.config import Settings
from tickwork.providers import FACTORIES
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


def test_with_the_apis_public_url_each_sms_asks_for_status_callbacks(twilio):
    # TICKWORK_PUBLIC_API_URL reaches the provider through the registry's factory
    settings = Settings(public_api_url="https://api.example.com/", outbound_allowed_networks={
        "127.0.0.0/8"})  # fmt: skip
    sender = FACTORIES["twilio"]({"api_url": twilio.url}, settings)
    connection = via()
    sender.send(an_action(payload=PAYLOAD), connection)
    [sent] = twilio.messages()
    assert sent.form()["StatusCallback"] == f"https://api.example.com/v1/callbacks/{connection.id}"
    # Without it, nothing is asked
    provider(twilio).send(an_action(payload=PAYLOAD), via())
    assert "StatusCallback" not in twilio.messages()[1].form()


# ------------------------------------------------------------------------------ lookup

TO = PAYLOAD["to"]
BODY = PAYLOAD["body"]


def test_lookup_finds_the_sms_sent_with_its_sid(twilio):
    # Given an SMS sent (Twilio answered with its sid)
    sms = provider(twilio)
    action = an_action(payload=PAYLOAD)
    sent = sms.send(action, via())
    assert isinstance(sent, Delivered)
    # When it is looked up
    found = sms.lookup(action, via())
    # Then Twilio's list has it under that sid, asked by recipient and sender
    assert isinstance(found, Found), found
    assert found.provider_id == sent.provider_id
    [listing] = twilio.lists()
    assert {k: v[0] for k, v in listing.query.items()} == {
        "To": TO, "From": FROM, "PageSize": "20",
    }  # fmt: skip


def test_lookup_reads_every_page_and_finds_ours_on_a_later_one(twilio):
    # Given our SMS followed by 45 others to the same number (three pages of 20)
    sms = provider(twilio)
    action = an_action(payload=PAYLOAD)
    sent = sms.send(action, via())
    twilio.keep(*(message(TO, f"other {n}", created=datetime.now(UTC) + timedelta(hours=1))
                  for n in range(45)))  # fmt: skip
    # When it is looked up, Then it is found after following next_page_uri to the end
    found = sms.lookup(action, via())
    assert isinstance(found, Found), found
    assert isinstance(sent, Delivered)
    assert found.provider_id == sent.provider_id
    assert len(twilio.lists()) == 3
    assert "PageToken" in twilio.lists()[1].query


def test_lookup_of_an_sms_never_sent_is_absent(twilio):
    # Given other messages to the number, outside the attempt's minutes or inbound
    old = datetime.now(UTC) - timedelta(hours=2)
    twilio.keep(
        message(TO, BODY, created=old),  # yesterday's reminder, same text
        message(FROM, BODY, sender=TO, direction="inbound"),
        message("+14155550199", BODY),
    )  # another recipient
    result = provider(twilio).lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Absent), result


def test_lookup_with_a_messaging_service_matches_the_service(twilio):
    service = "MG" + "ab" * 16
    sms = provider(twilio)
    action = an_action(payload=PAYLOAD)
    sms.send(action, via(messaging_service_sid=service))
    assert isinstance(sms.lookup(action, via(messaging_service_sid=service)), Found)
    assert "From" not in twilio.lists()[0].query
    # The same text through another service in the same minutes is not ours
    other = an_action(payload=PAYLOAD)
    assert isinstance(sms.lookup(other, via(messaging_service_sid="MG" + "cd" * 16)), Absent)


@pytest.mark.parametrize(
    "kept",
    [
        # Two copies of the text in the attempt's minutes: which is ours cannot be told
        lambda: [message(TO, BODY), message(TO, BODY)],
        # A body redacted by the account's settings may be ours
        lambda: [message(TO, "")],
    ],
    ids=["two-copies", "redacted"],
)
def test_lookup_that_cannot_tell_the_message_apart_is_unknown(twilio, kept):
    # The messages are made when the test runs: their time must fall in the attempt's minutes
    twilio.keep(*kept())
    result = provider(twilio).lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown), result


def test_a_body_twilio_may_rewrite_makes_another_text_in_the_window_unknown(twilio):
    # Given a text with a link (link shortening rewrites it) and one message in the window
    # whose body differs
    payload = {"to": TO, "body": "Your table: https://example.com/t/42"}
    twilio.keep(message(TO, "Your table: https://twil.io/abc"))
    result = provider(twilio).lookup(an_action(payload=payload), via())
    assert isinstance(result, Unknown), result
    # A plain ASCII text cannot have been rewritten: another text is not ours
    assert isinstance(provider(twilio).lookup(an_action(payload=PAYLOAD), via()), Absent)


@pytest.mark.parametrize(
    "answer",
    [
        Answer(500, {"code": 20500, "message": "Internal Server Error"}),
        Answer(503, "unavailable"),
        error(20429, 429),
        Answer(200, {"messages": "not a list"}),
        Answer(200, "<html>not json</html>"),
    ],
)
def test_lookup_that_gets_no_listing_is_unknown(twilio, answer):
    twilio.then(MESSAGES, answer)
    result = provider(twilio).lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown), result


def test_lookup_stops_at_a_next_page_outside_the_list_and_at_the_page_budget(twilio):
    twilio.then(MESSAGES, Answer(200, {"messages": [], "next_page_uri": "/elsewhere?x=1"}))
    result = provider(twilio).lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown)
    assert "next page" in result.reason
    endless = {"messages": [], "next_page_uri": f"{MESSAGES}?To=x&Page=1"}
    twilio.then(MESSAGES, *[Answer(200, endless)] * 30)
    result = provider(twilio).lookup(an_action(payload=PAYLOAD), via())
    assert isinstance(result, Unknown)
    assert "more than 25 pages" in result.reason


def test_lookup_refused_credentials_are_unknown_without_the_token(twilio):
    result = provider(twilio).lookup(an_action(payload=PAYLOAD), via("wrong-token-xyz"))
    assert isinstance(result, Unknown)
    assert "401" in result.reason
    assert "wrong-token" not in result.reason


def test_lookup_without_a_connection_or_with_a_bad_payload_is_unknown(twilio):
    assert isinstance(provider(twilio).lookup(an_action(payload=PAYLOAD), None), Unknown)
    assert isinstance(provider(twilio).lookup(an_action(payload={"to": 5}), via()), Unknown)


def test_twilio_offers_a_lookup_with_a_grace_and_a_retention():
    sms = TwilioProvider({}, policy=LOOPBACK)
    assert lookup_of(sms) is sms
    assert timedelta(0) < sms.lookup_grace < sms.lookup_retention
