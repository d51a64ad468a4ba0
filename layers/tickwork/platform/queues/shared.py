"""The in-process queue, shared with other processes: the local runtime's tick process and
the fault-injection run's workers send to and receive from the queues of one process, whose
SQS semantics (delay, visibility, receive count, redrive) stay as they are. A call carries a
whole batch, so a burst makes few round trips."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any
from uuid import UUID

from tickwork.platform.queues.memory import Entry, InProcessQueues, due_times
from tickwork.platform.queues.port import OutgoingMessage, VisibilityChange

# A received message as it crosses the process boundary:
# (message id, body, receipt handle, receive count, sent at).
ReceivedMessage = tuple[str, str, str, int, float]


class QueueService:
    """What other processes may call, in the process that holds the queues."""

    def __init__(self, queues: InProcessQueues) -> None:
        self.queues = queues

    def send(self, action_type: str, entries: list[Entry]) -> None:
        """(body, visible at, group) entries: a Unix time, the same clock on both sides of
        loopback."""
        self.queues.queue(action_type).send_visible_at(entries)

    def receive(self, action_type: str, max_messages: int, wait: float) -> list[ReceivedMessage]:
        messages = self.queues.queue(action_type).receive(max_messages, wait_seconds=wait)
        return [
            (m.message_id, m.body, m.receipt_handle, m.receive_count, m.sent_at) for m in messages
        ]

    def delete(self, action_type: str, handles: list[str]) -> None:
        self.queues.queue(action_type).delete(handles)

    def change_visibility(self, action_type: str, changes: list[tuple[str, int]]) -> int:
        pairs = [VisibilityChange(handle, seconds) for handle, seconds in changes]
        return self.queues.change_visibility(action_type, pairs)

    def dead_letters(self, action_type: str) -> int:
        return len(self.queues.queue(action_type).dead_letters)


class QueueHost:
    """Serves a QueueService on loopback from threads of this process, so the queues stay
    where the runtime's dispatchers are. Each connection must know `authkey`; a call is
    (method name, arguments) and its answer (True, result) or (False, error text)."""

    def __init__(self, service: QueueService) -> None:
        self.service = service
        self.authkey = os.urandom(32)
        self._listener = Listener(("127.0.0.1", 0), authkey=self.authkey)
        self.address: tuple[str, int] = self._listener.address
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="queue-host", daemon=True)

    def start(self) -> QueueHost:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        # A blocked accept() does not return when its socket is closed: a caller wakes it.
        with contextlib.suppress(OSError):
            Client(self.address, authkey=self.authkey).close()
        self._thread.join(timeout=5)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except AuthenticationError:
                continue  # a caller without the key
            except OSError:
                return
            if self._closed.is_set():
                conn.close()
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            while not self._closed.is_set():
                try:
                    method, args = conn.recv()
                except (EOFError, OSError):
                    return
                if method not in SERVICE_METHODS:
                    conn.send((False, f"no method {method!r}"))
                    continue
                try:
                    conn.send((True, getattr(self.service, method)(*args)))
                except Exception as exc:  # the caller raises it as RemoteQueueError
                    conn.send((False, f"{type(exc).__name__}: {exc}"))


SERVICE_METHODS = frozenset(
    name
    for name in vars(QueueService)
    if not name.startswith("_") and callable(getattr(QueueService, name))
)


class RemoteQueueError(RuntimeError):
    """The queue host refused or failed a call."""


class QueueConnection:
    """A QueueService of another process, called over one connection (thread-safe)."""

    def __init__(self, address: tuple[str, int], authkey: bytes) -> None:
        self._conn = Client(address, authkey=authkey)
        self._lock = threading.Lock()

    def call(self, method: str, *args: Any) -> Any:
        with self._lock:
            self._conn.send((method, args))
            ok, result = self._conn.recv()
        if not ok:
            raise RemoteQueueError(result)
        return result

    def __getattr__(self, method: str) -> Any:
        if method not in SERVICE_METHODS:
            raise AttributeError(method)
        return lambda *args: self.call(method, *args)

    def close(self) -> None:
        self._conn.close()


class RemoteQueues:
    """The queue port over a QueueService proxy."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def send(self, action_type: str, messages: Sequence[OutgoingMessage]) -> list[UUID]:
        self.service.send(action_type, due_times(messages))
        return []

    def change_visibility(self, action_type: str, changes: Sequence[VisibilityChange]) -> int:
        pairs = [(c.receipt_handle, c.seconds) for c in changes]
        return int(self.service.change_visibility(action_type, pairs))
