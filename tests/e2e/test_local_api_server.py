"""The local API server at the socket: broken framing is a clear 400/413/431 answered at once
in the API's error shape (never HTML, a hang or a dropped connection), a client too slow is
answered 408, bytes that are not UTF-8 are refused, and requests are served concurrently."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of, webhook
from tests.e2e.test_api_hostile_input import rows
from tests.waiting import wait_for
from tickwork.api import actions as action_routes
from tickwork.local import api_server
from tickwork.local.auth import LocalJwt


def raw_request(api: Api, head: str, body: bytes = b"", timeout: float = 5.0) -> bytes:
    """Send a hand-made request and read until the server closes or answers in full."""
    token = api.admin.http.headers["Authorization"]
    return raw_bytes(
        api,
        (
            f"{head}\r\nHost: x\r\nAuthorization: {token}\r\n"
            f"X-Workspace-Id: {api.workspace_a}\r\nContent-Type: application/json\r\n\r\n"
        ).encode()
        + body,
        timeout,
    )


def raw_bytes(api: Api, data: bytes, timeout: float = 5.0) -> bytes:
    """Send `data` as it is and read until the server closes or answers in full."""
    parts = urlsplit(api.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(data)
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


def error_answer(received: bytes, status: int) -> dict[str, Any]:
    """The API's error shape, with `status`, JSON, and the connection closed after it."""
    assert received, "the server closed without an answer"
    head, _, body = received.partition(b"\r\n\r\n")
    assert status_of(received) == status, received
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
    }
    assert headers[b"content-type"] == b"application/json", received
    error: dict[str, Any] = json.loads(body)["error"]
    assert set(error) == {"code", "message", "details"}, received
    assert error["message"]
    return error


@pytest.mark.parametrize("length", ["-1", "abc", "1.5", " "])
def test_a_broken_content_length_is_400_at_once(api, length):
    started = time.monotonic()
    received = raw_request(api, f"POST /v1/actions HTTP/1.1\r\nContent-Length: {length}")
    assert time.monotonic() - started < 2
    if length.strip():
        assert "Content-Length" in error_answer(received, 400)["message"]
    else:  # blank: no body, which the route refuses in the error shape
        assert status_of(received) in (400, 422), received


def test_a_content_length_over_the_limit_is_413(api):
    received = raw_request(
        api, f"POST /v1/actions HTTP/1.1\r\nContent-Length: {api_server.MAX_REQUEST_BYTES + 1}"
    )
    assert error_answer(received, 413)["code"] == "payload_too_large"


def test_a_body_shorter_than_its_content_length_is_408_after_the_timeout(api, monkeypatch):
    monkeypatch.setattr(api.local.api, "timeout", 0.5)
    started = time.monotonic()
    received = raw_request(api, "POST /v1/actions HTTP/1.1\r\nContent-Length: 100", b"{")
    assert time.monotonic() - started < 3
    error = error_answer(received, 408)
    assert error["code"] == "request_timeout"
    assert "1 of 100 bytes" in error["message"]


def test_a_head_that_stops_half_way_is_408_after_the_timeout(api, monkeypatch):
    monkeypatch.setattr(api.local.api, "timeout", 0.5)
    started = time.monotonic()
    received = raw_bytes(api, b"GET /v1/workspace HTTP/1.1\r\nHost: x\r\nX-Work")
    assert time.monotonic() - started < 3
    assert error_answer(received, 408)["code"] == "request_timeout"


# ------------------------------------------- what h11 refuses, in the API's error shape


def test_two_different_content_lengths_are_400(api, database_url):
    body = json.dumps(webhook()).encode()
    received = raw_request(
        api,
        f"POST /v1/actions HTTP/1.1\r\nContent-Length: {len(body)}\r\nContent-Length: 2",
        body,
    )
    error = error_answer(received, 400)
    assert error["code"] == "bad_request"
    assert "conflicting Content-Length" in error["message"]
    assert rows(database_url) == 0


def test_the_same_content_length_twice_is_one_content_length(api, database_url):
    # RFC 9110 section 8.6 lets a recipient take identical repeated values as one; h11 does
    body = json.dumps(webhook()).encode()
    received = raw_request(
        api,
        f"POST /v1/actions HTTP/1.1\r\nContent-Length: {len(body)}\r\nContent-Length: {len(body)}",
        body,
    )
    assert status_of(received) == 201, received
    assert rows(database_url) == 1


@pytest.mark.parametrize(
    "head",
    [
        b"X-Padding: " + b"a" * 11_000,  # one header over API Gateway's 10,240 bytes
        b"\r\n".join(b"X-Pad-%d: %s" % (i, b"b" * 100) for i in range(120)),  # many headers
        b"X-Padding: " + b"a" * 30_000,  # over what h11 buffers of a head
    ],
)
def test_a_head_over_the_limit_is_431(api, head):
    received = raw_bytes(api, b"GET /v1/workspace HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n\r\n")
    assert error_answer(received, 431)["code"] == "headers_too_large"


def test_a_head_over_the_limit_sent_in_pieces_is_431(api):
    parts = urlsplit(api.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(b"GET /v1/workspace HTTP/1.1\r\nHost: x\r\nX-Padding: ")
        received = b""
        for _ in range(40):
            try:
                sock.sendall(b"a" * 1000)
            except OSError:  # the server answered and closed
                break
            time.sleep(0.005)  # a head sent in pieces, deliberately: the thing under test
        while chunk := sock.recv(65536):
            received += chunk
    assert error_answer(received, 431)["code"] == "headers_too_large"


@pytest.mark.parametrize(
    "data",
    [
        b"HELLO\r\n\r\n",
        b"GET /v1/workspace\r\n\r\n",  # no version
        b"GET /v1/workspace HTTP/1.1 extra\r\nHost: x\r\n\r\n",
        b"GET  /v1/workspace HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello
        b"GET /v1/workspace HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
        b"GET /v1/workspace HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
        b"GET /v1/workspace HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
        b"POST /v1/actions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"GET /v1/caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n",  # raw UTF-8: percent-encode it
    ],
)
def test_what_is_not_http_is_400_in_the_error_shape(api, data):
    error = error_answer(raw_bytes(api, data), 400)
    assert error["code"] == "bad_request"
    assert error["message"].startswith("the request is not valid HTTP/1.1")


def test_chunked_bodies_are_refused_with_a_hint(api, database_url):
    body = json.dumps(webhook()).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    received = raw_request(api, "POST /v1/actions HTTP/1.1\r\nTransfer-Encoding: chunked", chunked)
    assert "Content-Length" in error_answer(received, 400)["message"]
    assert rows(database_url) == 0


def test_after_an_answer_the_connection_serves_the_next_request(api):
    # keep-alive still works: two requests on one connection, both answered
    token = api.admin.http.headers["Authorization"]
    one = (f"GET /v1/workspace HTTP/1.1\r\nHost: x\r\nAuthorization: {token}\r\n"
           f"X-Workspace-Id: {api.workspace_a}\r\n\r\n").encode()  # fmt: skip
    parts = urlsplit(api.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        answers = []
        for _ in range(2):
            sock.sendall(one)
            received = b""
            while not _complete(received):
                received += sock.recv(65536)
            answers.append(status_of(received))
    assert answers == [200, 200]


def test_bytes_that_are_not_utf8_are_refused(api, database_url):
    body = b'{"action_type": "webhook", "target_key": "primary", "payload": {"t": "\xff\xfe"}}'
    received = raw_request(api, f"POST /v1/actions HTTP/1.1\r\nContent-Length: {len(body)}", body)
    assert "UTF-8" in error_answer(received, 400)["message"]


def test_non_ascii_in_the_path_is_read_as_utf8_once_percent_encoded(api):
    body = b'{"action_type": "publish_post", "targets": ["instagram"], "date": "2027-05-20",' \
           b' "time": "09:00"}'  # fmt: skip
    received = raw_request(
        api, f"PUT /v1/things/caf%C3%A9/intent HTTP/1.1\r\nContent-Length: {len(body)}", body
    )
    assert status_of(received) == 201, received
    assert json.loads(received.partition(b"\r\n\r\n")[2])["thing_id"] == "café"


def test_requests_are_served_concurrently(api, monkeypatch):
    # Given a request that takes 3 s inside the API

    real_get = action_routes.store.get
    entered = threading.Event()

    def slow_get(*args, **kwargs):
        entered.set()
        time.sleep(3)  # the slow request, deliberately: the thing under test
        return real_get(*args, **kwargs)

    monkeypatch.setattr(action_routes.store, "get", slow_get)
    created = api.admin.call("POST", "/v1/actions", json=webhook())
    slow = threading.Thread(target=api.admin.http.get, args=(f"/v1/actions/{created['id']}",))
    slow.start()
    wait_for(entered.is_set)
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


# ------------------------------------------------------------------ start and stop


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("tickwork-api")}


def test_a_stop_closes_every_connection_and_leaves_no_thread(tmp_path):
    # Given a server with a request being answered, an idle keep-alive connection and a
    # connection that sent half a head
    release, entered = threading.Event(), threading.Event()

    def handler(event, context):
        entered.set()
        release.wait(5)
        return {"statusCode": 200, "headers": {}, "body": "{}"}

    jwt = LocalJwt(tmp_path / "jwt-secret")
    server = api_server.ApiServer(handler, jwt).start()
    parts = urlsplit(server.url)
    with httpx.Client(base_url=server.url) as idle:
        release.set()
        assert idle.get(api_server.OPENAPI_PATH).status_code == 200
        release.clear()
        entered.clear()
        half = socket.create_connection((parts.hostname, parts.port), timeout=5)
        half.sendall(b"GET /v1/workspace HTTP/1.1\r\nHo")
        answers: list[int] = []
        busy = threading.Thread(
            target=lambda: answers.append(httpx.get(server.url + api_server.OPENAPI_PATH,
                                                    timeout=10).status_code)
        )  # fmt: skip
        busy.start()
        wait_for(entered.is_set)
        # When it stops, the request in progress is let finish
        threading.Timer(0.2, release.set).start()
        server.stop()
        busy.join()
        # Then that request was answered, the others were closed, no thread is left
        assert answers == [200]
        assert half.recv(100) == b""
        half.close()
    assert _threads() == set()
    # and the port is free again
    with socket.create_server((parts.hostname, parts.port)):
        pass


def test_a_server_made_but_never_started_stops_cleanly(tmp_path):
    server = api_server.ApiServer(lambda e, c: {}, LocalJwt(tmp_path / "jwt-secret"))
    server.stop()
    assert _threads() == set()
