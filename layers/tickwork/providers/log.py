"""The `log` provider: records each delivery in memory and in the log. For local use and the
benchmark, where the provider must cost nothing and its call times must be known."""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple
from uuid import UUID

from tickwork.actions.model import Claimed
from tickwork.platform.observability import logger
from tickwork.platform.text import clock, lateness
from tickwork.providers.base import Delivered, Outcome, Via


class Delivery(NamedTuple):
    """A tuple, not a dataclass: the benchmark's provider records one per row."""

    action_id: UUID
    called_at: float  # time.time() when send() was called
    due_at: float  # the row's due time, as a Unix timestamp


class LogProvider:
    idempotent = True
    io_bound = False

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.quiet = bool((options or {}).get("quiet", False))
        # The local runtime prints each delivery as a line, as its webhook receiver does.
        self.echo = bool((options or {}).get("echo", False))
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        called_at = time.time()
        # list.append is atomic: no lock on the path every benchmarked row takes.
        self.deliveries.append(Delivery(action.id, called_at, action.due_at.timestamp()))
        if self.echo:
            print(
                f"{clock(called_at)}  {action.action_type} {str(action.id)[:8]}"
                f"  {action.target_key}  thing={action.thing_id or '-'}  due"
                f" {clock(action.due_at)}  sent {lateness(called_at - action.due_at.timestamp())}",
                flush=True,
            )
        elif not self.quiet:
            logger.info(
                "delivered",
                extra={"action_id": str(action.id), "action_type": action.action_type,
                       "target_key": action.target_key},
            )  # fmt: skip
        return Delivered(provider_id=f"log-{action.id}")

    def reset(self) -> list[Delivery]:
        with self._lock:
            taken, self.deliveries = self.deliveries, []
        return taken
