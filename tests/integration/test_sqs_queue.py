"""The SQS adapter against moto: batches, delays, redrive to a DLQ, and the Lambda path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import uuid4

import boto3
import pytest
from moto import mock_aws

from tests.conftest import make_workspace
from tests.engine import seed, statuses
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import runtime as runtime_slot
from tickwork.engine.tick import run_tick
from tickwork.platform.config import MAX_ROWS_PER_MESSAGE, ActionTypeConfig, Settings
from tickwork.platform.queues.port import (
    MESSAGE_WINDOW,
    OutgoingMessage,
    VisibilityChange,
    decode_body,
    doorbells,
)
from tickwork.platform.queues.sqs import SqsQueues
from tickwork.runtime import Runtime


@pytest.fixture
def sqs(monkeypatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def make_queue(sqs: Any, name: str, **attributes: str) -> str:
    return sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]
    ).get("Messages", []):
        messages.extend(batch)
    return messages


def test_send_uses_batches_of_ten_and_carries_the_row(sqs, now):
    url = make_queue(sqs, "tickwork-webhook")
    queues = SqsQueues({"webhook": url}, client=sqs)
    messages = [OutgoingMessage((uuid4(),), "webhook", now, now) for _ in range(23)]
    assert queues.send("webhook", messages) == []
    received = receive_all(sqs, url)
    bodies = sorted(json.loads(m["Body"])["id"] for m in received)
    assert bodies == sorted(str(m.action_ids[0]) for m in messages)


def test_rows_due_together_travel_together_within_sqs_request_limits(sqs, now):
    # Given ten messages of the most rows a message may carry, each row due at its own
    # instant across the whole message window (the longest body: every offset written)
    url = make_queue(sqs, "tickwork-webhook")
    queues = SqsQueues({"webhook": url}, client=sqs)
    ws, step = uuid4(), MESSAGE_WINDOW / MAX_ROWS_PER_MESSAGE
    due = {uuid4(): now + i * step for i in range(10 * MAX_ROWS_PER_MESSAGE)}
    rows = [(i, "webhook", at, ws) for i, at in due.items()]
    messages = doorbells(rows, now, lambda _: MAX_ROWS_PER_MESSAGE)
    assert [len(m.action_ids) for m in messages] == [MAX_ROWS_PER_MESSAGE] * 10
    # Then one SendMessageBatch of them stays within SQS's 256 KiB a request
    assert sum(len(m.body().encode()) for m in messages) <= 256 * 1024
    # And every row arrives, named by the message that carried it, with its due time
    assert queues.send("webhook", messages) == []
    received = [row for m in receive_all(sqs, url) for row in decode_body(m["Body"]) or []]
    assert sorted((row.action_id, row.due_at) for row in received) == sorted(due.items())
    assert {row.action_type for row in received} == {"webhook"}


def test_a_refused_request_reports_every_row_of_its_messages(sqs, now):
    # Given a queue that takes messages of at most 1 KiB, and a message of 30 rows (1.2 KiB)
    url = make_queue(sqs, "tickwork-webhook", MaximumMessageSize="1024")
    queues = SqsQueues({"webhook": url}, client=sqs)
    big = OutgoingMessage(tuple(uuid4() for _ in range(30)), "webhook", now, now)
    small = OutgoingMessage((uuid4(),), "webhook", now, now)
    # Then the request fails, and every row of both messages is reported not sent
    assert sorted(queues.send("webhook", [small, big])) == sorted(small.action_ids + big.action_ids)


class PartlyFailingClient:
    """SendMessageBatch answering that its second entry failed: an answer moto does not
    give for a valid request, which SQS gives for an internal error on one entry."""

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        failed = Entries[1]
        return {
            "Successful": [{"Id": e["Id"]} for e in Entries if e is not failed],
            "Failed": [{"Id": failed["Id"], "SenderFault": False, "Code": "InternalError"}],
        }


def test_a_failed_entry_reports_the_rows_of_its_message_only(now):
    queues = SqsQueues({"webhook": "https://sqs.example/q"}, client=PartlyFailingClient())  # type: ignore[arg-type]
    messages = [OutgoingMessage((uuid4(), uuid4()), "webhook", now, now) for _ in range(3)]
    assert queues.send("webhook", messages) == list(messages[1].action_ids)


def test_delay_seconds_hold_a_message_back(sqs, now):
    url = make_queue(sqs, "tickwork-webhook")
    queues = SqsQueues({"webhook": url}, client=sqs)
    later = OutgoingMessage((uuid4(),), "webhook", now + timedelta(seconds=60), now)
    assert later.delay_seconds == 60
    queues.send("webhook", [later])
    assert receive_all(sqs, url) == []


def test_unknown_queue_or_refused_send_reports_every_id(sqs, now):
    queues = SqsQueues({"webhook": "https://sqs.us-east-1.amazonaws.com/123/nope"}, client=sqs)
    messages = [OutgoingMessage((uuid4(),), "webhook", now, now) for _ in range(3)]
    assert sorted(queues.send("webhook", messages)) == sorted(m.action_ids[0] for m in messages)
    assert len(queues.send("sms", messages)) == 3


def test_a_failed_message_comes_back_after_its_shortened_visibility(sqs, now):
    url = make_queue(sqs, "tickwork-webhook", VisibilityTimeout="360")
    queues = SqsQueues({"webhook": url}, client=sqs)
    queues.send("webhook", [OutgoingMessage((uuid4(),), "webhook", now, now)])
    [received] = receive_all(sqs, url)
    assert receive_all(sqs, url) == []  # hidden for the queue's 360 s
    changed = queues.change_visibility("webhook", [VisibilityChange(received["ReceiptHandle"], 0)])
    assert changed == 1
    assert [m["MessageId"] for m in receive_all(sqs, url)] == [received["MessageId"]]
    assert queues.change_visibility("sms", [VisibilityChange("x", 0)]) == 0


def test_redrive_moves_a_message_to_the_dlq_after_max_receive_count(sqs):
    dlq = make_queue(sqs, "tickwork-webhook-dlq")
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = make_queue(
        sqs,
        "tickwork-webhook",
        VisibilityTimeout="0",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"}),
    )
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    for _ in range(2):  # received, never deleted: as a dispatcher that keeps failing
        assert len(sqs.receive_message(QueueUrl=url).get("Messages", [])) == 1
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    assert [m["Body"] for m in receive_all(sqs, dlq)] == ["poison"]


def test_tick_to_sqs_to_dispatcher_handler(sqs, conn, workspace, runtime, now):
    url = make_queue(sqs, "tickwork-log")
    ids = seed(conn, workspace, 4, now - timedelta(seconds=1))
    sqs_runtime = Runtime(
        settings=runtime.settings,
        db=runtime.db,
        queues=SqsQueues({"log": url}, client=sqs),
        providers=runtime.providers,
    )
    assert run_tick(conn, sqs_runtime.queues, sqs_runtime.settings).enqueued == {"log": 4}
    records = [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m["Attributes"],
            "messageAttributes": {},
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tickwork-log",
            "awsRegion": "us-east-1",
        }
        for m in receive_all(sqs, url)
    ]
    runtime_slot.install(sqs_runtime)
    try:
        response = load_handler("dispatcher").handler({"Records": records}, FakeLambdaContext())
    finally:
        runtime_slot.install(None)
    assert response == {"batchItemFailures": []}
    assert statuses(conn) == {"published": 4}
    delivered = runtime.providers.for_action_type("log").deliveries  # type: ignore[attr-defined]
    assert sorted(d.action_id for d in delivered) == sorted(ids)


def test_each_message_travels_in_its_workspaces_group(sqs, conn, workspace, now):
    # Given two workspaces' rows due together
    other = make_workspace(conn, "Other")
    mine = seed(conn, workspace, 3, now - timedelta(seconds=1))
    theirs = seed(conn, other, 2, now - timedelta(seconds=1))
    url = make_queue(sqs, "tickwork-log")
    settings = Settings(action_types={"log": ActionTypeConfig(provider="log")})
    # When the tick sends them to SQS
    assert run_tick(conn, SqsQueues({"log": url}, client=sqs), settings).enqueued == {"log": 5}
    # Then each message names its workspace as its group (a fair queue's tenant), and holds
    # only that workspace's rows
    groups = {
        row.action_id: m["Attributes"]["MessageGroupId"]
        for m in receive_all(sqs, url)
        for row in decode_body(m["Body"]) or []
    }
    assert groups == {i: str(workspace) for i in mine} | {i: str(other) for i in theirs}
