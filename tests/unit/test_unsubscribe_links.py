"""Unsubscribe links' tokens and settings: what a token binds, the key's floor, the page's
masking, and which messages want a link."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import boto3
import pytest
from moto import mock_aws

from tickwork import runtime
from tickwork.local.auth import unsubscribe_key
from tickwork.platform.config import Settings
from tickwork.platform.errors import ConfigError
from tickwork.providers.unsubscribe import Wanted, wanted
from tickwork.rules import unsubscribe_url
from tickwork.suppression import links

KEY = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("key", ["", "short", "x" * 31, "é" * 15])
def test_a_key_shorter_than_32_bytes_is_refused_at_startup_saying_why(key):
    with pytest.raises(ConfigError, match="at least 32 random bytes"):
        Settings(unsubscribe_key=key)
    if key:  # an empty variable is an unset one
        with pytest.raises(ConfigError, match="at least 32 random bytes"):
            Settings.from_env({"TICKWORK_UNSUBSCRIBE_KEY": key})


def test_a_key_of_32_bytes_is_taken_and_never_shown():
    settings = Settings.from_env({"TICKWORK_UNSUBSCRIBE_KEY": KEY})
    assert settings.unsubscribe_key == KEY
    assert KEY not in repr(settings)
    assert KEY not in str(settings)


def test_in_aws_the_key_comes_from_its_secret_and_a_short_one_stops_the_start(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name="eu-west-1")
        good = secrets.create_secret(Name="unsub-good", SecretString=KEY * 2)["ARN"]
        short = secrets.create_secret(Name="unsub-short", SecretString="tiny")["ARN"]
        read = runtime.with_unsubscribe_key(Settings(unsubscribe_key_secret_arn=good))
        assert read.unsubscribe_key == KEY * 2
        with pytest.raises(ConfigError, match="is 4 bytes; it must be at least 32"):
            runtime.with_unsubscribe_key(Settings(unsubscribe_key_secret_arn=short))


def test_locally_the_key_is_made_once_and_kept(tmp_path: Path):
    key_file = tmp_path / "unsubscribe-key"
    first = unsubscribe_key(key_file)
    assert len(first) == 64
    assert unsubscribe_key(key_file) == first
    assert key_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "url", ["http://api.example.com", "ftp://api.example.com", "https://", "https://a.b/?x=1"]
)
def test_the_public_url_is_https_or_loopback(url):
    with pytest.raises(ConfigError):
        Settings.from_env({"TICKWORK_PUBLIC_API_URL": url})
    assert Settings(public_api_url="https://api.example.com/").public_api_url == (
        "https://api.example.com"
    )


def test_a_token_binds_workspace_channel_address_and_scope():
    workspace, rule = uuid4(), uuid4()
    token = links.sign(KEY, workspace, "email", '"Ann" <Ann@Example.COM>', f"rule:{rule}")
    assert links.verify(KEY, token) == links.Link(
        workspace, "email", "ann@example.com", f"rule:{rule}"
    )
    sms = links.sign(KEY, workspace, "sms", "+1 (415) 555-0100")
    assert links.verify(KEY, sms).address == "+14155550100"
    with pytest.raises(links.InvalidUnsubscribeLinkError):
        links.verify(KEY + "x", token)


def test_the_url_needs_the_public_url_and_the_key():
    with pytest.raises(links.UnsubscribeUnavailableError):
        links.url(Settings(unsubscribe_key=KEY), uuid4(), "email", "a@example.com", "all")
    made = links.url(
        Settings(unsubscribe_key=KEY, public_api_url="https://api.example.com"),
        uuid4(), "email", "a@example.com", "all",
    )  # fmt: skip
    assert made.startswith("https://api.example.com/v1/unsubscribe/")


def test_scopes_resolve_to_the_actions_own_campaign_or_rule_else_everything():
    campaign, rule = uuid4(), uuid4()
    assert links.resolve_scope("campaign", campaign_id=campaign) == f"campaign:{campaign}"
    assert links.resolve_scope("rule", rule_id=rule) == f"rule:{rule}"
    assert links.resolve_scope("rule", campaign_id=campaign) == "all"
    assert links.resolve_scope(f"rule:{rule}") == f"rule:{rule}"
    assert links.resolve_scope(None) == "all"


def test_the_page_masks_the_address():
    assert links.mask("ann@example.com") == "a***@e******.com"
    assert links.mask("+14155550100") == "+1******0100"


def test_which_messages_want_a_link():
    one = {"to": "ann@example.com", "subject": "s", "text": "t"}
    assert wanted("postmark", one, {"unsubscribe": True}) == Wanted("ann@example.com", "all")
    assert wanted("postmark", one, {}) is None
    assert wanted("postmark", one | {"unsubscribe": False}, {"unsubscribe": True}) is None
    assert wanted("ses", one | {"unsubscribe": {"scope": "campaign"}}, {}) == Wanted(
        "ann@example.com", "campaign"
    )
    several = one | {"to": ["a@example.com", "b@example.com"]}
    assert wanted("postmark", several, {"unsubscribe": True}) is None
    assert wanted("postmark", one | {"cc": ["c@example.com"]}, {"unsubscribe": True}) is None
    assert wanted("twilio", one, {"unsubscribe": True}) is None


def test_rendering_resolves_only_the_two_words_and_leaves_other_payloads_alone():
    settings = Settings(unsubscribe_key=KEY, public_api_url="https://api.example.com")
    rule = uuid4()
    webhook = {"unsubscribe": {"scope": "newsletter"}, "text": "no link here"}
    assert unsubscribe_url.fill(webhook, settings, uuid4(), rule_id=rule) == webhook
    email = {"to": "a@example.com", "unsubscribe": {"scope": "rule"}}
    assert unsubscribe_url.fill(email, settings, uuid4(), rule_id=rule)["unsubscribe"] == {
        "scope": f"rule:{rule}"
    }
