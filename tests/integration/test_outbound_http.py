"""The outbound HTTP rules every provider call keeps: a total deadline, a bounded read, no
private destinations (also after DNS rebinding), nothing secret in what tenants see."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.fakes import LOOPBACK, OperatorLog, an_action
from tests.fakes.webhook_server import SECRET, Reply, fake_webhook_server
from tickwork.providers import http
from tickwork.providers.base import Ambiguous, Rejected, Transient
from tickwork.providers.http import OutboundPolicy, UnsafeDestinationError, check_url
from tickwork.providers.webhook import WebhookProvider


class Hostile:
    """A receiver that misbehaves on purpose: trickles bytes, or sends an endless body."""

    def __init__(self, mode: str) -> None:
        self.requests = 0
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                hostile.requests += 1
                self.rfile.read(int(self.headers.get("content-length", "0")))
                try:
                    if mode == "trickle":
                        self.send_response(200)
                        self.send_header("content-length", "100")
                        self.end_headers()
                        for _ in range(100):
                            self.wfile.write(b"x")
                            self.wfile.flush()
                            time.sleep(0.25)  # the trickle is the thing under test
                    else:  # endless: a 1 GiB body, far more than anyone should read
                        self.send_response(400)
                        self.send_header("content-length", str(1 << 30))
                        self.end_headers()
                        chunk = b"y" * 65536
                        for _ in range((1 << 30) // 65536):
                            self.wfile.write(chunk)
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def trickle() -> Iterator[Hostile]:
    server = Hostile("trickle")
    yield server
    server.close()


@pytest.fixture
def endless() -> Iterator[Hostile]:
    server = Hostile("endless")
    yield server
    server.close()


def webhook_to(url: str, timeout: float, policy: OutboundPolicy = LOOPBACK) -> WebhookProvider:
    options = {"endpoints": {"primary": {"url": url, "secret": SECRET}}}
    return WebhookProvider(options, timeout=timeout, policy=policy, max_body_bytes=4096)


# ----------------------------------------------------------------- 8: deadline, bounded read


def test_a_receiver_trickling_bytes_is_cut_off_at_the_total_deadline(trickle):
    # Given a receiver that sends one byte every 250 ms (each read well inside the timeout)
    provider = webhook_to(trickle.url, timeout=1.0)
    # When a call with a 1 s total deadline is made
    started = time.monotonic()
    outcome = provider.send(an_action())
    elapsed = time.monotonic() - started
    # Then it ends near the deadline, as ambiguous (the request may have arrived)
    assert isinstance(outcome, Ambiguous)
    assert elapsed < 1.6, elapsed


def test_an_endless_body_is_read_only_up_to_the_bound(endless):
    provider = webhook_to(endless.url, timeout=5.0)
    started = time.monotonic()
    outcome = provider.send(an_action())
    # A gibibyte would take many seconds to read; the bound stops it at 4 KiB.
    assert time.monotonic() - started < 2.0
    assert isinstance(outcome, Rejected)
    assert len(outcome.message) <= 250


def test_call_keeps_a_bounded_prefix_and_says_it_was_cut(endless):
    client = http.client(LOOPBACK, 5.0)
    reply = http.call(client, "POST", endless.url, content=b"{}", total_seconds=5.0,
                      max_body_bytes=1000)  # fmt: skip
    assert reply.status == 400
    assert len(reply.body) == 1000
    assert reply.truncated


# ------------------------------------------------------------------ 10: destinations


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "gopher://example.com/", "ftp://example.com/x", "http://",
     "http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:8080/", "http://localhost/",
     "http://10.0.0.5/", "http://192.168.1.1/", "http://172.16.0.1/", "http://[::1]/",
     "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/", "http://100.100.100.200/",
     "http://0.0.0.0/", "http://[fd00:ec2::254]/"],
)  # fmt: skip
def test_urls_that_are_not_public_http_are_refused(url):
    with pytest.raises(UnsafeDestinationError):
        check_url(url, OutboundPolicy())


def test_the_operator_allow_list_admits_its_networks():
    assert check_url("http://127.0.0.1:9/x", LOOPBACK).host == "127.0.0.1"
    with pytest.raises(UnsafeDestinationError):
        check_url("http://10.0.0.1/", LOOPBACK)


def test_a_call_to_a_loopback_receiver_is_refused_without_the_allow_list():
    with fake_webhook_server() as hook:
        outcome = webhook_to(hook.url, 1.0, policy=OutboundPolicy()).send(an_action())
        assert isinstance(outcome, Rejected)
        assert outcome.code == "unsafe_url"
        assert hook.requests == []


def test_dns_rebinding_is_caught_when_the_socket_connects(monkeypatch):
    # Given a name that resolves to a public address when checked, then to loopback
    with fake_webhook_server() as hook:
        port = int(hook.url.split(":")[2].split("/")[0])
        answers = iter(["93.184.216.34", "127.0.0.1", "127.0.0.1"])
        real = socket.getaddrinfo

        def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
            if host == "rebind.example":
                address = next(answers)
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
            return real(host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        url = f"http://rebind.example:{port}/hook"
        check_url(url, OutboundPolicy())  # passes: public at configuration time
        # When the call connects, the name now points at loopback
        outcome = webhook_to(url, 1.0, policy=OutboundPolicy()).send(an_action())
        # Then it is refused and nothing reached the loopback receiver
        assert isinstance(outcome, Rejected)
        assert outcome.code == "unsafe_url"
        assert hook.requests == []


def _hanging_resolver(release: threading.Event, port: int) -> http.Resolver:
    def resolve(host: str, _port: int) -> list[Any]:
        release.wait(10)  # a resolver that answers late: long after the call's deadline
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    return resolve


def test_a_slow_resolver_is_bounded_by_the_calls_total_deadline():
    # Given a receiver whose host name takes 10 s to resolve, and a 1 s total deadline
    release = threading.Event()
    with fake_webhook_server() as hook:
        port = int(hook.url.split(":")[2].split("/")[0])
        policy = OutboundPolicy(LOOPBACK.allowed_networks, _hanging_resolver(release, port))
        provider = webhook_to(f"http://slow.example:{port}/hook", 1.0, policy=policy)
        # When it is called
        started = time.monotonic()
        outcome = provider.send(an_action())
        elapsed = time.monotonic() - started
        release.set()
        # Then the call ends at the deadline, as transient (nothing was sent), saying why
        assert isinstance(outcome, Transient), outcome
        assert "did not resolve within the call's deadline" in outcome.message
        assert elapsed < 1.6, elapsed
        assert hook.requests == []


def test_the_system_resolver_is_bounded_too(monkeypatch):
    # Given the default resolver, with socket.getaddrinfo hanging for this one name
    release = threading.Event()
    with fake_webhook_server() as hook:
        port = int(hook.url.split(":")[2].split("/")[0])
        real = socket.getaddrinfo
        hanging = _hanging_resolver(release, port)

        def slow(host: str, *args: Any, **kwargs: Any) -> Any:
            return hanging(host, port) if host == "slow.example" else real(host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", slow)
        started = time.monotonic()
        outcome = webhook_to(f"http://slow.example:{port}/hook", 1.0).send(an_action())
        elapsed = time.monotonic() - started
        release.set()
        assert isinstance(outcome, Transient), outcome
        assert elapsed < 1.6, elapsed
        assert hook.requests == []


def test_configuring_a_url_whose_host_resolves_too_slowly_is_refused(monkeypatch):
    # An API request configuring a URL must not wait on a hanging resolver (it would 500)
    monkeypatch.setattr(http, "CONFIGURE_RESOLVE_SECONDS", 0.5)
    release = threading.Event()
    policy = OutboundPolicy(LOOPBACK.allowed_networks, _hanging_resolver(release, 80))
    started = time.monotonic()
    with pytest.raises(UnsafeDestinationError) as caught:
        check_url("http://slow.example/hook", policy)
    release.set()
    assert time.monotonic() - started < 1.5
    assert caught.value.message == "host 'slow.example' did not resolve within 0.5 s"
    assert caught.value.field == "url"


def test_a_resolver_within_the_deadline_still_connects():
    with fake_webhook_server() as hook:
        port = int(hook.url.split(":")[2].split("/")[0])
        release = threading.Event()
        release.set()  # answers at once
        policy = OutboundPolicy(LOOPBACK.allowed_networks, _hanging_resolver(release, port))
        outcome = webhook_to(f"http://fast.example:{port}/hook", 2.0, policy=policy).send(
            an_action()
        )
        assert not isinstance(outcome, Transient | Rejected), outcome
        assert len(hook.requests) == 1


def test_connection_refused_is_transient():
    outcome = webhook_to("http://127.0.0.1:1/hook", 0.5).send(an_action())
    assert isinstance(outcome, Transient)


# --------------------------------------------------------------------- 9: no secrets


def test_last_error_and_logs_carry_no_url_secrets_and_a_bounded_excerpt():
    with fake_webhook_server() as hook, OperatorLog() as log:
        body = ("Authorization: Bearer sk_live_abcdefghijklmnop token=qwerty12345 "
                + "z" * 500)  # fmt: skip
        hook.then(Reply(400, {}, body))
        port = hook.url.split(":")[2]
        url = f"http://alice:hunter2pw@127.0.0.1:{port}?token=QueryTok3n"
        outcome = webhook_to(url, 2.0).send(an_action())
    assert isinstance(outcome, Rejected)
    for shown in (outcome.message, log.text):
        for secret in ("hunter2pw", "QueryTok3n", "alice:", "sk_live_abcdefghijklmnop",
                       "qwerty12345", SECRET[6:]):  # fmt: skip
            assert secret not in shown
    assert len(outcome.message) <= 250
    assert "HTTP 400" in outcome.message
    assert "z" * 300 not in outcome.message
    assert "provider call did not succeed" in log.text


def test_sanitize_removes_secret_shapes():
    text = sanitize_sample = (
        'failed: {"password": "p@ss", "api_key": "AKIAXXXX"} at https://u:p@h.example/p?q=1 '
        "Basic dXNlcjpwYXNzd29yZA== " + "A" * 50
    )
    cleaned = http.sanitize(text, secrets=["p@ss"])
    assert sanitize_sample != cleaned
    for secret in ("p@ss", "AKIAXXXX", "u:p@", "/p?q=1", "dXNlcjpwYXNzd29yZA==", "A" * 50):
        assert secret not in cleaned
    assert "https://***@h.example/p?q=***" in cleaned


# ------------------------------------------------------------------- 7: retry-after


@pytest.mark.parametrize(
    ("value", "expected"),
    [("30", 30.0), ("0", 0.0), ("99999999999999999999", http.RETRY_AFTER_CAP_SECONDS),
     ("9" * 5000, http.RETRY_AFTER_CAP_SECONDS), ("1" * 12, http.RETRY_AFTER_CAP_SECONDS),
     ("²", None), ("٣٠", None), ("-5", None), ("1e9", None), ("soon", None), ("", None),
     (None, None), ("Wed, 20 May 2026 09:01:00 GMT", 60.0), ("Wed, 20 May 2026 08:00:00 GMT", 0.0),
     ("Fri, 31 Dec 9999 23:59:59 GMT", http.RETRY_AFTER_CAP_SECONDS),
     ("Mon, 99 Foo 99999 99:99:99 GMT", None)],
)  # fmt: skip
def test_retry_after_is_a_capped_float_and_never_raises(value, expected):
    now = datetime(2026, 5, 20, 9, 0, tzinfo=UTC)
    assert http.retry_after_seconds(value, now) == expected


def test_a_huge_retry_after_from_a_receiver_requeues_with_a_capped_delay():
    with fake_webhook_server() as hook:
        hook.then(Reply(429, {"retry-after": "99999999999999999999"}))
        outcome = webhook_to(hook.url, 2.0).send(an_action())
    assert isinstance(outcome, Transient)
    assert outcome.retry_after == http.RETRY_AFTER_CAP_SECONDS


def test_rate_limit_reset_headers_as_unix_time_or_iso():
    now = datetime(2026, 5, 20, 9, 0, tzinfo=UTC)
    assert http.reset_after_seconds(str(int(now.timestamp()) + 42), now) == 42
    assert http.reset_after_seconds("2026-05-20T09:00:30.000Z", now) == 30
    assert http.reset_after_seconds((now - timedelta(seconds=5)).isoformat(), now) == 0
    assert http.reset_after_seconds("garbage", now) is None
