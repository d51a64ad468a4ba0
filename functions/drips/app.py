"""Every minute: move drip enrollments on to their next step."""

from tickwork.lambdas.drips import handler

__all__ = ["handler"]
