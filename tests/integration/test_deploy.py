"""The migration function as a CloudFormation custom resource, driven with CloudFormation's
own event shapes through the Lambda handler, answering over real HTTP to a loopback server
standing in for the presigned S3 URL. Every case must answer, with the right status and a
reason a person can act on, before the function's timeout."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.handlers import FakeLambdaContext, load_handler
from tickwork.engine import deploy
from tickwork.engine.deploy import is_rollback, validate_configuration
from tickwork.platform import migrate
from tickwork.platform.config import EVENT_ACTION_TYPE, Settings
from tickwork.platform.db import API_LOGIN_ROLE, api_login_url, connect

REGION = "us-east-1"
PREFIX = "https://sqs.us-east-1.amazonaws.com/123456789012/tickwork-test-"
ACTION_TYPES = {
    "log": {"provider": "log"},
    "webhook": {
        "provider": "webhook",
        "targets": ["primary"],
        "options": {
            "endpoints": {
                "primary": {
                    "url": "https://hooks.example.com/in",
                    "secret": "whsec_dGlja3dvcmsgdGVzdCBzZWNyZXQ=",
                }
            }
        },
    },
}
LAYER = "arn:aws:lambda:us-east-1:123456789012:layer:tickwork-test:{}"


class CloudFormationResponses:
    """A loopback stand-in for the presigned S3 URL CloudFormation waits on."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrived: list[float] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                length = int(self.headers["Content-Length"])
                outer.bodies.append(json.loads(self.rfile.read(length)))
                outer.arrived.append(time.monotonic())
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/presigned?X-Amz-Signature=abc"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def only(self) -> dict[str, Any]:
        assert len(self.bodies) == 1, self.bodies
        return self.bodies[0]


@pytest.fixture
def cfn() -> Iterator[CloudFormationResponses]:
    responses = CloudFormationResponses()
    yield responses
    responses.server.shutdown()


@pytest.fixture
def queues(monkeypatch) -> Iterator[Any]:
    """Moto's SQS with the stack's queues for both types (two queues: kept small)."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        # (and the outcome events' own type, which every stack has)
        for name in [*ACTION_TYPES, EVENT_ACTION_TYPE]:
            sqs.create_queue(QueueName=f"tickwork-test-{name}")
        yield sqs


def event(url: str, request_type: str, layer: int = 2, old_layer: int | None = None) -> dict:
    body: dict[str, Any] = {
        "RequestType": request_type,
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:tickwork-migrate",
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tickwork/1",
        "RequestId": "req-1",
        "LogicalResourceId": "SchemaMigration",
        "ResourceType": "Custom::TickworkSchema",
        "ResourceProperties": {"ServiceToken": "arn:...", "LayerVersion": LAYER.format(layer)},
    }
    if request_type != "Create":
        body["PhysicalResourceId"] = "tickwork-schema"
    if old_layer is not None:
        body["OldResourceProperties"] = {"LayerVersion": LAYER.format(old_layer)}
    return body


def run(
    monkeypatch,
    database_url: str,
    body: dict[str, Any],
    action_types: dict[str, Any] | None = None,
    remaining_ms: int = 60_000,
) -> dict[str, Any]:
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("TICKWORK_QUEUE_URL_PREFIX", PREFIX)
    monkeypatch.setenv("TICKWORK_ACTION_TYPES", json.dumps(action_types or ACTION_TYPES))
    return load_handler("migrate").handler(body, FakeLambdaContext(remaining_ms))


ALL_MIGRATIONS = [f"{m.version}_{m.name}" for m in migrate.load(migrate.default_directory())]


def tables(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("select to_regclass('scheduled_actions')").fetchone()[0] is not None


def test_create_migrates_and_reports_success(monkeypatch, empty_database_url, cfn, queues):
    result = run(monkeypatch, empty_database_url, event(cfn.url, "Create"))
    assert result["status"] == "SUCCESS"
    answer = cfn.only
    assert answer["Status"] == "SUCCESS"
    assert answer["RequestId"] == "req-1"
    assert answer["LogicalResourceId"] == "SchemaMigration"
    assert answer["PhysicalResourceId"] == "tickwork-schema"
    assert answer["Data"] == {"Applied": ",".join(ALL_MIGRATIONS)}
    assert tables(empty_database_url)
    # The API's login works beside the owner once the deploy has run.
    with connect(api_login_url(empty_database_url)) as api:
        assert api.execute("select session_user").fetchone() == (API_LOGIN_ROLE,)


def test_update_applies_only_what_is_new(monkeypatch, empty_database_url, cfn, queues):
    migrate.migrate(empty_database_url)
    run(monkeypatch, empty_database_url, event(cfn.url, "Update", layer=3, old_layer=2))
    assert cfn.only["Status"] == "SUCCESS"
    assert cfn.only["Reason"] == "schema already up to date"
    assert cfn.only["Data"] == {"Applied": ""}


def test_update_during_rollback_succeeds_without_migrating(
    monkeypatch, empty_database_url, cfn, queues
):
    # Rolling back from layer 3 to layer 2; an unreachable database must not matter.
    unreachable = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    run(monkeypatch, unreachable, event(cfn.url, "Update", layer=2, old_layer=3))
    assert cfn.only["Status"] == "SUCCESS"
    assert "rollback" in cfn.only["Reason"]
    assert not tables(empty_database_url)


def test_delete_leaves_the_database_alone(monkeypatch, empty_database_url, cfn):
    run(monkeypatch, empty_database_url, event(cfn.url, "Delete"))
    assert cfn.only["Status"] == "SUCCESS"
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute("select to_regclass('schema_migrations')").fetchone()[0] is None


def test_invalid_json_configuration_fails_with_its_reason(
    monkeypatch, empty_database_url, cfn, queues
):
    monkeypatch.setenv("DATABASE_URL", empty_database_url)
    monkeypatch.setenv("TICKWORK_ACTION_TYPES", "{not json")
    load_handler("migrate").handler(event(cfn.url, "Create"), FakeLambdaContext())
    assert cfn.only["Status"] == "FAILED"
    assert "TICKWORK_ACTION_TYPES is not valid JSON" in cfn.only["Reason"]
    assert not tables(empty_database_url)


def test_a_type_whose_provider_cannot_be_built_fails_the_deploy(
    monkeypatch, empty_database_url, cfn, queues
):
    # A webhook type whose endpoints are not a map of {url, secret}: it cannot be built.
    # (No endpoints at all is fine: workspaces then send through their webhook connections.)
    webhook = {"provider": "webhook", "options": {"endpoints": ["https://x"]}}
    broken = {"log": {"provider": "log"}, "webhook": webhook}
    run(monkeypatch, empty_database_url, event(cfn.url, "Create"), action_types=broken)
    assert cfn.only["Status"] == "FAILED"
    assert "'webhook': its provider cannot be built" in cfn.only["Reason"]
    assert "options.endpoints" in cfn.only["Reason"]
    assert not tables(empty_database_url)


def test_a_type_without_its_queue_fails_the_deploy(monkeypatch, empty_database_url, cfn, queues):
    # The resource depends on every queue of the template: a type without one is a typo,
    # answered at once, not after waiting for a queue that will never come.
    extra = {**ACTION_TYPES, "sms": {"provider": "log"}}
    started = time.monotonic()
    run(monkeypatch, empty_database_url, event(cfn.url, "Update", 3, 2), action_types=extra)
    assert time.monotonic() - started < 10
    assert cfn.only["Status"] == "FAILED"
    assert f"'sms' has no queue at {PREFIX}sms" in cfn.only["Reason"]
    assert "Fn::ForEach::PerActionType" in cfn.only["Reason"]


def test_an_unreachable_database_is_retried_then_reported(monkeypatch, cfn, queues):
    unreachable = "postgresql://nobody@127.0.0.1:1/none"
    started = time.monotonic()
    # 31 s left: 16 s of work budget, enough for two attempts five seconds apart.
    result = run(monkeypatch, unreachable, event(cfn.url, "Create"), remaining_ms=31_000)
    assert result["status"] == "FAILED"
    assert cfn.only["Status"] == "FAILED"
    assert "unreachable after 2 attempts" in cfn.only["Reason"]
    assert "security group" in cfn.only["Reason"]
    assert cfn.arrived[0] - started < 31


def test_a_database_that_never_answers_still_gets_an_answer_in_time(monkeypatch, cfn, queues):
    # A listener that accepts and says nothing: the connection attempt hangs.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        url = f"postgresql://nobody@127.0.0.1:{silent.getsockname()[1]}/none"
        started = time.monotonic()
        run(monkeypatch, url, event(cfn.url, "Create"), remaining_ms=20_000)
        assert cfn.only["Status"] == "FAILED"
        assert "did not finish within 5 s" in cfn.only["Reason"]
        assert cfn.arrived[0] - started < 20 - 10  # answered with the margin to spare
    finally:
        silent.close()


def test_an_unreachable_answer_url_does_not_raise(monkeypatch, empty_database_url, queues):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    result = run(monkeypatch, empty_database_url, event(f"http://127.0.0.1:{port}/x", "Delete"))
    assert result["status"] == "SUCCESS"


def test_a_direct_invoke_migrates(monkeypatch, empty_database_url):
    monkeypatch.setenv("DATABASE_URL", empty_database_url)
    result = load_handler("migrate").handler({}, FakeLambdaContext())
    assert result == {"applied": ALL_MIGRATIONS}


def test_rollback_is_an_update_to_an_older_layer():
    assert is_rollback(event("u", "Update", layer=4, old_layer=5))
    assert not is_rollback(event("u", "Update", layer=5, old_layer=4))
    assert not is_rollback(event("u", "Update", layer=5, old_layer=5))
    assert not is_rollback(event("u", "Create", layer=4))


def test_every_configured_type_needs_a_queue_url():
    settings = Settings.model_validate({"action_types": {"log": {"provider": "log"}}})
    assert validate_configuration(settings, lambda url: True) == [
        f"action type '{EVENT_ACTION_TYPE}' has no queue URL (TICKWORK_QUEUE_URL_PREFIX)",
        "action type 'log' has no queue URL (TICKWORK_QUEUE_URL_PREFIX)",
    ]
    assert validate_configuration(Settings.model_validate({"action_types": {}}), bool) == [
        "no action types are configured (the ActionTypes parameter)"
    ]


def test_a_webhook_secret_outside_the_stacks_prefix_fails_the_deploy_by_name():
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:{}/webhooks/primary-AbCdEf"
    endpoints = {
        "primary": {"url": "https://hooks.example.com/a", "secret_arn": secret.format("tw-prod")},
        "legacy": {"url": "https://hooks.example.com/b", "secret_arn": secret.format("tickwork")},
    }
    settings = Settings.model_validate(
        {
            "secrets_prefix": "tw-prod",
            "action_types": {
                "webhook": {"provider": "webhook", "options": {"endpoints": endpoints}}
            },
        }
    )
    problems = deploy._unreadable_webhook_secrets(settings, "webhook")
    assert problems == [
        "action type 'webhook', endpoint 'legacy': secret_arn must name a secret"
        " tw-prod/webhooks/..., the only webhook secrets this stack's dispatchers may read"
    ]


def test_the_deploy_gives_service_made_log_groups_the_stacks_retention(
    monkeypatch, empty_database_url, cfn, queues
):
    logs = boto3.client("logs", region_name=REGION)
    # RDS made its export's group before the migration ran; the rotation's is not made yet.
    logs.create_log_group(logGroupName="/aws/rds/instance/db-1/postgresql")
    body = event(cfn.url, "Create")
    groups = ["/aws/rds/instance/db-1/postgresql", "/aws/lambda/tickwork-test-rotate-owner"]
    body["ResourceProperties"] |= {"LogGroups": groups, "LogRetentionDays": "30"}
    run(monkeypatch, empty_database_url, body)
    assert cfn.only["Status"] == "SUCCESS", cfn.only["Reason"]
    found = {
        g["logGroupName"]: g.get("retentionInDays") for g in logs.describe_log_groups()["logGroups"]
    }
    assert found == dict.fromkeys(groups, 30)


@pytest.fixture
def listening() -> Iterator[str]:
    """A loopback host:port that accepts connections (a provider the subnets reach)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def closed() -> str:
    """A loopback host:port nothing listens on (a provider behind a missing NAT)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        return f"127.0.0.1:{server.getsockname()[1]}"


def test_a_stack_that_cannot_reach_a_provider_fails_its_deploy_naming_the_type(
    monkeypatch, empty_database_url, cfn, queues, listening, closed
):
    monkeypatch.setitem(deploy.PROVIDER_HOSTS, "event", listening)  # the engine's own type
    monkeypatch.setitem(deploy.PROVIDER_HOSTS, "log", f"https://{closed}/")
    body = event(cfn.url, "Create")
    body["ResourceProperties"]["EgressCheck"] = "fail"
    started = time.monotonic()
    run(monkeypatch, empty_database_url, body, action_types={"log": {"provider": "log"}})
    assert time.monotonic() - started < deploy.EGRESS_TIMEOUT_SECONDS + 5
    assert cfn.only["Status"] == "FAILED"
    assert f"no way out to the internet for: log ({closed})" in cfn.only["Reason"]
    assert "event" not in cfn.only["Reason"].split("(add")[0]
    assert not tables(empty_database_url)


def test_egress_warn_deploys_and_says_which_types_cannot_get_out(
    monkeypatch, empty_database_url, cfn, queues, listening, closed
):
    monkeypatch.setitem(deploy.PROVIDER_HOSTS, "event", closed)
    body = event(cfn.url, "Create")
    body["ResourceProperties"]["EgressCheck"] = "warn"
    run(monkeypatch, empty_database_url, body, action_types={"log": {"provider": "log"}})
    assert cfn.only["Status"] == "SUCCESS", cfn.only["Reason"]
    assert f"WARNING no way out to the internet for: event ({closed})" in cfn.only["Reason"]
    assert tables(empty_database_url)


def test_egress_targets_follow_each_types_provider():
    settings = Settings.model_validate(
        {
            "action_types": {
                "log": {"provider": "log"},
                "email": {"provider": "postmark"},
                "mail": {"provider": "ses"},
                "hook": {
                    "provider": "webhook",
                    "options": {"endpoints": {"a": {"url": "https://hooks.example.com:8443/x"}}},
                },
            }
        }
    )
    assert deploy.egress_targets(settings, "eu-west-1") == {
        "email": {"api.postmarkapp.com:443"},
        "mail": {"email.eu-west-1.amazonaws.com:443"},
        "hook": {"hooks.example.com:8443"},
        "event": {"checkip.amazonaws.com:443"},
    }
