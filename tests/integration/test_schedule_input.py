"""Bad input to schedule: a clear error naming the problem, and nothing written."""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import uuid4

import psycopg
import pytest

from tickwork.actions import model, scheduling
from tickwork.actions.model import PAYLOAD_MAX_BYTES, NewAction
from tickwork.platform.errors import (
    InputError,
    InvalidTimeError,
    InvalidTimezoneError,
    NotFoundError,
    PastTimeError,
    PayloadTooLargeError,
    UnknownActionTypeError,
)
from tickwork.platform.wallclock import parse_wall_time


def rows(conn) -> int:
    return conn.execute("select count(*) from scheduled_actions").fetchone()[0]


def attempt(conn, workspace, settings, now, **fields):
    values = {"action_type": "webhook", "target_key": "primary",
              "publish_at": now + timedelta(hours=1), "payload": {}}  # fmt: skip
    values.update(fields)
    return scheduling.schedule(conn, workspace, NewAction(**values), settings, now)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"action_type": "send_fax"}, UnknownActionTypeError, "unknown action_type 'send_fax'"),
        ({"target_key": None}, InputError, "target_key is required"),
        ({"target_key": "  "}, InputError, "target_key must be a non-empty string"),
        ({"target_key": "x" * 201}, InputError, "target_key is longer than 200"),
        ({"thing_id": ""}, InputError, "thing_id must be a non-empty string"),
        ({"payload": ["not", "an", "object"]}, InputError, "payload must be a JSON object"),
        ({"payload": {"n": float("nan")}}, InputError, "payload is not plain JSON"),
        ({"payload": {"blob": "x" * PAYLOAD_MAX_BYTES}}, PayloadTooLargeError, "the limit is"),
        ({"publish_at": datetime(2026, 5, 20, 9, 0)}, InvalidTimeError, "must carry a UTC offset"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    conn, workspace, settings, now, fields, error, message
):
    with pytest.raises(error, match=message):
        attempt(conn, workspace, settings, now, **fields)
    assert rows(conn) == 0


def test_a_past_time_is_refused(conn, workspace, settings, now):
    with pytest.raises(PastTimeError, match="is in the past") as raised:
        attempt(conn, workspace, settings, now, publish_at=now - timedelta(hours=2))
    assert raised.value.details == {"field": "publish_at"}
    assert rows(conn) == 0


def test_a_time_within_the_grace_period_is_accepted(conn, workspace, settings, now):
    # a request that took a moment to arrive still schedules "now"
    attempt(conn, workspace, settings, now, publish_at=now - timedelta(seconds=30))
    assert rows(conn) == 1


def test_a_payload_exactly_at_the_bound_is_accepted(conn, workspace, settings, now):
    # {"blob": "..."} is 12 bytes of framing around the string
    payload = {"blob": "x" * (PAYLOAD_MAX_BYTES - 12)}
    assert model.payload_size(payload) == PAYLOAD_MAX_BYTES
    attempt(conn, workspace, settings, now, payload=payload)
    assert rows(conn) == 1


def test_the_database_agrees_on_the_payload_bound(conn, workspace, now):
    payload = '{"blob": "' + "x" * (PAYLOAD_MAX_BYTES - 11) + '"}'
    with pytest.raises(psycopg.errors.CheckViolation, match="scheduled_actions_payload_size"):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, payload,"
            " publish_at) values (%s, 'webhook', 't', %s::jsonb, now())",
            (workspace, payload),
        )


@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        ("payload = '[1]'::jsonb", "scheduled_actions_payload_object"),
        ("action_type = 'Not A Type'", "scheduled_actions_action_type_check"),
        ("source = 'bad source'", "scheduled_actions_source_check"),
    ],
)
def test_the_database_checks_these_columns_on_an_update_too(
    conn, workspace, now, assignment, constraint
):
    # The checks run on the writes that set these columns (not on every transition)
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " values (%s, 'webhook', 't', %s)",
        (workspace, now),
    )
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        conn.execute(f"update scheduled_actions set {assignment}")
    assert caught.value.diag.constraint_name == constraint


def test_an_unknown_status_is_refused_by_the_database(conn, workspace):
    with pytest.raises(psycopg.errors.CheckViolation, match="scheduled_actions_status_check"):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " status) values (%s, 'webhook', 't', now(), 'sent')",
            (workspace,),
        )
    assert rows(conn) == 0


def test_an_invalid_zone_is_refused_before_any_write(conn, workspace, settings, now):
    with pytest.raises(InvalidTimezoneError, match="unknown time zone 'Mars/Olympus_Mons'"):
        parse_wall_time("2027-01-05", "09:00", "Mars/Olympus_Mons")
    assert rows(conn) == 0


def test_the_database_refuses_an_invalid_workspace_zone(conn):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown time zone"):
        conn.execute("insert into workspaces (name, timezone) values ('x', 'Not/AZone')")
    assert conn.execute("select count(*) from workspaces").fetchone()[0] == 0


def test_an_unknown_workspace_is_not_found(conn, settings, now):

    with pytest.raises(NotFoundError):
        attempt(conn, uuid4(), settings, now)
    assert rows(conn) == 0


def test_the_same_dedupe_key_returns_the_first_row(conn, workspace, settings, now):
    first = attempt(conn, workspace, settings, now, dedupe_key="req-1")
    second = attempt(conn, workspace, settings, now, dedupe_key="req-1")
    assert (first.created, second.created) == (True, False)
    assert second.action.id == first.action.id
    assert rows(conn) == 1
