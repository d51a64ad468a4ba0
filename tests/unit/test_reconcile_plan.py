"""The reconciler's decisions for one thing, without a database: the gates, moves, withdrawals."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import uuid4

import pytest

from tickwork.actions.model import Action
from tickwork.intents.reconcile import Insert, Intent, Move, Plan, Withdraw, plan_thing
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.errors import InvalidTimezoneError, UnknownActionTypeError

NOW = datetime(2026, 5, 19, 12, 0, tzinfo=UTC)
AT_9 = datetime(2026, 5, 20, 9, 0, tzinfo=UTC)
AT_1030 = datetime(2026, 5, 20, 10, 30, tzinfo=UTC)
WORKSPACE = uuid4()
SETTINGS = Settings(
    action_types={
        "publish_post": ActionTypeConfig(
            provider="log", targets=frozenset({"instagram", "facebook", "linkedin"})
        )
    }
)


def intent(**overrides: Any) -> Intent:
    values: dict[str, Any] = {
        "workspace_id": WORKSPACE,
        "thing_id": "post-1",
        "action_type": "publish_post",
        "targets": ("facebook", "instagram", "linkedin"),
        "wall_date": date(2026, 5, 20),
        "wall_time": time(9, 0),
        "timezone": None,
        "publish_at": None,
        "payload": {"caption": "hello"},
        "state": "scheduled",
        "version": 1,
        "reconciled_version": 0,
        "reconciled_at": None,
        "recheck_at": None,
        "updated_by": None,
        "created_at": NOW,
        "updated_at": NOW,
    }
    values.update(overrides)
    return Intent(**values)


def row(target: str, status: str = "queued", **overrides: Any) -> Action:
    terminal = status in ("published", "failed", "cancelled")
    values: dict[str, Any] = {
        "id": uuid4(),
        "workspace_id": WORKSPACE,
        "created_by": None,
        "action_type": "publish_post",
        "thing_id": "post-1",
        "target_key": target,
        "payload": {"caption": "hello"},
        "publish_at": AT_9,
        "status": status,
        "error_code": None,
        "last_error": None,
        "attempt_count": 1 if status in ("submitted", "published", "failed") else 0,
        "manual_retries": 0,
        "next_attempt_at": None,
        "enqueued_at": None,
        "provider_id": None,
        "submitted_at": None,
        "finished_at": NOW if terminal else None,
        "dedupe_key": None,
        "rescheduled_from": None,
        "source": "intent",
        "recurring_schedule_id": None,
        "created_at": NOW - timedelta(hours=1),
        "updated_at": NOW,
        "connection_id": None,
        "recipient_id": None,
        "transactional": False,
    }
    values.update(overrides)
    return Action(**values)


def plan(rows: list[Action], zone: str = "UTC", **intent_overrides: Any) -> Plan:
    return plan_thing(intent(**intent_overrides), zone, rows, NOW, SETTINGS)


def inserted_targets(steps: list[Any]) -> list[str]:
    return [s.desired.target_key for s in steps if isinstance(s, Insert)]


def test_a_new_intent_inserts_one_row_per_target():
    result = plan([])
    assert inserted_targets(result.steps) == ["facebook", "instagram", "linkedin"]
    assert {s.desired.publish_at for s in result.steps} == {AT_9}


def test_rows_that_match_the_intent_are_left_alone():
    result = plan([row("facebook"), row("instagram"), row("linkedin")])
    assert result.steps == []
    assert sum(result.skipped.values()) == 0
    assert result.owned_active == 3


@pytest.mark.parametrize("status", ["published", "failed"])
def test_terminal_history_gate_never_reinserts_a_shipped_or_failed_target(status):
    # Given instagram already published (or failed) and nothing active for it
    result = plan([row("instagram", status), row("facebook"), row("linkedin")])
    # Then instagram is not inserted again
    assert inserted_targets(result.steps) == []
    assert result.skipped["terminal_history"] == 1


def test_a_user_cancelled_target_is_not_reinserted():
    result = plan([row("instagram", "cancelled"), row("facebook"), row("linkedin")])
    assert result.steps == []
    assert result.skipped["terminal_history"] == 1


def test_a_row_the_reconciler_withdrew_does_not_block_a_later_insert():
    # Given instagram withdrawn when the intent was unscheduled; the intent is back
    withdrawn = row("instagram", "cancelled", error_code="withdrawn")
    result = plan([withdrawn, row("facebook"), row("linkedin")])
    assert inserted_targets(result.steps) == ["instagram"]
    assert result.skipped["terminal_history"] == 0


def test_a_move_cancelled_row_does_not_block_while_its_successor_speaks_for_it():
    # Given a row moved by cancel + insert, and its replacement later withdrawn
    moved = row("instagram", "cancelled", publish_at=AT_9 - timedelta(hours=1))
    replacement = row("instagram", "cancelled", error_code="withdrawn", rescheduled_from=moved.id)
    result = plan([moved, replacement, row("facebook"), row("linkedin")])
    assert inserted_targets(result.steps) == ["instagram"]


def test_a_published_successor_blocks_even_though_its_predecessor_was_moved():
    moved = row("instagram", "cancelled", error_code="superseded")
    shipped = row("instagram", "published", rescheduled_from=moved.id)
    result = plan([moved, shipped, row("facebook"), row("linkedin")])
    assert result.steps == []
    assert result.skipped["terminal_history"] == 1


def test_a_changed_wall_time_moves_the_row_by_cancel_and_insert():
    old = row("instagram")
    result = plan([old], targets=("instagram",), wall_time=time(10, 30))
    [step] = result.steps
    assert isinstance(step, Move)
    assert step.row is old
    assert step.desired.publish_at == AT_1030


def test_a_changed_payload_replaces_the_row():
    old = row("instagram")
    result = plan([old], targets=("instagram",), payload={"caption": "edited"})
    [step] = result.steps
    assert isinstance(step, Move)
    assert step.desired.payload == {"caption": "edited"}


def test_the_workspace_zone_decides_a_wall_time_without_its_own_zone():
    old = row("instagram")
    result = plan([old], zone="Europe/Berlin", targets=("instagram",))
    [step] = result.steps
    assert isinstance(step, Move)
    assert step.desired.publish_at == datetime(2026, 5, 20, 7, 0, tzinfo=UTC)  # 09:00 CEST


def test_an_intent_zone_wins_over_the_workspace_zone():
    result = plan([], zone="Europe/Berlin", targets=("instagram",), timezone="America/New_York")
    [step] = result.steps
    assert step.desired.publish_at == datetime(2026, 5, 20, 13, 0, tzinfo=UTC)  # 09:00 EDT


def test_a_removed_target_is_withdrawn_when_old_enough():
    stale = row("linkedin")
    result = plan([row("facebook"), row("instagram"), stale], targets=("facebook", "instagram"))
    assert result.steps == [Withdraw(stale)]


def test_age_gate_keeps_a_young_row_and_says_when_to_look_again():
    # Given linkedin's row inserted 30 s ago and then removed from the intent
    young = row("linkedin", created_at=NOW - timedelta(seconds=30))
    result = plan([row("facebook"), row("instagram"), young], targets=("facebook", "instagram"))
    # Then it stays, and the reconciler comes back when it is 2 minutes old
    assert result.steps == []
    assert result.skipped["age"] == 1
    assert result.recheck_at == NOW + timedelta(seconds=90)


def test_an_unscheduled_intent_withdraws_its_rows():
    rows = [row("facebook"), row("instagram"), row("linkedin")]
    result = plan(rows, state="unscheduled")
    assert sorted(s.row.target_key for s in result.steps if isinstance(s, Withdraw)) == [
        "facebook",
        "instagram",
        "linkedin",
    ]
    # in id order, the order the dispatcher's claim locks rows in
    assert [s.row.id for s in result.steps] == sorted(s.row.id for s in result.steps)


@pytest.mark.parametrize(
    "overrides",
    [
        {"manual_retries": 1},  # an admin retry
        {"source": "send_now"},
        {"source": "api"},
    ],
)
def test_terminal_parent_gate_keeps_rows_minted_by_a_user_action(overrides):
    kept = row("instagram", **overrides)
    result = plan([kept], state="unscheduled")
    assert result.steps == []
    assert result.skipped["user_action"] == 1


def test_rows_of_other_producers_are_theirs_to_manage():
    result = plan([row("instagram", source="recurring")], state="unscheduled")
    assert result.steps == []
    assert result.skipped["other_source"] == 1


@pytest.mark.parametrize(
    "overrides",
    [
        {"status": "submitted", "attempt_count": 1},
        {"attempt_count": 1},  # back in queued after a transient error: a provider saw it
    ],
)
def test_rows_a_provider_may_have_seen_are_never_touched(overrides):
    in_flight = row("instagram", **overrides)
    withdrawn = plan([in_flight], state="unscheduled")
    moved = plan([in_flight], targets=("instagram",), wall_time=time(10, 30))
    assert withdrawn.steps == []
    assert moved.steps == []
    assert withdrawn.skipped["in_flight"] == moved.skipped["in_flight"] == 1


def test_no_row_is_created_in_the_past():
    result = plan([], wall_date=date(2026, 5, 18))
    assert result.steps == []
    assert result.skipped["past"] == 3


def test_a_changed_action_type_withdraws_the_old_rows_and_inserts_new_ones():
    settings = SETTINGS.model_copy(
        update={"action_types": {**SETTINGS.action_types, "log": ActionTypeConfig(provider="log")}}
    )
    old = row("instagram")
    result = plan_thing(
        intent(action_type="log", targets=("instagram",)), "UTC", [old], NOW, settings
    )
    assert result.steps[0] == Withdraw(old)
    assert isinstance(result.steps[1], Insert)
    assert result.steps[1].desired.action_type == "log"


def test_an_action_type_no_longer_configured_is_refused_not_guessed():
    with pytest.raises(UnknownActionTypeError):
        plan([row("instagram")], action_type="gone")


def test_a_zone_python_cannot_read_is_refused():
    with pytest.raises(InvalidTimezoneError):
        plan([], zone="Mars/Olympus_Mons")
