"""What a tenant's URL carries stays hidden, and where it points is checked: through the API
and the real dispatcher, against the fake webhook receiver on loopback."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of
from tests.e2e.test_connections_api import at, raw, schedule, settle
from tests.fakes import OperatorLog
from tests.fakes.webhook_server import SECRET, FakeWebhookServer, Reply, fake_webhook_server
from tests.integration.test_unsafe_addresses import WRAPPED_URLS
from tickwork.platform.db import connect

# Parts of the URL a tenant's admin gives that carry secrets: userinfo, token-like path
# segments, query values, the fragment.
URL_SECRETS = ["hookuser", "Pa55w0rdXyz", "T024BE7LD", "B01ABCDEF", "x0Ab1Cd2Ef3Gh4Ij5Kl6Mn7",
               "QueryTok3nValue", "S1gVal42zz", "Abc123Secret", "frag-Secret99",
               "St4tusTok3n"]  # fmt: skip
# Receivers' answers: JSON, HTML and plain text, each with secret-looking or internal text
# the old excerpt kept, and one echoing the URL's query back.
BODIES = [
    (400, json.dumps({"error": "denied", "debug": {"dsn_user": "svc_billing",
                      "stripe": "sk_live_4eC39HqLyjWDarjtT1zdp7dc"}})),
    (403, "<html><body><h1>Forbidden</h1><p>PaymentsController#create at db-7.internal"
          "</p></body></html>"),
    (410, "gone: customer 4111111111111111 closed; you sent key Abc123Secret sig S1gVal42zz"),
    (422, "invalid; echo: ?token=QueryTok3nValue&key=Abc123Secret"),
]  # fmt: skip
BODY_SECRETS = ["svc_billing", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "PaymentsController",
                "db-7.internal", "4111111111111111", "<h1>", "echo:"]  # fmt: skip


def secret_url(hook: FakeWebhookServer) -> str:
    port = hook.url.split(":")[2].split("/")[0]
    return (f"http://hookuser:Pa55w0rdXyz@127.0.0.1:{port}/hook/T024BE7LD/B01ABCDEF/"
            "x0Ab1Cd2Ef3Gh4Ij5Kl6Mn7?token=QueryTok3nValue&sig=S1gVal42zz&key=Abc123Secret"
            "#frag-Secret99")  # fmt: skip


def secret_status_url(hook: FakeWebhookServer) -> str:
    return hook.status_url + "?access=St4tusTok3n"


def hook_connection(hook: FakeWebhookServer, name: str = "Hook") -> dict[str, Any]:
    return {"name": name, "provider": "webhook",
            "settings": {"url": secret_url(hook), "status_url": secret_status_url(hook)},
            "credentials": {"signing_secret": SECRET}}  # fmt: skip


def assert_hidden(text: str, secrets: list[str], where: str) -> None:
    shown = [secret for secret in secrets if secret in text]
    assert not shown, f"{where} shows {shown}: {text[:2000]}"


# ------------------------------------------------------------------- 3: URL secrets


def test_receiver_bodies_and_url_secrets_reach_no_member_and_no_log(api: Api):
    with fake_webhook_server() as hook, OperatorLog() as log:
        # Given a webhook connection whose URL carries secrets, and a receiver that refuses
        # each delivery with a body holding secret-looking and internal text
        hook.then(*(Reply(status, {"content-type": "text/plain"}, body) for status, body in BODIES))
        created = api.admin.call("POST", "/v1/connections", json=hook_connection(hook))
        # When actions are sent through it by the dispatcher
        ids = [
            schedule(api, action_type="webhook", payload={"n": n},
                     connection_id=created["id"], publish_at=at(0.3)).json()["id"]
            for n in range(len(BODIES))
        ]  # fmt: skip
        rows = [settle(api, action_id) for action_id in ids]
        # Then each failed, saying the status and the masked URL only
        connections_seen = api.member.call("GET", "/v1/connections")
        one_seen = api.member.call("GET", f"/v1/connections/{created['id']}")
        admin_seen = api.admin.call("GET", "/v1/connections")
        details = [api.member.call("GET", f"/v1/actions/{action_id}") for action_id in ids]
    assert len(hook.requests) == len(BODIES)
    assert [row["error_code"] for row in rows] == ["provider_rejected"] * len(BODIES)
    port = hook.url.split(":")[2].split("/")[0]
    where = f"http://***@127.0.0.1:{port}/hook/***/***/***?token=***&sig=***&key=***#***"
    # (the receiver answers in the order the calls arrive, which rows due together need not keep)
    statuses = sorted(detail["last_error"].split()[1] for detail in details)
    assert statuses == [str(status) for status, _ in BODIES]
    [masked] = [detail for detail in details if detail["last_error"].startswith("HTTP 400 ")]
    assert masked["last_error"] == f"HTTP 400 Bad Request from {where}: refused by the receiver"
    [attempt] = masked["attempts"]
    assert attempt["excerpt"] == masked["last_error"]
    # ... to members (the action, its attempts, the connection) and in the operator's log
    for detail in details:
        assert_hidden(json.dumps(detail), URL_SECRETS + BODY_SECRETS, "GET /v1/actions/{id}")
    for seen in (connections_seen, one_seen, admin_seen, created):
        assert_hidden(json.dumps(seen), URL_SECRETS, "the connection")
    assert one_seen["settings"] == {
        "url": where,
        "status_url": f"http://127.0.0.1:{port}/status/{{webhook_id}}?access=***",
    }
    assert "provider call did not succeed" in log.text
    assert_hidden(log.text, URL_SECRETS + BODY_SECRETS, "the operator's log")
    # ... and no receiver body is stored anywhere
    with connect(api.local.database_url) as conn:
        stored = json.dumps([
            conn.execute("select last_error from scheduled_actions").fetchall(),
            conn.execute("select excerpt, resolution_detail from action_attempts").fetchall(),
            conn.execute("select reason from action_changes").fetchall(),
        ], default=str)  # fmt: skip
    assert_hidden(stored, URL_SECRETS + BODY_SECRETS, "the database")


def test_a_masked_url_sent_back_keeps_the_stored_one_and_another_is_refused(api: Api):
    with fake_webhook_server() as hook:
        created = api.admin.call("POST", "/v1/connections", json=hook_connection(hook))
        shown = api.admin.call("GET", f"/v1/connections/{created['id']}")["settings"]
        # A form sending back what it read (and a new name) keeps the URLs as stored
        patched = api.admin.call("PATCH", f"/v1/connections/{created['id']}",
                                 json={"name": "Renamed", "settings": shown})  # fmt: skip
        assert patched["settings"] == shown
        action = schedule(api, action_type="webhook", payload={"a": 1},
                          connection_id=created["id"], publish_at=at(0.3)).json()  # fmt: skip
        assert settle(api, action["id"])["status"] == "published"
        [request] = hook.requests
        assert request.verified
        # A masked URL that is not this connection's is refused, naming the setting
        other = shown | {"url": shown["url"].replace("/hook/", "/elsewhere/")}
        refused = raw(api, "PATCH", f"/v1/connections/{created['id']}",
                      json={"settings": other})  # fmt: skip
        error = error_of(refused, 422)
        assert error["details"]["field"] == "settings.url"
        copied = hook_connection(hook, "Copy") | {"settings": shown}
        assert error_of(raw(api, "POST", "/v1/connections", json=copied), 422)
    with connect(api.local.database_url) as conn:
        (stored,) = conn.execute(  # type: ignore[misc]
            "select settings from connections where id = %s", (created["id"],)
        ).fetchone()
    assert stored["url"] == secret_url(hook)


# ----------------------------------------------------------- 4: addresses in disguise


def test_connection_urls_wrapping_private_addresses_are_refused_with_unsafe_url(api: Api):
    with fake_webhook_server() as hook:
        good = api.admin.call("POST", "/v1/connections", json={
            "name": "Good", "provider": "webhook", "settings": {"url": hook.url},
            "credentials": {"signing_secret": SECRET}})  # fmt: skip
        accepted = []
        for n, url in enumerate(WRAPPED_URLS):
            body = {"name": f"Hook {n}", "provider": "webhook", "settings": {"url": url},
                    "credentials": {"signing_secret": SECRET}}  # fmt: skip
            created = raw(api, "POST", "/v1/connections", json=body)
            patched = raw(api, "PATCH", f"/v1/connections/{good['id']}",
                          json={"settings": {"url": url}})  # fmt: skip
            mastodon = raw(api, "POST", "/v1/connections", json={
                "name": f"Social {n}", "provider": "mastodon",
                "settings": {"instance_url": url.removesuffix("/hook")},
                "credentials": {"access_token": "a-token-of-ten"}})  # fmt: skip
            for answer, field in ((created, "settings.url"), (patched, "settings.url"),
                                  (mastodon, "settings.instance_url")):  # fmt: skip
                if answer.status_code != 422:
                    accepted.append((url, field, answer.status_code))
                    continue
                error = answer.json()["error"]
                assert (error["code"], error["details"]["field"]) == ("unsafe_url", field), url
        assert accepted == []
        after = api.admin.call("GET", "/v1/connections")["items"]
        assert [item["name"] for item in after] == ["Good"]
        assert after[0]["settings"]["url"] == hook.url


@pytest.mark.parametrize("address", ["64:ff9b::7f00:1", "::127.0.0.1", "2002:7f00:1::1"])
def test_a_name_that_resolves_to_a_wrapped_address_at_send_time_is_not_called(
    api: Api, monkeypatch, address
):
    with fake_webhook_server() as hook:
        port = int(hook.url.split(":")[2].split("/")[0])
        # Given a name public when the connection is made, and wrapped loopback when it sends
        answers = iter(["93.184.215.14"])
        real = socket.getaddrinfo

        def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
            if host != "rebind.example":
                return real(host, *args, **kwargs)
            resolved = next(answers, address)
            if ":" in resolved:
                return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (resolved, port, 0, 0))]
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (resolved, port))]

        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        connection = api.admin.call("POST", "/v1/connections", json={
            "name": "Rebind", "provider": "webhook",
            "settings": {"url": f"http://rebind.example:{port}/hook"},
            "credentials": {"signing_secret": SECRET}})  # fmt: skip
        # When an action is sent through it
        created = schedule(api, action_type="webhook", payload={"a": 1},
                           connection_id=connection["id"], publish_at=at(0.3)).json()  # fmt: skip
        row = settle(api, created["id"])
        # Then it fails as unsafe_url, and nothing reached the receiver
        assert (row["status"], row["error_code"]) == ("failed", "unsafe_url")
        assert hook.requests == []
