"""Every hour: materialize the occurrences of every active recurring schedule, 14 days ahead."""

from tickwork.lambdas.expander import handler

__all__ = ["handler"]
