"""Validating a declared intent: clear errors naming the problem, normalised values."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any

import pytest

from tickwork.actions.model import PAYLOAD_MAX_BYTES
from tickwork.intents.store import IntentInput, ValidIntent, validate_intent
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.errors import (
    InputError,
    InvalidTimeError,
    InvalidTimezoneError,
    PastTimeError,
    PayloadTooLargeError,
    UnknownActionTypeError,
    UnknownTargetError,
)

NOW = datetime(2026, 5, 19, 12, 0, tzinfo=UTC)
SETTINGS = Settings(
    action_types={
        "publish_post": ActionTypeConfig(
            provider="log", targets=frozenset({"instagram", "facebook", "linkedin"})
        ),
        "webhook": ActionTypeConfig(provider="webhook"),
    }
)


def given(**overrides: Any) -> IntentInput:
    values: dict[str, Any] = {
        "action_type": "publish_post",
        "targets": ["instagram", "facebook"],
        "wall_date": "2026-05-20",
        "wall_time": "09:00",
    }
    values.update(overrides)
    return IntentInput(**values)


def validate(workspace_timezone: str = "UTC", **overrides: Any) -> ValidIntent:
    return validate_intent(given(**overrides), SETTINGS, workspace_timezone, NOW)


def test_a_wall_time_intent_is_normalised():
    valid = validate(targets=["linkedin", "instagram", "linkedin"], timezone="Europe/Berlin")
    assert valid.targets == ("instagram", "linkedin")  # a sorted set
    assert valid.wall_date == date(2026, 5, 20)
    assert valid.wall_time == time(9, 0)
    assert valid.timezone == "Europe/Berlin"
    assert valid.publish_at is None
    assert valid.state == "scheduled"


def test_an_instant_intent_is_kept_in_utc():
    valid = validate(wall_date=None, wall_time=None, publish_at="2026-05-20T11:00:00+02:00")
    assert valid.publish_at == datetime(2026, 5, 20, 9, 0, tzinfo=UTC)
    assert valid.wall_date is None


def test_any_target_is_allowed_when_the_type_names_none():
    assert validate(action_type="webhook", targets=["anything"]).targets == ("anything",)


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"action_type": "send_fax"}, UnknownActionTypeError, "unknown action_type 'send_fax'"),
        ({"targets": ["instagram", "myspace"]}, UnknownTargetError,
         "'myspace' is not a target of publish_post; allowed: facebook, instagram, linkedin"),
        ({"targets": []}, InputError, "at least one target"),
        ({"targets": "instagram"}, InputError, "must be a list"),
        ({"targets": [""]}, InputError, "must be a non-empty string"),
        ({"timezone": "Mars/Olympus_Mons"}, InvalidTimezoneError, "unknown time zone"),
        ({"wall_date": "20.05.2026"}, InvalidTimeError, "YYYY-MM-DD"),
        ({"wall_time": "9 am"}, InvalidTimeError, "HH:MM"),
        ({"wall_time": None}, InvalidTimeError, "time is required"),
        ({"wall_date": None, "wall_time": None}, InvalidTimeError, "date is required"),
        ({"publish_at": "2026-05-20T09:00:00Z"}, InvalidTimeError, "not both"),
        ({"wall_date": None, "wall_time": None, "publish_at": "2026-05-20T09:00:00"},
         InvalidTimeError, "must carry a UTC offset"),
        ({"wall_date": None, "wall_time": None, "publish_at": "2026-05-20T09:00:00Z",
          "timezone": "UTC"}, InvalidTimezoneError, "applies to a wall date and time"),
        ({"wall_date": "2026-05-18"}, PastTimeError, "is in the past"),
        ({"wall_date": "2046-05-18"}, InputError, "days ahead"),
        ({"state": "paused"}, InputError, "state must be"),
        ({"payload": ["a"]}, InputError, "payload must be a JSON object"),
        ({"payload": {"blob": "x" * PAYLOAD_MAX_BYTES}}, PayloadTooLargeError, "the limit is"),
    ],
)  # fmt: skip
def test_bad_intents_are_refused_with_a_clear_error(overrides, error, message):
    with pytest.raises(error, match=message):
        validate(**overrides)


def test_an_unknown_workspace_zone_is_refused_for_a_wall_time_without_a_zone():
    with pytest.raises(InvalidTimezoneError, match="Nowhere/Land"):
        validate("Nowhere/Land")


def test_an_intent_being_unscheduled_may_keep_a_past_time():
    assert validate(wall_date="2026-05-18", state="unscheduled").state == "unscheduled"
