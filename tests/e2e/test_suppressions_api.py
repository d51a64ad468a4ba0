"""/v1/suppressions through the real local API: add, read, list with filters and pages,
remove; a complaint only by an admin; bad channels and addresses are clear 422s."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from tests.e2e.conftest import Api

CAMPAIGN = "campaign:6f1c2b1e-8f1e-4a57-9a54-3f0d2a9b7c11"


def raw(api: Api, method: str, path: str, client: Any = None, **kwargs: Any) -> httpx.Response:
    return (client or api.admin).http.request(method, path, **kwargs)


def test_add_read_and_remove_an_address(api):
    added = raw(
        api,
        "POST",
        "/v1/suppressions",
        json={"channel": "email", "address": "Ann <Ann@Example.com>", "detail": "asked by phone"},
    )
    assert added.status_code == 201, added.text
    body = added.json()
    assert (body["address"], body["reason"], body["scope"], body["source"]) == (
        "ann@example.com", "manual", "all", "user:alice")  # fmt: skip
    again = raw(
        api,
        "POST",
        "/v1/suppressions",
        api.member,
        json={"channel": "email", "address": "ann@example.com", "reason": "complaint"},
    )
    assert again.status_code == 200
    assert again.json()["reason"] == "manual"  # the first reason is kept
    found = api.member.call("GET", f"/v1/suppressions/email/{quote('ANN@example.com')}")
    assert found["address"] == "ann@example.com"
    removed = api.member.call("DELETE", "/v1/suppressions/email/ann@example.com")
    assert removed["address"] == "ann@example.com"
    gone = raw(api, "GET", "/v1/suppressions/email/ann@example.com")
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "not_found")
    assert raw(api, "DELETE", "/v1/suppressions/email/ann@example.com").status_code == 404


def test_a_complaint_is_removed_only_by_an_admin(api):
    api.admin.call(
        "POST",
        "/v1/suppressions",
        json={"channel": "sms", "address": "+1 555 010 0000", "reason": "complaint"},
    )
    refused = raw(api, "DELETE", "/v1/suppressions/sms/+15550100000", api.member)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    assert api.member.call("GET", "/v1/suppressions/sms/+15550100000")["reason"] == "complaint"
    assert api.admin.call("DELETE", "/v1/suppressions/sms/+15550100000")["reason"] == "complaint"


def test_scoped_entries_are_apart(api):
    api.admin.call("POST", "/v1/suppressions", json={
        "channel": "email", "address": "bob@example.com", "reason": "unsubscribed",
        "scope": CAMPAIGN})  # fmt: skip
    assert raw(api, "GET", "/v1/suppressions/email/bob@example.com").status_code == 404
    scoped = api.admin.call(
        "GET", "/v1/suppressions/email/bob@example.com", params={"scope": CAMPAIGN}
    )
    assert scoped["scope"] == CAMPAIGN
    assert raw(api, "DELETE", "/v1/suppressions/email/bob@example.com").status_code == 404
    api.admin.call("DELETE", "/v1/suppressions/email/bob@example.com", params={"scope": CAMPAIGN})


def test_list_filters_and_pages(api):
    for n in range(5):
        api.admin.call(
            "POST", "/v1/suppressions", json={"channel": "email", "address": f"u{n}@example.com"}
        )
    api.admin.call(
        "POST",
        "/v1/suppressions",
        json={"channel": "sms", "address": "+15550100001", "reason": "stop_reply"},
    )
    seen, cursor = [], None
    while True:
        params = {"limit": 2, "channel": "email"} | ({"cursor": cursor} if cursor else {})
        page = api.member.call("GET", "/v1/suppressions", params=params)
        seen += [e["address"] for e in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == [f"u{n}@example.com" for n in range(5)]
    stops = api.admin.call("GET", "/v1/suppressions", params={"reason": "stop_reply"})["items"]
    assert [e["address"] for e in stops] == ["+15550100001"]
    assert api.outsider.call("GET", "/v1/suppressions")["items"] == []
    bad = raw(api, "GET", "/v1/suppressions", params={"cursor": "bm9wZQ"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_input")


def test_bad_channels_addresses_and_scopes_are_clear_422s(api):
    cases = [
        ({"channel": "fax", "address": "+15550100000"}, "unknown_channel"),
        ({"channel": "email", "address": "not an address"}, "invalid_address"),
        ({"channel": "sms", "address": "5550100"}, "invalid_address"),
        ({"channel": "email", "address": "a@example.com", "scope": "campaign:x"},
         "invalid_input"),
        ({"channel": "email", "address": "a@example.com", "reason": "bored"}, "invalid_input"),
    ]  # fmt: skip
    for body, code in cases:
        answer = raw(api, "POST", "/v1/suppressions", json=body)
        assert (answer.status_code, answer.json()["error"]["code"]) == (422, code), body
    path = raw(api, "GET", "/v1/suppressions/fax/123")
    assert (path.status_code, path.json()["error"]["code"]) == (422, "unknown_channel")
    path = raw(api, "DELETE", "/v1/suppressions/sms/hello")
    assert (path.status_code, path.json()["error"]["code"]) == (422, "invalid_address")
