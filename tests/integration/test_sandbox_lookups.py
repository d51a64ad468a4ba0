"""`tickwork dev`'s provider sandbox keeps what arrived, so the providers' lookups find a
message sent through it and say absent for one that never was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import LOOPBACK, a_via, an_action
from tickwork.local.sandbox import ProviderSandbox
from tickwork.providers.base import Absent, Delivered, Found
from tickwork.providers.bluesky import BlueskyProvider
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.slack import SlackProvider


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
    ]  # fmt: skip
    for provider, via, payload in cases:
        action = an_action(payload=payload)
        sent = provider.send(action, via)
        assert isinstance(sent, Delivered), (provider.name, sent)
        found = provider.lookup(action, via)
        assert isinstance(found, Found), (provider.name, found)
        assert found.provider_id == sent.provider_id
        assert isinstance(provider.lookup(an_action(payload=payload), via), Absent), provider.name
