"""Which providers can be asked whether a message arrived (`lookup_of`), as built by the
registry's factories: Postmark, Slack, Bluesky, webhooks, Twilio and Mastodon can; SES
cannot (its module says why), nor can the log provider."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tickwork.platform.config import Settings
from tickwork.providers import FACTORIES
from tickwork.providers.base import Lookup, lookup_of


@pytest.mark.parametrize("name", ["ses", "log"])
def test_providers_without_a_lookup_say_so(name):
    provider = FACTORIES[name]({}, Settings())
    assert lookup_of(provider) is None
    assert not hasattr(provider, "lookup")


@pytest.mark.parametrize("name", ["postmark", "slack", "bluesky", "webhook", "twilio", "mastodon"])
def test_providers_with_a_lookup_have_realistic_windows(name):
    provider = FACTORIES[name]({}, Settings())
    lookup = lookup_of(provider)
    assert isinstance(lookup, Lookup)
    assert timedelta(minutes=1) <= lookup.lookup_grace < lookup.lookup_retention
    assert lookup.lookup_retention <= timedelta(days=365)
