"""Waiting in tests: on a condition, never for a guessed time.

A test that must see something happen polls for it with `wait_for`. A test that must see
something NOT happen first waits for proof that the system has gone past the point where it
would have happened (a queue emptied, a later tick's summary, a later message), then asserts
the absence: a bare sleep passes on a slow machine without proving anything, and costs its
whole length on a fast one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition not met",
) -> T:
    """Call `condition` until it returns something truthy, and return that.

    It is called at once, then every `interval` seconds (0: again at once, for a condition
    that blocks on its own, such as a queue receive) until `timeout` seconds have passed; it
    is always called at least once, and once more at the deadline. On timeout, raises
    AssertionError with `message` (a callable is called then, to show the state at the end).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"{said} (waited {timeout:g} s)")
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
