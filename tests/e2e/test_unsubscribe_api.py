"""One-click unsubscribe (RFC 8058) end to end: email sent through Postmark and SES
connections by the real dispatcher carries the headers (the fake servers record them), and
the link is clicked over real HTTP against the local API, without a login."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

from tests.e2e.conftest import Api, running_api
from tests.e2e.test_connections_api import at, postmark_connection, raw, schedule, settle
from tests.fakes import LOOPBACK
from tests.fakes.postmark import FakePostmark
from tests.fakes.ses import SEND, FakeSes
from tests.integration.test_provider_ses import CREDENTIALS
from tickwork.api import handle
from tickwork.local.handlers import LocalContext
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.db import connect
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.ses import SesProvider
from tickwork.suppression import links

LINK = re.compile(r"^<(http://127\.0\.0\.1:\d+/v1/unsubscribe/[A-Za-z0-9_-]+)>$")
ONE_CLICK = {"content-type": "application/x-www-form-urlencoded"}
EMAIL = {"to": "Ann <Ann@Example.com>", "subject": "News", "text": "Hi Ann"}


@pytest.fixture
def unsub(database_url: str, tmp_path: Path, monkeypatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    settings = Settings(action_types={
        "email": ActionTypeConfig(provider="postmark"),
        "ses": ActionTypeConfig(provider="ses"),
        "log": ActionTypeConfig(provider="log"),
    })  # fmt: skip
    postmark, ses = FakePostmark(), FakeSes()
    with running_api(database_url, tmp_path, settings) as api:
        registry = api.local.runtime.providers
        registry.register("email", PostmarkProvider({"api_url": postmark.url}, 2.0, LOOPBACK))
        registry.register("ses", SesProvider({"endpoint_url": ses.url}, 2.0, LOOPBACK))
        yield {"api": api, "postmark": postmark, "ses": ses}
    postmark.close()
    ses.close()


def suppressions(api: Api) -> list[tuple[Any, ...]]:
    with connect(api.local.database_url) as conn:
        return conn.execute(
            "select workspace_id, channel, address, scope, reason, source, created_at"
            " from suppressions order by address, scope"
        ).fetchall()


def click(url: str, **kwargs: Any) -> httpx.Response:
    """The mail client's one-click POST: no login, a form body."""
    return httpx.post(url, content="List-Unsubscribe=One-Click", headers=ONE_CLICK, **kwargs)


def sent_headers(postmark: FakePostmark) -> dict[str, str]:
    [request] = [r for r in postmark.requests if r.path == "/email"]
    return {h["Name"]: h["Value"] for h in request.json().get("Headers", [])}


def altered(token: str, index: int) -> str:
    """The token with one byte of what it encodes changed."""
    raw_bytes = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw_bytes[index] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw_bytes)).rstrip(b"=").decode()


# ------------------------------------------------------------------ headers and clicks


def test_postmark_mail_carries_the_link_and_two_clicks_suppress_once(unsub):
    api, postmark = unsub["api"], unsub["postmark"]
    # Given a Postmark connection that adds one-click unsubscribe to its mail
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection(
        settings={"from": "News <news@example.com>", "unsubscribe": True}))  # fmt: skip
    # When an email to Ann is sent through it by the dispatcher
    action = schedule(api, action_type="email", payload=EMAIL, publish_at=at(0.3),
                      connection_id=connection["id"]).json()  # fmt: skip
    assert settle(api, action["id"])["status"] == "published"
    # Then Postmark was given both RFC 8058 headers, the link on the public API
    headers = sent_headers(postmark)
    assert headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    match = LINK.match(headers["List-Unsubscribe"])
    assert match, headers
    url = match.group(1)
    assert url.startswith(api.url + "/v1/unsubscribe/")
    key = api.local.settings.unsubscribe_key
    assert key is not None
    assert links.verify(key, url.rsplit("/", 1)[1]) == links.Link(
        UUID(api.workspace_a), "email", "ann@example.com", "all"
    )
    # And opening it (a browser, a link scanner) asks first, the address masked, and
    # changes nothing
    page = httpx.get(url, headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "a***@e******.com" in page.text
    assert "ann@example.com" not in page.text
    assert '<form method="post">' in page.text
    assert page.headers["referrer-policy"] == "no-referrer"
    assert suppressions(api) == []
    # When the mail client posts the one-click request, twice
    first, second = click(url), click(url)
    # Then the first suppressed Ann, and the second was answered 200 without a change
    assert first.status_code == 200, first.text
    assert first.json() == {"unsubscribed": True, "already": False, "scope": "all"}
    assert second.status_code == 200
    assert second.json() == {"unsubscribed": True, "already": True, "scope": "all"}
    [row] = suppressions(api)
    assert row[:6] == (UUID(api.workspace_a), "email", "ann@example.com", "all", "unsubscribed",
                       "link")  # fmt: skip
    # And the page's own form (a browser) lands on the same entry and says so in HTML
    form = httpx.post(url, data={"List-Unsubscribe": "One-Click"},
                      headers={"accept": "text/html"})  # fmt: skip
    assert form.status_code == 200
    assert "You are unsubscribed" in form.text
    assert suppressions(api) == [row]


def test_ses_mail_carries_the_headers_in_its_simple_content(unsub):
    api, ses = unsub["api"], unsub["ses"]
    # Given an SES connection (no unsubscribe setting) and an email whose payload asks
    connection = api.admin.call("POST", "/v1/connections", json={
        "name": "SES", "provider": "ses",
        "settings": {"region": "eu-west-1", "from": "news@example.com"},
        "credentials": CREDENTIALS})  # fmt: skip
    payload = EMAIL | {"unsubscribe": {"scope": "all"}}
    action = schedule(api, action_type="ses", payload=payload, publish_at=at(0.3),
                      connection_id=connection["id"]).json()  # fmt: skip
    # When the dispatcher sends it
    assert settle(api, action["id"])["status"] == "published"
    # Then SendEmail's Simple content carried both header fields
    [request] = [r for r in ses.requests if r.path == SEND]
    simple = request.json()["Content"]["Simple"]
    fields = {h["Name"]: h["Value"] for h in simple["Headers"]}
    assert fields["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert LINK.match(fields["List-Unsubscribe"]), fields


def test_without_a_setting_or_an_ask_no_headers_and_several_recipients_cannot_ask(unsub):
    api, postmark = unsub["api"], unsub["postmark"]
    connection = api.admin.call("POST", "/v1/connections", json=postmark_connection())
    # An email through a connection without the setting carries no link
    action = schedule(api, action_type="email", payload=EMAIL, publish_at=at(0.3),
                      connection_id=connection["id"]).json()  # fmt: skip
    assert settle(api, action["id"])["status"] == "published"
    assert sent_headers(postmark) == {}
    # A payload that asks for a link while going to two addresses is refused, saying why
    two = EMAIL | {"to": ["ann@example.com", "bob@example.com"], "unsubscribe": True}
    refused = schedule(api, action_type="email", payload=two, connection_id=connection["id"])
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "invalid_input"
    assert "one address" in error["message"]


# ------------------------------------------------------------------ forged and altered


def test_a_link_altered_by_one_byte_is_refused_and_writes_nothing(unsub):
    api = unsub["api"]
    key = api.local.settings.unsubscribe_key
    token = links.sign(key, UUID(api.workspace_a), "email", "ann@example.com")
    size = len(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    # One byte changed anywhere: the version, the workspace, the channel, the scope, the
    # address, the MAC
    for index in (0, 1, 16, 17, 18, 19, 25, size - 33, size - 32, size - 1):
        forged = altered(token, index)
        for method in ("GET", "POST"):
            url = f"{api.url}/v1/unsubscribe/{forged}"
            answer = httpx.request(method, url, content="List-Unsubscribe=One-Click",
                                   headers=ONE_CLICK)  # fmt: skip
            assert answer.status_code == 400, (index, method, answer.text)
            assert answer.json()["error"]["code"] == "invalid_unsubscribe_link"
    # Cut short, padded, or not base64 at all
    for bad in (token[:-1], token + "A", token + "=", "!" * 20, "A"):
        assert click(f"{api.url}/v1/unsubscribe/{bad}").status_code == 400, bad
    # A browser is told in HTML
    page = httpx.get(f"{api.url}/v1/unsubscribe/{altered(token, 25)}",
                     headers={"accept": "text/html"})  # fmt: skip
    assert page.status_code == 400
    assert "invalid_unsubscribe_link" in page.text
    assert suppressions(api) == []
    # And the real one still works
    assert click(f"{api.url}/v1/unsubscribe/{token}").status_code == 200
    assert len(suppressions(api)) == 1


def test_a_link_for_one_address_cannot_be_used_for_another(unsub):
    api = unsub["api"]
    key = api.local.settings.unsubscribe_key
    workspace = UUID(api.workspace_a)
    token_a = links.sign(key, workspace, "email", "ann@example.com")
    raw_a = base64.urlsafe_b64decode(token_a + "=" * (-len(token_a) % 4))
    body_a, mac_a = raw_a[:-32], raw_a[-32:]
    # Ann's MAC on Bob's address, and on Ann's link for another workspace
    bob_body = body_a.replace(b"ann@example.com", b"bob@example.com")
    other_body = body_a[:1] + UUID(api.workspace_b).bytes + body_a[17:]
    for body in (bob_body, other_body):
        forged = base64.urlsafe_b64encode(body + mac_a).rstrip(b"=").decode()
        assert click(f"{api.url}/v1/unsubscribe/{forged}").status_code == 400
    # A token signed with another key
    stranger = links.sign("k" * 40, workspace, "email", "bob@example.com")
    assert click(f"{api.url}/v1/unsubscribe/{stranger}").status_code == 400
    assert suppressions(api) == []
    # Ann's own link suppresses Ann, and only Ann, in her workspace only
    assert click(f"{api.url}/v1/unsubscribe/{token_a}").status_code == 200
    assert [(r[0], r[2]) for r in suppressions(api)] == [(workspace, "ann@example.com")]


def test_the_route_needs_no_login_and_serves_only_its_methods(unsub):
    api = unsub["api"]
    token = links.sign(api.local.settings.unsubscribe_key, UUID(api.workspace_a), "email",
                       "ann@example.com")  # fmt: skip
    url = f"{api.url}/v1/unsubscribe/{token}"
    # a bearer token is not needed, and one that is wrong changes nothing
    assert httpx.get(url, headers={"authorization": "Bearer nonsense"}).status_code == 200
    put = httpx.put(url)
    assert put.status_code == 405
    assert put.headers["allow"] == "GET, HEAD, POST"
    assert httpx.get(f"{api.url}/v1/unsubscribe/").status_code == 404
    assert raw(api, "GET", "/v1/actions").status_code == 200  # the rest still needs its JWT
    assert httpx.get(f"{api.url}/v1/actions").status_code == 401


# ---------------------------------------------------- the one-click field is required


def test_a_post_without_list_unsubscribe_one_click_is_refused_and_writes_nothing(unsub):
    api = unsub["api"]
    token = links.sign(api.local.settings.unsubscribe_key, UUID(api.workspace_a), "email",
                       "ann@example.com")  # fmt: skip
    url = f"{api.url}/v1/unsubscribe/{token}"
    # Given what a link scanner or a foreign page might POST: nothing, JSON, another field,
    # the field with another value, the right text under a type RFC 8058 does not name
    tries = [
        {},
        {"content": b"", "headers": ONE_CLICK},
        {"json": {"List-Unsubscribe": "One-Click"}},
        {"data": {"List-Unsubscribe": "Yes"}},
        {"data": {"Unsubscribe": "One-Click"}},
        {"content": "List-Unsubscribe=One-Click", "headers": {"content-type": "text/plain"}},
        {
            "content": "List-Unsubscribe=One-Click",
            "headers": {"content-type": "multipart/form-data; boundary=x"},
        },
    ]
    for kwargs in tries:
        # When it is posted, then it is a 400 naming the field, and nothing is written
        answer = httpx.post(url, **kwargs)
        assert answer.status_code == 400, (kwargs, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "one_click_required", kwargs
        assert "List-Unsubscribe=One-Click" in error["message"]
    assert suppressions(api) == []
    # A browser is told so in HTML
    page = httpx.post(url, headers={"accept": "text/html"})
    assert page.status_code == 400
    assert "one_click_required" in page.text
    assert suppressions(api) == []
    # RFC 8058's multipart form is a one-click request too
    multipart = httpx.post(url, files={"List-Unsubscribe": (None, "One-Click")})
    assert multipart.status_code == 200, multipart.text
    assert multipart.json()["already"] is False
    assert len(suppressions(api)) == 1


def test_the_confirmation_pages_own_form_sends_the_one_click_field(unsub):
    api = unsub["api"]
    token = links.sign(api.local.settings.unsubscribe_key, UUID(api.workspace_a), "email",
                       "bob@example.com")  # fmt: skip
    url = f"{api.url}/v1/unsubscribe/{token}"
    page = httpx.get(url, headers={"accept": "text/html"}).text
    # What a browser submits: the form's hidden fields, form-encoded, to the same address
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]+)">', page))
    assert fields == {"List-Unsubscribe": "One-Click"}
    answer = httpx.post(url, data=fields, headers={"accept": "text/html"})
    assert answer.status_code == 200
    assert "You are unsubscribed" in answer.text
    assert [r[2] for r in suppressions(api)] == ["bob@example.com"]


def test_a_one_click_post_through_api_gateway_may_come_base64_encoded(unsub):
    api = unsub["api"]
    token = links.sign(api.local.settings.unsubscribe_key, UUID(api.workspace_a), "email",
                       "cy@example.com")  # fmt: skip
    path = f"/v1/unsubscribe/{token}"

    def event(body: bytes) -> dict[str, Any]:
        return {"version": "2.0", "rawPath": path, "rawQueryString": "",
                "headers": {"content-type": "application/x-www-form-urlencoded"},
                "requestContext": {"http": {"method": "POST", "path": path}},
                "body": base64.b64encode(body).decode(), "isBase64Encoded": True}  # fmt: skip

    refused = handle(event(b"List-Unsubscribe=Later"), LocalContext("api", 30))
    assert refused["statusCode"] == 400
    assert suppressions(api) == []
    answer = handle(event(b"List-Unsubscribe=One-Click"), LocalContext("api", 30))
    assert answer["statusCode"] == 200, answer
    assert [r[2] for r in suppressions(api)] == ["cy@example.com"]


# ------------------------------------------------------------------------- templates


def test_unsubscribe_url_renders_in_a_rules_payload_for_its_recipient_and_rule(unsub):
    api = unsub["api"]
    # Given a rule whose payload links to unsubscribe
    rule = api.admin.call("POST", "/v1/rules", json={
        "name": "welcome",
        "trigger": {"type": "event", "event": "signup"},
        "action": {"action_type": "log", "target_key": "guest", "payload": {
            "to": "{{ context.email }}",
            "html": '<a href="{{ unsubscribe_url }}">Unsubscribe</a>'}},
    })  # fmt: skip
    # When its event comes
    result = api.admin.call("POST", "/v1/events", json={
        "type": "signup", "context": {"email": "Cleo@Example.com"}})  # fmt: skip
    [made] = result["created"]
    action = api.admin.call("GET", f"/v1/actions/{made['action_id']}")
    # Then the payload holds the link signed for Cleo and the rule
    found = re.fullmatch(r'<a href="([^"]+)">Unsubscribe</a>', action["payload"]["html"])
    assert found, action["payload"]
    url = found.group(1)
    key = api.local.settings.unsubscribe_key
    assert links.verify(key, url.rsplit("/", 1)[1]) == links.Link(
        UUID(api.workspace_a), "email", "cleo@example.com", f"rule:{rule['id']}"
    )
    # And clicking it suppresses Cleo for that rule's messages
    assert click(url).json() == {"unsubscribed": True, "already": False,
                                 "scope": f"rule:{rule['id']}"}  # fmt: skip
    [row] = suppressions(api)
    assert (row[2], row[3], row[4]) == ("cleo@example.com", f"rule:{rule['id']}", "unsubscribed")


def test_unsubscribe_url_for_several_recipients_fails_the_rule_with_a_reason(unsub):
    api = unsub["api"]
    api.admin.call("POST", "/v1/rules", json={
        "name": "all hands",
        "trigger": {"type": "event", "event": "memo"},
        "action": {"action_type": "log", "target_key": "staff", "payload": {
            "to": ["a@example.com", "b@example.com"], "text": "{{ unsubscribe_url }}"}},
    })  # fmt: skip
    result = api.admin.call("POST", "/v1/events", json={"type": "memo", "context": {}})
    [failed] = result["failed"]
    assert "one address" in failed["message"]
    assert result["created"] == []


def test_unsubscribe_url_renders_in_a_campaign_step_for_its_recipient_and_campaign(unsub):
    api = unsub["api"]
    # Given a campaign whose first step links to unsubscribe, and Dan enrolled in it
    api.admin.call("PUT", "/v1/recipients/dan", json={"timezone": "Europe/Paris"})
    campaign = api.admin.call("POST", "/v1/campaigns", json={
        "name": "onboarding",
        "steps": [{"wait": {"delay_seconds": 3600}, "action": {
            "action_type": "log", "target_key": "dan",
            "payload": {"to": "{{ data.email }}", "text": "Stop: {{ unsubscribe_url }}",
                        "unsubscribe": {"scope": "campaign"}}}}],
    })  # fmt: skip
    enrollment = api.admin.call(
        "POST", f"/v1/campaigns/{campaign['id']}/enrollments",
        json={"recipient_id": "dan", "data": {"email": "dan@example.com"}},
    )  # fmt: skip
    # Then the step's row carries the link for Dan and the campaign, its scope resolved
    [step] = api.admin.call("GET", f"/v1/enrollments/{enrollment['id']}")["steps"]
    payload = api.admin.call("GET", f"/v1/actions/{step['action_id']}")["payload"]
    scope = f"campaign:{campaign['id']}"
    assert payload["unsubscribe"] == {"scope": scope}
    url = payload["text"].removeprefix("Stop: ")
    key = api.local.settings.unsubscribe_key
    assert links.verify(key, url.rsplit("/", 1)[1]) == links.Link(
        UUID(api.workspace_a), "email", "dan@example.com", scope
    )


def test_locally_the_sandbox_shows_the_link_and_it_works(database_url, tmp_path):
    # Given `tickwork dev`'s own catalog (email goes to the provider sandbox)
    with running_api(database_url, tmp_path, Settings()) as api:
        connection = api.admin.call("POST", "/v1/connections", json=postmark_connection(
            settings={"from": "news@example.com", "unsubscribe": True}))  # fmt: skip
        # When an email is sent through a connection with the setting
        action = schedule(api, action_type="email", payload=EMAIL, publish_at=at(0.3),
                          connection_id=connection["id"]).json()  # fmt: skip
        assert settle(api, action["id"])["status"] == "published"
        # Then the sandbox shows the link, signed with the key kept in the data directory,
        # and pointing at the local API, where it works
        [arrival] = api.local.sandbox.arrivals
        found = re.search(r"\(unsubscribe: (\S+)\)", arrival.summary)
        assert found, arrival.summary
        assert found.group(1).startswith(api.url + "/v1/unsubscribe/")
        assert click(found.group(1)).json()["already"] is False
        assert [r[2] for r in suppressions(api)] == ["ann@example.com"]
