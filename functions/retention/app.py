"""Every 15 minutes: archive, then remove, finished rows older than their retention."""

from tickwork.lambdas.retention import handler

__all__ = ["handler"]
