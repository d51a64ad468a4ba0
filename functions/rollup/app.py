"""Every minute: add what has finished to the stats rollup /v1/stats reads."""

from tickwork.lambdas.rollup import handler

__all__ = ["handler"]
