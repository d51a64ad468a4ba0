"""`tickwork status` (human and --json) from the database, and the AWS side of the operator
commands against moto: queue depths, dead letters, redrive, actions through the API handler."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.conftest import make_workspace
from tickwork import cli
from tickwork import runtime as runtime_slot
from tickwork.cli import status as status_module


def insert(
    conn,
    workspace,
    *,
    status="queued",
    error_code=None,
    due="now()",
    submitted=None,
    finished=None,
    action_type="webhook",
    next_attempt=None,
) -> None:
    # A claimed row was enqueued no later than it was claimed.
    enqueued = submitted if status == "submitted" else None
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, error_code, submitted_at, finished_at, next_attempt_at, enqueued_at)"
        f" values (%s, %s, 'primary', {due}, %s, %s, {submitted or 'null'},"
        f" {finished or 'null'}, {next_attempt or 'null'}, {enqueued or 'null'})",
        (workspace, action_type, status, error_code),
    )


@pytest.fixture
def busy(conn) -> dict[str, Any]:
    """A workspace with something of everything, and another with one queued row."""
    ws = make_workspace(conn, "Busy")
    other = make_workspace(conn, "Quiet")
    insert(conn, ws, due="now() - interval '90 seconds'")  # due, not sent
    insert(conn, ws, due="now() + interval '10 minutes'")
    insert(conn, ws, due="now() + interval '5 minutes'", action_type="log")
    insert(conn, other, due="now() + interval '1 minute'")
    done = "now() - interval '10 minutes'"
    for late_ms in (4, 6, 8, 1000):
        insert(
            conn,
            ws,
            status="published",
            due=done,
            finished="now()",
            submitted=f"now() - interval '10 minutes' + interval '{late_ms} milliseconds'",
        )
    insert(
        conn,
        ws,
        status="failed",
        error_code="provider_rejected",
        due=done,
        submitted=done,
        finished="now()",
    )
    insert(
        conn, ws, status="failed", error_code="stuck", due=done, submitted=done, finished="now()"
    )
    insert(
        conn,
        ws,
        status="failed",
        error_code="ambiguous",
        due="now() - interval '3 hours'",
        submitted="now() - interval '3 hours'",
        finished="now() - interval '2 hours'",
    )
    insert(
        conn,
        ws,
        status="submitted",
        due="now() - interval '1 hour'",
        submitted="now() - interval '59 minutes'",
    )
    return {"ws": ws, "other": other}


def status_json(capsys, *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["status", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_status_json_has_backlog_lag_outcomes_and_what_needs_a_person(
    busy, database_url, capsys, monkeypatch
):
    monkeypatch.setenv("TICKWORK_PAUSED_ACTION_TYPES", "log")
    monkeypatch.delenv("TICKWORK_QUEUE_URLS", raising=False)
    found = status_json(capsys, "--database-url", database_url)
    assert set(found) == {
        "generated_at",
        "window_seconds",
        "workspace_id",
        "dispatch",
        "dev",
        "backlog",
        "next_due",
        "oldest_due_age_seconds",
        "lag_ms",
        "outcomes",
        "attention",
        "queues",
        "queues_from",
        "notes",
        "circuits",
    }
    assert found["circuits"] == []  # every provider circuit closed
    assert found["dispatch"] == {
        "enabled": True,
        "paused_action_types": ["log"],
        "from": "this shell's environment",
    }
    backlog = {row["action_type"]: row for row in found["backlog"]}
    assert backlog["webhook"]["queued"] == 3  # both workspaces
    assert backlog["webhook"]["due"] == 1
    assert 85 <= backlog["webhook"]["oldest_due_age_seconds"] < 120
    assert backlog["log"]["due"] == 0
    assert found["oldest_due_age_seconds"] == backlog["webhook"]["oldest_due_age_seconds"]
    assert found["next_due"] == backlog["webhook"]["next_due"]  # the other workspace's, in 1 min
    assert found["lag_ms"]["sample"] == 6  # due in the last hour and claimed
    assert 4 <= found["lag_ms"]["p50"] <= 8
    assert found["lag_ms"]["p99"] > 500
    assert set(found["lag_ms"]["by_action_type"]) == {"webhook"}
    outcomes = {(o["status"], o["error_code"]): o["count"] for o in found["outcomes"]}
    assert outcomes == {
        ("published", None): 4,
        ("failed", "provider_rejected"): 1,
        ("failed", "stuck"): 1,
    }
    assert found["attention"] == {"stuck": 1, "ambiguous": 1, "submitted_too_long": 1}
    assert found["queues"] is None
    assert "no `tickwork dev` is running" in found["notes"][0]
    assert found["dev"] is None  # and so nowhere to say it listens


def test_status_of_one_workspace(busy, database_url, capsys):
    found = status_json(capsys, "--database-url", database_url, "--workspace", "Quiet")
    assert found["workspace_id"] == str(busy["other"])
    assert [(r["action_type"], r["queued"]) for r in found["backlog"]] == [("webhook", 1)]
    assert found["lag_ms"]["sample"] == 0
    assert found["outcomes"] == []


def test_a_long_due_backlog_is_counted_up_to_the_cap(conn, database_url, capsys, monkeypatch):

    monkeypatch.setattr(status_module, "DUE_CAP", 3)
    ws = make_workspace(conn, "Behind")
    for minutes in range(1, 6):
        insert(conn, ws, due=f"now() - interval '{minutes} minutes'")
    found = status_json(capsys, "--database-url", database_url, "--workspace", "Behind")
    [row] = found["backlog"]
    assert (row["queued"], row["due"], row["due_capped"]) == (5, 3, True)
    assert 295 <= row["oldest_due_age_seconds"] < 330  # the oldest is read first
    assert cli.main(["status", "--database-url", database_url, "--workspace", "Behind"]) == 0
    assert re.search(r"webhook\s+5\s+3\+", capsys.readouterr().out)


def test_status_for_people(busy, database_url, capsys):
    assert cli.main(["status", "--database-url", database_url]) == 0
    out = capsys.readouterr().out
    assert "all workspaces; times in UTC" in out
    assert "dispatch: on; paused action types: none" in out
    # the other workspace's row, a minute ahead when inserted, as a person says it
    assert re.search(r"next due: in (5\d\.\d s|1 min) at ", out), out
    assert re.search(r"oldest due and not yet sent: 1 min 3\d s ago", out), out
    assert "p50 5 ms, p99 950 ms over 6 actions" in out
    assert "failed provider_rejected" in out
    assert "needs a person: 1 stuck, 1 ambiguous" in out


# ----------------------------------------------------------------------------- AWS


@pytest.fixture
def sqs(monkeypatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


@pytest.fixture
def queues(sqs, monkeypatch) -> dict[str, str]:
    """The template's shape: a queue per action type with a DLQ after 5 receives."""
    urls = {}
    for name in ("webhook", "log"):
        dlq = sqs.create_queue(QueueName=f"tickwork-{name}-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})
        urls[name] = sqs.create_queue(
            QueueName=f"tickwork-{name}", Attributes={"RedrivePolicy": policy}
        )["QueueUrl"]
        urls[f"{name}-dlq"] = dlq
    monkeypatch.setenv("TICKWORK_QUEUE_URLS", json.dumps({t: urls[t] for t in ("webhook", "log")}))
    return urls


def count(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_status_in_aws_shows_each_queue_and_its_dead_letters(sqs, queues, database_url, capsys):
    sqs.send_message(QueueUrl=queues["webhook"], MessageBody="{}", DelaySeconds=60)
    sqs.send_message(QueueUrl=queues["webhook-dlq"], MessageBody='{"id": "x"}')
    found = status_json(capsys, "--database-url", database_url)
    assert found["queues_from"] == "SQS"
    assert found["queues"]["webhook"] == {
        "visible": 0,
        "delayed": 1,
        "in_flight": 0,
        "dead_letters": 1,
    }
    assert found["queues"]["log"]["dead_letters"] == 0
    assert cli.main(["status", "--database-url", database_url]) == 0
    assert "dead letters 1  <- `tickwork redrive`" in capsys.readouterr().out


def test_redrive_in_aws_moves_dead_letters_back_to_their_queue(sqs, queues, capsys):
    # Given two dead letters on the webhook queue's DLQ
    bodies = {json.dumps({"id": str(n), "type": "webhook"}) for n in range(2)}
    for body in bodies:
        sqs.send_message(QueueUrl=queues["webhook-dlq"], MessageBody=body)
    # When redriven (moto has no StartMessageMoveTask, so they are moved by hand)
    assert cli.main(["redrive", "--json"]) == 0
    result = {r["action_type"]: r for r in json.loads(capsys.readouterr().out)}
    # Then both are back on the webhook queue, unchanged, and the DLQ is empty
    assert result["webhook"]["moved"] == 2
    assert result["webhook"]["method"] == "by_hand"
    assert result["log"]["moved"] == 0
    assert count(sqs, queues["webhook-dlq"]) == 0
    back = sqs.receive_message(QueueUrl=queues["webhook"], MaxNumberOfMessages=10)["Messages"]
    assert {m["Body"] for m in back} == bodies


def test_actions_in_aws_go_through_the_api_handler_and_enqueue_to_sqs(
    sqs, queues, database_url, conn, capsys, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url)
    ws = make_workspace(conn, "Cloud")
    conn.execute(
        "insert into workspace_members (workspace_id, user_id, role) values (%s, 'ops', 'admin')",
        (ws,),
    )
    try:
        # A refusal is the API's, code and message
        args = [
            "actions",
            "schedule",
            "--workspace",
            "Cloud",
            "--user",
            "ops",
            "--target",
            "primary",
        ]
        assert cli.main([*args, "--type", "nope", "--in", "5s"]) == 1
        err = capsys.readouterr().err
        # (the API's field name read as the flag it came from)
        assert "HTTP 422 unknown_action_type: unknown --type 'nope'; known types:" in err
        # A row due within the look-ahead goes to its SQS queue at once
        assert cli.main([*args, "--type", "webhook", "--in", "5s", "--json"]) == 0
        created = json.loads(capsys.readouterr().out)
        message = sqs.receive_message(QueueUrl=queues["webhook"], WaitTimeSeconds=0)
        assert message.get("Messages") is None  # delayed: due in 5 s
        assert count(sqs, queues["webhook"]) == 0
        attributes = sqs.get_queue_attributes(
            QueueUrl=queues["webhook"], AttributeNames=["ApproximateNumberOfMessagesDelayed"]
        )["Attributes"]
        assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"
        assert created["status"] == "queued"
        # A member who is not one is told so, with how to become one
        assert cli.main(["actions", "list", "--workspace", "Cloud", "--user", "eve"]) == 1
        assert "HTTP 403 forbidden: you are not a member" in capsys.readouterr().err
    finally:
        runtime_slot.install(None)


def test_actions_why_prints_each_step_in_utc_or_the_apis_json(
    sqs, queues, database_url, conn, capsys, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url)
    ws = make_workspace(conn, "Cloud")
    conn.execute(
        "insert into workspace_members (workspace_id, user_id, role) values (%s, 'ops', 'admin')",
        (ws,),
    )
    acting = ["--workspace", "Cloud", "--user", "ops"]
    try:
        args = ["actions", "schedule", *acting, "--type", "log", "--target", "t", "--in", "2h"]
        assert cli.main([*args, "--json"]) == 0
        created = json.loads(capsys.readouterr().out)
        # For people: a line per step, its time in UTC, then what it says
        assert cli.main(["actions", "why", created["id"][:8], *acting]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert re.fullmatch(
            rf"action {created['id']} is queued \(as of \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC\);"
            r" times in UTC:",
            lines[0],
        )
        assert re.fullmatch(
            r"  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  Created through the API by ops, for .* UTC\.",
            lines[1],
        )
        due = created["publish_at"].replace("T", " ")[:19]
        assert lines[2].startswith(f"  {due} UTC  Due at {due} UTC, in ")
        # For scripts: the API's answer
        assert cli.main(["actions", "why", created["id"], *acting, "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert [s["code"] for s in answer["steps"]] == ["created", "due_later"]
        # An unknown id is the API's 404
        assert cli.main(["actions", "why", "00000000", *acting]) == 1
        err = capsys.readouterr().err
        assert "HTTP 404 not_found: no action '00000000' in this workspace" in err
    finally:
        runtime_slot.install(None)
