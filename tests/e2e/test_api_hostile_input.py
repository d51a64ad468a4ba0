"""Hostile input over real HTTP: whatever arrives, a clear 4xx in the one error shape, never a
5xx, never a dropped connection, never a half-written row."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import at, create, error_of, webhook
from tests.waiting import wait_for
from tickwork.platform.db import connect

SOCIAL_INTENT = (
    '{"action_type": "publish_post", "targets": [%s], "date": "2027-05-20", "time": "09:00"}'
)


def rows(database_url: str, table: str = "scheduled_actions") -> int:
    with connect(database_url) as conn:
        row = conn.execute(f"select count(*) from {table}").fetchone()
    assert row is not None
    return int(row[0])


def raw_action(payload: str) -> str:
    """A webhook action's JSON with `payload` inserted as it is, whatever it holds."""
    head = f'{{"action_type": "webhook", "target_key": "primary", "publish_at": "{at(3600)}"'
    return head + ', "payload": ' + payload + "}"


def send(api: Api, method: str, path: str, raw: str | bytes, **headers: str) -> httpx.Response:
    return api.admin.http.request(
        method, path, content=raw, headers={"Content-Type": "application/json", **headers}
    )


# --------------------------------------------------------------- lone surrogates (11)


@pytest.mark.parametrize(
    ("method", "path", "raw"),
    [
        ("POST", "/v1/actions", '{"action_type": "webhook", "target_key": "primary",'
         ' "publish_at": "%s", "payload": {"text": "\\ud800"}}'),
        ("POST", "/v1/actions", '{"action_type": "webhook", "target_key": "primary",'
         ' "publish_at": "%s", "payload": {"\\udfff": 1}}'),
        ("POST", "/v1/actions", '{"action_type": "webhook", "target_key": "\\ud800",'
         ' "publish_at": "%s"}'),
        ("PUT", "/v1/things/post-1/intent", SOCIAL_INTENT % '"\\ud800"'),
        ("PUT", "/v1/things/post-1/intent", SOCIAL_INTENT % '"instagram", "x\\udbff"'),
        ("POST", "/v1/recurring", '{"action_type": "webhook", "target_key": "primary",'
         ' "rrule": "FREQ=DAILY", "payload": {"a": ["\\ud800"]}}'),
    ],
)  # fmt: skip
def test_a_lone_surrogate_anywhere_is_a_clear_422(api, database_url, method, path, raw):
    body = raw % at(3600) if "%s" in raw else raw
    error = error_of(send(api, method, path, body), 422)
    assert error["code"] == "invalid_input"
    assert "surrogate" in error["message"]
    assert rows(database_url) == 0
    assert rows(database_url, "schedule_intents") == 0


def test_a_lone_surrogate_in_a_path_or_query_is_a_4xx(api):
    response = api.admin.http.get("/v1/things/%ED%A0%80/intent")
    assert response.status_code in (400, 404), response.text
    error_of(response, response.status_code)
    # %ED%B2%80 is how a lone \udc80 would be percent-encoded: not UTF-8
    response = api.admin.http.get("/v1/actions?from=2027-01-01T00:00:00Z&to=2027-01-02T00:00:00Z"
                                  "&thing_id=%ED%B2%80x")  # fmt: skip
    assert "UTF-8" in error_of(response, 400)["message"]


# -------------------------------------------------------------- UTC overflow (12)

LOW, HIGH = "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"


@pytest.mark.parametrize("instant", [LOW, HIGH])
def test_instants_that_overflow_in_utc_are_422_everywhere(api, database_url, instant):
    error = error_of(api.admin.http.post("/v1/actions", json=webhook(publish_at=instant)), 422)
    assert "publish_at" in error["message"]
    queued = create(api)
    moved = api.admin.http.post(
        f"/v1/actions/{queued['id']}/reschedule", json={"publish_at": instant}
    )
    error_of(moved, 422)
    intent = {"action_type": "publish_post", "targets": ["instagram"], "publish_at": instant}
    error_of(api.admin.http.put("/v1/things/t-1/intent", json=intent), 422)
    schedule = {"action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY",
                "until": instant}  # fmt: skip
    error = error_of(api.admin.http.post("/v1/recurring", json=schedule), 422)
    assert "until" in error["message"]
    listing = api.admin.http.get("/v1/actions", params={"from": instant, "to": HIGH})
    error_of(listing, 422)
    assert rows(database_url) == 1
    assert rows(database_url, "schedule_intents") == 0
    assert rows(database_url, "recurring_schedules") == 0


@pytest.mark.parametrize(
    ("day", "clock", "zone"),
    [("0001-01-01", "00:00", "Europe/Berlin"), ("9999-12-31", "23:59:59", "America/Caracas")],
)
def test_wall_times_that_overflow_in_utc_are_422(api, database_url, day, clock, zone):
    when = {"date": day, "time": clock, "timezone": zone}
    error = error_of(api.admin.http.post("/v1/actions", json=webhook(publish_at=None, **when)), 422)
    assert error["code"] == "invalid_time"
    queued = create(api)
    error_of(api.admin.http.post(f"/v1/actions/{queued['id']}/reschedule", json=when), 422)
    intent = {"action_type": "publish_post", "targets": ["instagram"], **when}
    error_of(api.admin.http.put("/v1/things/t-1/intent", json=intent), 422)
    assert rows(database_url) == 1


# -------------------------------------------------- the scheduling horizon (issue 33)

HORIZON_DAYS = 3650  # Settings().max_horizon_days
DAY = 86400


def _campaign(api: Api) -> str:
    api.admin.call("PUT", "/v1/recipients/ann", json={"timezone": "Asia/Tokyo"})
    steps = [{"wait": {"delay_seconds": 0},
              "action": {"action_type": "log", "target_key": "x", "payload": {}}}]  # fmt: skip
    return str(api.admin.call("POST", "/v1/campaigns", json={"name": "c", "steps": steps})["id"])


def _schedule(api: Api) -> str:
    body = {"action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY"}
    return str(api.admin.call("POST", "/v1/recurring", json=body)["id"])


def _nothing(api: Api) -> str:
    return ""


# (what, field, setup, request): each made a 500, or was taken, before the horizon existed
BEYOND_THE_HORIZON = [
    ("calendar from near year 9999", "from", _nothing,
     lambda api, _: api.admin.http.get("/v1/actions", params={"from": "9999-12-31T23:59:59Z"})),
    ("calendar to near year 1", "to", _nothing,
     lambda api, _: api.admin.http.get("/v1/actions", params={"to": "0001-01-01T00:00:00Z"})),
    ("calendar from near year 1", "from", _nothing,
     lambda api, _: api.admin.http.get("/v1/actions", params={"from": "0001-01-02T00:00:00Z"})),
    ("calendar to past the horizon", "to", _nothing,
     lambda api, _: api.admin.http.get("/v1/actions",
                                       params={"to": at((HORIZON_DAYS + 2) * DAY)})),
    ("enrollment starting near 9999", "starts_at", _campaign,
     lambda api, campaign: api.admin.http.post(f"/v1/campaigns/{campaign}/enrollments", json={
         "recipient_id": "ann", "starts_at": "9999-12-30T00:00:00Z"})),
    ("enrollment starting in year 1", "starts_at", _campaign,
     lambda api, campaign: api.admin.http.post(f"/v1/campaigns/{campaign}/enrollments", json={
         "recipient_id": "ann", "starts_at": "0001-01-01T00:00:00Z"})),
    ("recurring until in a hundred years", "until", _nothing,
     lambda api, _: api.admin.http.post("/v1/recurring", json={
         "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY",
         "until": at(100 * 365 * DAY)})),
    ("recurring until changed to year 8998", "until", _schedule,
     lambda api, schedule: api.admin.http.patch(f"/v1/recurring/{schedule}",
                                                json={"until": "8998-01-01T00:00:00Z"})),
    ("an event that occurred in year 9999", "occurred_at", _nothing,
     lambda api, _: api.admin.http.post("/v1/events", json={
         "type": "booking.confirmed", "occurred_at": "9999-12-31T00:00:00Z"})),
    ("an entity date in year 8999", "dates.start", _nothing,
     lambda api, _: api.admin.http.put("/v1/entities/booking/bk-1/dates", json={
         "dates": {"start": "8999-06-01T10:00"}})),
    ("an entity date in 1900", "dates.start", _nothing,
     lambda api, _: api.admin.http.put("/v1/entities/booking/bk-1/dates", json={
         "dates": {"start": "1900-01-01T00:00:00+00:00"}})),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "field", "setup", "request_of"),
    [pytest.param(what, field, setup, make, id=what)
     for what, field, setup, make in BEYOND_THE_HORIZON],
)  # fmt: skip
def test_times_beyond_the_horizon_are_422_naming_the_field(
    api, database_url, what, field, setup, request_of
):
    given = setup(api)
    before = {t: rows(database_url, t) for t in ("scheduled_actions", "enrollments", "entities")}
    error = error_of(request_of(api, given), 422)
    # a recurring schedule's until bounds its rule: refused as the rule's UNTIL would be
    code = "invalid_recurrence" if what.startswith("recurring until") else "invalid_time"
    assert (error["code"], error["details"]["field"]) == (code, field)
    assert f"more than {HORIZON_DAYS} days" in error["message"]
    after = {t: rows(database_url, t) for t in before}
    assert after == before


def test_times_within_the_horizon_either_way_are_taken(api):
    # the calendar near both ends of the horizon, with its defaults computed from them
    near_past, near_future = at(-(HORIZON_DAYS - 1) * DAY), at((HORIZON_DAYS - 1) * DAY)
    for params in ({"from": near_past}, {"to": near_past}, {"from": near_future},
                   {"to": near_future}, {"from": near_past, "to": near_future}):  # fmt: skip
        assert api.admin.http.get("/v1/actions", params=params).status_code == 200, params
    # an enrollment starting a day inside the horizon, whose step lies beyond it
    api.admin.call("PUT", "/v1/recipients/bea", json={"timezone": "Pacific/Kiritimati"})
    steps = [{"wait": {"day": 366, "at": "23:59"},
              "action": {"action_type": "log", "target_key": "x", "payload": {}}}]  # fmt: skip
    campaign = api.admin.call("POST", "/v1/campaigns", json={"name": "far", "steps": steps})
    enrolled = api.admin.http.post(
        f"/v1/campaigns/{campaign['id']}/enrollments",
        json={"recipient_id": "bea", "starts_at": at((HORIZON_DAYS - 1) * DAY)},
    )
    assert enrolled.status_code == 201, enrolled.text
    # the step beyond the horizon is skipped with its reason, never a 500
    assert "more than 3650 days ahead" in (enrolled.json()["last_error"] or "")


@pytest.mark.parametrize("cursor", ["99999999999999999999", "１２３"])
def test_a_change_log_cursor_that_is_no_id_is_422(api, cursor):
    error = error_of(api.admin.http.get("/v1/changes", params={"cursor": cursor}), 422)
    assert error["details"]["field"] == "cursor"


# ----------------------------------------------------- depth and huge numbers (13)


@pytest.mark.parametrize("depth", [100, 300, 1200, 50_000])
def test_deeply_nested_json_is_refused_before_anything_is_written(api, database_url, depth):
    payload = "[" * depth + "]" * depth
    raw = raw_action('{"deep": ' + payload + "}")
    error = error_of(send(api, "POST", "/v1/actions", raw), 422)
    assert "deep" in error["message"]
    assert rows(database_url) == 0


def test_json_nested_within_the_limit_is_stored_and_read_back(api):
    deep: Any = "leaf"
    for _ in range(30):
        deep = {"d": deep}
    created = create(api, payload={"deep": deep})
    assert api.admin.call("GET", f"/v1/actions/{created['id']}")["payload"] == {"deep": deep}


@pytest.mark.parametrize("digits", [4301, 20_000])
def test_huge_integers_are_422(api, database_url, digits):
    raw = raw_action('{"n": ' + "9" * digits + "}")
    error = error_of(send(api, "POST", "/v1/actions", raw), 422)
    assert "digits" in error["message"]
    assert rows(database_url) == 0


# --------------------------------------------------------- path parameters (14)


def test_path_parameters_are_percent_decoded(api):
    body = {"action_type": "publish_post", "targets": ["instagram"], "date": "2027-05-20",
            "time": "09:00"}  # fmt: skip
    put = api.admin.http.put("/v1/things/caf%C3%A9%2F1/intent", json=body)
    assert put.status_code == 201, put.text
    assert put.json()["thing_id"] == "café/1"
    assert put.json()["actions"][0]["thing_id"] == "café/1"
    assert api.admin.http.get("/v1/things/caf%C3%A9%2F1/intent").json()["thing_id"] == "café/1"
    created = create(api)
    assert api.admin.http.get(f"/v1/actions/%{ord(created['id'][0]):02X}{created['id'][1:]}")\
        .json()["id"] == created["id"]  # fmt: skip


# ---------------------------------------- bodies, methods and the workspace header (15)


@pytest.mark.parametrize("verb", ["pause", "end"])
@pytest.mark.parametrize("raw", ["[null, null]", "[]", "null", "1", '"why"', '{"why": "x"}'])
def test_pause_and_end_refuse_a_body_that_is_not_a_reason(api, verb, raw):
    schedule = api.admin.call("POST", "/v1/recurring", json={
        "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY"})  # fmt: skip
    response = send(api, "POST", f"/v1/recurring/{schedule['id']}/{verb}", raw)
    error_of(response, 422)
    after = api.admin.call("GET", f"/v1/recurring/{schedule['id']}")
    assert after["status"] == "active"


@pytest.mark.parametrize("verb", ["pause", "end"])
def test_pause_and_end_take_a_reason_or_no_body(api, verb):
    schedule = api.admin.call("POST", "/v1/recurring", json={
        "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY"})  # fmt: skip
    done = send(api, "POST", f"/v1/recurring/{schedule['id']}/{verb}", '{"reason": "holiday"}')
    assert done.status_code == 200, done.text
    other = api.admin.call("POST", "/v1/recurring", json={
        "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY"})  # fmt: skip
    assert api.admin.http.post(f"/v1/recurring/{other['id']}/{verb}").status_code == 200


def test_a_wrong_method_is_405_with_allow(api):
    created = create(api)
    response = api.admin.http.delete(f"/v1/actions/{created['id']}")
    error = error_of(response, 405)
    assert response.headers["Allow"] == "GET"
    assert "GET" in error["message"]
    response = api.admin.http.put("/v1/actions")
    error_of(response, 405)
    assert set(response.headers["Allow"].split(", ")) == {"GET", "POST"}
    error_of(api.admin.http.get("/v1/nothing-here"), 404)


def test_a_malformed_workspace_header_is_400(api):
    response = api.admin.http.get("/v1/workspace", headers={"X-Workspace-Id": "not-a-uuid"})
    error = error_of(response, 400)
    assert "X-Workspace-Id" in error["message"]
    response = api.admin.http.post(
        "/v1/actions", json=webhook(), headers={"X-Workspace-Id": "12345"}
    )
    error_of(response, 400)


# ------------------------------------------------------------- messages (17)


def test_messages_name_the_field_without_pydantic_prefixes(api):
    error = error_of(api.admin.http.post("/v1/actions", json=webhook(date="2027-01-01")), 422)
    assert not error["message"].startswith("Value error")
    assert "publish_at" in error["message"]
    assert all(e["field"] for e in error["details"]["errors"])


def test_a_day_that_does_not_exist_is_named_as_such(api):
    when = {"publish_at": None, "date": "2027-02-30", "time": "09:00"}
    error = error_of(api.admin.http.post("/v1/actions", json=webhook(**when)), 422)
    assert "2027-02-30" in error["message"]
    assert "does not exist" in error["message"]
    assert "YYYY-MM-DD form" not in error["message"]


def test_401_messages_carry_no_library_internals(api):
    for token in ["garbage", "a.b.c", api.outsider.http.headers["Authorization"][7:] + "x"]:
        response = httpx.get(
            f"{api.url}/v1/workspace",
            headers={"Authorization": f"Bearer {token}", "X-Workspace-Id": api.workspace_a},
        )
        error = error_of(response, 401)
        assert error["message"] in {
            "the bearer token is not a valid token of this API; get a new one",
        }, error["message"]


def test_an_unencoded_plus_in_a_range_gets_a_hint(api):
    response = api.admin.http.get(
        f"{api.url}/v1/actions?from=2027-01-01T00:00:00+01:00&to=2027-01-02T00:00:00Z"
    )
    error = error_of(response, 422)
    assert "%2B" in error["message"]
    assert error["message"].startswith("from:")


# --------------------------------------------------------- idempotent replay (18)


def test_a_replay_returns_the_first_result_after_the_action_published(api):
    # Given an action created with an Idempotency-Key, which then fires
    body = webhook(publish_at=at(1), thing_id="post-9")
    headers = {"Idempotency-Key": "req-publish"}
    first = api.admin.http.post("/v1/actions", json=body, headers=headers)
    assert first.status_code == 201, first.text
    wait_for(
        lambda: api.admin.call("GET", f"/v1/actions/{first.json()['id']}")["status"] == "published"
    )
    # When the client retries the very same request (its time has passed, and the publish
    # guard refuses a new row for the thing)
    again = api.admin.http.post("/v1/actions", json=body, headers=headers)
    # Then it gets the first result, as it stands now
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["status"] == "published"
    # and the key reused for something else is still refused
    other = api.admin.http.post("/v1/actions", json=webhook(thing_id="post-9"), headers=headers)
    assert error_of(other, 422)["code"] == "idempotency_key_reused"


def test_a_replay_returns_the_first_result_after_a_cancel(api):
    body = webhook(thing_id="post-10")
    headers = {"Idempotency-Key": "req-cancel"}
    first = api.admin.http.post("/v1/actions", json=body, headers=headers).json()
    api.admin.call("POST", f"/v1/actions/{first['id']}/cancel")
    again = api.admin.http.post("/v1/actions", json=body, headers=headers)
    assert (again.status_code, again.json()["id"]) == (200, first["id"])
    assert again.json()["status"] == "cancelled"


@pytest.mark.parametrize("dtstart", ["0001-01-01T00:00:00", "9999-12-31T23:59:59"])
def test_recurring_wall_times_and_until_at_the_edges_are_422(api, database_url, dtstart):
    body = {"action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY",
            "dtstart": dtstart, "timezone": "Asia/Tokyo"}  # fmt: skip
    error_of(api.admin.http.post("/v1/recurring", json=body), 422)
    schedule = api.admin.call("POST", "/v1/recurring", json={
        "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY"})  # fmt: skip
    for change in ({"until": LOW}, {"until": HIGH}, {"dtstart": dtstart}):
        error_of(api.admin.http.patch(f"/v1/recurring/{schedule['id']}", json=change), 422)
    assert api.admin.call("GET", f"/v1/recurring/{schedule['id']}")["revision"] == 1
