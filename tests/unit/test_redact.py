"""The one rule for showing a URL (`mask_url`) and what free text keeps (`sanitize`)."""

from __future__ import annotations

import pytest

from tickwork.providers.redact import Redactor, mask_url, reads_as_words, sanitize, url_secrets


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # userinfo
        ("https://alice:hunter2pw@hooks.example.com/in", "https://***@hooks.example.com/in"),
        ("https://tok_only@hooks.example.com/in", "https://***@hooks.example.com/in"),
        # query values (names that read as words stay) and fragments
        ("https://h.example.com/in?token=T0k3nValue&sig=abc", "https://h.example.com/in?token=***&sig=***"),
        ("https://h.example.com/in?x9Fz31kQ=1&debug", "https://h.example.com/in?***=***&debug"),
        ("https://h.example.com/in#access_token=zz99", "https://h.example.com/in#***"),
        # path segments that look like tokens
        ("https://hooks.slack.com/services/T024BE7LD/B01234567/abcDEFghiJKLmnoPQRstu123",
         "https://hooks.slack.com/services/***/***/***"),
        ("https://discord.com/api/webhooks/123456789012345678/AbCdEf-ghIJklMNopQRstUVwxYZ_0123",
         "https://discord.com/api/webhooks/***/***"),
        ("https://maker.ifttt.com/trigger/door_open/with/key/dA3kd9Xk2s8HjkLm9Qw1z",
         "https://maker.ifttt.com/trigger/door_open/with/key/***"),
        ("https://h.example.com/hooks/8f14e45f-ceea-467f-a9f0-12ab34cd56ef",
         "https://h.example.com/hooks/***"),
        ("https://h.example.com/in/aBcDeFgHiJkLmN", "https://h.example.com/in/***"),
        ("https://h.example.com/in/abcdefghijklmnopqrstuvwxyz", "https://h.example.com/in/***"),
        # host labels that look like tokens; IP literals whole
        ("https://eo3x8k2q9.m.pipedream.net/", "https://***.m.pipedream.net/"),
        ("http://127.0.0.1:8080/hook", "http://127.0.0.1:8080/hook"),
        ("http://[2606:4700::1111]/hook", "http://[2606:4700::1111]/hook"),
        # what reads as words is shown
        ("https://api.example.com/v2/IncomingWebhook/order-created",
         "https://api.example.com/v2/IncomingWebhook/order-created"),
        # not a URL at all
        ("not a url", "[unparsable URL]"),
        ("https://[::1", "[unparsable URL]"),
    ],
)  # fmt: skip
def test_mask_url_hides_every_part_that_can_carry_a_secret(url, shown):
    assert mask_url(url) == shown


def test_a_template_placeholder_is_kept_where_asked():
    template = "https://h.example.com/status/{webhook_id}?id={webhook_id}&key=Zz9SecretKey"
    assert mask_url(template, keep=("{webhook_id}",)) == (
        "https://h.example.com/status/{webhook_id}?id={webhook_id}&key=***"
    )


@pytest.mark.parametrize("part", ["v1", "api", "hooks", "IncomingWebhook", "order_created.json"])
def test_words_read_as_words(part):
    assert reads_as_words(part)


@pytest.mark.parametrize(
    "part", ["T024BE7LD", "hunter2pw", "aBcDeFgHiJ", "abcdefghijklmnopqrstu", "a b", "x%41"]
)
def test_tokens_do_not(part):
    assert not reads_as_words(part)


def test_the_secret_parts_of_a_url_are_removed_from_free_text_that_echoes_them():
    url = "https://bob:Pa55word@h.example.com/in/T024BE7LD?key=Abc123Secret#frag9Zed"
    assert {"Pa55word", "T024BE7LD", "Abc123Secret", "frag9Zed"} <= set(url_secrets(url))
    echoed = "you sent key Abc123Secret to T024BE7LD as bob:Pa55word (frag9Zed)"
    cleaned = Redactor.of(url).tenant(echoed)
    for secret in ("Pa55word", "T024BE7LD", "Abc123Secret", "frag9Zed"):
        assert secret not in cleaned


def test_sanitize_masks_urls_in_text_and_is_stable():
    text = "POST https://u:p4ss@h.example.com/in/T024BE7LD?sig=abc failed"
    once = sanitize(text)
    assert once == "POST https://***@h.example.com/in/***?sig=*** failed"
    assert sanitize(once) == once


@pytest.mark.parametrize(
    ("value", "shown"),
    [(300, "300"), ("channel_not_found", "channel_not_found"), (True, None), (None, None),
     ("has spaces in it", None), ("x" * 65, None), ({"nested": 1}, None)],
)  # fmt: skip
def test_only_code_shaped_values_are_shown_as_a_providers_code(value, shown):
    assert Redactor().code(value) == shown


def test_a_code_that_is_one_of_the_calls_secrets_is_not_shown():
    assert Redactor.of({"token": "sekrit_Token_9"}).code("sekrit_Token_9") is None
