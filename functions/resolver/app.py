"""Every minute: settle rows failed ambiguous or stuck with their provider's lookup."""

from tickwork.lambdas.resolver import handler

__all__ = ["handler"]
