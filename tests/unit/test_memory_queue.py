"""The in-process queue keeps the SQS semantics the engine relies on."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from tickwork.platform.queues.memory import InProcessQueue, InProcessQueues, Message
from tickwork.platform.queues.port import OutgoingMessage, decode_body, retry_visibility


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(**options: float) -> tuple[InProcessQueue, Clock]:
    clock = Clock()
    return InProcessQueue("q", clock=clock, **options), clock  # type: ignore[arg-type]


def test_a_delayed_message_is_invisible_until_its_delay_passes():
    queue, clock = make()
    queue.send("later", delay_seconds=5)
    queue.send("now")
    assert [m.body for m in queue.receive(10)] == ["now"]
    clock.now += 4.9
    assert queue.receive(10) == []
    clock.now += 0.2
    assert [m.body for m in queue.receive(10)] == ["later"]


class MovingClock(Clock):
    """A clock that moves on 5 ms each time it is read, as time passes while a big batch
    of bodies is built."""

    def __call__(self) -> float:
        self.now += 0.005
        return self.now


def test_a_rows_message_becomes_visible_at_its_due_time_however_long_the_send_took():
    clock = MovingClock()
    queues = InProcessQueues(clock=clock)  # type: ignore[arg-type]
    due = clock.now + 1.0
    due_at = datetime.fromtimestamp(due, UTC)
    # Given the messages of rows due in a second, sent while the clock moves on
    ids = [uuid4() for _ in range(3)]
    queues.send("log", [OutgoingMessage((i,), "log", due_at, due_at) for i in ids])
    queue = queues.queue("log")
    # Then none is visible a millisecond before the rows are due, and all are at it
    clock.now = due - 0.006  # the receive reads the clock once: due - 1 ms
    assert queue.receive(10) == []
    clock.now = due - 0.005
    assert [row.action_id for m in queue.receive(10) for row in decode_body(m.body) or []] == ids


def test_batches_are_bounded_and_come_in_visibility_order():
    queue, _ = make()
    for i in range(25):
        queue.send(f"m{i}")
    assert [m.body for m in queue.receive(10)] == [f"m{i}" for i in range(10)]
    assert len(queue.receive(10)) == 10
    assert len(queue.receive(10)) == 5


def test_messages_visible_when_sent_and_delayed_ones_come_out_in_visibility_order_together():
    queue, clock = make()
    # Given messages visible when sent (t=1000, 1001), one that fell due between them, and
    # one still delayed
    queue.send("early-delayed", delay_seconds=0.5)
    queue.send("later", delay_seconds=10)
    queue.send_visible_at([("sent-now", clock.now, "")])
    clock.now += 1
    queue.send_visible_at([("sent-later-due-before", 1000.2, ""), ("sent-later", clock.now, "")])
    assert queue.depth() == {"visible": 4, "delayed": 1, "in_flight": 0, "dead_letters": 0}
    assert len(queue) == 5
    # Then one receive gives the visible ones by the time they became visible, whichever
    # way they came, and not the delayed one
    assert [m.body for m in queue.receive(10)] == [
        "sent-now", "sent-later-due-before", "early-delayed", "sent-later",
    ]  # fmt: skip
    assert queue.depth() == {"visible": 0, "delayed": 1, "in_flight": 4, "dead_letters": 0}
    clock.now += 10
    assert [m.body for m in queue.receive(1)] == ["later"]


def test_a_received_message_reappears_after_the_visibility_timeout_unless_deleted():
    queue, clock = make(visibility_timeout=30)
    queue.send("a")
    queue.send("b")
    first = queue.receive(10)
    queue.delete([m.receipt_handle for m in first if m.body == "a"])
    clock.now += 29
    assert queue.receive(10) == []
    clock.now += 2
    [again] = queue.receive(10)
    assert (again.body, again.receive_count) == ("b", 2)


def test_redrive_moves_a_message_to_the_dead_letters_after_max_receives():
    queue, clock = make(visibility_timeout=1, max_receive_count=3)
    queue.send("poison")
    for expected_count in (1, 2, 3):
        [message] = queue.receive(1)
        assert message.receive_count == expected_count
        clock.now += 1.5
    assert queue.receive(1) == []
    assert [m.body for m in queue.dead_letters] == ["poison"]
    assert len(queue) == 0


def test_receive_waits_for_a_message_sent_meanwhile():

    queue = InProcessQueue("q")
    threading.Timer(0.1, lambda: queue.send("late")).start()
    started = time.monotonic()
    [message] = queue.receive(10, wait_seconds=2)
    assert message.body == "late"
    assert time.monotonic() - started < 1.0


def test_a_changed_visibility_brings_a_message_back_sooner():
    queue, clock = make(visibility_timeout=300)
    queue.send("a")
    [message] = queue.receive()
    assert queue.change_visibility(message.receipt_handle, 2)
    clock.now += 1
    assert queue.receive() == []
    clock.now += 1.5
    [again] = queue.receive()
    assert (again.message_id, again.receive_count) == (message.message_id, 2)
    assert len(queue) == 1
    queue.delete([again.receipt_handle])
    assert not queue.change_visibility(again.receipt_handle, 0)
    assert len(queue) == 0


@pytest.mark.parametrize(("count", "seconds"), [(1, 5), (2, 10), (4, 40), (9, 300), (500, 300)])
def test_retry_visibility_doubles_per_receive_up_to_its_cap(count, seconds):
    assert retry_visibility(count, 5, 300) == seconds


def bodies(messages: list[Message]) -> list[str]:
    return [m.body for m in messages]


def test_a_quiet_groups_message_is_received_ahead_of_a_noisy_groups_backlog():
    queue, clock = make()
    # Given a workspace's backlog of 50 visible messages, then another's one message
    queue.send_visible_at([(f"noisy-{i}", clock.now, "noisy") for i in range(50)])
    clock.now += 1
    queue.send("quiet-0", group="quiet")
    # Then the next receive takes the quiet one among its first two, not after fifty
    first = queue.receive(2)
    assert bodies(first) == ["noisy-0", "quiet-0"]
    # And the noisy backlog follows in its own order, nothing lost or repeated
    rest = [m for _ in range(6) for m in queue.receive(10)]
    assert bodies(rest) == [f"noisy-{i}" for i in range(1, 50)]
    assert queue.depth() == {"visible": 0, "delayed": 0, "in_flight": 51, "dead_letters": 0}


def test_groups_take_turns_each_in_visibility_order_whichever_way_they_came():
    queue, clock = make()
    # Given three groups' messages: sent visible, delayed and falling due, in any order
    queue.send("b-late", delay_seconds=0.5, group="b")
    queue.send_visible_at([("a-1", clock.now, "a"), ("a-2", clock.now, "a"),
                           ("b-1", clock.now, "b"), ("a-3", clock.now, "a")])  # fmt: skip
    queue.send("c-1", delay_seconds=0.2, group="c")
    clock.now += 1
    # Then one receive takes one message of each group in turn, a group's own in order
    assert bodies(queue.receive(10)) == ["a-1", "b-1", "c-1", "a-2", "b-late", "a-3"]


def test_a_message_hidden_again_while_waiting_its_turn_comes_back_once_when_visible():
    queue, clock = make(visibility_timeout=5)
    queue.send("x", group="a")
    queue.send("y", group="b")
    [x] = queue.receive(1)
    clock.now += 6  # x's visibility ran out: it waits for its turn again
    assert queue.depth()["visible"] == 2
    queue.receive(0)  # a receive of nothing still lines x up
    # When the dispatcher that still holds x's handle hides it for 10 s
    assert queue.change_visibility(x.receipt_handle, 10)
    # Then x is not received while hidden, and comes back once, when visible
    [y] = queue.receive(10)
    assert y.body == "y"
    queue.delete([y.receipt_handle])
    clock.now += 11
    [again] = queue.receive(10)
    assert (again.body, again.receive_count) == ("x", 2)
    clock.now += 1
    assert queue.receive(10) == []
