"""Queue depths and dead-letter redrive, for whoever holds the queues: SQS in AWS
(GetQueueAttributes, StartMessageMoveTask), the in-process queues in the local runtime's
own process. The operations API (GET /v1/operations) reads them through `admin_of` the
runtime's queue port; one queue that cannot be read is that queue's error, not the call's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.platform.errors import TickworkError
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.queues.sqs import SqsQueues

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

# A by-hand move stops after this many receives, so a queue being refilled cannot hold it.
MAX_MOVE_ROUNDS = 1000
# What an SQS-compatible endpoint without StartMessageMoveTask answers it with. Any other
# error (a task already running, access denied) is the queue's error, not a by-hand move.
UNSUPPORTED = frozenset({"InvalidAction", "UnsupportedOperation", "UnknownOperationException"})


QueueSource = Literal["sqs", "in_process"]
RedriveMethod = Literal["move_task", "by_hand", "in_process", "none"]


class QueueAdminError(TickworkError):
    code = "queue_admin"


@dataclass(frozen=True)
class Depth:
    """Messages of one action type's queue (a message may ring for several rows) and its
    dead-letter queue, as SQS counts them (approximate there)."""

    visible: int
    delayed: int
    in_flight: int
    dead_letters: int


@dataclass(frozen=True)
class Redriven:
    action_type: str
    moved: int
    # "move_task" (SQS moves them: `moved` is how many were waiting when it started),
    # "by_hand" (an SQS-compatible endpoint without move tasks), "in_process", or "none"
    # (nothing was waiting, or the queue has no dead-letter queue).
    method: RedriveMethod
    task_handle: str | None = None


class QueueAdmin(Protocol):
    # Where the numbers come from.
    @property
    def source(self) -> QueueSource: ...

    def depth(self, action_type: str) -> Depth:
        """The queue's and its dead-letter queue's messages; QueueAdminError when unreadable."""
        ...

    def redrive(self, action_type: str) -> Redriven:
        """Dead letters back to their queue; QueueAdminError when that cannot start."""
        ...


# ------------------------------------------------------------------------------ SQS


class SqsAdmin:
    """The queue of each action type and its dead-letter queue (the queue's RedrivePolicy
    names it)."""

    source: QueueSource = "sqs"

    def __init__(self, queue_urls: dict[str, str], client: SQSClient) -> None:
        self.client = client
        self.queue_urls = dict(queue_urls)

    def _url(self, action_type: str) -> str:
        url = self.queue_urls.get(action_type)
        if url is None:
            raise QueueAdminError(f"no queue is configured for the action type {action_type!r}")
        return url

    def _attributes(self, url: str, *names: str) -> dict[str, str]:
        try:
            response = self.client.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=list(names),  # type: ignore[arg-type]
            )
        except (ClientError, BotoCoreError) as exc:
            raise QueueAdminError(f"cannot read queue {url}: {exc}") from exc
        return {str(key): value for key, value in response.get("Attributes", {}).items()}

    @staticmethod
    def _dead_letter_queue(url: str, attributes: dict[str, str]) -> tuple[str, str] | None:
        """(DLQ ARN, DLQ URL) from a queue's RedrivePolicy; the DLQ's URL is its queue's with
        the DLQ's account and name (no GetQueueUrl call)."""
        policy = attributes.get("RedrivePolicy")
        if not policy:
            return None
        try:
            dlq_arn = str(json.loads(policy)["deadLetterTargetArn"])
            _, _, _, _, account, name = dlq_arn.split(":", 5)
        except (ValueError, KeyError, TypeError) as exc:
            raise QueueAdminError(f"queue {url} has a RedrivePolicy that cannot be read") from exc
        base = url.rstrip("/").rsplit("/", 2)[0]
        return dlq_arn, f"{base}/{account}/{name}"

    def _waiting(self, dlq_url: str) -> int:
        found = self._attributes(dlq_url, "ApproximateNumberOfMessages")
        return int(found.get("ApproximateNumberOfMessages", 0))

    def depth(self, action_type: str) -> Depth:
        url = self._url(action_type)
        found = self._attributes(
            url,
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesDelayed",
            "ApproximateNumberOfMessagesNotVisible",
            "RedrivePolicy",
        )
        dlq = self._dead_letter_queue(url, found)
        return Depth(
            visible=int(found.get("ApproximateNumberOfMessages", 0)),
            delayed=int(found.get("ApproximateNumberOfMessagesDelayed", 0)),
            in_flight=int(found.get("ApproximateNumberOfMessagesNotVisible", 0)),
            dead_letters=self._waiting(dlq[1]) if dlq else 0,
        )

    def redrive(self, action_type: str) -> Redriven:
        """StartMessageMoveTask from the DLQ to its queue, or by hand (receive, send, delete)
        where the endpoint does not offer it."""
        url = self._url(action_type)
        found = self._attributes(url, "QueueArn", "RedrivePolicy")
        dlq = self._dead_letter_queue(url, found)
        if dlq is None:
            return Redriven(action_type, 0, "none")
        dlq_arn, dlq_url = dlq
        waiting = self._waiting(dlq_url)
        if waiting == 0:
            return Redriven(action_type, 0, "none")
        try:
            task = self.client.start_message_move_task(
                SourceArn=dlq_arn, DestinationArn=found["QueueArn"]
            )
        except NotImplementedError:
            # moto has no message move tasks: moved by hand.
            return Redriven(action_type, self._move_by_hand(dlq_url, url), "by_hand")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in UNSUPPORTED:
                raise QueueAdminError(f"cannot start moving {dlq_url}: {exc}") from exc
            # SQS-compatible endpoints (some emulators) lack them too.
            return Redriven(action_type, self._move_by_hand(dlq_url, url), "by_hand")
        except BotoCoreError as exc:
            raise QueueAdminError(f"cannot start moving {dlq_url}: {exc}") from exc
        return Redriven(action_type, waiting, "move_task", task.get("TaskHandle"))

    def _move_by_hand(self, source_url: str, target_url: str) -> int:
        moved = 0
        try:
            for _ in range(MAX_MOVE_ROUNDS):
                received = self.client.receive_message(
                    QueueUrl=source_url, MaxNumberOfMessages=10, VisibilityTimeout=60
                ).get("Messages", [])
                if not received:
                    break
                sent = self.client.send_message_batch(
                    QueueUrl=target_url,
                    Entries=[
                        {"Id": str(i), "MessageBody": m["Body"]} for i, m in enumerate(received)
                    ],
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
        except (ClientError, BotoCoreError) as exc:
            raise QueueAdminError(
                f"moved {moved} from {source_url} by hand, then failed: {exc}"
            ) from exc
        return moved


# ---------------------------------------------------------------------------- local


class InProcessAdmin:
    """The local runtime's in-process queues, read and redriven in the process that holds
    them (the local API server runs there)."""

    source: QueueSource = "in_process"

    def __init__(self, queues: InProcessQueues) -> None:
        self.queues = queues

    def depth(self, action_type: str) -> Depth:
        found = self.queues.queue(action_type).depth()
        return Depth(
            visible=found["visible"],
            delayed=found["delayed"],
            in_flight=found["in_flight"],
            dead_letters=found["dead_letters"],
        )

    def redrive(self, action_type: str) -> Redriven:
        moved = self.queues.queue(action_type).redrive()
        return Redriven(action_type, moved, "in_process" if moved else "none")


def admin_of(queues: QueuePort) -> QueueAdmin | None:
    """The administration of a runtime's queues, or None when this process cannot reach
    them (a queue port of another kind)."""
    if isinstance(queues, InProcessQueues):
        return InProcessAdmin(queues)
    if isinstance(queues, SqsQueues):
        return SqsAdmin(queues.queue_urls, queues.client)
    return None
