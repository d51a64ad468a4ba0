"""/v1/rules, /v1/events and /v1/entities over real HTTP against the local runtime: rules
turn an app's events and reference dates into actions that fire with their snapshot."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import arrived_ids, error_of
from tests.waiting import wait_for
from tickwork.platform.db import connect

HOUR = 3600


def event_rule(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "confirmation",
        "trigger": {"type": "event", "event": "booking.confirmed"},
        "action": {"action_type": "log", "target_key": "guest",
                   "payload": {"text": "Hi {{ context.guest.name }}"}},
    }  # fmt: skip
    body.update(overrides)
    return body


def time_rule(name: str, offset: int, **action: Any) -> dict[str, Any]:
    return {
        "name": name,
        "trigger": {"type": "time", "entity_type": "booking", "reference": "start",
                    "offset_seconds": offset},
        "action": {"action_type": action.get("action_type", "log"),
                   "target_key": action.get("target_key", "guest"),
                   "payload": action.get("payload", {"text": "{{ context.guest.name }}"})},
    }  # fmt: skip


def create(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    return api.admin.call("POST", "/v1/rules", json=body)


def event(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "booking.confirmed",
                            "entities": {"booking": "bk-1", "podcast": "pod-1"},
                            "context": {"guest": {"name": "Ann"}}}  # fmt: skip
    body.update(overrides)
    return body


def dates(api: Api, start: str, entity: str = "bk-1", **extra: Any) -> dict[str, Any]:
    body = {"dates": {"start": start}, "context": {"guest": {"name": "Ann"}}} | extra
    return api.admin.call("PUT", f"/v1/entities/booking/{entity}/dates", json=body)


def count_actions(database_url: str) -> int:
    with connect(database_url) as conn:
        return int(conn.execute("select count(*) from scheduled_actions").fetchone()[0])


# -------------------------------------------------------------------------------- rules


def test_rules_can_be_created_read_listed_edited_and_deleted(api):
    created = api.admin.http.post("/v1/rules", json=event_rule())
    assert created.status_code == 201, created.text
    rule = created.json()
    assert rule["trigger"] == {"type": "event", "event": "booking.confirmed",
                               "entity_type": None, "reference": None,
                               "offset_seconds": None}  # fmt: skip
    assert api.admin.call("GET", f"/v1/rules/{rule['id']}")["name"] == "confirmation"
    page = api.member.call("GET", "/v1/rules")
    assert [r["id"] for r in page["items"]] == [rule["id"]]
    edited = api.admin.call("PATCH", f"/v1/rules/{rule['id']}", json={"name": "welcome"})
    assert (edited["name"], edited["revision"]) == ("welcome", 2)
    assert edited["trigger"] == rule["trigger"]
    deleted = api.admin.http.delete(f"/v1/rules/{rule['id']}")
    assert deleted.status_code == 200
    assert error_of(api.admin.http.get(f"/v1/rules/{rule['id']}"), 404)["code"] == "not_found"


def test_rules_are_listed_in_pages(api):
    ids = [create(api, event_rule(name=f"r{i}"))["id"] for i in range(3)]
    first = api.admin.call("GET", "/v1/rules?limit=2")
    second = api.admin.call("GET", f"/v1/rules?limit=2&cursor={first['next_cursor']}")
    assert [r["id"] for r in first["items"] + second["items"]] == ids
    assert second["next_cursor"] is None
    # A cursor this API did not hand out is the caller's mistake, named, not a 500
    tampered = api.admin.http.get("/v1/rules", params={"cursor": first["next_cursor"][:-4]})
    answer = error_of(tampered, 422)
    assert (answer["code"], answer["message"]) == (
        "invalid_input", "cursor is not one this API returned")  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"action": {"action_type": "send_fax", "target_key": "t"}}, "action.action_type"),
        ({"action": {"action_type": "log", "target_key": "t",
                     "payload": {"text": "{% if %}"}}}, "action.payload.text"),
        ({"action": {"action_type": "webhook", "target_key": "nowhere"}}, "action.target_key"),
        ({"trigger": {"type": "time", "entity_type": "booking", "reference": "start",
                      "offset_seconds": 10**9}}, "trigger.offset_seconds"),
        ({"trigger": {"type": "time", "entity_type": "booking", "reference": "start"}},
         "trigger.offset_seconds"),
        ({"conditions": [{"path": "nowhere.x", "op": "eq", "value": 1}]}, "conditions[0].path"),
        ({"conditions": [{"path": "context.x", "op": "gt", "value": [1]}]},
         "conditions[0].value"),
        ({"conditions": [{"path": "context.x", "op": "like"}]}, "conditions[0].op"),
    ],
)  # fmt: skip
def test_a_rule_that_cannot_fire_is_a_422_naming_the_field(api, database_url, change, field):
    response = api.admin.http.post("/v1/rules", json=event_rule() | change)
    error = error_of(response, 422)
    assert field in error["message"], error
    named = error["details"].get("field") or error["details"]["errors"][0]["field"]
    assert named == field
    with connect(database_url) as conn:
        assert conn.execute("select count(*) from rules").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/rules", event_rule(conditions=[{"path": "context.x", "op": "like"}])),
        ("/v1/rules", event_rule(conditions=[{"path": "context.x", "op": "exists"}] * 21)),
        ("/v1/rules", event_rule(conditions=[{"path": "nowhere.x", "op": "eq", "value": 1}])),
        ("/v1/campaigns", {"name": "c", "steps": [
            {"wait": {"delay_seconds": 0}, "conditions": [{"path": "data.x", "op": "like"}],
             "action": {"action_type": "log", "target_key": "x", "payload": {}}}]}),
    ],
)  # fmt: skip
def test_a_condition_that_cannot_be_read_is_invalid_condition_however_it_is_wrong(api, path, body):
    # an unknown operator and too many conditions are refused by the body's schema, a bad
    # path by the rules' own check: the same code either way, as the docs' table says
    error = error_of(api.admin.http.post(path, json=body), 422)
    assert error["code"] == "invalid_condition", error
    assert "conditions" in error["message"]


def test_a_bad_condition_beside_another_problem_is_invalid_input_listing_both(api):
    body = event_rule(conditions=[{"path": "context.x", "op": "like"}], name="")
    error = error_of(api.admin.http.post("/v1/rules", json=body), 422)
    assert error["code"] == "invalid_input"
    assert {e["field"] for e in error["details"]["errors"]} == {"name", "conditions[0].op"}


HOSTILE_CONSTANTS = [
    "{% set x = (((9**64)**64)**64)**64 %}ok",
    "{{ 'ab' * 9999999 }}",
    "{{ ('x' * 200000) ~ ('x' * 200000) }}",
    "{% for x in context.l recursive %}{{ loop(x) }}{% endfor %}",
    "{% for x in context.l %}{% for y in x %}{% endfor %}{% endfor %}",
]


@pytest.mark.parametrize("template", HOSTILE_CONSTANTS)
def test_a_template_that_is_over_its_budget_when_written_is_a_422_invalid_template(
    api, database_url, template
):
    # Given a rule, when it is created or edited with a template whose constants alone
    # break the budget (or a loop shape that is refused): 422 naming the field
    payload = {"text": "Hi", "body": {"t": template}}
    action = {"action_type": "log", "target_key": "guest", "payload": payload}
    created = api.admin.http.post("/v1/rules", json=event_rule(action=action))
    rule = create(api, event_rule(name="kept"))
    edited = api.admin.http.patch(f"/v1/rules/{rule['id']}", json={"action": action})
    for response in (created, edited):
        error = error_of(response, 422)
        assert (error["code"], error["details"]["field"]) == (
            "invalid_template", "action.payload.body.t")  # fmt: skip
        assert error["message"].startswith("action.payload.body.t: ")
    # And nothing was written: the kept rule is as it was
    assert api.admin.call("GET", f"/v1/rules/{rule['id']}")["revision"] == 1
    with connect(database_url) as conn:
        assert conn.execute("select count(*) from rules").fetchone()[0] == 1


@pytest.mark.timeout(60)
def test_a_template_over_its_budget_fails_its_rule_and_the_event_fires_the_others(api):
    # Given a good rule and one whose template would stall the engine on this event
    good = create(api, event_rule(name="good"))
    power = create(api, event_rule(name="power", action={
        "action_type": "log", "target_key": "guest",
        "payload": {"text": "{% set x = (((context.n**64)**64)**64)**64 %}ok"}}))  # fmt: skip
    # When the event comes
    result = api.admin.call("POST", "/v1/events", json=event(context={
        "guest": {"name": "Ann"}, "n": 9}))  # fmt: skip
    # Then the good rule fired, and the other failed with a structured reason
    assert result["rule_ids"] == [good["id"]]
    [failed] = result["failed"]
    reason = "action.payload.text: the template would make a number of more than 4,300 digits"
    assert (failed["rule_id"], failed["field"], failed["message"]) == (
        power["id"], "action.payload.text", reason)  # fmt: skip
    assert api.admin.call("GET", f"/v1/rules/{power['id']}")["last_error"] == reason


# ------------------------------------------------------------------------------- events


def test_the_same_event_twice_and_from_two_clients_at_once_makes_one_action_per_rule(
    api, database_url
):
    create(api, event_rule(name="guest"))
    create(api, event_rule(name="host"))
    start = threading.Barrier(3)
    answers: list[dict[str, Any]] = []

    def client() -> None:
        start.wait()
        answers.append(api.admin.call("POST", "/v1/events", json=event()))

    threads = [threading.Thread(target=client) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a["executions_created"] for a in answers) == [0, 0, 2]
    assert sum(a["duplicates_skipped"] for a in answers) == 4
    assert all(a["success"] for a in answers)
    again = api.admin.call("POST", "/v1/events", json=event())
    assert (again["executions_created"], again["duplicates_skipped"]) == (0, 2)
    # another day (of the workspace's zone) is another key: yesterday's event fires too
    yesterday = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    earlier = api.admin.call("POST", "/v1/events", json=event(occurred_at=yesterday))
    assert earlier["executions_created"] == 2
    assert count_actions(database_url) == 4


def test_an_event_fires_its_rules_action_with_the_snapshot(api):
    webhook = {"action_type": "webhook", "target_key": "primary",
               "payload": {"text": "Hi {{ context.guest.name }}"}}  # fmt: skip
    create(api, event_rule(action=webhook))
    result = api.admin.call("POST", "/v1/events", json=event())
    [made] = result["created"]
    wait_for(lambda: made["action_id"] in arrived_ids(api))
    # the app's data changed: replaying the event (renamed guest) changes nothing sent
    api.admin.call("POST", "/v1/events", json=event(context={"guest": {"name": "Bea"}}))
    [delivery] = api.local.receiver.deliveries
    assert delivery.body["data"]["payload"] == {"text": "Hi Ann"}


def test_a_template_error_in_one_rule_leaves_the_others_and_names_it(api):
    good = create(api, event_rule(name="good"))
    bad = create(api, event_rule(name="sms", action={
        "action_type": "log", "target_key": "{{ context.guest.phone }}"}))  # fmt: skip
    result = api.admin.call("POST", "/v1/events", json=event())
    assert result["rule_ids"] == [good["id"]]
    assert result["executions_created"] == 1
    assert result["success"] is False
    [failed] = result["failed"]
    assert (failed["rule_id"], failed["rule_name"], failed["field"]) == (
        bad["id"], "sms", "action.target_key")  # fmt: skip
    assert "sms" in result["error"]
    assert "phone" in result["error"]
    assert "phone" in api.admin.call("GET", f"/v1/rules/{bad['id']}")["last_error"]


def test_a_bad_event_is_a_422_and_writes_nothing(api, database_url):
    create(api, event_rule())
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    bad = [event(type="no spaces"), event(entities={"Booking!": "x"}),
           event(occurred_at="2020-01-01T00:00:00Z"), event(occurred_at=tomorrow)]  # fmt: skip
    for body in bad:
        error_of(api.admin.http.post("/v1/events", json=body), 422)
    assert count_actions(database_url) == 0


# -------------------------------------------------------------------------------- dates


def test_a_booking_at_15_moved_to_15_45_and_cancelled(api):
    before = create(api, time_rule("24h before", -24 * HOUR))
    after = create(api, time_rule("1h after", HOUR))
    day = (datetime.now(UTC) + timedelta(days=20)).date().isoformat()
    # A booking at 15:00 New York time (the workspace's zone, as no timezone is given)
    response = api.admin.http.put(
        "/v1/entities/booking/bk-1/dates",
        json={"dates": {"start": f"{day}T15:00"}, "context": {"guest": {"name": "Ann"}}},
    )
    assert response.status_code == 201, response.text
    first = response.json()
    assert first["timezone"] == "America/New_York"
    start = datetime.fromisoformat(first["dates"]["start"]["at"].replace("Z", "+00:00"))
    made = {c["rule_id"]: c for c in first["result"]["created"]}
    assert at(made[before["id"]]) == start - timedelta(hours=24)
    assert at(made[after["id"]]) == start + timedelta(hours=1)
    # moved to 15:45: two cancelled, two new with new keys and lineage
    moved = dates(api, f"{day}T15:45")
    assert sorted(moved["result"]["cancelled"]) == sorted(c["action_id"] for c in made.values())
    new = {c["rule_id"]: c for c in moved["result"]["created"]}
    for rule in (before, after):
        assert new[rule["id"]]["rescheduled_from"] == made[rule["id"]]["action_id"]
        assert new[rule["id"]]["idempotency_key"] != made[rule["id"]]["idempotency_key"]
        assert at(new[rule["id"]]) - at(made[rule["id"]]) == timedelta(minutes=45)
    # cancelled: nothing pending
    gone = api.admin.call("DELETE", "/v1/entities/booking/bk-1/dates")
    assert sorted(gone["result"]["cancelled"]) == sorted(c["action_id"] for c in new.values())
    assert {a["status"] for a in gone["actions"]} == {"cancelled"}
    error_of(api.admin.http.get("/v1/entities/booking/bk-1/dates"), 404)


def at(fired: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(fired["publish_at"].replace("Z", "+00:00"))


def test_a_reference_date_in_another_zone_across_dst(api):
    create(api, time_rule("24h before", -24 * HOUR))
    view = dates(api, "2027-03-28T15:00", timezone="Europe/Berlin")
    assert view["dates"]["start"] == {"at": "2027-03-28T13:00:00Z",
                                      "local": "2027-03-28T15:00:00+02:00",
                                      "wall": "2027-03-28T15:00:00"}  # fmt: skip
    [action] = view["actions"]
    assert action["publish_at"] == "2027-03-27T13:00:00Z"  # 14:00 CET, the day before
    assert view["result"]["skipped"] == []


def test_a_time_actions_snapshot_is_what_the_provider_receives(api):
    create(api, time_rule("at start", 0, action_type="webhook", target_key="primary",
                          payload={"text": "see you, {{ context.guest.name }}"}))  # fmt: skip
    soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    [made] = dates(api, soon)["result"]["created"]
    # the guest is renamed before the action fires: the action keeps what it was made with
    renamed = dates(api, soon, context={"guest": {"name": "Bea"}})
    assert renamed["result"]["created"] == []
    wait_for(lambda: made["action_id"] in arrived_ids(api))
    [delivery] = api.local.receiver.deliveries
    assert delivery.body["data"]["payload"] == {"text": "see you, Ann"}


def test_disabling_a_rule_cancels_and_a_new_offset_moves_over_http(api):
    rule = create(api, time_rule("1h before", -HOUR))
    start = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    [made] = dates(api, start)["result"]["created"]
    moved = api.admin.call("PATCH", f"/v1/rules/{rule['id']}", json={"trigger": {
        "type": "time", "entity_type": "booking", "reference": "start",
        "offset_seconds": -2 * HOUR}})  # fmt: skip
    [new] = moved["result"]["created"]
    assert new["rescheduled_from"] == made["action_id"]
    assert at(made) - at(new) == timedelta(hours=1)
    off = api.admin.call("PATCH", f"/v1/rules/{rule['id']}", json={"enabled": False})
    assert off["result"]["cancelled"] == [new["action_id"]]
    view = api.admin.call("GET", "/v1/entities/booking/bk-1/dates")
    assert {a["status"] for a in view["actions"]} == {"cancelled"}
    assert {a["rule_id"] for a in view["actions"]} == {rule["id"]}


def test_bad_dates_are_a_422_naming_the_field(api, database_url):
    for body, field in (
        ({"dates": {"start": "next tuesday"}}, "dates.start"),
        ({"dates": {"start": "2027-03-28T15:00"}, "timezone": "Mars/Base"}, "timezone"),
        ({"dates": {"Start!": "2027-03-28T15:00"}}, "dates"),
    ):
        response = api.admin.http.put("/v1/entities/booking/bk-1/dates", json=body)
        assert error_of(response, 422)["details"]["field"] == field
    bad_type = api.admin.http.put("/v1/entities/Bad Type/bk-1/dates", json={"dates": {}})
    assert error_of(bad_type, 422)["details"]["field"] == "entity_type"
    with connect(database_url) as conn:
        assert conn.execute("select count(*) from entities").fetchone()[0] == 0


# ------------------------------------------------------------------------------ tenancy


def test_another_workspaces_rules_entities_and_events_are_invisible_and_unaffected(
    api, database_url
):
    rule = create(api, event_rule())
    timed = create(api, time_rule("1h before", -HOUR))
    start = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    dates(api, start)
    api.admin.call("POST", "/v1/events", json=event())
    before = count_actions(database_url)
    other = api.outsider
    for rule_id in (rule["id"], timed["id"]):
        error_of(other.http.get(f"/v1/rules/{rule_id}"), 404)
        error_of(other.http.patch(f"/v1/rules/{rule_id}", json={"enabled": False}), 404)
        error_of(other.http.delete(f"/v1/rules/{rule_id}"), 404)
    assert other.call("GET", "/v1/rules")["items"] == []
    error_of(other.http.get("/v1/entities/booking/bk-1/dates"), 404)
    error_of(other.http.delete("/v1/entities/booking/bk-1/dates"), 404)
    # the same event in the other workspace fires none of ours
    theirs = other.call("POST", "/v1/events", json=event())
    assert (theirs["executions_created"], theirs["duplicates_skipped"]) == (0, 0)
    # the same entity key there is its own entity; ours keeps its date and actions
    own = other.call("PUT", "/v1/entities/booking/bk-1/dates",
                     json={"dates": {"start": "2027-01-01T10:00"}})  # fmt: skip
    assert own["actions"] == []
    mine = api.admin.call("GET", "/v1/entities/booking/bk-1/dates")
    assert mine["dates"]["start"]["at"] != own["dates"]["start"]["at"]
    assert [a["status"] for a in mine["actions"]] == ["queued"]
    assert api.admin.call("GET", f"/v1/rules/{rule['id']}")["enabled"] is True
    assert count_actions(database_url) == before


# ------------------------------------------ the docs' worked example (docs/rules.md)


def webhook_rule(name: str, trigger: dict[str, Any], payload: dict[str, Any],
                 **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"name": name, "trigger": trigger,
            "action": {"action_type": "webhook", "target_key": "primary", "payload": payload},
            **extra}  # fmt: skip


def test_the_readme_podcast_example_end_to_end(api):
    def booking(offset: int) -> dict[str, Any]:
        return {"type": "time", "entity_type": "booking", "reference": "recording",
                "offset_seconds": offset}  # fmt: skip

    def episode(offset: int) -> dict[str, Any]:
        return {"type": "time", "entity_type": "episode", "reference": "publish",
                "offset_seconds": offset}  # fmt: skip

    rules = [
        webhook_rule("confirmation", {"type": "event", "event": "booking.confirmed"},
                     {"to": "{{ context.guest.email }}",
                      "text": "Thanks {{ context.guest.name }}, see you {{ context.booking.start"
                              "|datetime('%A %H:%M', context.booking.timezone) }}"}),
        webhook_rule("reminder", booking(-86400),
                     {"to": "{{ context.guest.phone }}",
                      "text": "Recording tomorrow at {{ reference.local|datetime('%H:%M') }}"},
                     conditions=[{"path": "context.guest.phone", "op": "exists"}]),
        webhook_rule("thank you", booking(3600),
                     {"text": "Thanks for recording, {{ context.guest.name }}!"}),
        webhook_rule("teaser", episode(-172800),
                     {"text": "In two days: {{ context.episode.title }}"}),
        webhook_rule("announce", episode(3600), {"text": "Out now: {{ context.episode.title }}"}),
    ]  # fmt: skip
    ids = {r["name"]: create(api, r)["id"] for r in rules}
    guest = {"name": "Ann", "email": "ann@example.com", "phone": "+4915112345678"}
    start = {"start": "2027-03-28T15:00:00+02:00", "timezone": "Europe/Berlin"}
    context = {"guest": guest, "booking": start}
    confirmed = {"type": "booking.confirmed", "context": context,
                 "entities": {"booking": "bk_42", "podcast": "pod_7"}}  # fmt: skip
    first = api.admin.call("POST", "/v1/events", json=confirmed)
    assert (first["executions_created"], first["rule_ids"]) == (1, [ids["confirmation"]])
    again = api.admin.call("POST", "/v1/events", json=confirmed)
    assert (again["executions_created"], again["duplicates_skipped"]) == (0, 1)
    [mail] = first["created"]
    wait_for(lambda: mail["action_id"] in arrived_ids(api))
    [delivery] = api.local.receiver.deliveries
    sent_payload = delivery.body["data"]["payload"]
    assert sent_payload == {"to": "ann@example.com", "text": "Thanks Ann, see you Sunday 15:00"}

    path = "/v1/entities/booking/bk_42/dates"
    put = {"timezone": "Europe/Berlin", "dates": {"recording": "2027-03-28T15:00"},
           "context": context}  # fmt: skip
    made = {c["rule_id"]: c for c in api.admin.call("PUT", path, json=put)["result"]["created"]}
    assert made[ids["reminder"]]["publish_at"] == "2027-03-27T13:00:00Z"  # 14:00 CET
    assert made[ids["thank you"]]["publish_at"] == "2027-03-28T14:00:00Z"  # 16:00 CEST
    view = api.admin.call("GET", path)
    texts = {a["rule_id"]: a["payload"]["text"] for a in view["actions"]}
    assert texts[ids["reminder"]] == "Recording tomorrow at 15:00"

    moved = api.admin.call("PUT", path, json=put | {"dates": {"recording": "2027-03-28T15:45"}})
    assert sorted(moved["result"]["cancelled"]) == sorted(c["action_id"] for c in made.values())
    new = {c["rule_id"]: c for c in moved["result"]["created"]}
    assert new[ids["reminder"]]["publish_at"] == "2027-03-27T13:45:00Z"  # 14:45 CET
    assert new[ids["thank you"]]["publish_at"] == "2027-03-28T14:45:00Z"  # 16:45 CEST
    for name in ("reminder", "thank you"):
        assert new[ids[name]]["rescheduled_from"] == made[ids[name]]["action_id"]

    gone = api.admin.call("DELETE", path)
    assert sorted(gone["result"]["cancelled"]) == sorted(c["action_id"] for c in new.values())
    sent = api.admin.call("GET", f"/v1/actions/{mail['action_id']}")
    assert sent["status"] == "published"  # the confirmation stays as history

    ep = api.admin.call("PUT", "/v1/entities/episode/ep_9/dates", json={
        "dates": {"publish": "2027-04-10T08:00"}, "timezone": "Europe/Berlin",
        "context": {"episode": {"title": "Ann on clocks"}}})  # fmt: skip
    assert sorted(c["publish_at"] for c in ep["result"]["created"]) == [
        "2027-04-08T06:00:00Z", "2027-04-10T07:00:00Z"]  # fmt: skip
    off = api.admin.call("PATCH", f"/v1/rules/{ids['announce']}", json={"enabled": False})
    assert len(off["result"]["cancelled"]) == 1


# ---------------------------------------------------------------------- per-key limits


def test_a_per_key_limit_drops_the_excess_and_a_digest_of_it_needs_its_window(api, database_url):
    limit = {"key": "{{ context.guest.name }}", "count": 1, "per_seconds": 3600}
    rule = create(api, event_rule(action=event_rule()["action"] | {"limit": limit}))
    assert rule["action"]["limit"] == limit | {"excess": "drop"}
    first = api.admin.call("POST", "/v1/events", json=event())
    again = api.admin.call("POST", "/v1/events", json=event(entities={"booking": "bk-2"}))
    assert first["executions_created"] == 1
    assert (again["executions_created"], again["success"]) == (0, True)
    assert [s["reason"] for s in again["skipped"]] == ["rate_limited"]
    assert count_actions(database_url) == 1
    digest = event_rule(action=event_rule()["action"] | {"limit": limit | {"excess": "digest"}})
    refused = error_of(api.admin.http.post("/v1/rules", json=digest), 422)
    assert (refused["code"], refused["details"]["field"]) == (
        "invalid_input",
        "action.limit.digest_window",
    )
