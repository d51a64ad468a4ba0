"""The queue port over Amazon SQS: SendMessageBatch, ten entries a call, calls in parallel,
each message in its workspace's group (SQS fair queues); ChangeMessageVisibilityBatch for
messages to be tried again sooner than the queue's timeout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from uuid import UUID

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.platform.observability import logger
from tickwork.platform.queues.port import OutgoingMessage, VisibilityChange

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

BATCH_LIMIT = 10  # SendMessageBatch takes at most ten entries


class SqsQueues:
    def __init__(
        self, queue_urls: Mapping[str, str], client: SQSClient | None = None, parallelism: int = 16
    ) -> None:
        if client is None:
            import boto3  # noqa: PLC0415 - lazy: boto3 loads only where AWS is called (cold start)

            client = boto3.client("sqs")
        self.client = client
        self.queue_urls = dict(queue_urls)
        self.parallelism = parallelism

    def send(self, action_type: str, messages: Sequence[OutgoingMessage]) -> list[UUID]:
        url = self.queue_urls.get(action_type)
        if url is None:
            logger.error("no queue configured", extra={"action_type": action_type})
            return [action_id for m in messages for action_id in m.action_ids]
        chunks = [messages[i : i + BATCH_LIMIT] for i in range(0, len(messages), BATCH_LIMIT)]
        if len(chunks) == 1:
            return self._send_chunk(url, chunks[0])
        with ThreadPoolExecutor(max_workers=min(self.parallelism, len(chunks))) as pool:
            return [failed for result in pool.map(lambda c: self._send_chunk(url, c), chunks)
                    for failed in result]  # fmt: skip

    def _send_chunk(self, url: str, chunk: Sequence[OutgoingMessage]) -> list[UUID]:
        # The workspace is the message group: on a standard queue that makes it a fair
        # queue, whose consumers get a quiet workspace's messages ahead of a noisy one's
        # backlog. A message without a group (none of ours) is a group of its own.
        entries: list[Any] = [
            {"Id": str(i), "MessageBody": m.body(), "DelaySeconds": m.delay_seconds}
            | ({"MessageGroupId": m.group} if m.group else {})
            for i, m in enumerate(chunk)
        ]
        try:
            response = self.client.send_message_batch(QueueUrl=url, Entries=entries)
        except (ClientError, BotoCoreError) as exc:
            logger.warning("SendMessageBatch failed", extra={"error": str(exc), "size": len(chunk)})
            return [action_id for m in chunk for action_id in m.action_ids]
        failed = response.get("Failed", [])
        if failed:
            logger.warning("SendMessageBatch partly failed", extra={"failed": failed})
        return [action_id for entry in failed for action_id in chunk[int(entry["Id"])].action_ids]

    def change_visibility(self, action_type: str, changes: Sequence[VisibilityChange]) -> int:
        url = self.queue_urls.get(action_type)
        if url is None or not changes:
            return 0
        accepted = 0
        for start in range(0, len(changes), BATCH_LIMIT):
            chunk = changes[start : start + BATCH_LIMIT]
            entries: list[Any] = [
                {"Id": str(i), "ReceiptHandle": c.receipt_handle, "VisibilityTimeout": c.seconds}
                for i, c in enumerate(chunk)
            ]
            try:
                response = self.client.change_message_visibility_batch(
                    QueueUrl=url, Entries=entries
                )
            except (ClientError, BotoCoreError) as exc:
                # The message then comes back after the queue's own visibility timeout.
                logger.warning("ChangeMessageVisibilityBatch failed", extra={"error": str(exc)})
                continue
            accepted += len(response.get("Successful", []))
        return accepted
