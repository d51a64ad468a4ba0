"""GET /v1/operations and POST /v1/operations/redrive through the API's Lambda handler on a
real Postgres: admins only; the series, outcomes and backlog of seeded rows, this workspace's
alone; the warnings when their condition holds; queue depths and redrive over the local
runtime's in-process queues and over SQS (moto)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import boto3
import pytest
from moto import mock_aws

from tests.conftest import make_workspace
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import operations, runtime
from tickwork.local.api_server import http_api_event
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.db import Database, connect, local_api_login
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.queues.sqs import SqsQueues
from tickwork.providers import ProviderRegistry
from tickwork.workspaces import add_member

TYPES = {
    "log": ActionTypeConfig(provider="log"),
    "webhook": ActionTypeConfig(provider="log"),
}
MINUTE = timedelta(minutes=1)


@pytest.fixture
def install(database_url) -> Iterator[Callable[..., runtime.Runtime]]:
    """Installs the API's runtime with the given queues and settings."""
    made: list[runtime.Runtime] = []

    def make(queues: QueuePort | None = None, **options: Any) -> runtime.Runtime:
        settings = Settings(database_url=database_url, action_types=TYPES, **options)
        engine = runtime.Runtime(
            settings=settings,
            db=Database(database_url),
            queues=queues if queues is not None else InProcessQueues(visibility_timeout=30),
            providers=ProviderRegistry(settings),
            api_db=Database(local_api_login(database_url)),
        )
        runtime.install(engine)
        made.append(engine)
        return engine

    yield make
    runtime.install(None)
    for engine in made:
        engine.db.close()
        engine.api_database().close()


@pytest.fixture
def acme(conn) -> UUID:
    """Alice is an admin of Acme, Bob a member."""
    workspace = make_workspace(conn, "Acme")
    add_member(conn, workspace, "alice", "admin")
    add_member(conn, workspace, "bob", "member")
    return workspace


def call(method: str, path: str, workspace: UUID, body: dict | None = None,
         user: str = "alice", query: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    headers = {"x-workspace-id": str(workspace), "content-type": "application/json"}
    target = f"{path}?{urlencode(query)}" if query else path
    event = http_api_event(
        method, target, headers, json.dumps(body) if body else None, {"sub": user}, "127.0.0.1"
    )
    answer = load_handler("api").handler(event, FakeLambdaContext())
    return answer["statusCode"], json.loads(answer["body"])


def ops(workspace: UUID, **query: str) -> dict[str, Any]:
    status, body = call("GET", "/v1/operations", workspace, query=query or None)
    assert status == 200, body
    return body


def seed(conn, workspace: UUID, action_type: str, publish_at: datetime, status: str = "queued",
         finished_at: datetime | None = None, error_code: str | None = None) -> None:  # fmt: skip
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, finished_at, error_code, submitted_at)"
        " values (%s, %s, 't', %s, %s, %s, %s, %s)",
        (workspace, action_type, publish_at, status, finished_at, error_code,
         finished_at if status in ("published", "failed") else None),
    )  # fmt: skip


def floor10(instant: datetime) -> datetime:
    epoch = instant.timestamp()
    return datetime.fromtimestamp(epoch - epoch % 600, UTC)


def at(series: dict[str, Any], start: datetime) -> dict[str, Any]:
    [found] = [b for b in series["buckets"] if datetime.fromisoformat(b["start"]) == start]
    return found


def codes(answer: dict[str, Any]) -> list[str]:
    return [w["code"] for w in answer["warnings"]]


# ------------------------------------------------------------------------------ access


def test_members_may_not_see_operations_or_redrive(install, acme):
    install()
    for method, path in (("GET", "/v1/operations"), ("POST", "/v1/operations/redrive")):
        status, body = call(method, path, acme, user="bob")
        assert status == 403
        assert body["error"]["code"] == "forbidden"
        assert "admin" in body["error"]["message"]


def test_hours_are_one_to_forty_eight(install, acme):
    install()
    for hours in ("0", "49", "x"):
        status, body = call("GET", "/v1/operations", acme, query={"hours": hours})
        assert status == 422, body
        assert body["error"]["code"] == "invalid_input"
    assert ops(acme, hours="48")["bucket_seconds"] == 3600
    assert ops(acme, hours="12")["bucket_seconds"] == 1800
    answer = ops(acme)
    assert answer["hours"] == 6
    assert answer["bucket_seconds"] == 600
    # 36 whole buckets and the current one, for every configured type
    # (every stack has the outcome events' own type, `event`)
    assert [s["action_type"] for s in answer["series"]] == ["event", "log", "webhook"]
    assert len(answer["series"][0]["buckets"]) == 37
    assert answer["warnings"] == []


# ------------------------------------------------------------------------------ numbers


def test_the_series_counts_this_workspaces_rows_per_bucket(install, conn, acme):
    install()
    other = make_workspace(conn, "Globex")
    b = floor10(datetime.now(UTC))  # the current bucket's start
    t = b - 55 * MINUTE  # five minutes into the bucket an hour back
    # Given rows due in the window (all webhook unless said)
    seed(conn, acme, "webhook", t, "published", t + timedelta(seconds=2))
    seed(conn, acme, "webhook", t + MINUTE, "failed", t + MINUTE + timedelta(seconds=4),
         "provider_rejected")  # fmt: skip
    seed(conn, acme, "webhook", t)  # never sent: behind ever since
    seed(conn, acme, "webhook", t, "published", b - 25 * MINUTE)  # half an hour late
    seed(conn, acme, "webhook", b - 45 * MINUTE, "cancelled", b - 50 * MINUTE)  # before due
    seed(conn, acme, "log", b - 35 * MINUTE, "published", b - 35 * MINUTE + timedelta(seconds=1))
    # and rows due before it: one still queued, one sent within it
    seed(conn, acme, "webhook", b - timedelta(hours=10))
    seed(conn, acme, "webhook", b - timedelta(hours=8), "published", b - 15 * MINUTE)
    # and another workspace's, due and behind at the same time
    seed(conn, other, "webhook", t)
    seed(conn, other, "webhook", t, "published", t + MINUTE)

    answer = ops(acme)

    series = {s["action_type"]: s for s in answer["series"]}
    webhook = series["webhook"]
    assert webhook["backlog_at_start"] == 2
    first = at(webhook, b - 60 * MINUTE)
    assert first == {
        "start": first["start"], "due": 4, "published": 1, "failed": 1, "backlog": 4,
        "lag_sample": 2, "lag_p50_ms": 3000.0, "lag_p99_ms": 3980.0,
    }  # fmt: skip
    assert at(webhook, b - 50 * MINUTE)["due"] == 0  # cancelled before it was due
    assert [at(webhook, b - n * MINUTE)["backlog"] for n in (50, 40, 30, 20, 10, 0)] == [
        4, 4, 3, 2, 2, 2,
    ]  # fmt: skip
    late = at(webhook, b - 30 * MINUTE)
    assert (late["published"], late["lag_sample"], late["lag_p50_ms"]) == (1, 1, 1_800_000.0)
    assert at(webhook, b - 20 * MINUTE)["published"] == 1
    assert sum(bucket["due"] for bucket in webhook["buckets"]) == 4
    assert at(series["log"], b - 40 * MINUTE)["published"] == 1
    assert answer["outcomes"] == [
        {"action_type": "log", "status": "published", "error_code": None, "count": 1},
        {"action_type": "webhook", "status": "cancelled", "error_code": None, "count": 1},
        {"action_type": "webhook", "status": "failed", "error_code": "provider_rejected",
         "count": 1},
        {"action_type": "webhook", "status": "published", "error_code": None, "count": 3},
    ]  # fmt: skip
    generated = datetime.fromisoformat(answer["generated_at"])
    assert datetime.fromisoformat(answer["start"]) == floor10(generated) - timedelta(hours=6)
    assert answer["end"] == answer["generated_at"]


def test_a_backlog_above_the_threshold_and_growing_is_a_warning(install, conn, acme):
    b = floor10(datetime.now(UTC))
    seed(conn, acme, "webhook", b - timedelta(hours=7))  # behind before the window
    for _ in range(3):
        seed(conn, acme, "webhook", b - 30 * MINUTE)
    install(ops_backlog_warning_rows=3)
    [warning] = [w for w in ops(acme)["warnings"] if w["code"] == "backlog_growing"]
    assert warning["action_type"] == "webhook"
    assert "4 rows are due and not sent, up from 1" in warning["message"]
    # Not above the threshold: no warning
    install(ops_backlog_warning_rows=4)
    assert "backlog_growing" not in codes(ops(acme))


# ---------------------------------------------------------------------------- warnings


def test_switches_and_their_warnings(install, acme):
    install(dispatch_enabled=False, paused_action_types=frozenset({"webhook"}))
    answer = ops(acme)
    assert answer["switches"] == {"dispatch_enabled": False, "paused_action_types": ["webhook"]}
    assert codes(answer) == ["dispatch_off", "paused"]
    assert answer["warnings"][1]["action_type"] == "webhook"


def test_an_old_open_transaction_is_a_warning(install, acme, database_url):
    # Given a transaction left open in another session (an idle psql in BEGIN)
    with connect(database_url) as other, other.transaction():
        other.execute("select 1")
        # Younger than the threshold: nothing to say
        install()
        assert "old_transaction" not in codes(ops(acme))
        # Older (a threshold of zero, so that the test need not wait ten minutes)
        install(ops_old_transaction_seconds=0)
        [warning] = [w for w in ops(acme)["warnings"] if w["code"] == "old_transaction"]
    assert "idle in transaction" in warning["message"]
    assert "holds back vacuum's clean-up of dead rows" in warning["message"]


def test_clock_skew_beyond_the_tolerance_is_a_warning(install, acme, monkeypatch):
    install(clock_skew_tolerance_seconds=1.0)
    answer = ops(acme)
    assert abs(answer["clock"]["skew_seconds"]) < 1.0
    assert "clock_skew" not in codes(answer)
    # Given this function's clock five seconds behind the database's
    monkeypatch.setattr(operations, "utcnow", lambda: datetime.now(UTC) - timedelta(seconds=5))
    answer = ops(acme)
    assert answer["clock"]["skew_seconds"] == pytest.approx(5.0, abs=0.5)
    assert answer["clock"]["tolerance_seconds"] == 1.0
    [warning] = [w for w in answer["warnings"] if w["code"] == "clock_skew"]
    assert "s ahead of this function's" in warning["message"]


# ------------------------------------------------------------- in-process queues (local)


def dead_letter(queues: InProcessQueues, action_type: str, body: str) -> None:
    """A message that reached its dead-letter list: received once more than allowed."""
    queue = queues.queue(action_type)
    queue.send(body)
    assert queue.receive(10)  # its one receive; visible again at once (timeout 0)
    assert queue.receive(10) == []  # past max_receive_count: to the dead letters
    assert len(queue.dead_letters) == 1


def test_local_queues_show_depths_and_redrive_their_dead_letters(install, acme):
    queues = InProcessQueues(visibility_timeout=0, max_receive_count=1)
    install(queues)
    dead_letter(queues, "webhook", '{"id": "x"}')
    queues.queue("log").send('{"id": "y"}', delay_seconds=600)

    answer = ops(acme)
    assert answer["queues"]["source"] == "in_process"
    assert answer["queues"]["stack_wide"] is True
    depths = {q["action_type"]: q for q in answer["queues"]["by_action_type"]}
    assert depths["webhook"]["dead_letters"] == 1
    assert depths["log"] == {"action_type": "log", "visible": 0, "in_flight": 0, "delayed": 1,
                             "dead_letters": 0, "error": None}  # fmt: skip
    [warning] = [w for w in answer["warnings"] if w["code"] == "dead_letters"]
    assert warning["action_type"] == "webhook"

    status, body = call("POST", "/v1/operations/redrive", acme, {"action_type": "webhook"})
    assert status == 200, body
    assert body == {
        "source": "in_process",
        "redriven": [{"action_type": "webhook", "method": "in_process", "moved": 1,
                      "task_handle": None, "error": None}],
    }  # fmt: skip
    assert queues.queue("webhook").dead_letters == []
    assert len(queues.queue("webhook")) == 1
    assert "dead_letters" not in codes(ops(acme))


def test_redrive_of_an_unknown_type_is_a_422_naming_the_known_ones(install, acme):
    install()
    status, body = call("POST", "/v1/operations/redrive", acme, {"action_type": "fax"})
    assert status == 422
    assert body["error"]["code"] == "unknown_action_type"
    assert "event, log, webhook" in body["error"]["message"]
    # Without a body: every type's, nothing waiting
    status, body = call("POST", "/v1/operations/redrive", acme)
    assert status == 200, body
    assert [(r["action_type"], r["method"], r["moved"]) for r in body["redriven"]] == [
        ("event", "none", 0), ("log", "none", 0), ("webhook", "none", 0),
    ]  # fmt: skip


# ------------------------------------------------------------------------------- SQS


@pytest.fixture
def sqs(monkeypatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


@pytest.fixture
def sqs_queues(sqs) -> dict[str, str]:
    """The template's shape: a queue per action type with a DLQ after 5 receives."""
    urls = {}
    for name in ("webhook", "log", "event"):
        dlq = sqs.create_queue(QueueName=f"tickwork-{name}-dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 5})
        urls[name] = sqs.create_queue(
            QueueName=f"tickwork-{name}", Attributes={"RedrivePolicy": policy}
        )["QueueUrl"]
        urls[f"{name}-dlq"] = dlq
    return urls


def test_sqs_depths_and_redrive(install, acme, sqs, sqs_queues):
    install(SqsQueues({t: sqs_queues[t] for t in ("webhook", "log")}, client=sqs))
    sqs.send_message(QueueUrl=sqs_queues["webhook"], MessageBody="{}", DelaySeconds=60)
    bodies = {json.dumps({"id": str(n), "type": "webhook"}) for n in range(2)}
    for body in bodies:
        sqs.send_message(QueueUrl=sqs_queues["webhook-dlq"], MessageBody=body)

    answer = ops(acme)
    assert answer["queues"]["source"] == "sqs"
    depths = {q["action_type"]: q for q in answer["queues"]["by_action_type"]}
    assert depths["webhook"] == {"action_type": "webhook", "visible": 0, "in_flight": 0,
                                 "delayed": 1, "dead_letters": 2, "error": None}  # fmt: skip
    assert depths["log"]["dead_letters"] == 0
    assert "webhook: 2 messages in the dead-letter queue" in " ".join(
        w["message"] for w in answer["warnings"]
    )

    # When redriven (moto has no StartMessageMoveTask: they are moved by hand)
    status, body = call("POST", "/v1/operations/redrive", acme)
    assert status == 200, body
    result = {r["action_type"]: r for r in body["redriven"]}
    assert body["source"] == "sqs"
    assert (result["webhook"]["method"], result["webhook"]["moved"]) == ("by_hand", 2)
    assert (result["log"]["method"], result["log"]["moved"]) == ("none", 0)
    # Then both are back on the webhook queue, unchanged, and the DLQ is empty
    back = sqs.receive_message(QueueUrl=sqs_queues["webhook"], MaxNumberOfMessages=10)
    assert {m["Body"] for m in back["Messages"]} >= bodies
    dlq = sqs.get_queue_attributes(
        QueueUrl=sqs_queues["webhook-dlq"], AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert dlq["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_a_queue_that_cannot_be_read_is_said_so_not_a_failed_request(
    install, acme, sqs, sqs_queues
):
    missing = sqs_queues["log"].replace("tickwork-log", "tickwork-gone")
    install(
        SqsQueues(
            {"webhook": sqs_queues["webhook"], "log": missing, "event": sqs_queues["event"]},
            client=sqs,
        )
    )
    answer = ops(acme)
    depths = {q["action_type"]: q for q in answer["queues"]["by_action_type"]}
    assert depths["webhook"]["error"] is None
    assert depths["log"]["visible"] is None
    assert "cannot read queue" in depths["log"]["error"]
    [warning] = [w for w in answer["warnings"] if w["code"] == "queues_unreadable"]
    assert warning["message"].startswith("The queue depths of log cannot be read")
    # and a redrive of it says why, per queue
    status, body = call("POST", "/v1/operations/redrive", acme, {"action_type": "log"})
    assert status == 200, body
    [only] = body["redriven"]
    assert only["method"] is None
    assert "cannot read queue" in only["error"]
