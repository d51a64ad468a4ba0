"""An in-process queue with the SQS semantics Tickwork relies on: per-message delay,
visibility timeout, receive count, redrive to a dead-letter list after maxReceiveCount,
batches, and fair shares between message groups (SQS fair queues). For the local runtime
and the benchmark (moto's SQS is far too slow for either)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from uuid import UUID

from tickwork.platform.queues.port import OutgoingMessage, VisibilityChange

# (body, when it becomes visible on the queue's clock, message group)
Entry = tuple[str, float, str]


@dataclass(slots=True)
class Message:
    message_id: str
    body: str
    visible_at: float
    sent_at: float
    group: str = ""
    receive_count: int = 0
    receipt_handle: str = ""
    deleted: bool = False
    waiting: bool = False  # visible, in its group's line, not yet received


class InProcessQueue:
    """One queue. Thread-safe; `clock` is injectable so tests need not sleep.

    Fair shares: a receive takes visible messages one group at a time, round robin (a
    group's own messages in the order they became visible), as SQS fair queues give a quiet
    tenant's message to the next consumer while a noisy one's backlog waits. With one group
    (a single workspace, a bench) the order is the order of visibility."""

    def __init__(
        self,
        name: str,
        *,
        visibility_timeout: float = 30.0,
        max_receive_count: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.visibility_timeout = visibility_timeout
        self.max_receive_count = max_receive_count
        self.clock = clock
        self.dead_letters: list[Message] = []
        self._heap: list[tuple[float, int, Message]] = []
        # Messages visible when sent and never received, in the order sent: a burst of rows
        # already due skips the heap both ways (a push and a pop each).
        self._ready: deque[Message] = deque()
        # Visible messages taken from the two lines above, by group, and the groups' turns.
        self._lines: dict[str, deque[Message]] = {}
        self._turns: deque[str] = deque()
        self._inflight: dict[str, Message] = {}
        self._order = itertools.count()
        self._ids = itertools.count(1)
        self._id_prefix = uuid.uuid4().hex[:12]  # unique across queues and restarts
        self._changed = threading.Condition()

    def send(self, body: str, delay_seconds: float = 0.0, group: str = "") -> str:
        return self.send_visible_at([(body, self.clock() + max(0.0, delay_seconds), group)])[0]

    def send_visible_at(self, entries: Sequence[Entry]) -> list[str]:
        """(body, when it becomes visible on this queue's clock, group) entries."""
        ids = []
        with self._changed:
            now = self.clock()
            for body, visible_at, group in entries:
                message = Message(
                    f"{self._id_prefix}-{next(self._ids)}", body, visible_at, now, group
                )
                if visible_at <= now:
                    self._ready.append(message)
                else:
                    heapq.heappush(self._heap, (visible_at, next(self._order), message))
                ids.append(message.message_id)
            self._changed.notify_all()
        return ids

    def receive(self, max_messages: int = 10, wait_seconds: float = 0.0) -> list[Message]:
        """Up to `max_messages` visible messages, each hidden for the visibility timeout.
        A message past max_receive_count goes to `dead_letters` instead (SQS redrive)."""
        deadline = time.monotonic() + wait_seconds
        with self._changed:
            while True:
                batch = self._take(max_messages)
                remaining = deadline - time.monotonic()
                if batch or remaining <= 0:
                    return batch
                # Wake when a message may have become visible, or when one is sent.
                next_visible = self._heap[0][0] - self.clock() if self._heap else remaining
                self._changed.wait(timeout=max(0.001, min(remaining, next_visible)))

    def _gather(self, now: float) -> None:
        """Every message visible now joins its group's line, in the order of visibility
        (the earlier of the two lines' heads first, so neither starves the other)."""
        heap, ready, lines, turns = self._heap, self._ready, self._lines, self._turns
        while True:
            if ready and not (heap and heap[0][0] < ready[0].visible_at):
                message = ready.popleft()
            elif heap and heap[0][0] <= now:
                visible_at, _, message = heapq.heappop(heap)
                if message.deleted or message.waiting or visible_at != message.visible_at:
                    continue  # deleted, waiting already, or superseded by a visibility change
            else:
                return
            message.waiting = True
            line = lines.get(message.group)
            if line is None:
                lines[message.group] = line = deque()
                turns.append(message.group)
            line.append(message)

    def _take(self, max_messages: int) -> list[Message]:
        now = self.clock()
        self._gather(now)
        batch: list[Message] = []
        lines, turns = self._lines, self._turns
        while len(batch) < max_messages and turns:
            group = turns[0]
            line = lines[group]
            message = line.popleft()
            if not line:
                del lines[group]
                turns.popleft()
            elif len(lines) > 1:
                turns.rotate(-1)  # the next group's turn
            message.waiting = False
            if message.deleted:
                continue
            if message.visible_at > now:
                continue  # hidden again meanwhile: its heap entry brings it back
            if message.receive_count >= self.max_receive_count:
                self.dead_letters.append(message)
                continue
            message.receive_count += 1
            message.receipt_handle = f"{message.message_id}:{message.receive_count}"
            message.visible_at = now + self.visibility_timeout
            heapq.heappush(self._heap, (message.visible_at, next(self._order), message))
            self._inflight[message.receipt_handle] = message
            batch.append(message)
        return batch

    def delete(self, receipt_handles: Sequence[str]) -> None:
        with self._changed:
            for handle in receipt_handles:
                message = self._inflight.pop(handle, None)
                if message is not None:
                    message.deleted = True

    def change_visibility(self, receipt_handle: str, seconds: float) -> bool:
        """Make an in-flight message visible `seconds` from now; False for a stale handle."""
        with self._changed:
            message = self._inflight.get(receipt_handle)
            if message is None or message.deleted:
                return False
            message.visible_at = self.clock() + max(0.0, seconds)
            # The old heap entry stays; `_gather` skips entries whose time is not the message's.
            heapq.heappush(self._heap, (message.visible_at, next(self._order), message))
            self._changed.notify_all()
            return True

    def _live(self) -> list[Message]:
        """Every message not deleted, once each."""
        seen: dict[int, Message] = {}
        for at, _, message in self._heap:
            if not message.deleted and at == message.visible_at:
                seen[id(message)] = message
        for message in itertools.chain(self._ready, *self._lines.values()):
            if not message.deleted:
                seen[id(message)] = message
        return list(seen.values())

    def __len__(self) -> int:
        with self._changed:
            return len(self._live())

    def depth(self) -> dict[str, int]:
        """Messages visible, delayed, in flight and dead, as SQS counts them."""
        now = self.clock()
        with self._changed:
            live = self._live()
            visible = sum(1 for m in live if m.visible_at <= now)
            in_flight = sum(1 for m in live if m.visible_at > now and m.receipt_handle)
            return {
                "visible": visible,
                "delayed": len(live) - visible - in_flight,
                "in_flight": in_flight,
                "dead_letters": len(self.dead_letters),
            }

    def redrive(self) -> int:
        """Move every dead letter back to the queue, visible now with a fresh receive count
        (SQS's StartMessageMoveTask). Returns how many moved."""
        with self._changed:
            moved, self.dead_letters = self.dead_letters, []
            now = self.clock()
            for message in moved:
                message.receive_count = 0
                message.receipt_handle = ""
                message.visible_at = now
                heapq.heappush(self._heap, (now, next(self._order), message))
            self._changed.notify_all()
            return len(moved)


def due_times(messages: Sequence[OutgoingMessage]) -> list[Entry]:
    """(body, visible at, group) entries for `send_visible_at`. SQS delays are whole seconds;
    here a message becomes visible at its first row's due time exactly, so the dispatcher
    has nothing left to wait out but its other rows' (within the message window). The time
    is absolute, not a delay: a delay measured before the bodies were built and carried to
    the queue made each message late by that much."""
    return [(m.body(), m.due_at.timestamp(), m.group) for m in messages]


class InProcessQueues:
    """The queue port over one in-process queue per action type, created on first use."""

    def __init__(self, **queue_options: float) -> None:
        self._queue_options = queue_options
        self._queues: dict[str, InProcessQueue] = {}
        self._lock = threading.Lock()

    def queue(self, action_type: str) -> InProcessQueue:
        with self._lock:
            queue = self._queues.get(action_type)
            if queue is None:
                queue = InProcessQueue(action_type, **self._queue_options)  # type: ignore[arg-type]
                self._queues[action_type] = queue
            return queue

    def all(self) -> dict[str, InProcessQueue]:
        with self._lock:
            return dict(self._queues)

    def send(self, action_type: str, messages: Sequence[OutgoingMessage]) -> list[UUID]:
        self.queue(action_type).send_visible_at(due_times(messages))
        return []

    def change_visibility(self, action_type: str, changes: Sequence[VisibilityChange]) -> int:
        queue = self.queue(action_type)
        return sum(queue.change_visibility(c.receipt_handle, c.seconds) for c in changes)
