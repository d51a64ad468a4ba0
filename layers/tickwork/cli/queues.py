"""Queue depths and dead-letter redrive: SQS in AWS, the running `tickwork dev`'s in-process
queues locally (only that process holds them, so it is asked over its API server)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx
from botocore.exceptions import BotoCoreError, ClientError

from tickwork.platform.errors import TickworkError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

# A by-hand move stops after this many receives, so a queue being refilled cannot hold it.
MAX_MOVE_ROUNDS = 1000


class QueueAdminError(TickworkError):
    code = "queue_admin"


@dataclass(frozen=True)
class Depth:
    visible: int
    delayed: int
    in_flight: int
    dead_letters: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Redriven:
    action_type: str
    moved: int
    method: str  # "move_task" (SQS moves them), "by_hand" or "in_process"
    task_handle: str | None = None


# ------------------------------------------------------------------------------ SQS


class SqsAdmin:
    """Depths and redrive of the queue of each action type and its dead-letter queue (the
    queue's RedrivePolicy names it)."""

    def __init__(self, queue_urls: Mapping[str, str], client: SQSClient | None = None) -> None:
        if client is None:
            import boto3  # noqa: PLC0415 - lazy: boto3 loads only where AWS is called (cold start)

            client = boto3.client("sqs")
        self.client = client
        self.queue_urls = dict(queue_urls)

    def _attributes(self, url: str, *names: str) -> dict[str, str]:
        try:
            response = self.client.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=list(names),  # type: ignore[arg-type]
            )
        except (ClientError, BotoCoreError) as exc:
            raise QueueAdminError(f"cannot read queue {url}: {exc}") from exc
        return {str(key): value for key, value in response.get("Attributes", {}).items()}

    def _dead_letter_queue(self, url: str) -> tuple[str, str, str] | None:
        """(queue ARN, DLQ ARN, DLQ URL) of a queue, or None without a RedrivePolicy."""

        attributes = self._attributes(url, "QueueArn", "RedrivePolicy")
        policy = attributes.get("RedrivePolicy")
        if not policy:
            return None
        dlq_arn = str(json.loads(policy)["deadLetterTargetArn"])
        _, _, _, _, account, name = dlq_arn.split(":", 5)
        dlq_url = self.client.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)[
            "QueueUrl"
        ]
        return attributes["QueueArn"], dlq_arn, dlq_url

    def depths(self) -> dict[str, Depth]:
        found = {}
        for action_type, url in sorted(self.queue_urls.items()):
            a = self._attributes(
                url,
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesDelayed",
                "ApproximateNumberOfMessagesNotVisible",
            )
            dlq = self._dead_letter_queue(url)
            dead = 0
            if dlq is not None:
                dead = int(self._attributes(dlq[2], "ApproximateNumberOfMessages").get(
                    "ApproximateNumberOfMessages", 0))  # fmt: skip
            found[action_type] = Depth(
                visible=int(a.get("ApproximateNumberOfMessages", 0)),
                delayed=int(a.get("ApproximateNumberOfMessagesDelayed", 0)),
                in_flight=int(a.get("ApproximateNumberOfMessagesNotVisible", 0)),
                dead_letters=dead,
            )
        return found

    def redrive(self, action_type: str | None = None) -> list[Redriven]:
        """Dead letters back to their queue: StartMessageMoveTask, or by hand (receive, send,
        delete) where the endpoint does not offer it."""
        results = []
        for name, url in sorted(self.queue_urls.items()):
            if action_type is not None and name != action_type:
                continue
            dlq = self._dead_letter_queue(url)
            if dlq is None:
                results.append(Redriven(name, 0, "none"))
                continue
            queue_arn, dlq_arn, dlq_url = dlq
            waiting = int(self._attributes(dlq_url, "ApproximateNumberOfMessages").get(
                "ApproximateNumberOfMessages", 0))  # fmt: skip
            if waiting == 0:
                results.append(Redriven(name, 0, "none"))
                continue
            try:
                task = self.client.start_message_move_task(
                    SourceArn=dlq_arn, DestinationArn=queue_arn
                )
                results.append(Redriven(name, waiting, "move_task", task.get("TaskHandle")))
            except (ClientError, NotImplementedError):
                # SQS-compatible endpoints (moto, some emulators) lack message move tasks.
                results.append(Redriven(name, self._move_by_hand(dlq_url, url), "by_hand"))
        return results

    def _move_by_hand(self, source_url: str, target_url: str) -> int:
        moved = 0
        for _ in range(MAX_MOVE_ROUNDS):
            received = self.client.receive_message(
                QueueUrl=source_url, MaxNumberOfMessages=10, VisibilityTimeout=60
            ).get("Messages", [])
            if not received:
                break
            sent = self.client.send_message_batch(
                QueueUrl=target_url,
                Entries=[{"Id": str(i), "MessageBody": m["Body"]} for i, m in enumerate(received)],
            )
            ok = {int(entry["Id"]) for entry in sent.get("Successful", [])}
            done = [m for i, m in enumerate(received) if i in ok]
            if done:
                # Only what reached the queue leaves the dead-letter queue.
                self.client.delete_message_batch(
                    QueueUrl=source_url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(done)
                    ],
                )
            moved += len(done)
        return moved


# ---------------------------------------------------------------------------- local


class LocalAdmin:
    """The in-process queues of a running `tickwork dev`, through its API server."""

    def __init__(self, api_url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )

    def _call(self, method: str, path: str, **params: str) -> dict[str, Any]:
        try:
            response = self.http.request(method, path, params=params)
        except httpx.TransportError as exc:
            raise QueueAdminError(f"the local server at {self.http.base_url} did not answer: {exc}"
                                  ) from exc  # fmt: skip
        if response.status_code != 200:
            raise QueueAdminError(f"{method} {path}: HTTP {response.status_code} {response.text}")
        body: dict[str, Any] = response.json()
        return body

    def depths(self) -> dict[str, Depth]:
        found = self._call("GET", "/local/queues")
        return {name: Depth(**depth) for name, depth in sorted(found.items())}

    def redrive(self, action_type: str | None = None) -> list[Redriven]:
        params = {"type": action_type} if action_type else {}
        moved = self._call("POST", "/local/redrive", **params)["moved"]
        return [Redriven(name, int(count), "in_process") for name, count in sorted(moved.items())]
