"""Every minute: recover zombies, expire stale rows, hand due rows to their queues."""

from tickwork.lambdas.tick import handler

__all__ = ["handler"]
