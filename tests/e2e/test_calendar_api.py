"""GET /v1/calendar: a range by local day or hour, counts by status and first actions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of


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
    assert set(items[0]) == {"id", "action_type", "target_key", "status", "publish_at"}
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
