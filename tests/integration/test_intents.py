"""Declaring, reading and unscheduling schedule intents on a real Postgres."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from uuid import uuid4
from zoneinfo import ZoneInfo

import psycopg
import pytest

from tests.conftest import make_workspace
from tests.intent_helpers import SOCIAL, age_rows, count, declare, rows_of, social_settings
from tickwork.intents import store as intents
from tickwork.intents.reconcile import Intent
from tickwork.intents.store import IntentInput
from tickwork.platform.errors import (
    InputError,
    InvalidTimezoneError,
    NotFoundError,
    PastTimeError,
    PayloadTooLargeError,
    UnknownActionTypeError,
    UnknownTargetError,
)


@pytest.fixture
def settings(database_url):
    return social_settings(database_url)


@pytest.fixture
def tomorrow(now):
    return (now + timedelta(days=1)).date()


def test_declaring_an_intent_stores_it_and_schedules_every_target_at_once(
    conn, workspace, settings, tomorrow
):
    # Given a workspace in UTC
    # When an app declares a post for three platforms at 09:00 tomorrow
    result = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    # Then the intent is stored, version 1, already reconciled
    assert result.created
    assert result.changed
    assert result.intent.version == 1
    assert result.intent.targets == ("facebook", "instagram", "linkedin")
    assert result.intent.timezone is None
    assert result.instant == datetime.combine(tomorrow, time(9, 0), tzinfo=UTC)
    # and one queued row per platform exists, minted by the intent
    assert result.reconciled.inserted == 3
    assert sorted(a.target_key for a in result.active) == sorted(SOCIAL)
    for action in result.active:
        assert action.status == "queued"
        assert action.source == "intent"
        assert action.thing_id == "post-1"
        assert action.publish_at == result.instant
        assert action.payload == {"caption": "Launch day"}
    stored = intents.get_intent(conn, workspace, "post-1")
    assert stored is not None
    assert stored.intent.reconciled_version == 1
    assert stored.intent.recheck_at is not None  # live rows: the periodic sweep looks again


def test_declaring_the_same_intent_again_changes_nothing(conn, workspace, settings, tomorrow):
    first = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    again = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    assert not again.created
    assert not again.changed
    assert again.intent.version == 1
    assert again.intent.updated_at == first.intent.updated_at
    assert again.reconciled.inserted == 0
    assert count(conn, "scheduled_actions") == 3


def test_every_change_bumps_the_version_and_bookkeeping_does_not(
    conn, workspace, settings, tomorrow
):
    first = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    changed = declare(
        conn, workspace, settings, targets=("instagram",), wall_date=tomorrow, wall_time="09:00"
    )
    assert changed.changed
    assert changed.intent.version == 2
    assert changed.intent.updated_at > first.intent.updated_at
    unscheduled = intents.unschedule_intent(conn, workspace, "post-1", settings)
    assert unscheduled.intent.version == 3
    assert unscheduled.intent.state == "unscheduled"
    # the reconciler's own writes leave version and updated_at alone
    conn.execute("update schedule_intents set reconciled_version = 0, recheck_at = now()")
    view = intents.get_intent(conn, workspace, "post-1")
    assert view is not None
    assert view.intent.version == 3
    assert view.intent.updated_at == unscheduled.intent.updated_at


def test_get_intent_shows_every_row_of_the_thing_and_the_active_ones(
    conn, workspace, settings, tomorrow
):
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="10:30")
    view = intents.get_intent(conn, workspace, "post-1")
    assert view is not None
    assert len(view.actions) == 6  # three moved away, three at 10:30
    assert {a.publish_at.time() for a in view.active} == {time(10, 30)}
    assert view.instant == datetime.combine(tomorrow, time(10, 30), tzinfo=UTC)
    assert intents.get_intent(conn, workspace, "no-such-thing") is None


def test_unscheduling_cancels_rows_old_enough_and_keeps_the_intent(
    conn, workspace, settings, tomorrow
):
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    age_rows(conn, 300)
    result = intents.unschedule_intent(conn, workspace, "post-1", settings)
    assert result.changed
    assert result.reconciled.cancelled == 3
    assert result.active == []
    assert {a.error_code for a in result.actions} == {"withdrawn"}
    # and unscheduling again is a no-op
    again = intents.unschedule_intent(conn, workspace, "post-1", settings)
    assert not again.changed
    assert again.intent.version == result.intent.version


def test_unscheduling_a_thing_without_an_intent_is_not_found(conn, workspace, settings):
    with pytest.raises(NotFoundError, match="no schedule intent for thing 'ghost'"):
        intents.unschedule_intent(conn, workspace, "ghost", settings)
    assert count(conn, "schedule_intents") == 0


def test_an_intent_in_its_own_zone_and_one_at_an_instant(conn, workspace, settings, tomorrow):
    zoned = declare(
        conn,
        workspace,
        settings,
        "post-ny",
        wall_date=tomorrow,
        wall_time="09:00",
        timezone="America/New_York",
    )

    expected = datetime.combine(tomorrow, time(9, 0), tzinfo=ZoneInfo("America/New_York"))
    assert {a.publish_at for a in zoned.active} == {expected}
    instant = datetime.combine(tomorrow, time(7, 15), tzinfo=UTC)
    at = declare(conn, workspace, settings, "post-at", publish_at=instant.isoformat())
    assert {a.publish_at for a in at.active} == {instant}
    assert at.intent.wall_date is None


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"targets": ("instagram", "myspace")}, UnknownTargetError, "'myspace' is not a target"),
        ({"timezone": "Mars/Olympus_Mons"}, InvalidTimezoneError, "unknown time zone"),
        ({"wall_date": date(2020, 1, 1)}, PastTimeError, "is in the past"),
        ({"payload": {"blob": "x" * 70_000}}, PayloadTooLargeError, "the limit is"),
        ({"action_type": "send_fax"}, UnknownActionTypeError, "unknown action_type"),
        ({"targets": ()}, InputError, "at least one target"),
    ],
)
def test_a_bad_intent_is_refused_and_nothing_is_written(
    conn, workspace, settings, now, tomorrow, fields, error, message
):
    values = {"action_type": "publish_post", "targets": SOCIAL, "wall_date": tomorrow,
              "wall_time": "09:00"} | fields  # fmt: skip
    with pytest.raises(error, match=message):
        intents.declare_intent(conn, workspace, "post-1", IntentInput(**values), settings, now)
    assert count(conn, "schedule_intents") == 0
    assert count(conn, "scheduled_actions") == 0


@pytest.mark.parametrize(
    "fields",
    [{"payload": {"caption": "nul \x00 inside"}}, {"wall_time": "09:00", "thing_id": "a\x00b"}],
    ids=["nul-in-payload", "nul-in-thing-id"],
)
def test_a_value_postgres_cannot_store_is_bad_input_and_nothing_is_written(
    conn, workspace, settings, now, tomorrow, fields
):
    thing_id = fields.pop("thing_id", "post-1")
    values = {"action_type": "publish_post", "targets": SOCIAL, "wall_date": tomorrow,
              "wall_time": "09:00"} | fields  # fmt: skip
    with pytest.raises(InputError, match="cannot be stored"):
        intents.declare_intent(conn, workspace, thing_id, IntentInput(**values), settings, now)
    assert count(conn, "schedule_intents") == 0
    assert count(conn, "scheduled_actions") == 0


def test_a_bad_change_leaves_the_intent_and_its_rows_as_they_were(
    conn, workspace, settings, tomorrow
):
    before = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    with pytest.raises(UnknownTargetError):
        declare(conn, workspace, settings, targets=("tiktok",), wall_date=tomorrow,
                wall_time="10:30")  # fmt: skip
    after = intents.get_intent(conn, workspace, "post-1")
    assert after is not None
    assert after.intent == before.intent
    assert [a.id for a in after.active] == [a.id for a in before.active]


def test_a_bad_thing_id_is_refused(conn, workspace, settings, now, tomorrow):
    given = IntentInput("publish_post", SOCIAL, wall_date=tomorrow, wall_time="09:00")
    with pytest.raises(InputError, match="thing_id is longer than 200"):
        intents.declare_intent(conn, workspace, "x" * 201, given, settings, now)
    assert count(conn, "schedule_intents") == 0


def test_an_unknown_workspace_is_not_found_and_nothing_is_written(conn, settings, now, tomorrow):
    given = IntentInput("publish_post", SOCIAL, wall_date=tomorrow, wall_time="09:00")
    with pytest.raises(NotFoundError, match="workspace does not exist"):
        intents.declare_intent(conn, uuid4(), "post-1", given, settings, now)
    assert count(conn, "schedule_intents") == 0


def test_another_workspaces_thing_is_invisible_and_untouchable(conn, workspace, settings, tomorrow):
    # Given workspace A's intent for post-1
    theirs = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    other = make_workspace(conn, "Other", "Europe/Berlin")
    # When workspace B asks for it or unschedules it, it is not there
    assert intents.get_intent(conn, other, "post-1") is None
    with pytest.raises(NotFoundError, match="no schedule intent for thing 'post-1'"):
        intents.unschedule_intent(conn, other, "post-1", settings)
    # and declaring its own post-1 makes a second, independent thing
    mine = declare(conn, other, settings, targets=("facebook",), wall_date=tomorrow,
                   wall_time="11:00")  # fmt: skip
    assert mine.created
    assert [a.target_key for a in mine.active] == ["facebook"]
    # Then A's intent and rows are exactly as they were
    assert count(conn, "schedule_intents") == 2
    still = intents.get_intent(conn, workspace, "post-1")
    assert still is not None
    assert still.intent == theirs.intent
    assert [(a.id, a.status) for a in still.actions] == [(a.id, a.status) for a in theirs.actions]


def test_the_database_refuses_what_validation_would(conn, workspace):
    # belt and braces under the domain checks: a zone Postgres does not know, both time kinds
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute(
            "insert into schedule_intents (workspace_id, thing_id, action_type, targets,"
            " wall_date, wall_time, timezone) values (%s, 'p', 'log', '{a}', '2030-01-01',"
            " '09:00', 'Mars/Olympus_Mons')",
            (workspace,),
        )
    with pytest.raises(psycopg.errors.CheckViolation, match="one_kind_of_time"):
        conn.execute(
            "insert into schedule_intents (workspace_id, thing_id, action_type, targets,"
            " wall_date, wall_time, publish_at) values (%s, 'p', 'log', '{a}', '2030-01-01',"
            " '09:00', now())",
            (workspace,),
        )


def test_the_schema_matches_what_the_code_reads(conn):
    columns = [
        row[0]
        for row in conn.execute(
            "select column_name from information_schema.columns"
            " where table_name = 'schedule_intents' order by ordinal_position"
        ).fetchall()
    ]
    assert columns == list(Intent.__dataclass_fields__)


def test_rows_of_a_thing_belong_to_its_workspace(conn, workspace, settings, tomorrow):
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    assert {r["workspace_id"] for r in rows_of(conn, "post-1")} == {workspace}
