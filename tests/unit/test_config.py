import pytest

from tickwork.platform.config import Settings
from tickwork.platform.errors import ConfigError


def test_defaults_need_no_environment():
    settings = Settings.from_env({})
    assert settings.database_url is None
    assert "webhook" in settings.action_types
    assert settings.dispatch_allowed("webhook")


def test_environment_values_are_typed():
    settings = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://x/y",
            "TICKWORK_DISPATCH_ENABLED": "false",
            "TICKWORK_PAUSED_ACTION_TYPES": "sms, publish_post",
            "TICKWORK_LOOKAHEAD_SECONDS": "90",
            "TICKWORK_ACTION_TYPES": '{"sms": {"provider": "log", "targets": ["sms"],'
            ' "max_lateness_seconds": 600}}',
        }
    )
    assert settings.database_url == "postgresql://x/y"
    assert settings.lookahead_seconds == 90
    assert settings.paused_action_types == frozenset({"sms", "publish_post"})
    sms = settings.action_type("sms")
    assert sms is not None
    assert sms.targets == frozenset({"sms"})
    assert sms.max_lateness is not None
    assert sms.max_lateness.total_seconds() == 600
    assert not settings.dispatch_allowed("webhook")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TICKWORK_LOOKAHEAD_SECONDS": "5000"}, "lookahead_seconds"),
        # The due-index ranges that find rows in flight end a minute past the look-ahead.
        ({"TICKWORK_CLOCK_SKEW_TOLERANCE_SECONDS": "61"}, "clock_skew_tolerance_seconds"),
        ({"TICKWORK_ACTION_TYPES": "{not json"}, "not valid JSON"),
        ({"TICKWORK_ACTION_TYPES": '{"x": {"provider": "log", "colour": 1}}'}, "colour"),
    ],
)
def test_bad_configuration_is_reported_with_the_setting(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_database_session_limits_come_from_the_environment():
    settings = Settings.from_env({"TICKWORK_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "30",
                                  "TICKWORK_DB_STATEMENT_TIMEOUT_SECONDS": "0"})  # fmt: skip
    assert settings.db_idle_in_transaction_timeout_seconds == 30
    assert settings.db_statement_timeout_seconds == 0
    with pytest.raises(ConfigError, match="db_idle_in_transaction_timeout_seconds"):
        Settings.from_env({"TICKWORK_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "-1"})


# ------------------------------------------------------------- the tick's interval


@pytest.mark.parametrize(
    ("interval", "lookahead"), [("60", 120), ("120", 240), ("300", 600), ("600", 900), ("900", 900)]
)
def test_the_lookahead_follows_the_tick_interval(interval, lookahead):
    settings = Settings.from_env({"TICKWORK_TICK_INTERVAL_SECONDS": interval})
    assert settings.tick_interval_seconds == int(interval)
    # twice the interval, at most SQS's longest delay, and never less than one interval
    assert settings.lookahead_seconds == lookahead
    assert settings.lookahead_seconds >= settings.tick_interval_seconds


def test_an_explicit_lookahead_wins_over_the_derived_one():
    env = {"TICKWORK_TICK_INTERVAL_SECONDS": "300", "TICKWORK_LOOKAHEAD_SECONDS": "400"}
    assert Settings.from_env(env).lookahead_seconds == 400
    assert Settings().lookahead_seconds == 120


@pytest.mark.parametrize("interval", ["0", "901", "soon"])
def test_a_tick_interval_sqs_cannot_follow_is_refused(interval):
    with pytest.raises(ConfigError, match="tick_interval_seconds"):
        Settings.from_env({"TICKWORK_TICK_INTERVAL_SECONDS": interval})
