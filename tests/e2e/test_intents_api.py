"""/v1/things/{thing_id}/intent over real HTTP: declare, change, read and unschedule a
thing's intent; the thing's actions follow at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of
from tests.waiting import wait_for
from tickwork.platform.db import connect

SOCIAL = ["instagram", "facebook", "linkedin"]


def intent(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"action_type": "publish_post", "targets": SOCIAL,
                            "date": "2027-05-20", "time": "09:00",
                            "payload": {"caption": "launch day"}}  # fmt: skip
    body.update(overrides)
    return body


def put(api: Api, thing: str = "post-1", **overrides: Any) -> dict[str, Any]:
    return api.admin.call("PUT", f"/v1/things/{thing}/intent", json=intent(**overrides))


def live(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["target_key"]: a for a in view["actions"] if a["status"] == "queued"}


def test_declaring_an_intent_schedules_one_action_per_target_at_once(api):
    response = api.admin.http.put("/v1/things/post-1/intent", json=intent())
    assert response.status_code == 201
    view = response.json()
    assert view["resolved_at"] == "2027-05-20T13:00:00Z"  # 09:00 in New York (EDT)
    assert view["resolved_at_local"] == "2027-05-20T09:00:00-04:00"
    assert set(live(view)) == set(SOCIAL)
    assert {a["publish_at"] for a in view["actions"]} == {"2027-05-20T13:00:00Z"}
    assert view["reconciled"]["inserted"] == 3
    # the same declaration again changes nothing
    again = api.admin.http.put("/v1/things/post-1/intent", json=intent())
    assert (again.status_code, again.json()["version"]) == (200, view["version"])


def test_moving_the_wall_time_cancels_and_relinks_every_target(api):
    first = live(put(api))
    moved = put(api, time="10:30")
    after = live(moved)
    assert moved["reconciled"]["moved"] == 3
    for target in SOCIAL:
        assert after[target]["publish_at"] == "2027-05-20T14:30:00Z"
        assert after[target]["rescheduled_from"] == first[target]["id"]
    cancelled = [a for a in moved["actions"] if a["status"] == "cancelled"]
    assert {a["id"] for a in cancelled} == {a["id"] for a in first.values()}


def test_removing_a_young_targets_row_waits_for_the_age_gate(api):
    put(api)
    narrowed = put(api, targets=["instagram"])
    # the facebook and linkedin rows are seconds old: the age gate keeps them for now
    assert narrowed["reconciled"]["skipped"]["age"] == 2
    assert set(live(narrowed)) == set(SOCIAL)


def test_an_intent_due_soon_fires_on_time(api):
    soon = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    view = put(api, date=None, time=None, publish_at=soon, targets=["instagram"])
    [action] = live(view).values()
    provider = api.local.runtime.providers.for_action_type("publish_post")
    wait_for(lambda: provider.deliveries)  # type: ignore[attr-defined]
    [delivery] = provider.deliveries  # type: ignore[attr-defined]
    assert str(delivery.action_id) == action["id"]
    assert 0 <= delivery.called_at - delivery.due_at < 0.3


def test_get_and_unschedule(api):
    put(api)
    assert set(live(api.admin.call("GET", "/v1/things/post-1/intent"))) == set(SOCIAL)
    gone = api.admin.call("DELETE", "/v1/things/post-1/intent")
    assert gone["state"] == "unscheduled"
    missing = api.admin.http.get("/v1/things/post-2/intent")
    assert "no schedule intent" in error_of(missing, 404)["message"]


@pytest.mark.parametrize(
    ("overrides", "status", "code"),
    [
        ({"targets": ["instagram", "myspace"]}, 422, "unknown_target"),
        ({"targets": []}, 422, "invalid_input"),
        ({"timezone": "Mars/Olympus_Mons"}, 422, "invalid_timezone"),
        ({"action_type": "send_fax"}, 422, "unknown_action_type"),
        ({"date": "2020-01-01"}, 422, "time_in_past"),
        ({"payload": {"blob": "x" * 70_000}}, 413, "payload_too_large"),
        ({"state": "maybe"}, 422, "invalid_input"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(api, database_url, overrides, status, code):
    response = api.admin.http.put("/v1/things/post-1/intent", json=intent(**overrides))
    assert error_of(response, status)["code"] == code
    with connect(database_url) as conn:
        assert conn.execute("select count(*) from schedule_intents").fetchone() == (0,)
        assert conn.execute("select count(*) from scheduled_actions").fetchone() == (0,)


def test_another_workspaces_thing_is_not_found_and_untouched(api, database_url):
    mine = put(api)
    # Another workspace's id reads exactly as an id that never existed
    for thing in ("post-1", "never-declared"):
        for method in ("GET", "DELETE"):
            response = api.outsider.http.request(method, f"/v1/things/{thing}/intent")
            error = error_of(response, 404)
            assert error == {"code": "not_found", "details": {},
                             "message": f"no schedule intent for thing {thing!r} in this"
                                        " workspace"}, method  # fmt: skip
    with connect(database_url) as conn:
        rows = conn.execute("select count(*) from schedule_intents").fetchone()
    assert rows == (1,)
    still = api.admin.call("GET", "/v1/things/post-1/intent")
    assert (still["version"], set(live(still))) == (mine["version"], set(SOCIAL))


def test_thing_ids_are_per_workspace_with_their_own_gates(api):
    # Given workspace A's post-1, published on instagram
    put(api, targets=["instagram"], date=None, time=None, publish_at=at_seconds(1))
    wait_until_published(api, api.admin, "post-1")
    # When workspace B declares its own post-1
    response = api.outsider.http.put(
        "/v1/things/post-1/intent", json=intent(targets=["instagram", "facebook"])
    )
    # Then it is B's own thing: created, one row per target, A's history does not gate it
    assert response.status_code == 201, response.text
    theirs = response.json()
    assert set(live(theirs)) == {"instagram", "facebook"}
    assert {a["id"] for a in theirs["actions"]}.isdisjoint(
        a["id"] for a in api.admin.call("GET", "/v1/things/post-1/intent")["actions"]
    )
    # and A's terminal-history gate still holds for A alone
    again = put(api, targets=["instagram"], date="2027-05-20", time="09:00")
    assert again["reconciled"]["skipped"]["terminal_history"] == 1
    assert live(again) == {}


def at_seconds(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def wait_until_published(api: Api, client: Any, thing: str, timeout: float = 10.0) -> None:
    def published() -> bool:
        view = client.call("GET", f"/v1/things/{thing}/intent")
        return any(a["status"] == "published" for a in view["actions"])

    wait_for(published, timeout, message="not published in time")
