"""Configuration as deployed: queue URLs by naming convention, action types from SSM
Parameter Store (through Powertools, cached), and dispatch metrics per action type."""

from __future__ import annotations

import json

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

from tickwork.engine.dispatch import DispatchSummary, emit_metrics
from tickwork.platform.config import Settings
from tickwork.platform.errors import ConfigError
from tickwork.platform.observability import metrics

PREFIX = "https://sqs.eu-west-1.amazonaws.com/123456789012/tickwork-prod-"
TYPES = {"log": {"provider": "log"}, "sms": {"provider": "log"}}


def test_queue_urls_follow_the_naming_convention():
    settings = Settings.model_validate({"action_types": TYPES, "queue_url_prefix": PREFIX})
    assert settings.queue_url("sms") == PREFIX + "sms"
    # The engine's own `event` type (outcome events) is always configured, with its queue.
    assert settings.all_queue_urls() == {
        "event": PREFIX + "event", "log": PREFIX + "log", "sms": PREFIX + "sms",
    }  # fmt: skip
    # Not a configured type: no queue, whatever the convention would say.
    assert settings.queue_url("email") is None


def test_an_explicit_queue_url_wins_over_the_convention():
    settings = Settings.model_validate(
        {"action_types": TYPES, "queue_url_prefix": PREFIX, "queue_urls": {"sms": "http://q/x"}}
    )
    assert settings.all_queue_urls() == {
        "event": PREFIX + "event", "log": PREFIX + "log", "sms": "http://q/x",
    }  # fmt: skip


def test_without_a_prefix_only_explicit_urls_exist():
    settings = Settings.model_validate({"action_types": TYPES, "queue_urls": {"log": "http://q"}})
    assert settings.all_queue_urls() == {"log": "http://q"}


def test_action_type_names_must_fit_a_queue_name():
    with pytest.raises(ConfigError, match=r"action type names must be .*: a b"):
        Settings.from_env({"TICKWORK_ACTION_TYPES": json.dumps({"a b": {"provider": "log"}})})


def test_the_action_type_of_a_queue_comes_from_its_arn():
    settings = Settings.model_validate({"action_types": TYPES, "queue_url_prefix": PREFIX})
    record = {"eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:tickwork-prod-sms"}
    assert settings.action_type_of_queue([record]) == "sms"
    other = {"eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:someone-else"}
    assert settings.action_type_of_queue([other]) is None
    assert settings.action_type_of_queue([]) is None


@pytest.fixture
def ssm(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        parameters.clear_caches()
        yield boto3.client("ssm", region_name="eu-west-1")
        parameters.clear_caches()


def test_action_types_come_from_ssm(ssm):
    ssm.put_parameter(Name="/tickwork/prod/action-types", Type="String", Value=json.dumps(TYPES))
    settings = Settings.from_env({"TICKWORK_ACTION_TYPES_PARAMETER": "/tickwork/prod/action-types"})
    assert set(settings.action_types) - {"event"} == {"log", "sms"}


def test_ssm_values_are_cached(ssm):
    name = "/tickwork/prod/action-types"
    ssm.put_parameter(Name=name, Type="String", Value=json.dumps({"log": {"provider": "log"}}))
    env = {"TICKWORK_ACTION_TYPES_PARAMETER": name}
    assert set(Settings.from_env(env).action_types) - {"event"} == {"log"}
    ssm.put_parameter(Name=name, Type="String", Value=json.dumps(TYPES), Overwrite=True)
    assert set(Settings.from_env(env).action_types) - {"event"} == {"log"}  # within max_age


def test_the_environment_variable_wins_for_local_use(ssm):
    env = {
        "TICKWORK_ACTION_TYPES_PARAMETER": "/does/not/exist",
        "TICKWORK_ACTION_TYPES": json.dumps({"log": {"provider": "log"}}),
    }
    assert set(Settings.from_env(env).action_types) - {"event"} == {"log"}


def test_a_missing_or_broken_parameter_is_a_config_error(ssm):
    with pytest.raises(ConfigError, match="cannot be read"):
        Settings.from_env({"TICKWORK_ACTION_TYPES_PARAMETER": "/does/not/exist"})
    ssm.put_parameter(Name="/broken", Type="String", Value="{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Settings.from_env({"TICKWORK_ACTION_TYPES_PARAMETER": "/broken"})


def test_dispatch_metrics_carry_the_action_type(monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    metrics.clear_metrics()
    try:
        emit_metrics(DispatchSummary(claimed=2, published=2, lags=[0.1, 0.2]), "sms")
        emf = metrics.serialize_metric_set()
    finally:
        metrics.clear_metrics()
    (directive,) = emf["_aws"]["CloudWatchMetrics"]
    assert [sorted(d) for d in directive["Dimensions"]] == [["action_type", "service"]]
    assert emf["action_type"] == "sms"
    assert emf["Published"] == [2.0]
    assert emf["DispatchLag"] == [100.0, 200.0]
