"""The local runtime's tick in a process of its own, so that on a burst its marking and
sending run on the other core instead of waiting for the dispatchers' turn at the
interpreter (one process runs one thread of Python at a time). It calls the same Lambda
handler, every `interval` seconds or when woken, and sends through the runtime's queues
(QueueHost): the queue and its SQS semantics stay in the runtime's process."""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.queues import SimpleQueue
from typing import Any

from tickwork import runtime
from tickwork.connections.secrets import MemorySecretStore
from tickwork.local import handlers
from tickwork.local.handlers import quiet_powertools
from tickwork.platform.config import Settings
from tickwork.platform.db import Database, SessionLimits
from tickwork.platform.queues.shared import QueueConnection, RemoteQueues
from tickwork.providers import ProviderRegistry

log = logging.getLogger("tickwork.local")


@dataclass(frozen=True)
class TickProcessSpec:
    database_url: str
    settings_json: str  # Settings as JSON (what crosses a process boundary intact)
    queue_address: tuple[str, int]
    queue_authkey: bytes
    interval: float
    timeout: float
    gc_thresholds: tuple[int, int, int]


PARENT_CHECK_SECONDS = 1.0


def wait_for_next(wake: multiprocessing.synchronize.Event, interval: float, parent: Any) -> None:
    """Until `wake` is set or `interval` has passed; sooner when the runtime's process is
    gone (killed: nothing would stop this one, and its queue is gone with it)."""
    deadline = time.monotonic() + interval
    while (remaining := deadline - time.monotonic()) > 0:
        if wake.wait(min(remaining, PARENT_CHECK_SECONDS)):
            return
        if parent is not None and not parent.is_alive():
            return


def run_ticks(
    spec: TickProcessSpec,
    stop: multiprocessing.synchronize.Event,
    wake: multiprocessing.synchronize.Event,
    results: SimpleQueue[dict[str, Any] | None],
) -> None:
    """The child's loop: a tick now, then one every `interval` or when `wake` is set; each
    summary goes to `results`, and None when it stops."""

    # Its sessions name it in pg_stat_activity (libpq reads PGAPPNAME).
    os.environ.setdefault("PGAPPNAME", "tickwork-tick")
    # Ctrl-C reaches the whole process group; the runtime stops this process itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_powertools()
    gc.set_threshold(*spec.gc_thresholds)
    settings = Settings.model_validate_json(spec.settings_json)
    queues = QueueConnection(spec.queue_address, spec.queue_authkey)
    db = Database(spec.database_url, SessionLimits.of(settings))
    # The tick reads no secrets and calls no provider.
    runtime.install(runtime.Runtime(
        settings=settings, db=db, queues=RemoteQueues(queues),
        providers=ProviderRegistry(settings), secrets=MemorySecretStore(),
    ))  # fmt: skip
    handler = handlers.load("tick")
    parent = multiprocessing.parent_process()
    try:
        while not stop.is_set() and (parent is None or parent.is_alive()):
            try:
                results.put(
                    handler({"source": "aws.events"}, handlers.LocalContext("tick", spec.timeout))
                )
            except Exception:
                log.exception("tick failed")
            wait_for_next(wake, spec.interval, parent)
            wake.clear()
    finally:
        with contextlib.suppress(OSError):  # the runtime's process may be gone
            results.put(None)
        db.close()
        queues.close()
