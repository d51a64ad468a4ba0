"""The HTTP API behind API Gateway (JWT authorizer): schedule, cancel, reschedule, retry, ..."""

from tickwork.lambdas.api import handler

__all__ = ["handler"]
