"""The Standard Webhooks wire format and the HTTP status → outcome map."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import pytest

from tickwork.providers.base import Ambiguous, Delivered, Rejected, Transient
from tickwork.providers.http import Reply
from tickwork.providers.webhook import (
    WebhookProvider,
    decode_secret,
    retry_after_seconds,
    sign,
    verify,
)


def test_signature_matches_the_standard_webhooks_test_vector():
    secret = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    signature = sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_verify_accepts_a_fresh_signature_and_refuses_tampering_and_replays():
    secret = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    now = int(time.time())
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(now),
               "webhook-signature": sign(secret, "msg_1", now, b"{}")}  # fmt: skip
    assert verify(secret, headers, b"{}")
    assert not verify(secret, headers, b'{"x": 1}')
    old = now - 3600
    stale = headers | {"webhook-timestamp": str(old),
                       "webhook-signature": sign(secret, "msg_1", old, b"{}")}  # fmt: skip
    assert not verify(secret, stale, b"{}")


@pytest.mark.parametrize(
    ("status", "kind"),
    [(200, Delivered), (204, Delivered), (400, Rejected), (404, Rejected), (410, Rejected),
     (301, Rejected), (408, Transient), (429, Transient), (503, Transient), (500, Ambiguous),
     (502, Ambiguous), (504, Ambiguous)],
)  # fmt: skip
def test_status_codes_map_to_outcomes(status, kind):
    reply = Reply(status, httpx.Headers(), b"detail")
    assert isinstance(WebhookProvider.outcome(reply), kind)


def test_retry_after_in_seconds_or_as_an_http_date():
    now = datetime(2026, 5, 20, 9, 0, tzinfo=UTC)
    assert retry_after_seconds("30", now) == 30
    assert retry_after_seconds("Wed, 20 May 2026 09:01:00 GMT", now) == 60
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds(None, now) is None
