"""The in-process queue served to other processes (QueueHost): what a caller sends arrives
in the host's queue with its delay, and a caller without the key, or asking for anything
but the service's methods, gets nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from uuid import uuid4

import pytest

from tickwork.platform.queues.memory import InProcessQueues
from tickwork.platform.queues.port import OutgoingMessage, VisibilityChange, decode_body
from tickwork.platform.queues.shared import (
    QueueConnection,
    QueueHost,
    QueueService,
    RemoteQueueError,
    RemoteQueues,
)


@pytest.fixture
def hosted():
    queues = InProcessQueues(visibility_timeout=30)
    host = QueueHost(QueueService(queues)).start()
    connection = QueueConnection(host.address, host.authkey)
    yield queues, host, connection
    connection.close()
    host.close()


def test_messages_sent_through_the_host_arrive_in_its_queue_with_their_delay(hosted):
    queues, _, connection = hosted
    now = datetime.now(UTC)
    due_now, due_later = uuid4(), uuid4()
    # Given two rows, one due now and one in an hour, sent from "another process"
    RemoteQueues(connection).send("log", [
        OutgoingMessage((due_now,), "log", now, now),
        OutgoingMessage((due_later,), "log", now + timedelta(hours=1), now),
    ])  # fmt: skip
    # Then the host's queue holds both, and only the due one is visible
    queue = queues.queue("log")
    assert queue.depth() == {"visible": 1, "delayed": 1, "in_flight": 0, "dead_letters": 0}
    received = connection.receive("log", 10, 0.0)
    rows = [row for _, body, _, _, _ in received for row in decode_body(body) or []]
    assert [row.action_id for row in rows] == [due_now]
    # And a visibility change and a delete made remotely act on the host's message
    handle = received[0][2]
    assert RemoteQueues(connection).change_visibility("log", [VisibilityChange(handle, 0)]) == 1
    connection.delete("log", [handle])
    assert queue.depth()["visible"] == 0


def test_a_message_sent_through_the_host_is_visible_at_its_rows_due_time():
    # Given a host whose queue clock reads a moment of our choosing
    now = [1000.0]
    queues = InProcessQueues(clock=lambda: now[0])  # type: ignore[arg-type]
    host = QueueHost(QueueService(queues)).start()
    connection = QueueConnection(host.address, host.authkey)
    try:
        due_at = datetime.fromtimestamp(1000.5, UTC)
        # When a row due at 1000.5 is sent: however long it took to arrive
        RemoteQueues(connection).send("log", [OutgoingMessage((uuid4(),), "log", due_at, due_at)])
        # Then its message becomes visible at 1000.5, not a delay after its arrival
        queue = queues.queue("log")
        now[0] = 1000.499
        assert queue.depth()["visible"] == 0
        now[0] = 1000.5
        assert queue.depth()["visible"] == 1
    finally:
        connection.close()
        host.close()


def test_a_caller_without_the_key_is_refused(hosted):
    _, host, _ = hosted
    with pytest.raises(AuthenticationError):
        Client(host.address, authkey=b"not the key")


def test_only_the_services_methods_can_be_called(hosted):
    _, _, connection = hosted
    with pytest.raises(RemoteQueueError, match="no method '__init__'"):
        connection.call("__init__", None)
    with pytest.raises(AttributeError):
        connection.queues  # noqa: B018
    # A method that fails there raises here, and the connection stays usable
    with pytest.raises(RemoteQueueError, match="TypeError"):
        connection.call("receive", "log")
    assert connection.receive("log", 1, 0.0) == []


def test_a_closed_host_accepts_no_one():
    host = QueueHost(QueueService(InProcessQueues())).start()
    host.close()
    with pytest.raises(ConnectionRefusedError):
        QueueConnection(host.address, host.authkey)
