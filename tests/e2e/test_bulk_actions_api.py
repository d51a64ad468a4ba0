"""Bulk cancel and bulk retry over real HTTP against the local server: the filter, the
bounded batches and their cursor, the counts, the roles, tenancy and the refusals."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.waiting import wait_for
from tickwork.api import openapi_document
from tickwork.platform.db import Connection, connect

CANCEL = "/v1/actions/bulk-cancel"
RETRY = "/v1/actions/bulk-retry"
NOW = datetime.now(UTC)


def day(n: float) -> datetime:
    return NOW + timedelta(days=n)


def insert(
    conn: Connection, workspace: str, *, action_type: str = "webhook", target: str = "primary",
    thing: str | None = None, at: datetime | None = None, status: str = "queued",
    error_code: str | None = None, manual_retries: int = 0,
) -> str:  # fmt: skip
    """A row written as the owner: any state, any time, in either workspace."""
    finished = None if status in ("queued", "submitted") else NOW
    row = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, thing_id,"
        " publish_at, status, error_code, manual_retries, finished_at, payload)"
        " values (%s, %s, %s, %s, %s, %s, %s, %s, %s, '{\"text\": \"hi\"}') returning id",
        (workspace, action_type, target, thing, at or day(1), status, error_code,
         manual_retries, finished),
    ).fetchone()  # fmt: skip
    assert row is not None
    return str(row[0])


def statuses(conn: Connection, ids: list[str]) -> list[str]:
    found = dict(
        conn.execute(
            "select id::text, status from scheduled_actions where id = any(%s::uuid[])", (ids,)
        ).fetchall()
    )
    return [found[i] for i in ids]


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


@pytest.fixture
def owner(database_url) -> Any:
    with connect(database_url) as conn:
        yield conn


# ------------------------------------------------------------------------------ filter

CASES = [
    ({"action_type": "log"}, {"c"}),
    ({"target_key": "secondary"}, {"b"}),
    ({"thing_id": "t-d"}, {"d"}),
    ({"due_from": day(1.5).isoformat(), "due_to": day(3.5).isoformat()}, {"b", "c"}),
    ({"due_to": day(2).isoformat()}, {"a"}),  # exclusive: b is due at day 2
    ({"due_from": day(2).isoformat()}, {"b", "c", "d"}),  # inclusive
    ({"action_type": "webhook", "due_from": day(1.5).isoformat(), "status": "queued"}, {"b", "d"}),
]


def test_bulk_cancel_takes_exactly_the_queued_rows_each_criterion_names(api, owner):
    for criteria, expected in CASES:
        owner.execute("delete from scheduled_actions")
        rows = {
            "a": insert(owner, api.workspace_a, thing="t-a", at=day(1)),
            "b": insert(owner, api.workspace_a, target="secondary", thing="t-b", at=day(2)),
            "c": insert(owner, api.workspace_a, action_type="log", thing="t-c", at=day(3)),
            "d": insert(owner, api.workspace_a, thing="t-d", at=day(4)),
            # failed and published rows are never cancelled, whatever the filter
            "e": insert(owner, api.workspace_a, thing="t-d", at=day(2.5), status="failed"),
            "f": insert(owner, api.workspace_a, action_type="log", at=day(3), status="published"),
        }
        answer = api.member.call("POST", CANCEL, json=criteria)
        assert answer == {
            "matched": len(expected), "changed": len(expected), "skipped": 0, "refused": {},
            "next": None, "exited": 0, "paused_schedules": [],
        }, criteria  # fmt: skip
        cancelled = {name for name, s in zip(rows, statuses(owner, list(rows.values())),
                                             strict=True) if s == "cancelled"}  # fmt: skip
        assert cancelled == expected, criteria


def test_bulk_retry_filters_by_error_code_and_leaves_other_failures(api, owner):
    rejected = insert(owner, api.workspace_a, at=day(-1), status="failed", error_code="rejected")
    expired = insert(owner, api.workspace_a, at=day(-1), status="failed", error_code="expired")
    answer = api.admin.call("POST", RETRY, json={"error_code": "rejected", "status": "failed"})
    assert (answer["matched"], answer["changed"], answer["next"]) == (1, 1, None)
    assert statuses(owner, [rejected, expired]) == ["queued", "failed"]


# ---------------------------------------------------------------- batches and the cursor


def test_batches_are_bounded_resume_from_the_cursor_and_repeat_as_no_ops(api, owner):
    ids = [insert(owner, api.workspace_a, thing=f"t{i}", at=day(1 + i / 10)) for i in range(7)]
    body: dict[str, Any] = {"action_type": "webhook", "limit": 3}
    first = api.admin.call("POST", CANCEL, json=body)
    assert (first["matched"], first["changed"]) == (3, 3)
    assert first["next"] is not None
    # In (publish_at, id) order: the three due first
    assert statuses(owner, ids) == ["cancelled"] * 3 + ["queued"] * 4
    second = api.admin.call("POST", CANCEL, json=body | {"after": first["next"]})
    assert (second["matched"], second["changed"]) == (3, 3)
    third = api.admin.call("POST", CANCEL, json=body | {"after": second["next"]})
    assert (third["matched"], third["changed"], third["next"]) == (1, 1, None)
    assert statuses(owner, ids) == ["cancelled"] * 7
    # The same calls again change nothing
    for after in (None, first["next"], second["next"]):
        again = api.admin.call("POST", CANCEL, json=body | ({"after": after} if after else {}))
        assert (again["matched"], again["changed"], again["next"]) == (0, 0, None)


def test_a_last_batch_of_exactly_limit_rows_says_nothing_is_left(api, owner):
    for i in range(4):
        insert(owner, api.workspace_a, thing=f"t{i}", at=day(1 + i / 10))
    first = api.admin.call("POST", CANCEL, json={"target_key": "primary", "limit": 2})
    last = api.admin.call(
        "POST", CANCEL, json={"target_key": "primary", "limit": 2, "after": first["next"]}
    )
    assert (first["changed"], last["changed"], last["next"]) == (2, 2, None)


def _waiting_on_a_lock(conn: Connection) -> bool:
    row = conn.execute(
        "select count(*) from pg_stat_activity where datname = current_database()"
        " and wait_event_type = 'Lock'"
    ).fetchone()
    return bool(row and row[0])


def test_a_row_that_moved_on_meanwhile_is_skipped_and_counted(api, owner, database_url):
    ids = [insert(owner, api.workspace_a, thing=f"t{i}", at=day(1 + i)) for i in range(3)]
    answers: list[dict[str, Any]] = []
    call = threading.Thread(
        target=lambda: answers.append(
            api.admin.call("POST", CANCEL, json={"target_key": "primary"})
        )
    )
    with connect(database_url) as claim:
        # Given a dispatcher claiming the middle row, its transaction not yet committed
        with claim.transaction():
            claim.execute(
                "update scheduled_actions set status = 'submitted', submitted_at = now(),"
                " attempt_count = 1 where id = %s",
                (ids[1],),
            )
            # When the bulk call has read it as queued and waits for the claim's lock
            call.start()
            wait_for(lambda: _waiting_on_a_lock(owner), timeout=10)
        call.join(10)
    # Then it leaves the claimed row alone and says so
    assert answers == [
        {
            "matched": 3,
            "changed": 2,
            "skipped": 1,
            "refused": {},
            "next": None,
            "exited": 0,
            "paused_schedules": [],
        }
    ]
    assert statuses(owner, ids) == ["cancelled", "submitted", "cancelled"]


# ------------------------------------------------------------------------- retry


def test_bulk_retry_requeues_hands_due_rows_to_their_queue_and_refuses_what_it_must(api, owner):
    # Given failed rows: two retryable, one out of retries, one whose thing has an active
    # row, and two of one thing (the first is retried, the second would be a second active)
    ok = [insert(owner, api.workspace_a, thing=f"ok{i}", at=day(-0.01 * (i + 1)),
                 status="failed", error_code="rejected") for i in range(2)]  # fmt: skip
    spent = insert(owner, api.workspace_a, thing="spent", at=day(-0.5), status="failed",
                   error_code="rejected", manual_retries=5)  # fmt: skip
    busy = insert(owner, api.workspace_a, thing="busy", at=day(-0.4), status="failed",
                  error_code="rejected")  # fmt: skip
    insert(owner, api.workspace_a, thing="busy", at=day(3))
    twins = [insert(owner, api.workspace_a, thing="twin", at=day(-0.3 + i / 100),
                    status="failed", error_code="rejected") for i in range(2)]  # fmt: skip
    # When an admin retries them in bulk
    answer = api.admin.call("POST", RETRY, json={"error_code": "rejected"})
    # Then each is counted where it belongs
    assert answer == {
        "matched": 6, "changed": 3, "skipped": 0,
        "refused": {"retries_exhausted": 1, "taken": 2}, "next": None, "exited": 0,
    }  # fmt: skip
    assert statuses(owner, [*ok, spent, busy, *twins]) == [
        "queued",
        "queued",
        "failed",
        "failed",
        "queued",
        "failed",
    ]
    retried = owner.execute(
        "select manual_retries, error_code, finished_at from scheduled_actions"
        " where id = any(%s::uuid[])", (ok,),
    ).fetchall()  # fmt: skip
    assert retried == [(1, None, None), (1, None, None)]
    # And the retried rows, due now, go to their queue at once (the tick is a minute away)
    delivered = lambda: {d.body["data"]["id"] for d in api.local.receiver.deliveries}  # noqa: E731
    wait_for(lambda: {*ok, twins[0]} <= delivered(), timeout=10)


def test_bulk_retry_is_for_admins_and_bulk_cancel_for_members(api, owner):
    failed = insert(owner, api.workspace_a, at=day(-1), status="failed", error_code="x")
    queued = insert(owner, api.workspace_a, thing="q", at=day(1))
    refused = api.member.http.post(RETRY, json={"error_code": "x"})
    assert error_of(refused, 403)["code"] == "forbidden"
    assert "admin" in error_of(refused, 403)["message"]
    assert api.member.call("POST", CANCEL, json={"thing_id": "q"})["changed"] == 1
    assert statuses(owner, [failed, queued]) == ["failed", "cancelled"]


# --------------------------------------------------------------- tenancy, change log


def test_a_workspaces_bulk_call_leaves_another_workspaces_rows_alone(api, owner):
    mine = [insert(owner, api.workspace_a, thing=f"a{i}") for i in range(2)]
    theirs = [insert(owner, api.workspace_b, thing=f"b{i}") for i in range(2)]
    theirs_failed = insert(owner, api.workspace_b, at=day(-1), status="failed", error_code="x")
    answer = api.admin.call("POST", CANCEL, json={"action_type": "webhook"})
    assert (answer["matched"], answer["changed"]) == (2, 2)
    assert api.admin.call("POST", RETRY, json={"error_code": "x"})["matched"] == 0
    assert statuses(owner, [*mine, *theirs, theirs_failed]) == [
        "cancelled",
        "cancelled",
        "queued",
        "queued",
        "failed",
    ]
    # and B's own call takes B's rows
    assert api.outsider.call("POST", CANCEL, json={"action_type": "webhook"})["changed"] == 2


def test_each_bulk_cancel_is_in_the_actions_change_log(api, owner):
    ids = [insert(owner, api.workspace_a, thing=f"t{i}", at=day(1 + i)) for i in range(2)]
    api.member.call("POST", CANCEL, json={"target_key": "primary"})
    for action_id, due in zip(ids, (day(1), day(2)), strict=True):
        changes = api.admin.call("GET", f"/v1/actions/{action_id}")["changes"]
        assert [(c["kind"], c["actor"]) for c in changes] == [("cancel", "mallory-member")]
        assert datetime.fromisoformat(changes[0]["old_at"]) == due


# ------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("path", [CANCEL, RETRY])
@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({}, "invalid_input", "body"),
        ({"limit": 10, "after": None}, "invalid_input", "body"),
        ({"due_from": "tomorrow"}, "invalid_input", "due_from"),
        ({"due_to": "2027-01-01T09:00:00"}, "invalid_input", "due_to"),  # no offset
        ({"due_from": 1700000000}, "invalid_input", "due_from"),
        ({"due_from": "2027-02-30T00:00:00Z"}, "invalid_input", "due_from"),
        ({"due_to": "9999-01-01T00:00:00Z"}, "invalid_time", "due_to"),
        ({"due_from": "2027-01-02T00:00:00Z", "due_to": "2027-01-01T00:00:00Z"},
         "invalid_input", "due_to"),
        ({"action_type": "webhook", "limit": 0}, "invalid_input", "limit"),
        ({"action_type": "webhook", "limit": 1001}, "invalid_input", "limit"),
        ({"action_type": "webhook", "after": "not-a-cursor"}, "invalid_input", "after"),
        ({"action_type": "webhook", "status": "published"}, "invalid_input", "status"),
        ({"action_type": "webhook", "labels": "x"}, "invalid_input", "labels"),
        ({"action_type": ""}, "invalid_input", "action_type"),
    ],
)  # fmt: skip
def test_bad_input_is_a_4xx_naming_the_field_and_changes_nothing(
    api, owner, path, body, code, field
):
    queued = insert(owner, api.workspace_a, thing="q")
    failed = insert(owner, api.workspace_a, at=day(-1), status="failed", error_code="x")
    error = error_of(api.admin.http.post(path, json=body), 422)
    assert error["code"] == code, error
    problems = [error["details"].get("field")] + [
        p["field"] for p in error["details"].get("errors", [])
    ]
    assert field in problems, error
    assert field in error["message"] or field == "body", error
    assert statuses(owner, [queued, failed]) == ["queued", "failed"]


def test_an_empty_filter_says_why_it_is_refused(api):
    error = error_of(api.admin.http.post(CANCEL, json={"status": "queued", "limit": 5}), 422)
    assert "at least one criterion besides limit" in error["message"]
    assert "every queued action" in error["message"]


def test_the_bulk_routes_are_in_the_openapi_document():
    document = json.loads(openapi_document())
    for path, model, out in ((CANCEL, "BulkCancelIn", "BulkCancelOut"),
                             (RETRY, "BulkRetryIn", "BulkOut")):  # fmt: skip
        operation = document["paths"][path]["post"]
        assert model in json.dumps(operation["requestBody"])
        assert f'"#/components/schemas/{out}"' in json.dumps(operation["responses"]["200"])
    assert "admins" in document["paths"][RETRY]["post"]["summary"]


def test_a_bulk_path_is_no_action_id(api):
    # GET /v1/actions/{id} would read `bulk-cancel` as an id: the static path wins, and
    # another method on it is a 405 naming POST alone
    for path in (CANCEL, RETRY):
        for method in ("GET", "PUT", "DELETE"):
            refused = api.admin.http.request(method, path)
            assert error_of(refused, 405)["code"] == "method_not_allowed"
            assert refused.headers["Allow"] == "POST"
