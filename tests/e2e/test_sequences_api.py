"""/v1/campaigns, /v1/enrollments, /v1/recipients, /v1/forecast and /v1/changes over real
HTTP against the local runtime, whose drip advance cron runs every half second here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from tests.e2e.conftest import Api, running_api
from tests.e2e.test_api import error_of
from tests.waiting import wait_for
from tickwork.platform.config import Settings
from tickwork.platform.db import connect


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with running_api(database_url, tmp_path, Settings(), drips_interval=0.5) as running:
        yield running


def step(text: str, **wait: Any) -> dict[str, Any]:
    return {"wait": wait or {"delay_seconds": 0},
            "action": {"action_type": "webhook", "target_key": "primary",
                       "payload": {"text": text, "to": "{{ recipient.id }}"}}}  # fmt: skip


def put_recipient(api: Api, recipient_id: str = "ann", **body: Any) -> dict[str, Any]:
    return api.admin.call(
        "PUT", f"/v1/recipients/{recipient_id}", json={"timezone": "America/New_York"} | body
    )


def deliveries(api: Api) -> list[dict[str, Any]]:
    return [d.body["data"] for d in api.local.receiver.deliveries]


def test_a_3_step_drip_enrolled_twice_sends_each_step_once(api):
    put_recipient(api)
    campaign = api.admin.call("POST", "/v1/campaigns", json={
        "name": "welcome",
        "steps": [step("welcome {{ data.name }}"), step("tips", delay_seconds=1),
                  step("offer", delay_seconds=1)],
    })  # fmt: skip
    path = f"/v1/campaigns/{campaign['id']}/enrollments"
    first = api.admin.http.post(path, json={"recipient_id": "ann", "data": {"name": "Ann"}})
    again = api.admin.http.post(path, json={"recipient_id": "ann", "data": {"name": "Bea"}})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    eid = first.json()["id"]
    wait_for(lambda: len(deliveries(api)) >= 3, timeout=20)
    texts = [d["payload"]["text"] for d in deliveries(api)]
    assert texts == ["welcome Ann", "tips", "offer"]
    assert all(d["payload"]["to"] == "ann" for d in deliveries(api))
    wait_for(lambda: api.admin.call("GET", f"/v1/enrollments/{eid}")["status"] == "completed")
    done = api.admin.call("GET", f"/v1/enrollments/{eid}")
    assert [s["status"] for s in done["steps"]] == ["published"] * 3
    assert Counter(d["id"] for d in deliveries(api)) == {s["action_id"]: 1 for s in done["steps"]}
    # the second step went no sooner than its delay after the first was sent
    sent = [datetime.fromisoformat(s["publish_at"]) for s in done["steps"]]
    assert sent[1] - sent[0] >= timedelta(seconds=1)


def test_an_exit_between_steps_sends_nothing_more_and_is_in_the_change_log(api):
    put_recipient(api)
    campaign = api.admin.call("POST", "/v1/campaigns", json={
        "name": "drip", "steps": [step("one"), step("two", delay_seconds=3600)]})  # fmt: skip
    eid = api.admin.call("POST", f"/v1/campaigns/{campaign['id']}/enrollments",
                         json={"recipient_id": "ann"})["id"]  # fmt: skip
    wait_for(lambda: len(api.admin.call("GET", f"/v1/enrollments/{eid}")["steps"]) == 2)
    pending = api.admin.call("GET", f"/v1/enrollments/{eid}")["steps"][1]
    assert pending["status"] == "queued"
    exited = api.member.call("POST", f"/v1/enrollments/{eid}/exit", json={"reason": "replied"})
    assert (exited["status"], exited["exit_reason"], exited["exit_outcome"]) == (
        "exited", "replied", "cancelled")  # fmt: skip
    action = api.admin.call("GET", f"/v1/actions/{pending['action_id']}")
    assert action["status"] == "cancelled"
    [change] = action["changes"]
    assert (change["kind"], change["actor"], change["reason"]) == (
        "exit", "mallory-member", "enrollment exited: replied")  # fmt: skip
    assert change["old_at"] == pending["publish_at"]
    listed = api.admin.call("GET", f"/v1/changes?enrollment_id={eid}")["items"]
    assert [c["id"] for c in listed] == [change["id"]]
    assert api.admin.call("GET", "/v1/changes?kind=exit")["items"][0]["id"] == change["id"]
    assert len(deliveries(api)) == 1


def test_an_event_in_the_campaigns_exit_events_ends_the_enrollment(api):
    put_recipient(api)
    campaign = api.admin.call("POST", "/v1/campaigns", json={
        "name": "drip", "exit_events": ["email.replied"],
        "steps": [step("one", delay_seconds=3600), step("two")]})  # fmt: skip
    eid = api.admin.call("POST", f"/v1/campaigns/{campaign['id']}/enrollments",
                         json={"recipient_id": "ann"})["id"]  # fmt: skip
    api.admin.call("POST", "/v1/events", json={"type": "email.replied",
                                               "entities": {"recipient": "ann"}})  # fmt: skip
    done = api.admin.call("GET", f"/v1/enrollments/{eid}")
    assert (done["status"], done["exit_reason"], done["steps"][0]["status"]) == (
        "exited", "event email.replied", "cancelled")  # fmt: skip


def test_quiet_hours_in_tokyo_move_an_sms_due_2330_to_0800(api):
    put_recipient(api, timezone="Asia/Tokyo", quiet_hours=[{"start": "21:00", "end": "08:00"}])
    made = api.admin.call("POST", "/v1/actions", json={
        "action_type": "log", "target_key": "sms", "recipient_id": "ann",
        "date": "2027-06-01", "time": "23:30", "timezone": "Asia/Tokyo"})  # fmt: skip
    assert made["publish_at"] == "2027-06-01T23:00:00Z"  # 08:00 on 2 June in Tokyo
    assert made["original_publish_at"] == "2027-06-01T14:30:00Z"  # 23:30 in Tokyo
    [change] = api.admin.call("GET", f"/v1/actions/{made['id']}")["changes"]
    assert (change["kind"], change["old_at"], change["new_at"], change["actor"]) == (
        "quiet_hours", "2027-06-01T14:30:00Z", "2027-06-01T23:00:00Z", "alice")  # fmt: skip
    # the same request again with its Idempotency-Key is the same action, moved or not
    body = {"action_type": "log", "target_key": "sms", "recipient_id": "ann",
            "date": "2027-06-01", "time": "23:30", "timezone": "Asia/Tokyo"}  # fmt: skip
    key = {"Idempotency-Key": "sms-1"}
    first = api.admin.http.post("/v1/actions", json=body, headers=key)
    again = api.admin.http.post("/v1/actions", json=body, headers=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]


def test_a_cap_of_2_a_day_defers_the_third_and_the_recipient_shows_the_count(api):
    put_recipient(api, caps={"webhook": 2})
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    ids = [api.admin.call("POST", "/v1/actions", json={
        "action_type": "webhook", "target_key": "primary", "recipient_id": "ann",
        "publish_at": soon, "payload": {"n": n}})["id"] for n in range(3)]  # fmt: skip
    wait_for(lambda: len(deliveries(api)) == 2)
    wait_for(lambda: any(
        api.admin.call("GET", f"/v1/actions/{i}")["changes"] for i in ids))  # fmt: skip
    views = [api.admin.call("GET", f"/v1/actions/{i}") for i in ids]
    [deferred] = [v for v in views if v["status"] == "queued"]
    assert deferred["id"] not in {d["id"] for d in deliveries(api)}
    [change] = deferred["changes"]
    assert change["kind"] == "defer"
    assert change["new_at"] == deferred["next_attempt_at"]
    local = datetime.fromisoformat(deferred["next_attempt_at"]).astimezone(
        __import__("zoneinfo").ZoneInfo("America/New_York")
    )
    assert local.time().isoformat() == "00:00:00"
    assert api.admin.call("GET", "/v1/recipients/ann")["sent_today"] == {"webhook": 2}


def test_the_forecast_matches_the_rows(api, database_url):
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    for hours, count, action_type in ((0, 3, "webhook"), (0, 1, "log"), (5, 2, "webhook")):
        for i in range(count):
            api.admin.call("POST", "/v1/actions", json={
                "action_type": action_type, "target_key": "primary",
                "publish_at": (base + timedelta(hours=hours, minutes=i)).isoformat()})  # fmt: skip
    api.outsider.call("POST", "/v1/actions", json={
        "action_type": "log", "target_key": "x", "publish_at": base.isoformat()})  # fmt: skip
    got = api.admin.call("GET", "/v1/forecast?hours=48")
    buckets = {(b["hour"], b["action_type"]): b["due"] for b in got["buckets"]}
    assert all(b["connection_id"] is None for b in got["buckets"])
    with connect(database_url) as conn:
        rows = conn.execute(
            "select date_trunc('hour', publish_at), action_type, count(*) from scheduled_actions"
            " where workspace_id = %s and status = 'queued' group by 1, 2",
            (api.workspace_a,),
        ).fetchall()
    expected = {(h.astimezone(UTC).isoformat().replace("+00:00", "Z"), t): n for h, t, n in rows}
    assert buckets == expected
    assert got["totals"] == {"webhook": 5, "log": 1}
    assert api.admin.call("GET", "/v1/forecast?hours=1")["buckets"] == []
    assert error_of(api.admin.http.get("/v1/forecast?hours=0"), 422)


def test_every_move_is_in_the_change_log(api):
    future = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    made = api.admin.call("POST", "/v1/actions", json={
        "action_type": "log", "target_key": "x", "publish_at": future.isoformat()})  # fmt: skip
    moved = api.admin.call(
        "POST",
        f"/v1/actions/{made['id']}/reschedule",
        json={"publish_at": (future + timedelta(hours=1)).isoformat()},
    )
    api.member.call("POST", f"/v1/actions/{moved['id']}/cancel")
    log = api.admin.call("GET", "/v1/changes")["items"]
    assert [(c["kind"], c["action_id"], c["actor"]) for c in log] == [
        ("reschedule", made["id"], "alice"),
        ("cancel", moved["id"], "mallory-member"),
    ]
    assert log[0]["new_action_id"] == moved["id"]
    assert (log[0]["old_at"], log[0]["new_at"]) == (made["publish_at"], moved["publish_at"])
    assert api.outsider.call("GET", "/v1/changes")["items"] == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/recipients/ann", {"timezone": "Mars/Base"}, "timezone"),
        ("/v1/recipients/ann", {"timezone": "UTC", "caps": {"fax": 1}}, "caps.fax"),
        ("/v1/recipients/ann", {"timezone": "UTC", "caps": {"log": 0}}, "caps.log"),
        ("/v1/recipients/ann", {"timezone": "UTC",
                                "quiet_hours": [{"start": "25:00", "end": "08:00"}]},
         "quiet_hours[0].start"),
        ("/v1/recipients/ann", {"timezone": "UTC",
                                "quiet_hours": [{"days": ["funday"], "start": "21:00",
                                                 "end": "08:00"}]}, "quiet_hours[0].days"),
        ("/v1/campaigns", {"name": "c", "steps": [step("x", delay_seconds=-1)]},
         "steps[0].wait.delay_seconds"),
        ("/v1/campaigns", {"name": "c", "steps": [step("x", day=1, at="9 am")]},
         "steps[0].wait.at"),
        ("/v1/campaigns", {"name": "c", "steps": [step("{% if %}")]},
         "steps[0].action.payload.text"),
        ("/v1/campaigns", {"name": "c", "steps": [
            step("x"), step("{% set x = (((9**64)**64)**64)**64 %}ok")]},
         "steps[1].action.payload.text"),
        ("/v1/campaigns", {"name": "c", "steps": [
            step("{% for x in data.l recursive %}{{ loop(x) }}{% endfor %}")]},
         "steps[0].action.payload.text"),
        ("/v1/campaigns", {"name": "c", "steps": [
            step("x") | {"conditions": [{"path": "nowhere.x", "op": "eq", "value": 1}]}]},
         "steps[0].conditions[0].path"),
    ],
)  # fmt: skip
def test_bad_input_is_a_422_naming_the_field_and_writes_nothing(
    api, database_url, path, body, field
):
    method = "PUT" if path.startswith("/v1/recipients") else "POST"
    error = error_of(api.admin.http.request(method, path, json=body), 422)
    named = error["details"].get("field") or error["details"]["errors"][0]["field"]
    assert named == field, error
    with connect(database_url) as conn:
        counts = conn.execute(
            "select (select count(*) from recipients), (select count(*) from campaigns)"
        ).fetchone()
    assert counts == (0, 0)


@pytest.mark.timeout(60)
def test_a_step_over_its_budget_is_skipped_with_the_reason_and_the_next_sent(api):
    # Given a drip whose first step's template would grow without end on this data
    put_recipient(api)
    campaign = api.admin.call("POST", "/v1/campaigns", json={"name": "drip", "steps": [
        step("{% set s = data.s %}" + "{% set s = s ~ s %}" * 60), step("two")]})  # fmt: skip
    # When a recipient is enrolled
    eid = api.admin.call("POST", f"/v1/campaigns/{campaign['id']}/enrollments",
                         json={"recipient_id": "ann", "data": {"s": "ab"}})["id"]  # fmt: skip
    # Then the step is skipped with the reason, and the next one is sent
    wait_for(lambda: len(deliveries(api)) == 1)
    assert [d["payload"]["text"] for d in deliveries(api)] == ["two"]
    enrollment = api.admin.call("GET", f"/v1/enrollments/{eid}")
    assert enrollment["last_error"] == (
        "step 0 was skipped: action.payload.text: the template would make a value of more"
        " than 262,144 characters or items"
    )


def test_campaigns_are_listed_in_pages_and_a_tampered_cursor_is_refused(api):
    ids = [api.admin.call("POST", "/v1/campaigns", json={"name": f"c{i}", "steps": [step("x")]})
           ["id"] for i in range(3)]  # fmt: skip
    first = api.admin.call("GET", "/v1/campaigns", params={"limit": 2})
    second = api.admin.call("GET", "/v1/campaigns",
                            params={"limit": 2, "cursor": first["next_cursor"]})  # fmt: skip
    assert [c["id"] for c in first["items"] + second["items"]] == ids
    assert second["next_cursor"] is None
    tampered = api.admin.http.get("/v1/campaigns", params={"cursor": "bm90IGEgY3Vyc29y"})
    answer = error_of(tampered, 422)
    assert (answer["code"], answer["message"]) == (
        "invalid_input", "cursor is not one this API returned")  # fmt: skip


def test_unknown_recipients_and_other_workspaces_campaigns_are_not_found(api):
    campaign = api.admin.call("POST", "/v1/campaigns", json={"name": "c", "steps": [step("x")]})
    path = f"/v1/campaigns/{campaign['id']}/enrollments"
    assert error_of(api.admin.http.post(path, json={"recipient_id": "nobody"}), 404)
    assert error_of(api.outsider.http.get(f"/v1/campaigns/{campaign['id']}"), 404)
    api.outsider.call("PUT", "/v1/recipients/ann", json={"timezone": "UTC"})
    assert error_of(api.outsider.http.post(path, json={"recipient_id": "ann"}), 404)
    assert error_of(api.admin.http.get("/v1/recipients/ann"), 404)
    sms = {"action_type": "log", "target_key": "x", "recipient_id": "ann",
           "publish_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}  # fmt: skip
    assert (
        error_of(api.admin.http.post("/v1/actions", json=sms), 422)["code"] == "unknown_recipient"
    )


def test_lists_under_a_parent_that_is_not_there_are_404_not_empty(api):
    # Given a campaign of workspace A with an enrollment, and one of workspace B
    put_recipient(api)
    campaign = api.admin.call("POST", "/v1/campaigns", json={"name": "c", "steps": [step("x")]})
    enrolled = api.admin.call(
        "POST", f"/v1/campaigns/{campaign['id']}/enrollments", json={"recipient_id": "ann"}
    )
    theirs = api.outsider.call("POST", "/v1/campaigns", json={"name": "b", "steps": [step("y")]})
    # When A lists the enrollments of a campaign it does not have (unknown, B's, malformed)
    for campaign_id in (str(uuid4()), theirs["id"], "not-a-campaign"):
        listing = api.admin.http.get(f"/v1/campaigns/{campaign_id}/enrollments")
        # Then it is a 404 naming what is missing, not an empty page
        assert "campaign" in error_of(listing, 404)["message"]
    # and the change log of an enrollment that is not A's is a 404 too
    for enrollment_id in (str(uuid4()), enrolled["id"]):
        client = api.admin if enrollment_id != enrolled["id"] else api.outsider
        changes = client.http.get("/v1/changes", params={"enrollment_id": enrollment_id})
        assert "enrollment" in error_of(changes, 404)["message"]
    # while A's own lists answer as before
    page = api.admin.call("GET", f"/v1/campaigns/{campaign['id']}/enrollments")
    assert [e["id"] for e in page["items"]] == [enrolled["id"]]
    assert (
        api.admin.call("GET", "/v1/changes", params={"enrollment_id": enrolled["id"]})["items"]
        == []
    )
