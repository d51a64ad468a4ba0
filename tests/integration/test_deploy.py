"""The migration function as a CloudFormation custom resource, answering over real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import psycopg
import pytest

from tests.handlers import FakeLambdaContext, load_handler
from tickwork import migrate


class CloudFormationResponses:
    """A loopback stand-in for the presigned S3 URL CloudFormation waits on."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                length = int(self.headers["Content-Length"])
                outer.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/presigned?sig=abc"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def cfn() -> Iterator[CloudFormationResponses]:
    responses = CloudFormationResponses()
    yield responses
    responses.server.shutdown()


def custom_resource_event(url: str, request_type: str) -> dict[str, Any]:
    return {
        "RequestType": request_type,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tickwork/1",
        "RequestId": "req-1",
        "LogicalResourceId": "SchemaMigration",
        "ResourceType": "Custom::TickworkSchema",
        "ResourceProperties": {},
    }


def run(monkeypatch, database_url: str, event: dict[str, Any]) -> dict[str, Any]:
    from tickwork.config import settings

    monkeypatch.setenv("DATABASE_URL", database_url)
    settings.cache_clear()
    try:
        return load_handler("migrate").handler(event, FakeLambdaContext())
    finally:
        settings.cache_clear()


ALL_MIGRATIONS = [f"{m.version}_{m.name}" for m in migrate.load(migrate.default_directory())]


def test_create_migrates_and_reports_success(monkeypatch, empty_database_url, cfn):
    result = run(monkeypatch, empty_database_url, custom_resource_event(cfn.url, "Create"))
    assert result == {"applied": ALL_MIGRATIONS}
    assert cfn.bodies[0]["Status"] == "SUCCESS"
    assert cfn.bodies[0]["RequestId"] == "req-1"
    assert cfn.bodies[0]["Data"] == {"Applied": ",".join(ALL_MIGRATIONS)}
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute("select to_regclass('scheduled_actions')").fetchone()[0]


def test_delete_leaves_the_database_alone(monkeypatch, empty_database_url, cfn):
    run(monkeypatch, empty_database_url, custom_resource_event(cfn.url, "Delete"))
    assert cfn.bodies[0]["Status"] == "SUCCESS"
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute("select to_regclass('schema_migrations')").fetchone()[0] is None


def test_a_failure_is_reported_to_cloudformation_not_left_hanging(monkeypatch, cfn):
    unreachable = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"
    result = run(monkeypatch, unreachable, custom_resource_event(cfn.url, "Update"))
    assert result["applied"] == []
    assert cfn.bodies[0]["Status"] == "FAILED"
    assert "migration failed" in cfn.bodies[0]["Reason"]


def test_a_direct_invoke_migrates(monkeypatch, empty_database_url):
    assert run(monkeypatch, empty_database_url, {}) == {"applied": ALL_MIGRATIONS}
