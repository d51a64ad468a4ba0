"""Tags on actions and recurring schedules, and the bulk cancel of everything pending of one
parent (a tag, a recipient, an entity, a campaign) over real HTTP against the local server:
the counts, the budget and its continuation, what is never touched, enrollments exited, and
the refusals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api, running_api
from tickwork.engine import expander
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, connect

CANCEL = "/v1/actions/bulk-cancel"
NOW = datetime.now(UTC)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    # No reconciler: a campaign's first step stays pending until the test says otherwise.
    with running_api(database_url, tmp_path, Settings()) as running:
        yield running


@pytest.fixture
def owner(database_url: str) -> Iterator[Connection]:
    with connect(database_url) as conn:
        yield conn


def later(hours: float = 24) -> str:
    return (NOW + timedelta(hours=hours)).isoformat()


def schedule(api: Api, *, tags: list[str], **extra: Any) -> dict[str, Any]:
    body = {"action_type": "webhook", "target_key": "primary", "publish_at": later(),
            "payload": {"text": "hi"}, "tags": tags} | extra  # fmt: skip
    return api.admin.call("POST", "/v1/actions", json=body)


def insert_tagged(
    conn: Connection, workspace: str, tag: str, count: int, status: str = "queued"
) -> list[str]:
    finished = None if status in ("queued", "submitted") else NOW
    rows = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, finished_at, tags)"
        " select %s, 'webhook', 'primary', %s + make_interval(secs => g), %s, %s,"
        " array[%s::text] from generate_series(1, %s) g returning id::text",
        (workspace, NOW + timedelta(days=1), status, finished, tag, count),
    ).fetchall()
    return [r[0] for r in rows]


def status_counts(conn: Connection, ids: list[str]) -> dict[str, int]:
    return dict(
        conn.execute(
            "select status, count(*)::int from scheduled_actions where id = any(%s::uuid[])"
            " group by status",
            (ids,),
        ).fetchall()
    )


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


# --------------------------------------------------------------------------------- tags


def test_tags_are_kept_answered_and_filter_the_list(api):
    tagged = schedule(api, tags=["podcast:42", "episode-7", "podcast:42"])
    other = schedule(api, tags=["podcast:43"])
    schedule(api, tags=[])
    # duplicates dropped, order kept
    assert tagged["tags"] == ["podcast:42", "episode-7"]
    assert api.admin.call("GET", f"/v1/actions/{tagged['id']}")["tags"] == tagged["tags"]
    page = api.admin.call("GET", "/v1/actions", params={"tag": "podcast:42"})
    assert [a["id"] for a in page["items"]] == [tagged["id"]]
    page = api.admin.call("GET", "/v1/actions", params={"tag": "podcast:43"})
    assert [a["id"] for a in page["items"]] == [other["id"]]
    # another workspace's list never shows them
    assert api.outsider.call("GET", "/v1/actions", params={"tag": "podcast:42"})["items"] == []
    # a reschedule keeps them on the new row
    moved = api.admin.call(
        "POST", f"/v1/actions/{other['id']}/reschedule", json={"publish_at": later(30)}
    )
    assert moved["tags"] == ["podcast:43"]


@pytest.mark.parametrize(
    ("tags", "field"),
    [
        ([f"t{i}" for i in range(11)], "tags"),
        (["x" * 65], "tags[0]"),
        (["ok", "has space"], "tags[1]"),
        (["-leading"], "tags[0]"),
        ([""], "tags[0]"),
        ("podcast:42", "tags"),
    ],
)
def test_bad_tags_are_a_422_naming_the_tag(api, owner, tags, field):
    body = {"action_type": "webhook", "target_key": "primary", "publish_at": later(),
            "payload": {"text": "hi"}, "tags": tags}  # fmt: skip
    error = error_of(api.admin.http.post("/v1/actions", json=body), 422)
    assert error["code"] == "invalid_input", error
    fields = [error["details"].get("field")] + [
        p["field"] for p in error["details"].get("errors", [])
    ]
    assert field in fields, error
    assert owner.execute("select count(*) from scheduled_actions").fetchone() == (0,)


def test_a_recurring_schedules_occurrences_carry_its_tags(api):
    created = api.admin.call("POST", "/v1/recurring", json={
        "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY;COUNT=3",
        "payload": {"text": "daily"}, "tags": ["podcast:42"],
        "dtstart": (NOW + timedelta(days=1)).replace(tzinfo=None).isoformat(timespec="minutes"),
    })  # fmt: skip
    assert created["tags"] == ["podcast:42"]
    page = api.admin.call("GET", "/v1/actions", params={"tag": "podcast:42", "to": later(24 * 5)})
    assert len(page["items"]) == 3
    assert {a["recurring_schedule_id"] for a in page["items"]} == {created["id"]}
    # and a cancel by tag takes them
    answer = api.admin.call("POST", CANCEL, json={"tag": "podcast:42"})
    assert (answer["changed"], answer["next"]) == (3, None)


# ------------------------------------------------------------------------- cancel by tag


def test_cancel_by_tag_takes_every_pending_row_of_it_and_nothing_else(api, owner):
    mine = insert_tagged(owner, api.workspace_a, "podcast:42", 30)
    sent = insert_tagged(owner, api.workspace_a, "podcast:42", 5, status="published")
    claimed = insert_tagged(owner, api.workspace_a, "podcast:42", 5, status="submitted")
    other_tag = insert_tagged(owner, api.workspace_a, "podcast:43", 5)
    theirs = insert_tagged(owner, api.workspace_b, "podcast:42", 5)
    answer = api.member.call("POST", CANCEL, json={"tag": "podcast:42"})
    assert answer == {"matched": 30, "changed": 30, "skipped": 0, "refused": {},
                      "next": None, "exited": 0, "paused_schedules": []}  # fmt: skip
    assert status_counts(owner, mine) == {"cancelled": 30}
    assert status_counts(owner, sent) == {"published": 5}
    assert status_counts(owner, claimed) == {"submitted": 5}
    assert status_counts(owner, other_tag) == {"queued": 5}
    assert status_counts(owner, theirs) == {"queued": 5}
    # again: nothing left, nothing changed
    again = api.member.call("POST", CANCEL, json={"tag": "podcast:42"})
    assert (again["matched"], again["changed"], again["next"]) == (0, 0, None)
    # each row's change log names the caller
    actors = owner.execute(
        "select distinct actor from action_changes where action_id = any(%s::uuid[])", (mine,)
    ).fetchall()
    assert actors == [("mallory-member",)]


def test_a_call_stops_at_its_row_budget_and_the_next_goes_on(api, owner):
    ids = insert_tagged(owner, api.workspace_a, "bulk", 2500)
    first = api.admin.call("POST", CANCEL, json={"tag": "bulk", "limit": 1200})
    assert (first["matched"], first["changed"]) == (1200, 1200)
    assert first["next"] is not None
    second = api.admin.call(
        "POST", CANCEL, json={"tag": "bulk", "limit": 1200, "after": first["next"]}
    )
    assert (second["changed"], second["next"] is not None) == (1200, True)
    third = api.admin.call("POST", CANCEL, json={"tag": "bulk", "after": second["next"]})
    assert (third["changed"], third["next"]) == (100, None)
    assert status_counts(owner, ids) == {"cancelled": 2500}


def test_the_residual_criteria_narrow_a_parent(api, owner):
    near = schedule(api, tags=["p"], publish_at=later(2))
    far = schedule(api, tags=["p"], publish_at=later(48))
    log = schedule(api, tags=["p"], action_type="log", publish_at=later(2))
    answer = api.admin.call(
        "POST", CANCEL, json={"tag": "p", "action_type": "webhook", "due_to": later(24)}
    )
    assert answer["changed"] == 1
    assert status_counts(owner, [near["id"]]) == {"cancelled": 1}
    assert status_counts(owner, [far["id"], log["id"]]) == {"queued": 2}


# ------------------------------------------------------------------ recurring schedules


def recurring_schedule(api: Api, **extra: Any) -> dict[str, Any]:
    body = {"action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY",
            "payload": {"text": "daily"},
            "dtstart": (NOW + timedelta(days=1)).replace(tzinfo=None).isoformat(
                timespec="minutes")} | extra  # fmt: skip
    return api.admin.call("POST", "/v1/recurring", json=body)


def queued_of(conn: Connection, schedule: dict[str, Any]) -> int:
    row = conn.execute(
        "select count(*)::int from scheduled_actions where recurring_schedule_id = %s"
        " and status = 'queued'",
        (schedule["id"],),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_cancel_by_tag_pauses_the_recurring_schedules_that_carry_it(api, owner):
    # Given a daily schedule of the tag (its next 14 days queued), and one of another tag
    podcast = recurring_schedule(api, tags=["podcast:42"])
    other = recurring_schedule(api, tags=["podcast:43"])
    assert queued_of(owner, podcast) > 0
    # When a member cancels everything of the tag
    answer = api.member.call("POST", CANCEL, json={"tag": "podcast:42"})
    # Then the answer names the schedule it paused, and says why on the schedule
    assert answer["paused_schedules"] == [podcast["id"]]
    assert (answer["changed"], answer["next"]) == (answer["matched"], None)
    shown = api.admin.call("GET", f"/v1/recurring/{podcast['id']}")
    assert (shown["status"], shown["paused_reason"]) == (
        "paused", "a bulk cancel by mallory-member of everything tagged podcast:42")  # fmt: skip
    assert api.admin.call("GET", f"/v1/recurring/{other['id']}")["status"] == "active"
    # And its occurrences are cancelled and stay so: the expander makes none
    assert queued_of(owner, podcast) == 0
    expander.expand_all(owner, Settings(), now=NOW + timedelta(days=3))
    assert queued_of(owner, podcast) == 0
    assert queued_of(owner, other) > 0
    # A second call pauses nothing twice
    again = api.member.call("POST", CANCEL, json={"tag": "podcast:42"})
    assert (again["matched"], again["paused_schedules"], again["next"]) == (0, [], None)


def test_the_schedules_paused_count_in_the_budget_and_the_next_call_goes_on(api, owner):
    made = sorted([recurring_schedule(api, tags=["t"])["id"] for _ in range(3)])
    # A budget of two: the first call pauses two schedules and says more is left
    first = api.admin.call("POST", CANCEL, json={"tag": "t", "limit": 2})
    assert (first["paused_schedules"], first["changed"]) == (made[:2], 0)
    assert first["next"] is not None
    # the next pauses the third (none twice), then cancels rows with what is left
    second = api.admin.call("POST", CANCEL, json={"tag": "t", "limit": 2, "after": first["next"]})
    assert (second["paused_schedules"], second["changed"]) == (made[2:], 1)
    last = api.admin.call("POST", CANCEL, json={"tag": "t", "after": second["next"]})
    assert (last["paused_schedules"], last["next"]) == ([], None)
    statuses = {api.admin.call("GET", f"/v1/recurring/{i}")["status"] for i in made}
    assert statuses == {"paused"}
    assert sum(queued_of(owner, {"id": i}) for i in made) == 0


def test_cancel_by_recipient_pauses_their_recurring_schedules(api, owner):
    put_recipient(api, "ann")
    put_recipient(api, "bob")
    anns = recurring_schedule(api, recipient_id="ann")
    bobs = recurring_schedule(api, recipient_id="bob")
    answer = api.admin.call("POST", CANCEL, json={"recipient_id": "ann"})
    assert answer["paused_schedules"] == [anns["id"]]
    shown = api.admin.call("GET", f"/v1/recurring/{anns['id']}")
    assert (shown["status"], shown["paused_reason"]) == (
        "paused", "a bulk cancel by alice of everything for recipient ann")  # fmt: skip
    assert queued_of(owner, anns) == 0
    assert api.admin.call("GET", f"/v1/recurring/{bobs['id']}")["status"] == "active"
    assert queued_of(owner, bobs) > 0


def test_a_cancel_of_a_window_or_of_another_type_pauses_no_schedule(api, owner):
    podcast = recurring_schedule(api, tags=["podcast:42"])
    window = api.admin.call("POST", CANCEL, json={"tag": "podcast:42", "due_to": later(24 * 3)})
    assert window["paused_schedules"] == []
    assert window["changed"] >= 1
    narrowed = api.admin.call("POST", CANCEL, json={"tag": "podcast:42", "action_type": "log"})
    assert narrowed["paused_schedules"] == []
    assert api.admin.call("GET", f"/v1/recurring/{podcast['id']}")["status"] == "active"
    assert queued_of(owner, podcast) > 0


# ------------------------------------------------------------ recipient, entity, campaign


def put_recipient(api: Api, recipient_id: str) -> None:
    api.admin.call("PUT", f"/v1/recipients/{recipient_id}", json={"timezone": "UTC"})


def drip(api: Api) -> dict[str, Any]:
    step = {"wait": {"delay_seconds": 7200},
            "action": {"action_type": "webhook", "target_key": "primary",
                       "payload": {"text": "hello", "to": "{{ recipient.id }}"}}}  # fmt: skip
    return api.admin.call("POST", "/v1/campaigns", json={"name": "drip", "steps": [step, step]})


def enroll(api: Api, campaign: dict[str, Any], recipient_id: str) -> dict[str, Any]:
    return api.admin.call(
        "POST", f"/v1/campaigns/{campaign['id']}/enrollments", json={"recipient_id": recipient_id}
    )


def test_cancel_by_campaign_exits_its_enrollments_and_cancels_their_steps(api, owner):
    campaign, other = drip(api), drip(api)
    for name in ("ann", "bob", "cy"):
        put_recipient(api, name)
    enrolled = [enroll(api, campaign, name) for name in ("ann", "bob")]
    kept = enroll(api, other, "cy")
    steps = [e["current_action_id"] for e in enrolled]
    assert all(steps)
    answer = api.admin.call("POST", CANCEL, json={"campaign_id": campaign["id"]})
    assert answer == {"matched": 2, "changed": 2, "skipped": 0, "refused": {},
                      "next": None, "exited": 2, "paused_schedules": []}  # fmt: skip
    for e in enrolled:
        now = api.admin.call("GET", f"/v1/enrollments/{e['id']}")
        assert (now["status"], now["exit_reason"], now["exit_outcome"]) == (
            "exited", "bulk cancel", "cancelled")  # fmt: skip
    assert status_counts(owner, steps) == {"cancelled": 2}
    assert api.admin.call("GET", f"/v1/enrollments/{kept['id']}")["status"] == "active"


def test_cancel_by_recipient_exits_their_enrollments_and_cancels_their_actions(api, owner):
    campaign = drip(api)
    put_recipient(api, "ann")
    put_recipient(api, "bob")
    enrolled = enroll(api, campaign, "ann")
    theirs = enroll(api, campaign, "bob")
    one_off = schedule(api, tags=[], recipient_id="ann")
    answer = api.admin.call("POST", CANCEL, json={"recipient_id": "ann"})
    assert (answer["changed"], answer["exited"], answer["next"]) == (2, 1, None)
    assert api.admin.call("GET", f"/v1/enrollments/{enrolled['id']}")["status"] == "exited"
    assert api.admin.call("GET", f"/v1/enrollments/{theirs['id']}")["status"] == "active"
    assert status_counts(owner, [one_off["id"], enrolled["current_action_id"]]) == {"cancelled": 2}


def test_cancel_by_entity_takes_what_rules_made_for_it(api, owner):
    rule = {"name": "reminder",
            "trigger": {"type": "time", "entity_type": "booking", "reference": "start",
                        "offset_seconds": -3600},
            "action": {"action_type": "log", "target_key": "guest",
                       "payload": {"text": "soon"}}}  # fmt: skip
    api.admin.call("POST", "/v1/rules", json=rule)
    start = (NOW + timedelta(days=3)).replace(tzinfo=None).isoformat(timespec="minutes")
    made = {}
    for booking in ("bk-1", "bk-2"):
        answer = api.admin.call(
            "PUT", f"/v1/entities/booking/{booking}/dates", json={"dates": {"start": start}}
        )
        made[booking] = [c["action_id"] for c in answer["result"]["created"]]
    answer = api.admin.call("POST", CANCEL, json={"entity_type": "booking", "entity_id": "bk-1"})
    assert (answer["changed"], answer["next"]) == (1, None)
    assert status_counts(owner, made["bk-1"]) == {"cancelled": 1}
    assert status_counts(owner, made["bk-2"]) == {"queued": 1}


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tag": "a", "recipient_id": "ann"}, "recipient_id"),
        ({"entity_type": "booking"}, "entity_id"),
        ({"entity_id": "bk-1"}, "entity_type"),
        ({"campaign_id": "00000000-0000-0000-0000-000000000001", "action_type": "webhook"},
         "action_type"),
        ({"tag": "a", "error_code": "x"}, "error_code"),
        ({"tag": "a", "limit": 10_001}, "limit"),
        ({"tag": "has space"}, "tag"),
        ({"action_type": "webhook", "limit": 1001}, "limit"),
    ],
)  # fmt: skip
def test_a_bad_parent_filter_is_a_422_naming_the_field(api, owner, body, field):
    queued = insert_tagged(owner, api.workspace_a, "a", 2)
    error = error_of(api.admin.http.post(CANCEL, json=body), 422)
    assert error["code"] == "invalid_input", error
    fields = [error["details"].get("field")] + [
        p["field"] for p in error["details"].get("errors", [])
    ]
    assert field in fields, error
    assert status_counts(owner, queued) == {"queued": 2}


def test_bulk_retry_takes_no_parent(api):
    error = error_of(api.admin.http.post("/v1/actions/bulk-retry", json={"tag": "a"}), 422)
    assert error["code"] == "invalid_input"
