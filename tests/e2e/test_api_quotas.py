"""Per-workspace quotas over real HTTP: each refusal is a clear 422 (or 429 with
Retry-After), writes nothing, and touches no other workspace."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.e2e.conftest import Api, running_api
from tests.e2e.test_api import at, error_of, webhook
from tickwork.config import Settings
from tickwork.db import connect

QUOTAS = {
    "quota_active_actions": 3,
    "quota_recurring_schedules": 2,
    "quota_schedule_window_rows": 100,
    "quota_api_requests_per_minute": 40,
}


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with running_api(database_url, tmp_path, Settings(**QUOTAS)) as running:
        yield running


@pytest.fixture
def roomy_api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    """The same quotas, with room for the occurrences of a few daily schedules."""
    settings = Settings(**{**QUOTAS, "quota_active_actions": 10_000})
    with running_api(database_url, tmp_path, settings) as running:
        yield running


def count(database_url: str, table: str) -> int:
    with connect(database_url) as conn:
        row = conn.execute(f"select count(*) from {table}").fetchone()
    assert row is not None
    return int(row[0])


def daily(**overrides: object) -> dict[str, object]:
    return {"action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY",
            **overrides}  # fmt: skip


def test_active_actions_are_capped_per_workspace(api, database_url):
    for n in range(3):
        api.admin.call("POST", "/v1/actions", json=webhook(thing_id=f"t-{n}"))
    refused = api.admin.http.post("/v1/actions", json=webhook(thing_id="t-3"))
    error = error_of(refused, 422)
    assert error["code"] == "quota_exceeded"
    assert "3 active" in error["message"]
    assert error["details"]["quota"] == "active_actions"
    assert count(database_url, "scheduled_actions") == 3
    # an intent that would add rows is refused the same way, and writes nothing
    intent = {"action_type": "publish_post", "targets": ["instagram"], "date": "2027-05-20",
              "time": "09:00"}  # fmt: skip
    assert error_of(api.admin.http.put("/v1/things/p/intent", json=intent), 422)["code"] == (
        "quota_exceeded"
    )
    assert count(database_url, "schedule_intents") == 0
    # another workspace has its own quota
    assert api.outsider.http.post("/v1/actions", json=webhook()).status_code == 201
    # and cancelling frees room
    first = api.admin.call("GET", "/v1/actions", params={"from": at(0), "to": at(7200)})
    api.admin.call("POST", f"/v1/actions/{first['items'][0]['id']}/cancel")
    assert api.admin.http.post("/v1/actions", json=webhook(thing_id="t-3")).status_code == 201


def test_recurring_schedules_are_capped_per_workspace(roomy_api, database_url):
    api = roomy_api
    api.admin.call("POST", "/v1/recurring", json=daily(thing_id="a"))
    second = api.admin.call("POST", "/v1/recurring", json=daily(thing_id="b"))
    refused = api.admin.http.post("/v1/recurring", json=daily(thing_id="c"))
    error = error_of(refused, 422)
    assert error["code"] == "quota_exceeded"
    assert "2" in error["message"]
    assert count(database_url, "recurring_schedules") == 2
    api.admin.call("POST", f"/v1/recurring/{second['id']}/end")
    assert api.admin.http.post("/v1/recurring", json=daily(thing_id="c")).status_code == 201


def test_a_schedule_may_materialize_only_its_quota_of_rows(roomy_api, database_url):
    api = roomy_api
    # every 5 minutes for 14 days would be 4,032 rows; the quota here is 100
    refused = api.admin.http.post("/v1/recurring", json=daily(rrule="FREQ=MINUTELY;INTERVAL=5"))
    error = error_of(refused, 422)
    assert error["code"] == "quota_exceeded"
    assert "at most 100" in error["message"]
    assert error["details"]["rows"] == 4032
    assert count(database_url, "recurring_schedules") == 0
    assert count(database_url, "scheduled_actions") == 0
    # an edit to a denser rule is refused too, and the schedule stays as it was
    schedule = api.admin.call("POST", "/v1/recurring", json=daily())
    edit = api.admin.http.patch(
        f"/v1/recurring/{schedule['id']}", json={"rrule": "FREQ=HOURLY"}
    )  # 336 in 14 days
    assert error_of(edit, 422)["code"] == "quota_exceeded"
    assert api.admin.call("GET", f"/v1/recurring/{schedule['id']}")["rrule"] == "FREQ=DAILY"


def away_from_a_minute_boundary() -> None:
    """The rate is counted per wall-clock minute: start well inside one."""
    while datetime.now(UTC).second >= 50:
        time.sleep(0.2)


def test_the_api_rate_is_capped_per_workspace_with_retry_after(api):
    away_from_a_minute_boundary()
    statuses = [api.member.http.get("/v1/workspace").status_code for _ in range(45)]
    assert statuses[:40] == [200] * 40
    limited = api.admin.http.get("/v1/workspace")  # the same workspace, another user
    error = error_of(limited, 429)
    assert error["code"] == "rate_limited"
    assert "40 API requests" in error["message"]
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert set(statuses[40:]) == {429}
    # another workspace is not slowed down
    assert api.outsider.http.get("/v1/workspace").status_code == 200
