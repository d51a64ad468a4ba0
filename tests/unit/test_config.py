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
