"""The webhook receiver's optional status endpoint (docs/providers.md, webhook) over real HTTP
on loopback: the fake receiver answers for the webhook-ids it really received, the request
is signed like a delivery, the outbound guard applies, and what cannot tell is unknown."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.webhook_server import SECRET, FakeWebhookServer, Reply, fake_webhook_server
from tickwork.platform.errors import InputError
from tickwork.providers.base import (
    Absent,
    Ambiguous,
    Delivered,
    Found,
    ProviderError,
    Unknown,
    lookup_of,
)
from tickwork.providers.catalog import check_connection, url_settings
from tickwork.providers.http import OutboundPolicy
from tickwork.providers.webhook import WebhookProvider, decode_secret, verify


@pytest.fixture
def hook() -> Iterator[FakeWebhookServer]:
    with fake_webhook_server() as server:
        yield server


def operator(hook: FakeWebhookServer, timeout: float = 2.0, **extra: str) -> WebhookProvider:
    spec = {"url": hook.url, "secret": SECRET, "status_url": hook.status_url, **extra}
    return WebhookProvider({"endpoints": {"primary": spec}}, timeout=timeout, policy=LOOPBACK)


def test_a_delivered_webhook_is_found_with_a_signed_status_request(hook):
    provider = operator(hook)
    action = an_action()
    hook.then(Reply(500))  # received, but answered 500: the send is ambiguous
    assert isinstance(provider.send(action, None), Ambiguous)
    found = provider.lookup(action, None)
    assert isinstance(found, Found), found
    assert found.provider_id == f"msg_{action.id.hex}"
    [check] = hook.status_checks
    assert check["webhook-id"] == f"msg_{action.id.hex}"
    assert verify(decode_secret(SECRET), check, b"")


def test_a_webhook_never_delivered_is_absent(hook):
    provider = operator(hook)
    provider.send(an_action(), None)  # another action's webhook arrived
    assert isinstance(provider.lookup(an_action(), None), Absent)


def test_a_workspace_connection_may_name_its_status_url(hook):
    provider = WebhookProvider({}, timeout=2.0, policy=LOOPBACK)
    via = a_via("webhook", {"url": hook.url, "status_url": hook.status_url},
                {"signing_secret": SECRET})  # fmt: skip
    action = an_action(connection_id=via.id)
    assert isinstance(provider.send(action, via), Delivered)
    assert isinstance(provider.lookup(action, via), Found)
    without = a_via("webhook", {"url": hook.url}, {"signing_secret": SECRET})
    result = provider.lookup(action, without)
    assert isinstance(result, Unknown)
    assert "status_url" in result.reason


@pytest.mark.parametrize(
    "reply",
    [
        Reply(500, body='{"received": false}'),
        Reply(503),
        Reply(404, body="Not Found"),  # a 404 without received:false is a wrong path
        Reply(200, body='{"ok": true}'),
        Reply(200, body="<html>yes</html>"),
        Reply(401, body='{"error": "bad signature"}'),
        Reply(301, {"location": "http://169.254.169.254/"}),
    ],
)
def test_a_status_answer_that_cannot_tell_is_unknown(hook, reply):
    hook.status_script.append(reply)
    result = operator(hook).lookup(an_action(), None)
    assert isinstance(result, Unknown), result


def test_the_status_request_is_bounded_by_the_deadline(hook):
    hook.status_script.append(Reply(200, body='{"received": false}', delay=2))
    started = time.monotonic()
    result = operator(hook, timeout=0.5).lookup(an_action(), None)
    assert isinstance(result, Unknown)
    assert time.monotonic() - started < 1.5


def test_the_status_url_is_kept_to_the_outbound_guard(hook):
    # Without the loopback allow-list the guard refuses the status URL at connect time ...
    strict = WebhookProvider(
        {"endpoints": {"primary": {"url": hook.url, "secret": SECRET,
                                   "status_url": hook.status_url}}},
        timeout=2.0, policy=OutboundPolicy(),
    )  # fmt: skip
    refused = strict.lookup(an_action(), None)
    assert isinstance(refused, Unknown)
    assert "loopback" in refused.reason
    assert hook.status_checks == []
    # ... a connection's status_url is checked against private addresses when written ...
    assert "status_url" in url_settings("webhook")
    # ... and verify() resolves it too.
    via = a_via("webhook", {"url": "https://example.com/hook",
                            "status_url": "http://169.254.169.254/s/{webhook_id}"},
                {"signing_secret": SECRET})  # fmt: skip
    assert not strict.verify(via).ok


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("https://example.com/status", "{webhook_id}"),
        ("https://{webhook_id}.example.com/status", "path or query"),
        ("ftp://example.com/{webhook_id}", "http"),
    ],
)
def test_a_status_url_template_is_checked_when_configured(template, fragment):
    spec = {"url": "https://example.com/hook", "secret": SECRET, "status_url": template}
    with pytest.raises(ProviderError, match="primary"):
        WebhookProvider({"endpoints": {"primary": spec}})
    if fragment != "http":
        with pytest.raises(InputError, match=fragment.replace("{", r"\{").replace("}", r"\}")):
            check_connection("webhook", {"url": "https://example.com/h", "status_url": template},
                             None)  # fmt: skip
    ok = "https://example.com/status?id={webhook_id}"
    settings, _ = check_connection("webhook", {"url": "https://example.com/h",
                                               "status_url": ok}, None)  # fmt: skip
    assert settings == {"url": "https://example.com/h", "status_url": ok}


def test_lookup_windows():
    provider = WebhookProvider({})
    assert lookup_of(provider) is provider
    assert provider.lookup_retention == timedelta(days=7)
    assert timedelta(0) < provider.lookup_grace < provider.lookup_retention
