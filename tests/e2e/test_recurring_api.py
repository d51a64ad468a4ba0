"""/v1/recurring over real HTTP against the local server: the lifecycle, the preview across
DST, paging, the limits, the failure policy's reason, and tenancy."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from psycopg.rows import dict_row

from tests.e2e.conftest import Api
from tests.e2e.test_api import arrived_ids, error_of
from tests.waiting import wait_for
from tickwork.actions import model, store
from tickwork.platform.db import connect

NEW_YORK = ZoneInfo("America/New_York")
DAILY = "FREQ=DAILY"  # at dtstart's wall time


def tomorrow_at(clock: str, tz: ZoneInfo = NEW_YORK) -> str:
    """A wall time tomorrow in `tz`: hours away, beyond the tick's look-ahead."""
    day = datetime.now(tz).date() + timedelta(days=1)
    return f"{day.isoformat()}T{clock}"


def nth_sunday(year: int, month: int, n: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(6 - first.weekday()) % 7 + 7 * (n - 1))


def recurring_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "action_type": "webhook", "target_key": "primary", "rrule": DAILY,
        "dtstart": tomorrow_at("09:00:00"), "payload": {"text": "hi"},
    }  # fmt: skip
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


def create(api: Api, **overrides: Any) -> dict[str, Any]:
    return api.admin.call("POST", "/v1/recurring", json=recurring_body(**overrides))


def rows(database_url: str, schedule_id: str) -> list[dict[str, Any]]:
    with connect(database_url) as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select id::text, status, source, publish_at from scheduled_actions"
            " where recurring_schedule_id = %s order by publish_at, created_at",
            (schedule_id,),
        ).fetchall()


def queued(database_url: str, schedule_id: str) -> list[datetime]:
    return [
        r["publish_at"]
        for r in rows(database_url, schedule_id)
        if r["status"] == "queued" and r["source"] == "recurring"
    ]


def count(database_url: str, table: str) -> int:
    sql = {"schedules": "select count(*) from recurring_schedules",
           "actions": "select count(*) from scheduled_actions"}[table]  # fmt: skip
    with connect(database_url) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def finish(database_url: str, action_ids: list[str], *, fail: bool) -> None:
    """Drive queued rows to failed or published through the state machine, as a dispatcher
    would."""
    with connect(database_url) as conn:
        assert store.claim(conn, "webhook", action_ids, early_tolerance=60 * 86400)
        store.finalize(
            conn,
            [
                model.failed(i, "provider_rejected", "HTTP 410 Gone")
                if fail
                else model.published(i, "p1")
                for i in action_ids
            ],
        )


# ----------------------------------------------------------------------------- create


def test_create_in_the_workspace_zone_materializes_and_previews(api, database_url):
    dtstart = tomorrow_at("09:00:00")
    created = create(api, dtstart=dtstart, thing_id="digest")
    assert created["status"] == "active"
    assert created["timezone"] == "America/New_York"  # the workspace's
    assert created["dtstart"] == dtstart
    assert (created["rrule"], created["payload"], created["thing_id"]) == (DAILY, {"text": "hi"},
                                                                          "digest")  # fmt: skip
    assert (created["max_failures_before_pause"], created["catch_up_window_seconds"]) == (5, 3600)
    assert created["consecutive_failures"] == created["skipped_occurrences"] == 0
    assert (created["paused_reason"], created["ended_reason"]) == (None, None)
    assert created["revision"] == 1
    # the first window is queued at once, as ordinary rows linked to the schedule
    first = datetime.fromisoformat(dtstart).replace(tzinfo=NEW_YORK).astimezone(UTC)
    times = queued(database_url, created["id"])
    assert times[0] == first
    assert len(times) >= 13
    # and the answer shows the next occurrences, in UTC and in the schedule's zone
    preview = created["next_occurrences"]
    assert len(preview) == 5
    assert datetime.fromisoformat(preview[0]["at"]) == first
    assert preview[0]["local"].startswith(f"{dtstart}-0")
    assert api.admin.call("GET", f"/v1/recurring/{created['id']}")["id"] == created["id"]


def test_create_in_an_explicit_zone_keeps_its_wall_time(api):
    sydney = ZoneInfo("Australia/Sydney")
    dtstart = tomorrow_at("08:30", sydney)
    created = create(api, rrule="FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", dtstart=dtstart,
                     timezone="Australia/Sydney")  # fmt: skip
    assert created["timezone"] == "Australia/Sydney"
    assert created["dtstart"] == f"{dtstart}:00"
    for occurrence in created["next_occurrences"]:
        local = datetime.fromisoformat(occurrence["local"])
        assert (local.hour, local.minute) == (8, 30)
        assert local.weekday() < 5
        assert datetime.fromisoformat(occurrence["at"]) == local.astimezone(UTC)


def test_dtstart_defaults_to_now_in_the_zone_to_the_minute(api):
    created = create(api, dtstart=None, rrule="FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0")
    now_local = datetime.now(NEW_YORK).replace(tzinfo=None)
    assert abs(datetime.fromisoformat(created["dtstart"]) - now_local) < timedelta(minutes=2)
    assert created["dtstart"].endswith(":00")


def test_an_occurrence_due_in_seconds_fires_on_time(api, database_url):
    # dtstart 2 s from now: the row is handed to its queue after the commit, not at the
    # next tick (the fixture's tick runs every 60 s)
    soon = (datetime.now(NEW_YORK) + timedelta(seconds=2)).replace(tzinfo=None, microsecond=0)
    created = create(api, dtstart=soon.isoformat())
    [first_id] = [r["id"] for r in rows(database_url, created["id"])][:1]
    wait_for(lambda: first_id in arrived_ids(api), timeout=4)
    [delivery] = api.local.receiver.deliveries
    assert delivery.verified
    # Handed over at the commit: it arrives within a second or so even on a busy machine,
    # where waiting for the next tick would take up to 60 s (precision is for make bench).
    assert 0 <= (delivery.lag_seconds or 0) < 2.0


# ----------------------------------------------------------------------------- preview


def test_the_preview_keeps_09_00_local_across_a_dst_change(api):
    # New York springs forward on the second Sunday of March: 09:00 EST is 14:00 UTC,
    # 09:00 EDT is 13:00 UTC
    change = nth_sunday(datetime.now(UTC).year + 1, 3, 2)
    start = change - timedelta(days=2)
    created = create(api, dtstart=f"{start.isoformat()}T09:00:00")
    got = api.admin.call("GET", f"/v1/recurring/{created['id']}", params={"preview": 4})
    days = [start + timedelta(days=n) for n in range(4)]
    assert [o["local"] for o in got["next_occurrences"]] == [
        f"{days[0]}T09:00:00-05:00",
        f"{days[1]}T09:00:00-05:00",
        f"{days[2]}T09:00:00-04:00",
        f"{days[3]}T09:00:00-04:00",
    ]
    assert [o["at"] for o in got["next_occurrences"]] == [
        f"{days[0]}T14:00:00Z",
        f"{days[1]}T14:00:00Z",
        f"{days[2]}T13:00:00Z",
        f"{days[3]}T13:00:00Z",
    ]


def test_the_preview_size_is_bounded(api):
    sid = create(api)["id"]
    assert len(api.admin.call("GET", f"/v1/recurring/{sid}", params={"preview": 50})[
        "next_occurrences"]) == 50  # fmt: skip
    none = api.admin.call("GET", f"/v1/recurring/{sid}", params={"preview": 0})
    assert none["next_occurrences"] is None
    too_many = api.admin.http.get(f"/v1/recurring/{sid}", params={"preview": 51})
    assert error_of(too_many, 422)["code"] == "invalid_input"


# ------------------------------------------------------------------------------- list


def test_list_pages_in_creation_order_and_filters(api):
    made = [create(api, thing_id=f"t{n}")["id"] for n in range(5)]
    api.admin.call("POST", f"/v1/recurring/{made[1]}/pause")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        paging = {"cursor": cursor} if cursor else {}
        page = api.admin.call("GET", "/v1/recurring", params={"limit": 2} | paging)
        pages += 1
        seen += [item["id"] for item in page["items"]]
        assert all(item["next_occurrences"] is None for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert (seen, pages) == (made, 3)
    paused = api.admin.call("GET", "/v1/recurring", params={"status": "paused"})
    assert [s["id"] for s in paused["items"]] == [made[1]]
    by_type = api.admin.call("GET", "/v1/recurring", params={"action_type": "log", "preview": 2})
    assert by_type["items"] == []
    previewed = api.admin.call("GET", "/v1/recurring", params={"limit": 1, "preview": 2})
    assert len(previewed["items"][0]["next_occurrences"]) == 2
    bad = api.admin.http.get("/v1/recurring", params={"cursor": "not-a-cursor"})
    assert error_of(bad, 422)["code"] == "invalid_input"
    assert api.outsider.call("GET", "/v1/recurring")["items"] == []


# ------------------------------------------------------------------------------ PATCH


def test_patch_moves_only_future_queued_rows_and_history_stays(api, database_url):
    # Given a daily 09:00 schedule whose first three rows are published, failed and cancelled
    created = create(api)
    sid = created["id"]
    first, second, third = [r["id"] for r in rows(database_url, sid)[:3]]
    finish(database_url, [first], fail=False)
    finish(database_url, [second], fail=True)
    api.admin.call("POST", f"/v1/actions/{third}/cancel")
    queued_before = [r["id"] for r in rows(database_url, sid) if r["status"] == "queued"]
    # When the rule moves to 10:30 and the payload changes
    patched = api.member.call(
        "PATCH", f"/v1/recurring/{sid}",
        json={"rrule": "FREQ=DAILY;BYHOUR=10;BYMINUTE=30", "payload": {"text": "later"}},
    )  # fmt: skip
    assert (patched["rrule"], patched["payload"], patched["revision"]) == (
        "FREQ=DAILY;BYHOUR=10;BYMINUTE=30", {"text": "later"}, 2)  # fmt: skip
    # Then the history rows are as they were, every old queued row is cancelled
    after = {r["id"]: r for r in rows(database_url, sid)}
    assert [after[i]["status"] for i in (first, second, third)] == [
        "published", "failed", "cancelled"]  # fmt: skip
    assert {after[i]["status"] for i in queued_before} == {"cancelled"}
    # and the new definition is queued: 10:30 local every day
    new_times = queued(database_url, sid)
    assert new_times
    assert {t.astimezone(NEW_YORK).strftime("%H:%M") for t in new_times} == {"10:30"}
    assert [o["local"][11:16] for o in patched["next_occurrences"]] == ["10:30"] * 5
    assert patched["consecutive_failures"] == 1  # the failed row counted; history stays


def test_patch_changes_only_what_is_sent_and_refuses_bad_edits(api, database_url):
    until = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    sid = create(api, until=until.isoformat())["id"]
    assert api.admin.call("GET", f"/v1/recurring/{sid}")["until"] == until.isoformat().replace(
        "+00:00", "Z")  # fmt: skip
    before_rows = rows(database_url, sid)
    unchanged = api.admin.call("PATCH", f"/v1/recurring/{sid}", json={})
    assert unchanged["revision"] == 1
    policy = api.admin.call("PATCH", f"/v1/recurring/{sid}", json={"catch_up_window_seconds": 60})
    assert (policy["catch_up_window_seconds"], policy["revision"]) == (60, 2)
    assert rows(database_url, sid) == before_rows  # a policy moves no rows
    cleared = api.admin.call("PATCH", f"/v1/recurring/{sid}", json={"until": None})
    assert cleared["until"] is None
    current = api.admin.call("GET", f"/v1/recurring/{sid}")
    current_rows = rows(database_url, sid)
    for body, status, code in [
        ({"rrule": "FREQ=MINUTELY"}, 422, "invalid_recurrence"),
        ({"rrule": None}, 422, "invalid_input"),
        ({"timezone": "Mars/Olympus"}, 422, "invalid_timezone"),
        ({"dtstart": "2027-02-30T09:00:00"}, 422, "invalid_time"),
        ({"action_type": "log"}, 422, "invalid_input"),  # the type is fixed
        ({"payload": {"blob": "x" * 70_000}}, 413, "payload_too_large"),
    ]:
        response = api.admin.http.patch(f"/v1/recurring/{sid}", json=body)
        assert error_of(response, status)["code"] == code, body
    assert api.admin.call("GET", f"/v1/recurring/{sid}") == current
    assert rows(database_url, sid) == current_rows


# -------------------------------------------------------------- pause, resume, end


def test_pause_resume_and_end_with_their_reasons(api, database_url):
    sid = api.member.call("POST", "/v1/recurring", json=recurring_body())["id"]  # members may
    # pause, saying why: the rows not yet due are cancelled
    paused = api.member.call("POST", f"/v1/recurring/{sid}/pause", json={"reason": "holidays"})
    assert (paused["status"], paused["paused_reason"]) == ("paused", "holidays")
    assert paused["paused_at"] is not None
    assert len(paused["next_occurrences"]) == 5  # what would fire once resumed
    assert queued(database_url, sid) == []
    again = api.admin.call("POST", f"/v1/recurring/{sid}/pause")  # idempotent
    assert (again["status"], again["paused_reason"]) == ("paused", "holidays")
    # resume: materialized again from now
    resumed = api.member.call("POST", f"/v1/recurring/{sid}/resume")
    assert (resumed["status"], resumed["paused_reason"], resumed["paused_at"]) == (
        "active", None, None)  # fmt: skip
    assert len(queued(database_url, sid)) >= 13
    assert api.admin.call("POST", f"/v1/recurring/{sid}/resume")["status"] == "active"
    # pause without a body has a default reason
    default = api.admin.call("POST", f"/v1/recurring/{sid}/pause")
    assert default["paused_reason"] == "paused by request"
    # end: for good
    ended = api.member.call("POST", f"/v1/recurring/{sid}/end")
    assert (ended["status"], ended["ended_reason"]) == ("ended", "ended by request")
    assert ended["ended_at"] is not None
    assert ended["next_occurrences"] == []
    assert api.admin.call("POST", f"/v1/recurring/{sid}/end")["status"] == "ended"
    for method, path, body in [
        ("POST", "pause", None),
        ("POST", "resume", None),
        ("POST", "run-now", None),
        ("PATCH", "", {"rrule": "FREQ=WEEKLY"}),
    ]:
        url = f"/v1/recurring/{sid}/{path}".rstrip("/")
        refused = api.admin.http.request(method, url, json=body)
        assert "has ended" in error_of(refused, 409)["message"], path
    assert queued(database_url, sid) == []


def test_end_with_a_reason(api):
    sid = create(api)["id"]
    ended = api.admin.call("POST", f"/v1/recurring/{sid}/end", json={"reason": "campaign over"})
    assert ended["ended_reason"] == "campaign over"
    bad = api.admin.http.post(f"/v1/recurring/{sid}/end", json={"reason": ""})
    assert error_of(bad, 422)["code"] == "invalid_input"


# ----------------------------------------------------------------------------- run-now


def test_run_now_fires_a_linked_one_off_and_the_next_occurrence_does_not_move(api, database_url):
    created = create(api, thing_id="report")
    sid = created["id"]
    regular_before = queued(database_url, sid)
    one_off = api.member.call("POST", f"/v1/recurring/{sid}/run-now")
    assert (one_off["source"], one_off["recurring_schedule_id"]) == ("run_now", sid)
    assert (one_off["status"], one_off["payload"], one_off["thing_id"]) == (
        "queued", {"text": "hi"}, "report")  # fmt: skip
    assert one_off["publish_at_local"].endswith(("-05:00", "-04:00"))  # workspace time
    # it fires at once (handed to its queue after the commit) ...
    wait_for(lambda: one_off["id"] in arrived_ids(api), timeout=3)
    # (the receiver has it before the dispatcher records the answer: wait for that too)
    wait_for(
        lambda: api.admin.call("GET", f"/v1/actions/{one_off['id']}")["status"] == "published",
        timeout=5,
    )
    # ... and the regular occurrences are exactly as they were
    assert queued(database_url, sid) == regular_before
    after = api.admin.call("GET", f"/v1/recurring/{sid}")
    assert after["next_occurrences"] == created["next_occurrences"]
    assert after["consecutive_failures"] == 0


# ---------------------------------------------------------------------- failure policy


def test_five_failures_in_a_row_pause_the_schedule_and_get_says_why(api, database_url):
    sid = create(api)["id"]
    occurrence_ids = [r["id"] for r in rows(database_url, sid)]
    finish(database_url, occurrence_ids[:4], fail=True)
    four = api.admin.call("GET", f"/v1/recurring/{sid}")
    assert (four["status"], four["consecutive_failures"]) == ("active", 4)
    finish(database_url, occurrence_ids[4:5], fail=True)
    paused = api.admin.call("GET", f"/v1/recurring/{sid}")
    assert (paused["status"], paused["consecutive_failures"]) == ("paused", 5)
    assert "after 5 failed occurrences in a row" in paused["paused_reason"]
    assert "provider_rejected: HTTP 410 Gone" in paused["paused_reason"]
    assert paused["paused_at"] is not None
    listed = api.admin.call("GET", "/v1/recurring", params={"status": "paused"})
    assert listed["items"][0]["paused_reason"] == paused["paused_reason"]
    assert queued(database_url, sid) == []
    # a resume starts the count afresh
    resumed = api.admin.call("POST", f"/v1/recurring/{sid}/resume")
    assert (resumed["status"], resumed["consecutive_failures"]) == ("active", 0)


# -------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("overrides", "status", "code", "says"),
    [
        ({"rrule": "FREQ=SOMETIMES"}, 422, "invalid_recurrence", "cannot be read"),
        ({"rrule": "FREQ=MINUTELY;INTERVAL=2"}, 422, "invalid_recurrence", "at least 300 s apart"),
        ({"rrule": "FREQ=DAILY;COUNT=3;UNTIL=20300101T000000Z"}, 422, "invalid_recurrence",
         "both COUNT and UNTIL"),
        ({"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}, 422, "invalid_recurrence",
         "selects no date"),
        ({"rrule": "FREQ=DAILY;UNTIL=20200101T000000Z"}, 422, "invalid_recurrence",
         "no occurrence"),
        ({"rrule": "FREQ=HOURLY;BYHOUR=233"}, 422, "invalid_recurrence", "from 0 to 23"),
        ({"rrule": "FREQ=DAILY;UNTIL=99991231T235959Z", "timezone": "Australia/Sydney"}, 422,
         "invalid_recurrence", "out of range"),
        ({"timezone": "Mars/Olympus"}, 422, "invalid_timezone", "unknown time zone"),
        ({"payload": {"blob": "x" * 70_000}}, 413, "payload_too_large", "limit"),
        ({"action_type": "send_fax"}, 422, "unknown_action_type", "send_fax"),
        ({"target_key": "nowhere"}, 422, "unknown_target", "nowhere"),
        ({"dtstart": "2027-03-02T09:00:00-05:00"}, 422, "invalid_input", "dtstart"),  # offset
        ({"dtstart": "2027-13-02T09:00:00"}, 422, "invalid_time", "dtstart"),
        ({"dtstart": "2020-01-01T09:00:00"}, 422, "invalid_recurrence", "in the past"),
        ({"dtstart": "1800-01-01T09:00:00"}, 422, "invalid_recurrence", "years 1900 to 8999"),
        ({"until": "9000-01-01T00:00:00Z"}, 422, "invalid_recurrence", "until"),
        ({"until": "2020-01-01T00:00:00Z"}, 422, "invalid_time", "until"),
        ({"catch_up_window_seconds": 86401}, 422, "invalid_input", "catch_up_window_seconds"),
        ({"max_failures_before_pause": 0}, 422, "invalid_input", "max_failures_before_pause"),
        ({"payload": {"text": "nul \u0000 inside"}}, 422, "invalid_input", "cannot be stored"),
        ({"colour": "red"}, 422, "invalid_input", "colour"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_4xx_and_writes_nothing(
    api, database_url, overrides, status, code, says
):
    response = api.admin.http.post("/v1/recurring", json=recurring_body(**overrides))
    error = error_of(response, status)
    assert error["code"] == code
    assert says in error["message"]
    assert count(database_url, "schedules") == count(database_url, "actions") == 0


def test_a_missing_rule_is_refused(api, database_url):
    body = recurring_body()
    del body["rrule"]
    assert error_of(api.admin.http.post("/v1/recurring", json=body), 422)["code"] == "invalid_input"
    assert count(database_url, "schedules") == 0


# ---------------------------------------------------------------------------- tenancy


def test_another_workspaces_schedule_is_not_found_on_every_endpoint(api, database_url):
    sid = create(api)["id"]
    before = api.admin.call("GET", f"/v1/recurring/{sid}")
    rows_before = rows(database_url, sid)
    attempts: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "", None),
        ("PATCH", "", {"payload": {"text": "mine now"}}),
        ("POST", "/pause", None),
        ("POST", "/resume", None),
        ("POST", "/end", None),
        ("POST", "/run-now", None),
    ]
    for method, suffix, body in attempts:
        response = api.outsider.http.request(method, f"/v1/recurring/{sid}{suffix}", json=body)
        error = error_of(response, 404)
        assert error["code"] == "not_found", suffix
        # a malformed id is not found either
        malformed = api.admin.http.request(method, f"/v1/recurring/nope{suffix}", json=body)
        assert error_of(malformed, 404)["code"] == "not_found", suffix
    # and nothing changed for the owner
    assert api.admin.call("GET", f"/v1/recurring/{sid}") == before
    assert rows(database_url, sid) == rows_before
    assert count(database_url, "schedules") == 1
