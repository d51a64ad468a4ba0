"""The dispatcher's Lambda handler: the partial batch response it answers with."""

from __future__ import annotations

from typing import Any, cast

import pytest
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.exceptions import (
    BatchProcessingError,
    UnexpectedBatchTypeError,
)

from tests.handlers import FakeLambdaContext
from tickwork.engine import dispatch
from tickwork.engine.dispatch import DispatchResult, DispatchSummary, handle_sqs_event
from tickwork.platform.config import Settings
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.runtime import Runtime

BODY = '{"id": "%s", "type": "log", "due_at": "2026-05-20T09:00:00+00:00"}'
IDS = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(1, 4)]


def event() -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"m{i}", "receiptHandle": f"h{i}", "body": BODY % action_id,
                "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:local:0:tickwork-log",
            }
            for i, action_id in enumerate(IDS, 1)
        ]
    }  # fmt: skip


def handle(monkeypatch: pytest.MonkeyPatch, failed: list[str], sqs: dict[str, Any]) -> Any:
    """The handler's answer when the dispatcher fails `failed` (message ids)."""

    def dispatched(self: object, messages: object, *args: object) -> DispatchResult:
        return DispatchResult(failed, DispatchSummary())

    monkeypatch.setattr(dispatch.Dispatcher, "dispatch", dispatched)
    runtime = Runtime(
        settings=Settings(), db=cast(Any, None), queues=InProcessQueues(), providers=cast(Any, None)
    )
    return handle_sqs_event(sqs, cast(Any, FakeLambdaContext()), runtime)


def test_a_batch_without_failures_answers_as_the_batch_processor_would(monkeypatch):
    sqs = event()
    expected = process_partial_response(
        sqs, lambda record: None, BatchProcessor(EventType.SQS), cast(Any, FakeLambdaContext())
    )
    assert handle(monkeypatch, [], sqs) == dict(expected) == {"batchItemFailures": []}


def test_a_failed_record_is_reported_and_only_it(monkeypatch):
    assert handle(monkeypatch, ["m2"], event()) == {"batchItemFailures": [{"itemIdentifier": "m2"}]}


def test_a_batch_whose_every_record_failed_is_an_error_of_the_invocation(monkeypatch):
    with pytest.raises(BatchProcessingError, match="All records failed"):
        handle(monkeypatch, ["m1", "m2", "m3"], event())


def test_an_event_without_records_is_refused_as_before(monkeypatch):
    with pytest.raises(UnexpectedBatchTypeError):
        handle(monkeypatch, [], {"Records": []})
