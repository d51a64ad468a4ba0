"""Answers that say what the API chose: the calendar's default range, and how a wall time
the zone skips or repeats was read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def webhook(**when: str) -> dict[str, object]:
    return {"action_type": "webhook", "target_key": "primary", **when}


def test_the_calendar_needs_no_range_and_says_which_it_used(api):
    # Given an action due in an hour and one due in 2027
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    near = api.admin.call("POST", "/v1/actions", json=webhook(publish_at=soon))
    api.admin.call(
        "POST", "/v1/actions", json=webhook(publish_at="2027-09-01T00:00:00Z", thing_id="far")
    )
    # When the calendar is asked with no range
    before = datetime.now(UTC)
    page = api.admin.call("GET", "/v1/actions")
    # Then it covers 24 h back to 31 days after that, says so, and holds only the near one
    used_from = datetime.fromisoformat(page["range"]["from"])
    used_to = datetime.fromisoformat(page["range"]["to"])
    assert abs((before - timedelta(hours=24) - used_from).total_seconds()) < 5
    assert used_to - used_from == timedelta(days=31)
    assert [a["id"] for a in page["items"]] == [near["id"]]
    # And with only `from`, `to` follows from it
    page = api.admin.call("GET", "/v1/actions", params={"from": "2027-08-15T00:00:00Z"})
    assert page["range"] == {"from": "2027-08-15T00:00:00Z", "to": "2027-09-15T00:00:00Z"}
    assert [a["thing_id"] for a in page["items"]] == ["far"]


def test_a_skipped_wall_time_is_moved_and_the_answer_says_so(api):
    # Workspace A is in America/New_York, which skips 02:00-03:00 on 2027-03-14
    created = api.admin.call("POST", "/v1/actions", json=webhook(date="2027-03-14", time="02:30"))
    assert created["publish_at"] == "2027-03-14T07:30:00Z"
    assert created["resolved"] == {
        "wall_time": "2027-03-14T02:30:00",
        "timezone": "America/New_York",
        "rule": "skipped_moved_forward",
        "local": "2027-03-14T03:30:00-04:00",
        "note": "2027-03-14T02:30:00 does not exist in America/New_York (the clocks jump"
        " forward there); moved forward by the 1 h gap",
    }
    # Reading it later has no request wall time to explain
    assert api.admin.call("GET", f"/v1/actions/{created['id']}")["resolved"] is None
    # A reschedule to a repeated wall time in another zone says which of the two it took
    moved = api.admin.call(
        "POST",
        f"/v1/actions/{created['id']}/reschedule",
        json={"date": "2027-10-31", "time": "02:30", "timezone": "Europe/Berlin"},
    )
    assert moved["resolved"]["rule"] == "repeated_first_occurrence"
    assert moved["resolved"]["local"] == "2027-10-31T02:30:00+02:00"
    assert moved["publish_at"] == "2027-10-31T00:30:00Z"
    # An instant needs no explanation
    instant = api.admin.call(
        "POST", "/v1/actions", json=webhook(publish_at="2027-03-14T07:30:00Z", thing_id="t")
    )
    assert instant["resolved"] is None


def test_an_intent_says_how_its_wall_time_is_read(api):
    view = api.admin.call(
        "PUT",
        "/v1/things/post-9/intent",
        json={
            "action_type": "publish_post",
            "targets": ["instagram"],
            "date": "2027-11-07",
            "time": "01:30",
        },
    )
    assert view["resolved"]["rule"] == "repeated_first_occurrence"
    assert view["resolved"]["local"] == "2027-11-07T01:30:00-04:00"
    plain = api.admin.call(
        "PUT",
        "/v1/things/post-10/intent",
        json={
            "action_type": "publish_post",
            "targets": ["instagram"],
            "publish_at": "2027-11-07T06:30:00Z",
        },
    )
    assert plain["resolved"] is None


def test_publish_at_local_is_in_the_zone_the_action_was_scheduled_in(api):
    # Given workspace A in America/New_York and an action at 09:00 Tokyo time
    tokyo = api.admin.call(
        "POST", "/v1/actions",
        json=webhook(date="2027-05-20", time="09:00", timezone="Asia/Tokyo", thing_id="tk"),
    )  # fmt: skip
    # Then it is shown in Tokyo's zone, now and when read again
    assert tokyo["timezone"] == "Asia/Tokyo"
    assert tokyo["publish_at_local"] == "2027-05-20T09:00:00+09:00"
    again = api.admin.call("GET", f"/v1/actions/{tokyo['id']}")
    assert again["publish_at_local"] == "2027-05-20T09:00:00+09:00"
    # A reschedule at an instant keeps the zone; one at a wall time elsewhere takes that one
    moved = api.admin.call(
        "POST", f"/v1/actions/{tokyo['id']}/reschedule",
        json={"publish_at": "2027-05-21T01:00:00Z"},
    )  # fmt: skip
    assert moved["publish_at_local"] == "2027-05-21T10:00:00+09:00"
    moved = api.admin.call(
        "POST", f"/v1/actions/{moved['id']}/reschedule",
        json={"date": "2027-05-21", "time": "12:00", "timezone": "Europe/Berlin"},
    )  # fmt: skip
    assert (moved["timezone"], moved["publish_at_local"]) == (
        "Europe/Berlin", "2027-05-21T12:00:00+02:00",
    )  # fmt: skip
    # And an action scheduled at an instant is shown in the workspace's zone
    instant = api.admin.call(
        "POST", "/v1/actions", json=webhook(publish_at="2027-05-20T13:00:00Z", thing_id="i")
    )
    assert instant["timezone"] is None
    assert instant["publish_at_local"] == "2027-05-20T09:00:00-04:00"
