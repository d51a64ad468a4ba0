"""GET /v1/calendar: a range by local day or hour, counts by status and first actions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of
from tickwork.recurring import projection


def day_after_tomorrow() -> datetime:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=2)


def make(api: Api, at: datetime, action_type: str = "webhook") -> str:
    body = {"action_type": action_type, "target_key": "primary" if action_type == "webhook"
            else "demo", "publish_at": at.isoformat(), "payload": {}}  # fmt: skip
    return str(api.admin.call("POST", "/v1/actions", json=body)["id"])


def summary(api: Api, start: datetime, end: datetime, **params: Any) -> dict[str, Any]:
    query = {"from": start.isoformat(), "to": end.isoformat(), **params}
    result: dict[str, Any] = api.admin.call("GET", "/v1/calendar", params=query)
    return result


@pytest.fixture
def spread(api: Api) -> dict[str, Any]:
    """Around midnight in Tokyo (15:00 UTC): one action before it, three after, one of them
    cancelled, one a log line."""
    day = day_after_tomorrow()
    ids = {
        "before": make(api, day + timedelta(hours=14, minutes=30)),  # 23:30 JST
        "first": make(api, day + timedelta(hours=15, minutes=10)),  # 00:10 JST next day
        "second": make(api, day + timedelta(hours=15, minutes=20), "log"),
        "third": make(api, day + timedelta(hours=16)),  # 01:00 JST
    }
    api.admin.call("POST", f"/v1/actions/{ids['third']}/cancel")
    return {"day": day, **ids}


def test_days_are_the_viewers_days(api: Api, spread: dict[str, Any]) -> None:
    day = spread["day"]
    tokyo = summary(api, day, day + timedelta(days=2), timezone="Asia/Tokyo", per_bucket=2)
    assert (tokyo["timezone"], tokyo["unit"]) == ("Asia/Tokyo", "day")
    local = (day + timedelta(days=1)).date().isoformat()
    assert [(b["start"], b["total"], b["counts"]) for b in tokyo["buckets"]] == [
        (f"{day.date().isoformat()}T00:00:00", 1, {"queued": 1}),
        (f"{local}T00:00:00", 3, {"queued": 2, "cancelled": 1}),
    ]
    # The first two of the second day, in due order; the total still counts the third.
    items = tokyo["buckets"][1]["items"]
    assert [i["id"] for i in items] == [spread["first"], spread["second"]]
    assert set(items[0]) == {"id", "action_type", "target_key", "status", "publish_at",
                             "projected", "recurring_schedule_id"}  # fmt: skip
    assert (items[0]["projected"], items[0]["recurring_schedule_id"]) == (False, None)
    # In UTC all four are on one day.
    utc = summary(api, day, day + timedelta(days=2), timezone="UTC")
    assert [(b["start"], b["total"]) for b in utc["buckets"]] == [
        (f"{day.date().isoformat()}T00:00:00", 4)
    ]


def test_hours_filters_and_the_workspaces_zone(api: Api, spread: dict[str, Any]) -> None:
    day = spread["day"]
    hours = summary(api, day, day + timedelta(days=1), unit="hour", timezone="Asia/Tokyo")
    local = (day + timedelta(days=1)).date().isoformat()
    assert [(b["start"], b["total"]) for b in hours["buckets"]] == [
        (f"{day.date().isoformat()}T23:00:00", 1),
        (f"{local}T00:00:00", 2),
        (f"{local}T01:00:00", 1),
    ]
    queued_webhooks = summary(
        api, day, day + timedelta(days=1), status="queued", action_type="webhook", per_bucket=0
    )
    # Without a zone, the workspace's (America/New_York: 09:30 and 10:10 the same day).
    assert queued_webhooks["timezone"] == "America/New_York"
    assert [(b["total"], b["items"]) for b in queued_webhooks["buckets"]] == [(2, [])]


def test_another_workspace_sees_none_of_it(api: Api, spread: dict[str, Any]) -> None:
    day = spread["day"]
    theirs = api.outsider.call(
        "GET", "/v1/calendar",
        params={"from": day.isoformat(), "to": (day + timedelta(days=2)).isoformat()},
    )  # fmt: skip
    assert theirs["buckets"] == []


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"timezone": "Mars/Olympus"}, "invalid_timezone", "timezone"),
        ({"to_days": 0}, "invalid_input", "to"),
        ({"to_days": 63}, "invalid_input", "to"),
        ({"unit": "hour", "to_days": 9}, "invalid_input", "to"),
        ({"per_bucket": 101}, "invalid_input", "per_bucket"),
        ({"unit": "week"}, "invalid_input", "unit"),
    ],
)
def test_bad_ranges_and_names_are_refused(
    api: Api, params: dict[str, Any], code: str, field: str
) -> None:
    day = day_after_tomorrow()
    days = params.pop("to_days", 1)
    query = {"from": day.isoformat(), "to": (day + timedelta(days=days)).isoformat(), **params}
    error = error_of(api.admin.http.get("/v1/calendar", params=query), 422)
    assert error["code"] == code
    fields = [error["details"].get("field")] + [
        p["field"] for p in error["details"].get("errors", [])
    ]
    assert field in fields, error


def test_from_and_to_are_required(api: Api) -> None:
    error = error_of(api.admin.http.get("/v1/calendar"), 422)
    assert error["code"] == "invalid_input"


# ------------------------------------------------------------------ projected occurrences


def schedule(api: Api, dtstart: datetime, rrule: str, **extra: Any) -> dict[str, Any]:
    body = {"action_type": "webhook", "target_key": "primary", "rrule": rrule,
            "dtstart": dtstart.strftime("%Y-%m-%dT%H:%M:%S"), "timezone": "UTC",
            **extra}  # fmt: skip
    result: dict[str, Any] = api.admin.call("POST", "/v1/recurring", json=body)
    return result


def items_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for bucket in answer["buckets"] for item in bucket["items"]]


def test_a_schedule_beyond_the_window_shows_its_projected_occurrences(api: Api) -> None:
    # Given a weekly schedule whose first occurrence is ten weeks away: nothing made yet
    first = day_after_tomorrow() + timedelta(weeks=10, hours=9)
    made = schedule(api, first, "FREQ=WEEKLY;COUNT=12")
    # When the calendar shows its first four weeks
    answer = summary(api, first - timedelta(days=1), first + timedelta(weeks=4), timezone="UTC")
    # Then each week's day counts one projected occurrence, at the rule's time, with no id
    weeks = [first + timedelta(weeks=n) for n in range(4)]
    assert [(b["start"], b["counts"]) for b in answer["buckets"]] == [
        (w.replace(hour=0).strftime("%Y-%m-%dT%H:%M:%S"), {"projected": 1}) for w in weeks
    ]
    assert [(i["id"], i["status"], i["projected"], i["recurring_schedule_id"],
             datetime.fromisoformat(i["publish_at"])) for i in items_of(answer)] == [
        (None, "projected", True, made["id"], w) for w in weeks
    ]  # fmt: skip
    assert answer["projection_complete"] is True
    # The same occurrences the schedule's own preview shows
    preview = api.admin.call("GET", f"/v1/recurring/{made['id']}", params={"preview": 4})
    assert [datetime.fromisoformat(o["at"]) for o in preview["next_occurrences"]] == weeks


def test_projection_begins_where_the_rows_end_and_only_for_active_schedules(api: Api) -> None:
    # Given a daily schedule from tomorrow: its first 14 days are rows, the rest are not
    first = day_after_tomorrow() - timedelta(days=1) + timedelta(hours=12)
    made = schedule(api, first, "FREQ=DAILY")
    start, end = first - timedelta(hours=1), first + timedelta(days=30)
    answer = summary(api, start, end, timezone="UTC", per_bucket=5)
    # Then each of the 30 days holds one occurrence: a queued row, or else a projection
    assert [b["total"] for b in answer["buckets"]] == [1] * 30
    kinds = [next(iter(b["counts"])) for b in answer["buckets"]]
    assert set(kinds[:13]) == {"queued"}
    assert set(kinds[14:]) == {"projected"}
    assert kinds == sorted(kinds, key=lambda k: k == "projected")

    # Not with a status filter, nor when asked not to, nor once paused
    def kinds_of(answer: dict[str, Any]) -> set[str]:
        return {kind for bucket in answer["buckets"] for kind in bucket["counts"]}

    assert kinds_of(summary(api, start, end, status="queued")) == {"queued"}
    assert kinds_of(summary(api, start, end, projected="false")) == {"queued"}
    api.admin.call("POST", f"/v1/recurring/{made['id']}/pause")
    assert kinds_of(summary(api, start, end)) == {"cancelled"}


def test_the_projection_is_bounded_and_says_so(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projection, "MAX_OCCURRENCES", 5)
    first = day_after_tomorrow() + timedelta(weeks=10, hours=9)
    schedule(api, first, "FREQ=DAILY")
    answer = summary(api, first, first + timedelta(days=20), timezone="UTC")
    assert [b["counts"] for b in answer["buckets"]] == [{"projected": 1}] * 5
    assert answer["projection_complete"] is False
    # Another workspace sees none of it
    theirs = api.outsider.call("GET", "/v1/calendar", params={
        "from": first.isoformat(), "to": (first + timedelta(days=20)).isoformat()})  # fmt: skip
    assert theirs["buckets"] == []
