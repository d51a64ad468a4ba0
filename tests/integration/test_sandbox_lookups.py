"""`tickwork dev`'s provider sandbox keeps what arrived, so the providers' lookups find a
message sent through it and say absent for one that never was."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tickwork.local.sandbox import ProviderSandbox
from tickwork.providers.base import Absent, Delivered, Found
from tickwork.providers.bluesky import BlueskyProvider
from tickwork.providers.mastodon import MastodonProvider
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.slack import SlackProvider
from tickwork.providers.twilio import TwilioProvider


@pytest.fixture
def sandbox() -> Iterator[ProviderSandbox]:
    box = ProviderSandbox().start()
    yield box
    box.stop()


def test_the_sandbox_answers_each_lookup_from_what_arrived(sandbox):
    cases = [
        (PostmarkProvider({"api_url": f"{sandbox.url}/postmark"}, policy=LOOPBACK),
         a_via("postmark", {"from": "a@example.com"}, {"server_token": "local-token"}),
         {"to": "ann@example.com", "subject": "Hi", "text": "Hello"}),
        (SlackProvider({"api_url": f"{sandbox.url}/slack/api"}, policy=LOOPBACK),
         a_via("slack", {}, {"bot_token": "xoxb-local-sandbox"}),
         {"channel": "C0LOCAL1", "text": "Standup"}),
        (BlueskyProvider({}, policy=LOOPBACK),
         a_via("bluesky", {"handle": "local.bsky.social",
                           "service_url": f"{sandbox.url}/bluesky"},
               {"app_password": "local-app-password"}),
         {"text": "Launch day!"}),
        (TwilioProvider({"api_url": f"{sandbox.url}/twilio"}, policy=LOOPBACK),
         a_via("twilio", {"account_sid": "AC" + "0" * 32, "from": "+15005550006"},
               {"auth_token": "local-token"}),
         {"to": "+14155550100", "body": "Your table is ready"}),
        (MastodonProvider({}, policy=LOOPBACK),
         a_via("mastodon", {"instance_url": f"{sandbox.url}/mastodon"},
               {"access_token": "local-access-token"}),
         {"status": "Launch day!"}),
    ]  # fmt: skip
    for provider, via, payload in cases:
        action = an_action(payload=payload)
        sent = provider.send(action, via)
        assert isinstance(sent, Delivered), (provider.name, sent)
        found = provider.lookup(action, via)
        assert isinstance(found, Found), (provider.name, found)
        assert found.provider_id == sent.provider_id
        # The same text to the same recipient, claimed an hour later: not in the window
        later = an_action(payload=payload, publish_at=datetime.now(UTC) + timedelta(hours=1))
        assert isinstance(provider.lookup(later, via), Absent), provider.name
