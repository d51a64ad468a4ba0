"""/v1/connections and actions sent through them, over real HTTP against the local runtime,
with the providers pointed at fake servers on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of
from tests.fakes import LOOPBACK, OperatorLog
from tests.fakes.postmark import TOKEN as POSTMARK_TOKEN
from tests.fakes.postmark import FakePostmark
from tests.fakes.postmark import error as postmark_error
from tests.fakes.slack import TOKEN as SLACK_TOKEN
from tests.fakes.slack import FakeSlack
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FROM, FakeTwilio
from tests.fakes.twilio import error as twilio_error
from tests.fakes.webhook_server import SECRET, fake_webhook_server
from tests.waiting import wait_for
from tickwork.engine.tick import run_tick
from tickwork.platform.db import connect
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.slack import SlackProvider
from tickwork.providers.twilio import TwilioProvider

EMAIL = {"to": "ann@example.com", "subject": "Hello", "text": "Hi Ann"}
SMS = {"to": "+14155550100", "body": "Your table is ready"}


def at(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def raw(api: Api, method: str, path: str, client: Any = None, **kwargs: Any) -> httpx.Response:
    return (client or api.admin).http.request(method, path, **kwargs)


def postmark_connection(**overrides: Any) -> dict[str, Any]:
    body = {"name": "Email", "provider": "postmark",
            "settings": {"from": "News <news@example.com>"},
            "credentials": {"server_token": POSTMARK_TOKEN}}  # fmt: skip
    return body | overrides


def twilio_connection(**overrides: Any) -> dict[str, Any]:
    body = {"name": "SMS", "provider": "twilio",
            "settings": {"account_sid": ACCOUNT_SID, "from": FROM},
            "credentials": {"auth_token": AUTH_TOKEN}}  # fmt: skip
    return body | overrides


@pytest.fixture
def fakes(api: Api) -> Iterator[dict[str, Any]]:
    postmark, twilio, slack = FakePostmark(), FakeTwilio(), FakeSlack()
    registry = api.local.runtime.providers
    registry.register("email", PostmarkProvider({"api_url": postmark.url}, 2.0, LOOPBACK))
    registry.register("sms", TwilioProvider({"api_url": twilio.url}, 2.0, LOOPBACK))
    registry.register("slack", SlackProvider({"api_url": slack.url}, 2.0, LOOPBACK))
    yield {"postmark": postmark, "twilio": twilio, "slack": slack}
    for fake in (postmark, twilio, slack):
        fake.close()


def settle(api: Api, action_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """Tick (the fixture's tick is once a minute) until the row is terminal."""

    rt = api.local.runtime
    last: dict[str, Any] = {}

    def settled() -> dict[str, Any] | None:
        with connect(api.local.database_url) as conn:
            run_tick(conn, rt.queues, rt.settings)
        last.update(api.admin.call("GET", f"/v1/actions/{action_id}"))
        return dict(last) if last["status"] in ("published", "failed") else None

    return wait_for(settled, timeout, interval=0.2, message=lambda: f"not settled: {last}")


# ------------------------------------------------------------------------ the resource


def test_create_list_get_patch_delete_and_credentials_are_never_returned(api):
    created = raw(api, "POST", "/v1/connections", json=postmark_connection())
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["provider"] == "postmark"
    assert body["settings"] == {"from": "News <news@example.com>"}
    assert body["status"] == "active"
    assert "credentials" not in body
    listed = api.member.call("GET", "/v1/connections")
    assert [item["id"] for item in listed["items"]] == [body["id"]]
    assert api.member.call("GET", f"/v1/connections/{body['id']}")["name"] == "Email"
    patched = api.admin.call("PATCH", f"/v1/connections/{body['id']}",
                             json={"name": "Newsletter", "status": "disabled"})  # fmt: skip
    assert (patched["name"], patched["status"]) == ("Newsletter", "disabled")
    deleted = api.admin.call("DELETE", f"/v1/connections/{body['id']}")
    assert deleted["status"] == "deleted"
    assert raw(api, "GET", f"/v1/connections/{body['id']}").status_code == 404
    assert api.admin.call("GET", "/v1/connections")["items"] == []
    # Its credentials were erased from the store
    with connect(api.local.database_url) as conn:
        (ref,) = conn.execute("select secret_ref from connections").fetchone()  # type: ignore[misc]
    with pytest.raises(Exception, match="no credentials"):
        api.local.runtime.secrets.get(ref)


def test_members_read_admins_write(api):
    refused = raw(api, "POST", "/v1/connections", api.member, json=postmark_connection())
    assert refused.status_code == 403


def test_another_workspaces_connection_is_not_found(api):
    mine = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    for method, path in [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/verify")]:
        kwargs = {"json": {"name": "x"}} if method == "PATCH" else {}
        answer = raw(api, method, f"/v1/connections/{mine['id']}{path}", api.outsider, **kwargs)
        assert answer.status_code == 404, (method, path, answer.text)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (postmark_connection(provider="fax"), "provider"),
        (postmark_connection(settings={}), "settings.from"),
        (postmark_connection(settings={"from": "not an address"}), "settings.from"),
        (postmark_connection(credentials={}), "credentials.server_token"),
        (twilio_connection(settings={"account_sid": "nope", "from": FROM}),
         "settings.account_sid"),
        (twilio_connection(settings={"account_sid": ACCOUNT_SID}), "settings"),
        ({"name": "Hook", "provider": "webhook", "settings": {"url": "http://169.254.169.254/"},
          "credentials": {"signing_secret": SECRET}}, "settings.url"),
        ({"name": "Hook", "provider": "webhook", "settings": {"url": "gopher://example.com/"},
          "credentials": {"signing_secret": SECRET}}, "settings.url"),
        ({"name": "Hook", "provider": "webhook", "settings": {"url": "http://10.1.2.3/"},
          "credentials": {"signing_secret": SECRET}}, "settings.url"),
        ({"name": "Hook", "provider": "webhook", "settings": {"url": "https://example.com/"},
          "credentials": {"signing_secret": "plain"}}, "credentials.signing_secret"),
        ({"name": "Hook", "provider": "webhook", "settings": {"url": "http://93.184.215.14/",
          "status_url": "http://169.254.169.254/status/{webhook_id}"},
          "credentials": {"signing_secret": SECRET}}, "settings.status_url"),
        ({"name": "Hook", "provider": "webhook", "settings": {"url": "http://93.184.215.14/",
          "status_url": "http://93.184.215.14/status"},
          "credentials": {"signing_secret": SECRET}}, "settings.status_url"),
    ],
)  # fmt: skip
def test_bad_connections_are_422_naming_the_field(api, body, field):
    answer = raw(api, "POST", "/v1/connections", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field
    # the refused value is not echoed back
    for secret in json.dumps(body.get("credentials", {})).split('"')[3:4]:
        assert secret not in answer.text
    assert api.admin.call("GET", "/v1/connections")["items"] == []


@pytest.mark.parametrize(
    ("provider", "settings", "credentials", "field"),
    [
        ("webhook", {"url": "http://169.254.169.254/latest/meta-data/"},
         {"signing_secret": SECRET}, "settings.url"),
        ("webhook", {"url": "http://10.1.2.3/hook"}, {"signing_secret": SECRET}, "settings.url"),
        ("webhook", {"url": "http://127.0.0.2:8080/"}, {"signing_secret": SECRET},
         "settings.url"),
        ("webhook", {"url": "gopher://example.com/"}, {"signing_secret": SECRET}, "settings.url"),
        ("webhook", {"url": "http://93.184.215.14/",
                     "status_url": "http://[::1]/status/{webhook_id}"},
         {"signing_secret": SECRET}, "settings.status_url"),
        ("mastodon", {"instance_url": "http://192.168.1.10"},
         {"access_token": "a" * 20}, "settings.instance_url"),
    ],
)  # fmt: skip
def test_unsafe_urls_are_refused_with_the_code_the_readme_names(
    api, provider, settings, credentials, field
):
    # Given URLs that may not be called, on create
    body = {"name": "Unsafe", "provider": provider, "settings": settings,
            "credentials": credentials}  # fmt: skip
    error = error_of(raw(api, "POST", "/v1/connections", json=body), 422)
    # Then the answer is the docs' unsafe_url, naming the setting
    assert (error["code"], error["details"]["field"]) == ("unsafe_url", field)
    assert api.admin.call("GET", "/v1/connections")["items"] == []
    # and the same on a change of settings
    if provider == "webhook":
        safe = api.admin.call("POST", "/v1/connections", json=body | {"settings": {
            "url": "http://93.184.215.14/"}})  # fmt: skip
        patched = raw(api, "PATCH", f"/v1/connections/{safe['id']}", json={"settings": settings})
        assert error_of(patched, 422)["code"] == "unsafe_url"


def test_a_duplicate_name_is_a_conflict(api):
    api.admin.call("POST", "/v1/connections", json=postmark_connection())
    assert raw(api, "POST", "/v1/connections", json=postmark_connection()).status_code == 409


def test_verify_says_plainly_what_is_wrong(api, fakes):
    good = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    ok = api.member.call("POST", f"/v1/connections/{good['id']}/verify")
    assert (ok["ok"], ok["account"]) == (True, "Fake server")
    assert ok["connection"]["verify_ok"] is True
    bad = api.admin.call("POST", "/v1/connections", json=postmark_connection(
        name="Wrong", credentials={"server_token": "wrong-token-1234"}))  # fmt: skip
    refused = api.member.call("POST", f"/v1/connections/{bad['id']}/verify")
    assert refused["ok"] is False
    assert "server token" in refused["message"]
    slack = api.admin.call("POST", "/v1/connections", json={
        "name": "Bot", "provider": "slack", "credentials": {"bot_token": SLACK_TOKEN}})  # fmt: skip
    assert api.member.call("POST", f"/v1/connections/{slack['id']}/verify")["ok"] is True
    sms = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    assert api.member.call("POST", f"/v1/connections/{sms['id']}/verify")["ok"] is True


# --------------------------------------------------------------- actions and connections


def schedule(api: Api, client: Any = None, **body: Any) -> httpx.Response:
    request = {"target_key": "primary", "publish_at": at(3600)} | body
    return raw(api, "POST", "/v1/actions", client, json=request)


@pytest.mark.parametrize(
    ("action_type", "payload", "field"),
    [
        ("email", {"subject": "x", "text": "y"}, "payload.to"),
        ("email", {"to": "not-an-address", "subject": "x", "text": "y"}, "payload.to"),
        ("email", {"to": "a@example.com", "text": "y"}, "payload.subject"),
        ("email", {"to": "a@example.com", "subject": "x"}, "payload"),
        ("email", {"to": ["a@example.com"] * 51, "subject": "x", "text": "y"}, "payload"),
        ("email", EMAIL | {"colour": "red"}, "payload.colour"),
        ("sms", {"to": "0155 555", "body": "x"}, "payload.to"),
        ("sms", {"to": "+14155550100"}, "payload.body"),
        ("sms", {"to": "+14155550100", "body": "x" * 1601}, "payload.body"),
        ("slack", {"channel": "C1"}, "payload"),
        ("slack", {"text": "x" * 40001}, "payload.text"),
        ("slack", {"text": "x", "thread_ts": "yesterday"}, "payload.thread_ts"),
    ],
)  # fmt: skip
def test_payloads_are_checked_at_schedule_time(api, action_type, payload, field):
    provider = {"email": "postmark", "sms": "twilio", "slack": "slack"}
    spec = {"email": postmark_connection(), "sms": twilio_connection(),
            "slack": {"name": "Bot", "provider": "slack",
                              "credentials": {"bot_token": SLACK_TOKEN}}}[action_type]  # fmt: skip
    assert spec["provider"] == provider[action_type]
    connection = api.admin.call("POST", "/v1/connections", json=spec)
    answer = schedule(api, action_type=action_type, payload=payload,
                      connection_id=connection["id"])  # fmt: skip
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field


def test_connection_rules_at_schedule_time(api):
    email = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    sms = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    theirs = api.outsider.call("POST", "/v1/connections", json=postmark_connection())
    # none named where one is required
    answer = schedule(api, action_type="email", payload=EMAIL)
    assert (answer.status_code, answer.json()["error"]["details"]["field"]) == (
        422,
        "connection_id",
    )
    # another workspace's: not found
    answer = schedule(api, action_type="email", payload=EMAIL, connection_id=theirs["id"])
    assert answer.status_code == 404
    # another provider's
    answer = schedule(api, action_type="email", payload=EMAIL, connection_id=sms["id"])
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "connection_unusable")
    # disabled, then deleted
    api.admin.call("PATCH", f"/v1/connections/{email['id']}", json={"status": "disabled"})
    answer = schedule(api, action_type="email", payload=EMAIL, connection_id=email["id"])
    assert answer.status_code == 422
    assert "disabled" in answer.json()["error"]["message"]
    api.admin.call("DELETE", f"/v1/connections/{email['id']}")
    answer = schedule(api, action_type="email", payload=EMAIL, connection_id=email["id"])
    assert answer.status_code == 422
    assert "deleted" in answer.json()["error"]["message"]
    # a provider without connections
    answer = schedule(api, action_type="log", payload={}, connection_id=sms["id"])
    assert (answer.status_code, answer.json()["error"]["details"]["field"]) == (
        422,
        "connection_id",
    )


def test_email_sms_and_slack_are_sent_through_the_workspaces_connections(api, fakes):
    email = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    sms = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    bot = api.admin.call("POST", "/v1/connections", json={
        "name": "Bot", "provider": "slack", "credentials": {"bot_token": SLACK_TOKEN}})  # fmt: skip
    ids = [
        schedule(api, action_type="email", payload=EMAIL, connection_id=email["id"],
                 publish_at=at(0.5)).json()["id"],
        schedule(api, action_type="sms", payload=SMS, connection_id=sms["id"],
                 publish_at=at(0.5)).json()["id"],
        schedule(api, action_type="slack", payload={"channel": "C1", "text": "hi"},
                 connection_id=bot["id"], publish_at=at(0.5)).json()["id"],
    ]  # fmt: skip
    rows = [settle(api, action_id) for action_id in ids]
    assert [row["status"] for row in rows] == ["published"] * 3
    assert all(row["provider_id"] for row in rows)
    assert rows[0]["connection_id"] == email["id"]
    assert len(fakes["postmark"].emails()) == 1
    assert len(fakes["twilio"].messages()) == 1
    assert len(fakes["slack"].posts()) == 1


def test_a_connection_removed_before_firing_fails_the_row_unsent(api, fakes):
    email = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    sms = api.admin.call("POST", "/v1/connections", json=twilio_connection())
    first = schedule(api, action_type="email", payload=EMAIL, connection_id=email["id"],
                     publish_at=at(1)).json()  # fmt: skip
    second = schedule(api, action_type="sms", payload=SMS, connection_id=sms["id"],
                      publish_at=at(1)).json()  # fmt: skip
    api.admin.call("DELETE", f"/v1/connections/{email['id']}")
    api.admin.call("PATCH", f"/v1/connections/{sms['id']}", json={"status": "disabled"})
    removed, disabled = settle(api, first["id"]), settle(api, second["id"])
    assert (removed["status"], removed["error_code"]) == ("failed", "connection_removed")
    assert (disabled["status"], disabled["error_code"]) == ("failed", "connection_disabled")
    assert fakes["postmark"].emails() == []
    assert fakes["twilio"].messages() == []


def test_a_webhook_connection_delivers_signed_to_the_tenants_url(api):
    with fake_webhook_server() as hook:
        connection = api.admin.call("POST", "/v1/connections", json={
            "name": "My hook", "provider": "webhook", "settings": {"url": hook.url},
            "credentials": {"signing_secret": SECRET}})  # fmt: skip
        assert "credentials" not in connection
        created = schedule(api, action_type="webhook", target_key="primary", payload={"a": 1},
                           connection_id=connection["id"], publish_at=at(0.5)).json()  # fmt: skip
        row = settle(api, created["id"])
        assert row["status"] == "published"
        [request] = hook.requests
        assert request.verified
        assert request.body["data"]["id"] == created["id"]


# --------------------------------------------------------------------------- secrets


def test_credentials_appear_in_no_response_no_log_and_no_last_error(api, fakes):
    secrets = [POSTMARK_TOKEN, AUTH_TOKEN, SLACK_TOKEN]
    seen: list[str] = []
    with OperatorLog() as log:
        email = raw(api, "POST", "/v1/connections", json=postmark_connection())
        sms = raw(api, "POST", "/v1/connections", json=twilio_connection())
        slack = {"name": "Bot", "provider": "slack", "credentials": {"bot_token": SLACK_TOKEN}}
        bot = raw(api, "POST", "/v1/connections", json=slack)
        seen += [email.text, sms.text, bot.text]
        ids = {r.json()["id"]: r for r in (email, sms, bot)}
        for connection_id in ids:
            seen.append(raw(api, "GET", f"/v1/connections/{connection_id}").text)
            seen.append(raw(api, "POST", f"/v1/connections/{connection_id}/verify").text)
            seen.append(raw(api, "PATCH", f"/v1/connections/{connection_id}",
                            json={"name": f"renamed {connection_id[:4]}"}).text)  # fmt: skip
        seen.append(raw(api, "GET", "/v1/connections").text)
        # Providers that fail, echoing what they were sent (a hostile or buggy receiver)
        echo = postmark_error(300)
        echo.body = {"ErrorCode": 300, "Message": f"Invalid request with token {POSTMARK_TOKEN}"}
        fakes["postmark"].then("/email", echo)
        leak = twilio_error(21211)
        leak.body = {"code": 21211, "message": f"bad number; auth was {ACCOUNT_SID}:{AUTH_TOKEN}"}
        fakes["twilio"].then(f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json", leak)
        action_ids = [
            schedule(api, action_type="email", payload=EMAIL,
                     connection_id=email.json()["id"], publish_at=at(0.3)).json()["id"],
            schedule(api, action_type="sms", payload=SMS,
                     connection_id=sms.json()["id"], publish_at=at(0.3)).json()["id"],
        ]  # fmt: skip
        rows = [settle(api, action_id) for action_id in action_ids]
        assert [row["error_code"] for row in rows] == ["invalid_request", "invalid_number"]
        seen += [row["last_error"] or "" for row in rows]
        seen += [raw(api, "GET", f"/v1/actions/{a}").text for a in action_ids]
    seen.append(log.text)
    with connect(api.local.database_url) as conn:
        seen += [str(r) for r in conn.execute("select * from connections").fetchall()]
        seen += [str(r) for r in conn.execute("select * from scheduled_actions").fetchall()]
    assert "provider call did not succeed" in log.text
    for text in seen:
        for secret in secrets:
            assert secret not in text


def test_a_recurring_schedule_sends_its_occurrences_through_its_connection(api, fakes):
    email = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    theirs = api.outsider.call("POST", "/v1/connections", json=postmark_connection())
    body = {"action_type": "email", "target_key": "digest", "rrule": "FREQ=DAILY",
            "payload": EMAIL, "timezone": "UTC"}  # fmt: skip
    # Without a connection, or with another workspace's, it is refused
    missing = raw(api, "POST", "/v1/recurring", json=body)
    assert (missing.status_code, missing.json()["error"]["details"]["field"]) == (
        422, "connection_id")  # fmt: skip
    assert raw(api, "POST", "/v1/recurring",
               json=body | {"connection_id": theirs["id"]}).status_code == 404  # fmt: skip
    schedule = api.admin.call("POST", "/v1/recurring", json=body | {"connection_id": email["id"]})
    assert schedule["connection_id"] == email["id"]
    # Every occurrence, and a run-now, names the connection and is sent through it
    ran = api.admin.call("POST", f"/v1/recurring/{schedule['id']}/run-now")
    assert ran["connection_id"] == email["id"]
    assert settle(api, ran["id"])["status"] == "published"
    with connect(api.local.database_url) as conn:
        rows = conn.execute(
            "select distinct connection_id from scheduled_actions where recurring_schedule_id = %s",
            (schedule["id"],),
        ).fetchall()
    assert [str(r[0]) for r in rows] == [email["id"]]
    assert len(fakes["postmark"].emails()) == 1


def test_a_connections_rate_limits_are_checked_and_shown_back(api):
    body = {"name": "Limited", "provider": "slack",
            "settings": {"rate_limits": [{"limit": 1, "per": "second"}]},
            "credentials": {"bot_token": SLACK_TOKEN}}  # fmt: skip
    made = api.admin.call("POST", "/v1/connections", json=body)
    assert made["settings"]["rate_limits"] == [{"limit": 1, "per": "second"}]
    bad = body | {"name": "Bad", "settings": {"rate_limits": [{"limit": 1, "per": "day"}]}}
    refused = error_of(api.admin.http.post("/v1/connections", json=bad), 422)
    assert refused["details"]["field"] == "settings.rate_limits.0.per"
