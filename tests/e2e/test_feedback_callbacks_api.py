"""Delivery feedback over real HTTP: actions sent through fake providers on loopback, then
the providers' documented callback bodies posted to the local API's public endpoint
(POST /v1/callbacks/{connection_id}), signed and forged, duplicated and out of order; the
ledger, the action's `delivery`, the suppression list and the connection's counts follow."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.e2e.conftest import Api, running_api
from tests.e2e.test_connections_api import (
    EMAIL,
    SMS,
    at,
    postmark_connection,
    schedule,
    settle,
    twilio_connection,
)
from tests.fakes import LOOPBACK
from tests.fakes.event_receiver import event_receiver
from tests.fakes.postmark import FakePostmark
from tests.fakes.ses import FakeSes
from tests.fakes.sns import TOPIC, FakeSns, ses_event
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FakeTwilio
from tests.fakes.webhook_server import SECRET
from tests.waiting import wait_for
from tickwork.api import handle
from tickwork.engine.tick import run_tick
from tickwork.local.handlers import LocalContext
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.db import connect
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.twilio import TwilioProvider

# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def sns() -> Iterator[FakeSns]:
    fake = FakeSns()
    yield fake
    fake.close()


@pytest.fixture
def ses() -> Iterator[FakeSes]:
    fake = FakeSes()
    yield fake
    fake.close()


@pytest.fixture
def api(database_url: str, tmp_path: Path, sns: FakeSns, ses: FakeSes) -> Iterator[Api]:
    settings = Settings(
        action_types={
            "email": ActionTypeConfig(provider="postmark"),
            "sms": ActionTypeConfig(provider="twilio"),
            "ses_email": ActionTypeConfig(provider="ses", options={"endpoint_url": ses.url}),
            "slack": ActionTypeConfig(provider="slack"),
        },
        sns_certificate_origin=sns.url,
    )
    with running_api(database_url, tmp_path, settings) as running:
        yield running


@pytest.fixture
def fakes(api: Api) -> Iterator[dict[str, Any]]:
    postmark, twilio = FakePostmark(), FakeTwilio()
    registry = api.local.runtime.providers
    registry.register("email", PostmarkProvider({"api_url": postmark.url}, 2.0, LOOPBACK))
    registry.register("sms", TwilioProvider({"api_url": twilio.url}, 2.0, LOOPBACK))
    yield {"postmark": postmark, "twilio": twilio}
    postmark.close()
    twilio.close()


def sent(api: Api, action_type: str, payload: dict[str, Any], connection: str) -> dict[str, Any]:
    created = schedule(api, action_type=action_type, payload=payload, connection_id=connection,
                       publish_at=at(0.3))  # fmt: skip
    assert created.status_code == 201, created.text
    row = settle(api, created.json()["id"])
    assert row["status"] == "published", row
    return row


def action(api: Api, action_id: str) -> dict[str, Any]:
    return api.admin.call("GET", f"/v1/actions/{action_id}")


def counts(api: Api, connection_id: str) -> dict[str, int]:
    found: dict[str, int] = api.admin.call("GET", f"/v1/connections/{connection_id}")[
        "callbacks"]["counts"]  # fmt: skip
    return {k: v for k, v in found.items() if v}


def suppressions(api: Api) -> list[tuple[str, str, str, str]]:
    with connect(api.local.database_url) as conn:
        rows = conn.execute(
            "select channel, address, reason, source from suppressions order by address"
        ).fetchall()
    return [tuple(row) for row in rows]  # type: ignore[misc]


def attempts_table(api: Api) -> list[tuple[Any, ...]]:
    with connect(api.local.database_url) as conn:
        return conn.execute(
            "select action_id, attempt, delivery_status, delivery_bounce, delivery_at,"
            " delivery_detail from action_attempts order by action_id, attempt"
        ).fetchall()


# --------------------------------------------------------------------------- Postmark


def postmark_delivery(message_id: str, recipient: str = "ann@example.com") -> dict[str, Any]:
    return {"RecordType": "Delivery", "ServerID": 23, "MessageStream": "outbound",
            "MessageID": message_id, "Recipient": recipient, "Tag": "welcome-email",
            "DeliveredAt": "2026-12-05T08:01:02.9070259Z",
            "Details": "Test delivery webhook details", "Metadata": {}}  # fmt: skip


def postmark_bounce(message_id: str, kind: str = "HardBounce", ident: int = 4323372036854775807,
                    email: str = "ann@example.com") -> dict[str, Any]:  # fmt: skip
    return {"RecordType": "Bounce", "MessageStream": "outbound", "ID": ident, "Type": kind,
            "TypeCode": 1, "Name": "Hard bounce", "Tag": "Test", "MessageID": message_id,
            "Metadata": {}, "ServerID": 23,
            "Description": "The server was unable to deliver your message (ex: unknown user,"
                           " mailbox not found).",
            "Details": "Test bounce details", "Email": email, "From": "news@example.com",
            "BouncedAt": "2026-12-05T08:03:04Z", "DumpAvailable": True, "Inactive": True,
            "CanActivate": True, "Subject": "Hello",
            "Content": "<Full dump of bounce>"}  # fmt: skip


def postmark_complaint(message_id: str, ident: int = 42) -> dict[str, Any]:
    return {"RecordType": "SpamComplaint", "MessageStream": "outbound", "ID": ident,
            "Type": "SpamComplaint", "TypeCode": 512, "Name": "Spam complaint", "Tag": "Test",
            "MessageID": message_id, "Metadata": {}, "ServerID": 1234, "Description": "",
            "Details": "Test spam complaint details", "Email": "ann@example.com",
            "From": "news@example.com", "BouncedAt": "2026-12-05T09:00:00Z",
            "DumpAvailable": True, "Inactive": True, "CanActivate": False,
            "Subject": "Hello", "Content": "<Abuse report dump>"}  # fmt: skip


def test_postmark_webhooks_move_the_delivery_forward_only_and_suppress_a_hard_bounce(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    made = api.admin.call("POST", f"/v1/connections/{connection['id']}/callback-secret")
    assert made["url"].startswith(f"http://tickwork:{made['secret']}@127.0.0.1:")
    row = sent(api, "email", EMAIL, connection["id"])
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    auth = ("tickwork", made["secret"])

    def post(body: dict[str, Any], credentials: Any = auth) -> httpx.Response:
        return httpx.post(url, json=body, auth=credentials, timeout=10)

    # A delivery: the action stays published and gains its delivery, at Postmark's time
    assert post(postmark_delivery(row["provider_id"])).status_code == 200
    found = action(api, row["id"])
    assert found["status"] == "published"
    assert found["delivery"]["status"] == "delivered"
    assert found["delivery"]["at"].startswith("2026-12-05T08:01:02.907")
    assert found["attempts"][-1]["delivery"]["status"] == "delivered"
    # The same webhook again (Postmark retries): a duplicate, nothing changes
    before = attempts_table(api)
    assert post(postmark_delivery(row["provider_id"])).status_code == 200
    assert attempts_table(api) == before
    # A forged one (no or wrong credentials): 401, nothing changes, counted
    for credentials in (None, ("tickwork", "guessed-secret"), ("other", made["secret"])):
        forged = post(postmark_bounce(row["provider_id"], ident=7), credentials)
        assert forged.status_code == 401, forged.text
        assert forged.json()["error"]["code"] == "callback_unverified"
    assert attempts_table(api) == before
    assert suppressions(api) == []
    # A hard bounce beats the delivery, and suppresses the address
    assert post(postmark_bounce(row["provider_id"])).status_code == 200
    delivery = action(api, row["id"])["delivery"]
    assert (delivery["status"], delivery["bounce"]) == ("bounced", "hard")
    assert "HardBounce" in delivery["detail"]
    assert suppressions(api) == [
        ("email", "ann@example.com", "hard_bounce", f"postmark:bounce:{connection['id']}")
    ]
    # A late delivery for another recipient of the message, and a soft bounce: stale
    assert post(postmark_delivery(row["provider_id"], "bob@example.com")).status_code == 200
    assert post(postmark_bounce(row["provider_id"], "SoftBounce", ident=8)).status_code == 200
    assert action(api, row["id"])["delivery"]["bounce"] == "hard"
    # A complaint ranks above everything
    assert post(postmark_complaint(row["provider_id"])).status_code == 200
    assert action(api, row["id"])["delivery"]["status"] == "complained"
    # An unknown message id, and an event Tickwork does not track
    assert post(postmark_delivery("00000000-0000-0000-0000-000000000000")).status_code == 200
    assert post({"RecordType": "Open", "MessageID": row["provider_id"]}).status_code == 200
    assert counts(api, connection["id"]) == {
        "applied": 3,
        "duplicate": 1,
        "unverified": 3,
        "stale": 2,
        "unmatched": 1,
        "ignored": 1,
    }


def test_malformed_and_misdirected_callbacks(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    made = api.admin.call("POST", f"/v1/connections/{connection['id']}/callback-secret")
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    auth = ("tickwork", made["secret"])
    bad = httpx.post(url, content=b"{not json", auth=auth)
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "bad_request")
    missing = httpx.post(url, json={"RecordType": "Bounce"}, auth=auth)
    assert (missing.status_code, missing.json()["error"]["code"]) == (400, "bad_request")
    nobody = httpx.post(f"{api.url}/v1/callbacks/5d0c8a4e-0000-4000-8000-000000000000", json={})
    assert (nobody.status_code, nobody.json()["error"]["code"]) == (404, "not_found")
    assert httpx.get(url).status_code == 405
    # A provider that sends nothing back says so, on the endpoint and in the connection
    slack = api.admin.call("POST", "/v1/connections", json={
        "name": "Bot", "provider": "slack",
        "credentials": {"bot_token": "xoxb-1-2-abcdefgh"}})  # fmt: skip
    refused = httpx.post(f"{api.url}/v1/callbacks/{slack['id']}", json={})
    assert (refused.status_code, refused.json()["error"]["code"]) == (404, "callbacks_unsupported")
    assert slack["callbacks"]["supported"] is False
    assert slack["callbacks"]["url"] is None
    # Members cannot make a callback secret; the secret is never shown again
    denied = api.member.http.post(f"/v1/connections/{connection['id']}/callback-secret")
    assert denied.status_code == 403
    shown = api.admin.call("GET", f"/v1/connections/{connection['id']}")
    assert made["secret"] not in json.dumps(shown)
    assert shown["callbacks"]["url"] == url


# ------------------------------------------------------------------------------ Twilio


def twilio_signed(url: str, form: dict[str, str], token: str = AUTH_TOKEN) -> dict[str, str]:
    text = url + "".join(k + form[k] for k in sorted(form))
    digest = hmac.new(token.encode(), text.encode(), hashlib.sha1).digest()
    return {"X-Twilio-Signature": base64.b64encode(digest).decode(),
            "Content-Type": "application/x-www-form-urlencoded"}  # fmt: skip


def twilio_status(sid: str, status: str, **extra: str) -> dict[str, str]:
    return {"MessageSid": sid, "SmsSid": sid, "MessageStatus": status, "SmsStatus": status,
            "AccountSid": ACCOUNT_SID, "From": "+15005550006", "To": SMS["to"],
            "ApiVersion": "2010-04-01", **extra}  # fmt: skip


def test_twilio_status_callbacks_are_verified_by_signature_and_ranked(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    row = sent(api, "sms", SMS, connection["id"])
    sid = row["provider_id"]
    url = f"{api.url}/v1/callbacks/{connection['id']}"

    def post(form: dict[str, str], token: str = AUTH_TOKEN, sign_url: str = url) -> httpx.Response:
        return httpx.post(
            url, content=urlencode(form), headers=twilio_signed(sign_url, form, token)
        )

    # Out of order: delivered first, then the late `sent`: still delivered
    assert post(twilio_status(sid, "delivered", RawDlrDoneDate="2612050805")).status_code == 200
    assert post(twilio_status(sid, "sent")).status_code == 200
    delivery = action(api, row["id"])["delivery"]
    assert delivery["status"] == "delivered"
    assert delivery["at"].startswith("2026-12-05T08:05")
    before = attempts_table(api)
    # Forged: signed with another token, over another URL, or with a body changed after signing
    form = twilio_status(sid, "undelivered", ErrorCode="30003")
    assert post(form, token="not-the-auth-token").status_code == 401
    assert post(form, sign_url=url + "?x=1").status_code == 401
    tampered = httpx.post(url, content=urlencode({**form, "ErrorCode": "30005"}),
                          headers=twilio_signed(url, form))  # fmt: skip
    assert (tampered.status_code, tampered.json()["error"]["code"]) == (401, "callback_unverified")
    unsigned = httpx.post(url, data=form)
    assert unsigned.status_code == 401
    assert attempts_table(api) == before
    # Duplicated: the same delivered callback again
    assert post(twilio_status(sid, "delivered")).status_code == 200
    assert attempts_table(api) == before
    assert counts(api, connection["id"]) == {
        "applied": 1,
        "stale": 1,
        "unverified": 4,
        "duplicate": 1,
    }


def test_a_twilio_stop_reply_suppresses_the_number(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    inbound = {"MessageSid": "SM" + "1" * 32, "SmsSid": "SM" + "1" * 32,
               "AccountSid": ACCOUNT_SID, "From": "+1 415 555 0100", "To": "+15005550006",
               "Body": " stop ", "NumMedia": "0", "OptOutType": "STOP"}  # fmt: skip
    answer = httpx.post(url, content=urlencode(inbound), headers=twilio_signed(url, inbound))
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/xml")
    assert "<Response>" in answer.text
    assert suppressions(api) == [
        ("sms", "+14155550100", "stop_reply", f"twilio:stop:{connection['id']}")
    ]
    # Another reply is no opt-out; a forged STOP changes nothing
    hello = {**inbound, "MessageSid": "SM" + "2" * 32, "From": "+14155550101", "Body": "hi",
             "OptOutType": ""}  # fmt: skip
    assert httpx.post(url, content=urlencode(hello),
                      headers=twilio_signed(url, hello)).status_code == 200  # fmt: skip
    forged = {**inbound, "MessageSid": "SM" + "3" * 32, "From": "+14155550102"}
    assert httpx.post(url, content=urlencode(forged),
                      headers=twilio_signed(url, forged, "wrong")).status_code == 401  # fmt: skip
    assert len(suppressions(api)) == 1
    assert counts(api, connection["id"]) == {"applied": 1, "ignored": 1, "unverified": 1}


# ------------------------------------------------------------------------------ SES/SNS


def ses_connection(topic: str | None = TOPIC) -> dict[str, Any]:
    settings = {"region": "us-east-1", "from": "news@example.com"}
    if topic:
        settings["callback_topic_arn"] = topic
    return {"name": "SES", "provider": "ses", "settings": settings,
            "credentials": {"access_key_id": "AKIAABCDEFGHIJKLMNOP",
                            "secret_access_key": "abcdefghijklmnopqrstuvwxyz01234567"}}  # fmt: skip


def test_ses_events_through_sns_are_verified_confirmed_and_ranked(api, sns):
    connection = api.admin.call("POST", "/v1/connections", json=ses_connection())
    row = sent(api, "ses_email", EMAIL, connection["id"])
    url = f"{api.url}/v1/callbacks/{connection['id']}"

    def post(message: dict[str, Any]) -> httpx.Response:
        # SNS posts its JSON as text/plain
        return httpx.post(url, content=json.dumps(message),
                          headers={"Content-Type": "text/plain; charset=UTF-8",
                                   "x-amz-sns-message-type": message["Type"]})  # fmt: skip

    # The subscription is confirmed by GETting its SubscribeURL
    assert post(sns.subscription_confirmation()).status_code == 200
    assert len(sns.confirmations()) == 1
    # Reordered: the complaint first, then the delivery (SignatureVersion 2): complained
    complaint = sns.notification(ses_event("Complaint", row["provider_id"], complaint={
        "complainedRecipients": [{"emailAddress": "Ann@Example.com"}],
        "timestamp": "2026-12-05T08:10:00.000Z", "feedbackId": "0100-1",
        "complaintFeedbackType": "abuse"}))  # fmt: skip
    assert post(complaint).status_code == 200
    delivered = sns.notification(ses_event("Delivery", row["provider_id"], delivery={
        "timestamp": "2026-12-05T08:00:05.000Z", "processingTimeMillis": 500,
        "recipients": ["ann@example.com"], "smtpResponse": "250 ok"}), version=2)  # fmt: skip
    assert post(delivered).status_code == 200
    found = action(api, row["id"])
    assert found["delivery"]["status"] == "complained"
    assert found["delivery"]["at"].startswith("2026-12-05T08:10:00")
    assert suppressions(api) == [
        ("email", "ann@example.com", "complaint", f"ses:complaint:{connection['id']}")
    ]
    before = attempts_table(api)
    # Duplicated (SNS redelivers the same MessageId)
    assert post(complaint).status_code == 200
    # Forged: signed with another key, a field changed after signing, from another topic,
    # a certificate from anywhere but SNS, older than a replay can be told by
    other_key = FakeSns()
    try:
        bounce = ses_event("Bounce", row["provider_id"], bounce={
            "bounceType": "Permanent", "bounceSubType": "General", "timestamp":
            "2026-12-05T08:20:00Z",
            "bouncedRecipients": [{"emailAddress": "ann@example.com"}]})  # fmt: skip
        forged = sns.sign({**sns.notification(bounce)}, key=other_key.key)
    finally:
        other_key.close()
    tampered = {**sns.notification(bounce), "Message": json.dumps(bounce | {"x": 1})}
    elsewhere = sns.notification(bounce, topic="arn:aws:sns:us-east-1:999999999999:evil")
    foreign_cert = {**sns.notification(bounce), "SigningCertURL": "https://example.com/x.pem"}
    unsigned = {k: v for k, v in sns.notification(bounce).items()
                if k not in ("Signature", "SignatureVersion", "SigningCertURL")}  # fmt: skip
    too_old = sns.sign(unsigned | {"Timestamp": "2020-01-01T00:00:00.000Z"})
    for message in (forged, tampered, elsewhere, foreign_cert, too_old):
        answer = post(message)
        assert (answer.status_code, answer.json()["error"]["code"]) == (401, "callback_unverified")
    assert attempts_table(api) == before
    # A permanent bounce ranks below the complaint: stale (the address is suppressed already)
    assert post(sns.notification(bounce)).status_code == 200
    assert action(api, row["id"])["delivery"]["status"] == "complained"
    assert len(suppressions(api)) == 1
    assert counts(api, connection["id"]) == {
        "applied": 1,
        "stale": 2,
        "duplicate": 1,
        "unverified": 5,
    }


def test_an_ses_connection_without_a_topic_takes_no_event(api, sns):
    connection = api.admin.call("POST", "/v1/connections", json=ses_connection(topic=None))
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    answer = httpx.post(url, content=json.dumps(sns.subscription_confirmation()))
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "callback_unverified")
    assert "callback_topic_arn" in answer.json()["error"]["message"]
    assert sns.confirmations() == []


def test_a_twilio_callback_as_api_gateway_hands_it_over(api, fakes):
    # In AWS the body may come base64-encoded, and the URL Twilio called is the public one
    # (https, the API's host): the signature is checked over that URL.
    connection = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    row = sent(api, "sms", SMS, connection["id"])
    path = f"/v1/callbacks/{connection['id']}"
    form = twilio_status(row["provider_id"], "delivered")
    # The public URL: the configured one (the local runtime sets its own), else the host's
    base = api.local.runtime.settings.public_api_url or "https://api.example.com"
    signed = twilio_signed(f"{base}{path}", form)
    event = {
        "version": "2.0", "rawPath": path, "rawQueryString": "",
        "headers": {"host": "api.example.com", "x-forwarded-proto": "https",
                    "x-twilio-signature": signed["X-Twilio-Signature"],
                    "content-type": "application/x-www-form-urlencoded"},
        "requestContext": {"http": {"method": "POST", "path": path}},
        "body": base64.b64encode(urlencode(form).encode()).decode(), "isBase64Encoded": True,
    }  # fmt: skip
    answer = handle(event, LocalContext("api", 30))
    assert answer["statusCode"] == 200, answer
    assert action(api, row["id"])["delivery"]["status"] == "delivered"
    # Signed for another URL: refused
    forged = twilio_signed(f"https://evil.example.com{path}", form)["X-Twilio-Signature"]
    wrong = {**event, "headers": {**event["headers"], "x-twilio-signature": forged}}
    assert handle(wrong, LocalContext("api", 30))["statusCode"] == 401


def test_concurrent_duplicates_apply_once_and_racing_states_end_at_the_highest(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    made = api.admin.call("POST", f"/v1/connections/{connection['id']}/callback-secret")
    row = sent(api, "email", EMAIL, connection["id"])
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    auth = ("tickwork", made["secret"])
    bodies = [postmark_bounce(row["provider_id"])] * 8 + [
        postmark_delivery(row["provider_id"], f"r{i}@example.com") for i in range(8)]  # fmt: skip
    with httpx.Client(auth=auth, timeout=30) as client, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda body: client.post(url, json=body), bodies))
    assert [a.status_code for a in answers] == [200] * 16
    delivery = action(api, row["id"])["delivery"]
    assert (delivery["status"], delivery["bounce"]) == ("bounced", "hard")
    assert len(suppressions(api)) == 1
    found = counts(api, connection["id"])
    assert found["duplicate"] == 7
    assert found["applied"] + found.get("stale", 0) == 9


def test_why_tells_what_the_provider_said_later(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    made = api.admin.call("POST", f"/v1/connections/{connection['id']}/callback-secret")
    row = sent(api, "email", EMAIL, connection["id"])
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    httpx.post(url, json=postmark_bounce(row["provider_id"]), auth=("tickwork", made["secret"]))
    why = api.admin.call("GET", f"/v1/actions/{row['id']}/why")
    [step] = [s for s in why["steps"] if s["code"] == "delivery"]
    assert step["text"].startswith("The provider later said it got it back (a hard bounce)")
    assert step["details"]["bounce"] == "hard"
    assert step["at"].startswith("2026-12-05T08:03:04")


# ------------------------------------------- feedback, then the next message is held


def ended(api: Api, action_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """Tick until the row is terminal, cancelled included (a held row ends cancelled)."""

    rt = api.local.runtime
    last: dict[str, Any] = {}

    def terminal() -> dict[str, Any] | None:
        with connect(api.local.database_url) as conn:
            run_tick(conn, rt.queues, rt.settings)
        last.update(action(api, action_id))
        return dict(last) if last["status"] in ("published", "failed", "cancelled") else None

    return wait_for(terminal, timeout, interval=0.2, message=lambda: f"not ended: {last}")


def test_after_a_postmark_hard_bounce_the_next_email_to_the_address_is_not_sent(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    made = api.admin.call("POST", f"/v1/connections/{connection['id']}/callback-secret")
    first = sent(api, "email", EMAIL, connection["id"])
    assert len(fakes["postmark"].emails()) == 1
    bounce = httpx.post(f"{api.url}/v1/callbacks/{connection['id']}",
                        json=postmark_bounce(first["provider_id"]),
                        auth=("tickwork", made["secret"]), timeout=10)  # fmt: skip
    assert bounce.status_code == 200, bounce.text
    # The same address, spelled with a capital and a display name: still the same address
    second = schedule(api, action_type="email", connection_id=connection["id"], publish_at=at(0.3),
                      payload={**EMAIL, "to": "Ann <Ann@Example.com>"})  # fmt: skip
    assert second.status_code == 201, second.text
    held = ended(api, second.json()["id"])
    assert (held["status"], held["error_code"]) == ("cancelled", "suppressed")
    assert "ann@example.com" not in json.dumps(held)
    assert len(fakes["postmark"].emails()) == 1
    # Another address goes out as before
    other = sent(api, "email", {**EMAIL, "to": "bob@example.com"}, connection["id"])
    assert other["status"] == "published"
    assert len(fakes["postmark"].emails()) == 2


def test_after_a_twilio_stop_reply_the_next_sms_to_the_number_is_not_sent(api, fakes):
    connection = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    sent(api, "sms", SMS, connection["id"])
    calls = len(fakes["twilio"].messages())
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    stop = {"MessageSid": "SM" + "4" * 32, "SmsSid": "SM" + "4" * 32, "AccountSid": ACCOUNT_SID,
            "From": SMS["to"], "To": "+15005550006", "Body": "STOP", "NumMedia": "0",
            "OptOutType": "STOP"}  # fmt: skip
    answer = httpx.post(url, content=urlencode(stop), headers=twilio_signed(url, stop))
    assert answer.status_code == 200, answer.text
    second = schedule(api, action_type="sms", connection_id=connection["id"], publish_at=at(0.3),
                      payload={**SMS, "body": "Your table is still ready"})  # fmt: skip
    assert second.status_code == 201, second.text
    held = ended(api, second.json()["id"])
    assert (held["status"], held["error_code"]) == ("cancelled", "suppressed")
    assert len(fakes["twilio"].messages()) == calls


def test_deliveries_and_bounces_reach_the_tenants_endpoint_as_outcome_events(api, fakes):
    with event_receiver() as receiver:
        endpoint = api.admin.call(
            "POST",
            "/v1/event-endpoints",
            json={"url": receiver.url, "event_types": ["action.delivered", "action.bounced"]},
        )
        receiver.secret = endpoint["secret"]
        connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
        made = api.admin.call("POST", f"/v1/connections/{connection['id']}/callback-secret")
        row = sent(api, "email", EMAIL, connection["id"])
        url = f"{api.url}/v1/callbacks/{connection['id']}"
        auth = ("tickwork", made["secret"])
        for body in (postmark_delivery(row["provider_id"]), postmark_delivery(row["provider_id"]),
                     postmark_bounce(row["provider_id"])):  # fmt: skip
            assert httpx.post(url, json=body, auth=auth, timeout=10).status_code == 200
        rt = api.local.runtime

        def both() -> list[Any] | None:
            with connect(api.local.database_url) as conn:
                run_tick(conn, rt.queues, rt.settings)
            events = receiver.accepted()
            return events if len(events) >= 2 else None

        events = wait_for(both, 20.0, message=lambda: f"received {receiver.received}")
        # One of each (the duplicate delivery made none), in order, signed, for this action
        assert [e.event["type"] for e in events] == ["action.delivered", "action.bounced"]
        assert all(e.verified for e in events)
        assert {e.event["data"]["id"] for e in events} == {row["id"]}
        assert events[1].event["data"]["delivery"]["bounce"] == "hard"


# ------------------------------------------------- hostile bodies on the public route


DEEP = "[" * 1000 + "]" * 1000


def refused_as(answer: httpx.Response, status: int, code: str) -> str:
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    return str(answer.json()["error"]["message"])


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert "unhandled error in a callback" not in caplog.text


def test_hostile_bodies_to_an_ses_connection_are_4xx_without_credentials(api, sns, caplog):
    # Given an SES connection: its callbacks are read before anything can be checked
    connection = api.admin.call("POST", "/v1/connections", json=ses_connection())
    url = f"{api.url}/v1/callbacks/{connection['id']}"

    def post(body: str) -> httpx.Response:
        return httpx.post(url, content=body.encode(), timeout=10,
                          headers={"Content-Type": "text/plain; charset=UTF-8"})  # fmt: skip

    # When a stranger posts 1,000 levels of nesting, as an array or inside an object
    for body in (DEEP, '{"Type": ' + DEEP + "}", '{"a":' * 1000 + "1" + "}" * 1000):
        # Then it is a 400 that says so, never a 500
        assert "nests deeper than 64 levels" in refused_as(post(body), 400, "bad_request")
    # A NUL or a lone surrogate in any string, a key included: 400
    for text in ('{"Type": "Notification\\u0000"}', '{"Type": "\\ud800"}', '{"\\u0000": 1}'):
        assert "no provider sends" in refused_as(post(text), 400, "bad_request")
    # A message with no signature at all is unverified (401), as the docs say, not malformed
    unsigned = {k: v for k, v in sns.subscription_confirmation().items()
                if k not in ("Signature", "SignatureVersion", "SigningCertURL")}  # fmt: skip
    assert "not signed" in refused_as(post(json.dumps(unsigned)), 401, "callback_unverified")
    # A signature that is not even ASCII, or a certificate on an S3 bucket named sns: 401
    weird = {**sns.subscription_confirmation(), "Signature": "é" * 8}
    assert refused_as(post(json.dumps(weird)), 401, "callback_unverified")
    pem = "/SimpleNotificationService-0a.pem"
    for bucket in ("sns.s3.amazonaws.com", "sns.s3-website-us-east-1.amazonaws.com"):
        message = sns.subscription_confirmation() | {"SigningCertURL": f"https://{bucket}{pem}"}
        assert "SNS's certificates" in refused_as(post(json.dumps(message)), 401,
                                                  "callback_unverified")  # fmt: skip
    # And nothing was confirmed or recorded; no traceback was logged
    assert sns.confirmations() == []
    assert counts(api, connection["id"]) == {"unverified": 4}
    no_traceback(caplog)


def test_hostile_bodies_with_valid_postmark_credentials_are_400_and_change_nothing(
    api, fakes, caplog
):
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    made = api.admin.call("POST", f"/v1/connections/{connection['id']}/callback-secret")
    row = sent(api, "email", EMAIL, connection["id"])
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    auth = ("tickwork", made["secret"])
    before = attempts_table(api)
    good = json.dumps(postmark_bounce(row["provider_id"]))
    assert good.startswith('{"RecordType": "Bounce"')
    hostile = [
        # a NUL in a string Tickwork stores, or in one it does not read
        '{"RecordType":"Delivery","ID":424242,"MessageID":"x\\u0000"}',
        good.replace('"Tag": "Test"', '"Tag": "T\\u0000"'),
        # a lone surrogate
        '{"RecordType":"Delivery","ID":424242,"MessageID":"x\\udc00"}',
        good.replace('"Metadata": {}', '"Metadata": {"k\\ud800": 1}'),
        # 1,000 levels of nesting
        good.replace('"Metadata": {}', '"Metadata": ' + DEEP),
        DEEP,
    ]
    for body in hostile:
        answer = httpx.post(url, content=body.encode(), auth=auth, timeout=10,
                            headers={"Content-Type": "application/json"})  # fmt: skip
        refused_as(answer, 400, "bad_request")
    # Credentials that are not ASCII are not ours: 401, not a 500
    garbled = httpx.post(
        url,
        content=good.encode(),
        timeout=10,
        headers={"Authorization": "Basic é".encode("latin-1"), "Content-Type": "application/json"},
    )
    refused_as(garbled, 401, "callback_unverified")
    assert attempts_table(api) == before
    assert suppressions(api) == []
    # The real bounce still lands, even with a time that has no UTC form (read as now)
    assert '"BouncedAt": "2026-12-05T08:03:04Z"' in good
    odd_time = good.replace("2026-12-05T08:03:04Z", "0001-01-01T00:00:00+05:00")
    assert httpx.post(url, content=odd_time.encode(), auth=auth, timeout=10).status_code == 200
    assert action(api, row["id"])["delivery"]["bounce"] == "hard"
    no_traceback(caplog)
    assert "callback refused: malformed" in caplog.text


def test_a_signed_twilio_callback_with_a_nul_is_400_and_changes_nothing(api, fakes, caplog):
    connection = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    row = sent(api, "sms", SMS, connection["id"])
    url = f"{api.url}/v1/callbacks/{connection['id']}"
    before = attempts_table(api)
    for form in (
        {"MessageSid": "SM\x00x", "MessageStatus": "delivered"},
        twilio_status(row["provider_id"], "delivered", ErrorCode="3\x000"),
        {"MessageSid": "SM" + "5" * 32, "Body": "STOP\x00", "From": SMS["to"]},
    ):
        body = urlencode(form)
        assert "%00" in body
        answer = httpx.post(url, content=body, headers=twilio_signed(url, form), timeout=10)
        assert "no provider sends" in refused_as(answer, 400, "bad_request")
    assert attempts_table(api) == before
    assert suppressions(api) == []
    assert counts(api, connection["id"]) == {}
    no_traceback(caplog)


def test_a_callback_secret_is_made_only_for_a_connection_that_uses_one(api, fakes):
    webhook = api.admin.call("POST", "/v1/connections", json={
        "name": "Hook", "provider": "webhook", "settings": {"url": "http://93.184.215.14/"},
        "credentials": {"signing_secret": SECRET}})  # fmt: skip
    for body, says in (
        (twilio_connection(), "X-Twilio-Signature"),
        (ses_connection(), "SNS signs"),
        (None, "sends no status callbacks"),
    ):
        connection = api.admin.call("POST", "/v1/connections", json=body) if body else webhook
        answer = api.admin.http.post(f"/v1/connections/{connection['id']}/callback-secret")
        message = refused_as(answer, 422, "callback_secret_unused")
        assert says in message
        assert "only Postmark" in message
        assert answer.json()["error"]["details"]["provider"] == connection["provider"]
    # A Postmark connection gets one
    postmark = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    made = api.admin.call("POST", f"/v1/connections/{postmark['id']}/callback-secret")
    assert made["username"] == "tickwork"
