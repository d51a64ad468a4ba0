"""The tests' one way of waiting (tests/waiting.py)."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.waiting import wait_for


def test_it_returns_the_first_truthy_value_the_condition_gives():
    calls = itertools.count(1)
    assert wait_for(lambda: [n] if (n := next(calls)) >= 3 else [], interval=0) == [3]


def test_a_condition_already_met_is_not_waited_for():
    started = time.monotonic()
    assert wait_for(lambda: "ready", interval=5) == "ready"
    assert time.monotonic() - started < 1


def test_on_timeout_it_fails_with_the_message_and_the_state_at_the_end():
    seen: list[int] = []
    with pytest.raises(AssertionError, match=r"^\d+ tries, still nothing \(waited 0.2 s\)$"):
        wait_for(lambda: seen.append(1), timeout=0.2, interval=0.1,
                 message=lambda: f"{len(seen)} tries, still nothing")  # fmt: skip
    # called at once, and again at the deadline at least
    assert len(seen) >= 2
