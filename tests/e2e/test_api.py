"""The HTTP API over real HTTP against the local server (JWT checked as API Gateway would)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api
from tests.waiting import wait_for
from tickwork.actions import model, store
from tickwork.platform.db import connect

ERROR_KEYS = {"code", "message", "details"}


def at(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def webhook(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"action_type": "webhook", "target_key": "primary",
                            "publish_at": at(3600), "payload": {"text": "hi"}}  # fmt: skip
    body.update(overrides)
    return body


def create(api: Api, **overrides: Any) -> dict[str, Any]:
    return api.admin.call("POST", "/v1/actions", json=webhook(**overrides))


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == ERROR_KEYS
    return error


def arrived_ids(api: Api) -> list[str]:
    return [d.body["data"]["id"] for d in api.local.receiver.deliveries]


# ---------------------------------------------------------------------------- create


def test_create_with_an_instant_answers_in_utc_and_workspace_time(api):
    created = create(api, publish_at="2027-07-04T09:00:00-04:00", thing_id="post-1")
    assert created["status"] == "queued"
    assert created["publish_at"] == "2027-07-04T13:00:00Z"
    assert created["publish_at_local"] == "2027-07-04T09:00:00-04:00"  # workspace: New York
    assert api.admin.call("GET", f"/v1/actions/{created['id']}")["id"] == created["id"]


def test_create_with_a_wall_time_uses_the_workspace_zone_and_the_gap_rule(api):
    # 02:30 does not exist in New York on 2027-03-14: it is read as 03:30 EDT
    created = create(api, publish_at=None, date="2027-03-14", time="02:30")
    assert created["publish_at"] == "2027-03-14T07:30:00Z"
    assert created["publish_at_local"] == "2027-03-14T03:30:00-04:00"
    sydney = create(api, publish_at=None, date="2027-04-04", time="02:30",
                    timezone="Australia/Sydney")  # fmt: skip
    assert sydney["publish_at"] == "2027-04-03T15:30:00Z"  # repeated: the first (AEDT)


def test_an_action_due_soon_fires_on_time_through_the_api(api):
    created = create(api, publish_at=at(1.5))
    wait_for(lambda: created["id"] in arrived_ids(api))
    [delivery] = api.local.receiver.deliveries
    assert delivery.verified
    assert 0 <= (delivery.lag_seconds or 0) < 1.0  # precision: make bench


def test_the_same_idempotency_key_returns_the_same_action(api):
    headers = {"Idempotency-Key": "req-42"}
    body = webhook(thing_id="t1")
    first = api.admin.http.post("/v1/actions", json=body, headers=headers)
    again = api.admin.http.post("/v1/actions", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["idempotency_key"] == "req-42"
    reused = api.admin.http.post("/v1/actions", json=body | {"thing_id": "t2"}, headers=headers)
    assert error_of(reused, 422)["code"] == "idempotency_key_reused"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (webhook(action_type="send_fax"), 422, "unknown_action_type"),
        (webhook(target_key="no-such-endpoint"), 422, "unknown_target"),
        (webhook(publish_at=None, date="2027-01-05", time="09:00", timezone="Mars/Base"),
         422, "invalid_timezone"),
        (webhook(publish_at="2020-01-01T00:00:00Z"), 422, "time_in_past"),
        (webhook(publish_at="2027-01-05T09:00:00"), 422, "invalid_input"),  # no offset
        (webhook(publish_at=None), 422, "invalid_input"),  # no time at all
        (webhook(payload={"blob": "x" * 70_000}), 413, "payload_too_large"),
        (webhook(payload={"text": "nul \u0000 inside"}), 422, "invalid_input"),
        (webhook(colour="red"), 422, "invalid_input"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_4xx_and_writes_nothing(api, database_url, body, status, code):
    response = api.admin.http.post("/v1/actions", json=body)
    error = error_of(response, status)
    assert error["code"] == code
    with connect(database_url) as conn:
        assert conn.execute("select count(*) from scheduled_actions").fetchone()[0] == 0


def test_malformed_requests_are_400_or_413(api):
    not_json = api.admin.http.post(
        "/v1/actions", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert error_of(not_json, 400)["message"].startswith("the request body is not valid JSON")
    huge = api.admin.http.post(
        "/v1/actions", content=b"x" * 300_000, headers={"content-type": "application/json"}
    )
    assert error_of(huge, 413)["code"] == "payload_too_large"


# ------------------------------------------------------------------------- calendar


def test_list_a_range_in_pages(api):
    made = [create(api, publish_at=f"2027-05-0{d}T09:00:00Z")["id"] for d in range(1, 8)]
    create(api, publish_at="2027-06-01T09:00:00Z")  # outside the range
    params = {"from": "2027-05-01T00:00:00Z", "to": "2027-05-31T00:00:00Z", "limit": 3}
    seen: list[str] = []
    cursor = None
    while True:
        paging = {"cursor": cursor} if cursor else {}
        page = api.admin.call("GET", "/v1/actions", params=params | paging)
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made


def test_list_filters_by_status_and_thing(api):
    keep = create(api, thing_id="post-9")
    gone = create(api, thing_id="post-8")
    api.admin.call("POST", f"/v1/actions/{gone['id']}/cancel")
    window = {"from": at(-60), "to": at(7200)}
    queued = api.admin.call("GET", "/v1/actions", params=window | {"status": "queued"})
    assert [i["id"] for i in queued["items"]] == [keep["id"]]
    by_thing = api.admin.call("GET", "/v1/actions", params=window | {"thing_id": "post-8"})
    assert [i["status"] for i in by_thing["items"]] == ["cancelled"]


# ---------------------------------------------------------------------- transitions


def test_cancel_is_idempotent_and_refused_past_queued(api, database_url):
    created = create(api)
    path = f"/v1/actions/{created['id']}/cancel"
    assert api.admin.call("POST", path)["status"] == "cancelled"
    assert api.admin.call("POST", path)["status"] == "cancelled"
    published = create(api, thing_id="done")
    with connect(database_url) as conn:
        store.claim(conn, "webhook", [published["id"]], early_tolerance=7200)
        store.finalize(conn, [model.published(published["id"], "p1")])
    refused = api.admin.http.post(f"/v1/actions/{published['id']}/cancel")
    assert "only queued actions can be cancelled" in error_of(refused, 409)["message"]


def test_reschedule_cancels_links_and_only_the_new_one_fires(api):
    old = create(api, publish_at=at(1.0), thing_id="post-r")
    moved = api.admin.call(
        "POST", f"/v1/actions/{old['id']}/reschedule", json={"publish_at": at(2.0)}
    )
    assert moved["rescheduled_from"] == old["id"]
    assert api.admin.call("GET", f"/v1/actions/{old['id']}")["status"] == "cancelled"
    # (once the new one has arrived and the queue is empty, the old one's message included)
    queue = api.local.queues.queue("webhook")
    wait_for(lambda: moved["id"] in arrived_ids(api) and len(queue) == 0)
    assert arrived_ids(api) == [moved["id"]]


def test_send_now_fires_at_once(api):
    later = create(api, publish_at=at(3600), thing_id="post-s")
    sent = api.admin.call("POST", f"/v1/actions/{later['id']}/send-now")
    assert (sent["source"], sent["rescheduled_from"]) == ("send_now", later["id"])
    wait_for(lambda: sent["id"] in arrived_ids(api), timeout=3)


def make_failed(api: Api, database_url: str) -> str:
    created = create(api, thing_id="post-f")
    with connect(database_url) as conn:
        store.claim(conn, "webhook", [created["id"]], early_tolerance=7200)
        store.finalize(conn, [model.failed(created["id"], "provider_rejected", "400")])
    return str(created["id"])


def test_retry_is_for_admins(api, database_url):
    failed = make_failed(api, database_url)
    refused = api.member.http.post(f"/v1/actions/{failed}/retry")
    assert "admin" in error_of(refused, 403)["message"]
    retried = api.admin.call("POST", f"/v1/actions/{failed}/retry")
    assert (retried["id"], retried["status"], retried["manual_retries"]) == (failed, "queued", 1)
    wait_for(lambda: failed in arrived_ids(api))


def test_retry_of_a_queued_action_is_a_conflict(api):
    created = create(api)
    refused = api.admin.http.post(f"/v1/actions/{created['id']}/retry")
    assert "only failed actions can be retried" in error_of(refused, 409)["message"]


# ----------------------------------------------------------------- workspace, stats


def test_workspace_zone_is_validated_and_admin_only(api):
    assert api.admin.call("GET", "/v1/workspace")["timezone"] == "America/New_York"
    bad = api.admin.http.patch("/v1/workspace", json={"timezone": "Atlantis/Capital"})
    assert error_of(bad, 422)["code"] == "invalid_timezone"
    assert error_of(api.member.http.patch("/v1/workspace", json={"name": "X"}), 403)
    changed = api.admin.call("PATCH", "/v1/workspace", json={"timezone": "Europe/Berlin"})
    assert changed["timezone"] == "Europe/Berlin"
    assert changed["now_local"].endswith(("+01:00", "+02:00"))


def test_retention_and_legal_hold_are_set_by_admins_and_validated(api):
    retention = api.admin.call("GET", "/v1/workspace")["retention"]
    assert retention == {"days": 90, "own_days": None, "default_days": 90, "legal_hold": False}
    for bad in (6, 3651, "thirty", "30", 30.5, True):
        refused = api.admin.http.patch("/v1/workspace", json={"retention_days": bad})
        assert error_of(refused, 422)["code"] == "invalid_input", bad
    assert error_of(api.admin.http.patch("/v1/workspace", json={"legal_hold": "yes"}), 422)
    assert error_of(api.member.http.patch("/v1/workspace", json={"legal_hold": True}), 403)
    changed = api.admin.call("PATCH", "/v1/workspace",
                             json={"retention_days": 30, "legal_hold": True})  # fmt: skip
    assert changed["retention"] == {"days": 30, "own_days": 30, "default_days": 90,
                                    "legal_hold": True}  # fmt: skip
    # a change of something else leaves them; null goes back to the stack's retention
    assert api.admin.call("PATCH", "/v1/workspace", json={"name": "N"})["retention"][
        "own_days"] == 30  # fmt: skip
    back = api.admin.call("PATCH", "/v1/workspace", json={"retention_days": None,
                                                         "legal_hold": False})  # fmt: skip
    assert back["retention"] == {"days": 90, "own_days": None, "default_days": 90,
                                 "legal_hold": False}  # fmt: skip


def test_stats_count_by_status_and_type(api):
    create(api)
    create(api)
    api.admin.call("POST", f"/v1/actions/{create(api)['id']}/cancel")
    stats = api.admin.call("GET", "/v1/stats")
    counts = {(c["status"], c["action_type"]): c["count"] for c in stats["counts"]}
    assert counts == {("queued", "webhook"): 2, ("cancelled", "webhook"): 1}
    assert stats["due_backlog"] == 0


# ------------------------------------------------------------------------- tenancy


def test_no_token_or_a_bad_token_is_401(api):
    assert error_of(httpx.get(f"{api.url}/v1/workspace"), 401)
    forged = httpx.get(
        f"{api.url}/v1/workspace",
        headers={"Authorization": "Bearer not.a.jwt", "X-Workspace-Id": api.workspace_a},
    )
    assert error_of(forged, 401)["code"] == "unauthenticated"


def test_a_non_member_is_refused(api):
    intruder = api.outsider.http.get("/v1/workspace", headers={"X-Workspace-Id": api.workspace_a})
    assert "not a member" in error_of(intruder, 403)["message"]


def test_another_workspaces_action_is_not_found_on_every_endpoint(api, database_url):
    mine = create(api)["id"]
    failed = make_failed(api, database_url)
    attempts = [
        ("GET", f"/v1/actions/{mine}", None),
        ("POST", f"/v1/actions/{mine}/cancel", None),
        ("POST", f"/v1/actions/{mine}/reschedule", {"publish_at": at(7200)}),
        ("POST", f"/v1/actions/{mine}/send-now", None),
        ("POST", f"/v1/actions/{failed}/retry", None),
    ]
    for method, path, body in attempts:
        response = api.outsider.http.request(method, path, json=body)
        assert error_of(response, 404)["code"] == "not_found", path
    # and nothing changed for the owner
    assert api.admin.call("GET", f"/v1/actions/{mine}")["status"] == "queued"
    assert api.admin.call("GET", f"/v1/actions/{failed}")["status"] == "failed"
    window = {"from": at(-3600), "to": at(86400)}
    assert api.outsider.call("GET", "/v1/actions", params=window)["items"] == []


def test_the_openapi_document_is_served_without_a_token(api):
    document = httpx.get(f"{api.url}/v1/openapi.json").json()
    assert document["info"]["title"] == "Tickwork"
    assert "/v1/actions/{action_id}/reschedule" in document["paths"]


def test_values_postgres_cannot_store_are_a_422_everywhere(api):
    patched = api.admin.http.patch("/v1/workspace", json={"settings": {"note": "a\u0000b"}})
    assert error_of(patched, 422)["code"] == "invalid_input"
    assert api.admin.call("GET", "/v1/workspace")["settings"] == {}
