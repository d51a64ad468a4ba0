"""Every minute: keep scheduled_actions in step with schedule intents (the three gates)."""

from tickwork.lambdas.reconciler import handler

__all__ = ["handler"]
