"""The routes anyone may call without a token: console files, unsubscribe links, callbacks."""

from tickwork.lambdas.public import handler

__all__ = ["handler"]
