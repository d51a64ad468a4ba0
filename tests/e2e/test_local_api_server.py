"""The local API server at the socket: broken framing is a clear 400/413 answered at once
(never a hang or a dropped connection), bytes that are not UTF-8 are refused, and requests
are served concurrently."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of, webhook
from tickwork.local import api_server


def raw_request(api: Api, head: str, body: bytes = b"", timeout: float = 5.0) -> bytes:
    """Send a hand-made request and read until the server closes or answers in full."""
    parts = urlsplit(api.url)
    token = api.admin.http.headers["Authorization"]
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(
            (
                f"{head}\r\nHost: x\r\nAuthorization: {token}\r\n"
                f"X-Workspace-Id: {api.workspace_a}\r\nContent-Type: application/json\r\n\r\n"
            ).encode()
            + body
        )
        received = b""
        while b"\r\n\r\n" not in received or not _complete(received):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    return received


def _complete(received: bytes) -> bool:
    head, _, body = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def status_of(received: bytes) -> int:
    return int(received.split(b" ", 2)[1])


@pytest.mark.parametrize("length", ["-1", "abc", "1.5", " "])
def test_a_broken_content_length_is_400_at_once(api, length):
    started = time.monotonic()
    received = raw_request(api, f"POST /v1/actions HTTP/1.1\r\nContent-Length: {length}")
    assert time.monotonic() - started < 2
    if length.strip():
        assert status_of(received) == 400, received
        assert b"Content-Length" in received
    else:  # blank: no body, which the route refuses in the error shape
        assert status_of(received) in (400, 422), received


def test_a_content_length_over_the_limit_is_413(api):
    received = raw_request(
        api, f"POST /v1/actions HTTP/1.1\r\nContent-Length: {api_server.MAX_REQUEST_BYTES + 1}"
    )
    assert status_of(received) == 413, received


def test_a_body_shorter_than_its_content_length_times_out(api, monkeypatch):
    monkeypatch.setattr(api.local.api.server.RequestHandlerClass, "timeout", 0.5)
    started = time.monotonic()
    received = raw_request(api, "POST /v1/actions HTTP/1.1\r\nContent-Length: 100", b"{")
    assert time.monotonic() - started < 3
    assert received == b""  # the server gave up on the socket and closed it


def test_bytes_that_are_not_utf8_are_refused(api, database_url):
    body = b'{"action_type": "webhook", "target_key": "primary", "payload": {"t": "\xff\xfe"}}'
    received = raw_request(api, f"POST /v1/actions HTTP/1.1\r\nContent-Length: {len(body)}", body)
    assert status_of(received) == 400, received
    assert b"UTF-8" in received


def test_raw_non_ascii_in_the_path_is_read_as_utf8(api):
    body = b'{"action_type": "publish_post", "targets": ["instagram"], "date": "2027-05-20",' \
           b' "time": "09:00"}'  # fmt: skip
    received = raw_request(
        api,
        f"PUT /v1/things/café/intent HTTP/1.1\r\nContent-Length: {len(body)}",  # sent as UTF-8
        body,
    )
    assert status_of(received) == 201, received
    assert json.loads(received.partition(b"\r\n\r\n")[2])["thing_id"] == "café"


def test_requests_are_served_concurrently(api, monkeypatch):
    # Given a request that takes 3 s inside the API
    from tickwork.api import actions as action_routes

    real_get = action_routes.actions.get

    def slow_get(*args, **kwargs):
        time.sleep(3)
        return real_get(*args, **kwargs)

    monkeypatch.setattr(action_routes.actions, "get", slow_get)
    created = api.admin.call("POST", "/v1/actions", json=webhook())
    slow = threading.Thread(target=api.admin.http.get, args=(f"/v1/actions/{created['id']}",))
    slow.start()
    time.sleep(0.2)
    # When another client calls meanwhile, it is answered without waiting for the slow one
    started = time.monotonic()
    other = httpx.get(
        f"{api.url}/v1/workspace",
        headers={"Authorization": api.outsider.http.headers["Authorization"],
                 "X-Workspace-Id": api.workspace_b},
    )  # fmt: skip
    elapsed = time.monotonic() - started
    slow.join()
    assert other.status_code == 200, other.text
    assert other.json()["id"] == api.workspace_b
    assert elapsed < 1.5  # served one at a time, it would wait about 2.8 s


def test_concurrent_requests_keep_their_own_workspace_and_answers(api):
    results: list[tuple[str, int, str]] = []

    def call(client, expected):
        for _ in range(15):
            response = client.http.get("/v1/workspace")
            results.append((expected, response.status_code, response.json().get("id", "")))

    threads = [
        threading.Thread(target=call, args=(api.admin, api.workspace_a)),
        threading.Thread(target=call, args=(api.member, api.workspace_a)),
        threading.Thread(target=call, args=(api.outsider, api.workspace_b)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 45
    assert all(status == 200 and got == expected for expected, status, got in results), results


def test_an_expired_token_says_so(api):
    token = api.local.jwt.sign("alice", ttl_seconds=-10)
    response = httpx.get(
        f"{api.url}/v1/workspace",
        headers={"Authorization": f"Bearer {token}", "X-Workspace-Id": api.workspace_a},
    )
    assert error_of(response, 401)["message"] == "the bearer token has expired; get a new one"
