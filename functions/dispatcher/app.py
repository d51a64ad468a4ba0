"""Claims a batch of due rows from one action type's queue and calls their provider."""

from tickwork.lambdas.dispatcher import handler

__all__ = ["handler"]
