"""The local runtime: Tickwork whole in one process, through the same handlers Lambda runs.

- the tick, reconciler, drip advance, stats rollup and resolver (every minute) and expander
  (hourly) handlers on timers, as EventBridge rules run them;
- one in-process queue per action type, with delay, visibility timeout and redrive;
- dispatcher workers that receive batches and call the dispatcher handler with
  Lambda-shaped SQS events, deleting what it did not report as failed;
- the HTTP API, behind a local server that verifies JWTs as API Gateway's authorizer does;
- a webhook receiver that prints each delivery as it arrives;
- a provider sandbox standing in for Postmark, Twilio, Slack, Mastodon and Bluesky, which
  prints each email, SMS, message and post as it arrives.
"""

from __future__ import annotations

import base64
import errno
import functools
import gc
import hashlib
import json
import logging
import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.queues import SimpleQueue
from typing import Any, TypeVar

from tickwork import runtime
from tickwork.api import public
from tickwork.connections.secrets import MemorySecretStore, SecretStore
from tickwork.engine import tick
from tickwork.local import handlers, paths
from tickwork.local.api_server import ApiServer
from tickwork.local.auth import LocalJwt, unsubscribe_key
from tickwork.local.errors import PortInUseError
from tickwork.local.handlers import quiet_powertools
from tickwork.local.receiver import ReceivedWebhook, WebhookReceiver
from tickwork.local.sandbox import Arrival, ProviderSandbox, sandbox_action_types
from tickwork.local.tick_process import TickProcessSpec, run_ticks
from tickwork.platform import migrate
from tickwork.platform.archive import FolderArchiveStore
from tickwork.platform.config import (
    DEFAULT_ACTION_TYPES,
    EVENT_ACTION_TYPE,
    EVENT_TYPE_CONFIG,
    ActionTypeConfig,
    Settings,
    check_unsubscribe_key,
)
from tickwork.platform.db import Database, SessionLimits, connect, local_api_login
from tickwork.platform.queues.memory import InProcessQueue, InProcessQueues, Message
from tickwork.platform.queues.shared import QueueHost, QueueService
from tickwork.providers import ProviderRegistry

log = logging.getLogger("tickwork.local")

# A fixed key, so a receiver in another process can verify what the dev runtime signs.
DEV_WEBHOOK_SECRET = (
    "whsec_" + base64.b64encode(hashlib.sha256(b"tickwork local development").digest()).decode()
)

# Routes of the local API server that only `tickwork dev` has (its in-process queues).
LOCAL_ADMIN_PREFIX = "/local/"
JSON = {"Content-Type": "application/json"}
T = TypeVar("T")

DISPATCHER_TIMEOUT_SECONDS = 60.0
TICK_TIMEOUT_SECONDS = 60.0
EXPANDER_TIMEOUT_SECONDS = 300.0
RECONCILER_TIMEOUT_SECONDS = 60.0
RESOLVER_TIMEOUT_SECONDS = 60.0
DRIPS_TIMEOUT_SECONDS = 60.0
ROLLUP_TIMEOUT_SECONDS = 60.0
RETENTION_TIMEOUT_SECONDS = 300.0
CRONS = ("tick", "expander", "reconciler", "drips", "rollup", "resolver", "retention")

# A burst makes and drops a handful of objects per row by the hundred thousand (messages,
# events, claimed rows, outcomes). At the collector's default (a pass every 700 allocations
# and frequent older passes over every live object) collection was a third of the
# runtime's CPU in `make bench`. Rarer passes; reference counting still frees at once
# everything that is not a cycle.
GC_THRESHOLDS = (100_000, 50, 100)


def dev_action_types(
    receiver_url: str, sandbox_url: str | None = None
) -> dict[str, ActionTypeConfig]:
    sandboxed = {
        name: ActionTypeConfig.model_validate(spec)
        for name, spec in sandbox_action_types(sandbox_url).items()
    } if sandbox_url else {}  # fmt: skip
    return sandboxed | {
        # Outcome events to a workspace's endpoints: the engine's own type, its own queue.
        EVENT_ACTION_TYPE: EVENT_TYPE_CONFIG,
        "webhook": ActionTypeConfig(
            provider="webhook",
            targets=frozenset({"primary"}),
            options={"endpoints": {"primary": {"url": receiver_url, "secret": DEV_WEBHOOK_SECRET}}},
        ),
        "log": ActionTypeConfig(provider="log", options={"echo": True}),
        # Social posts, printed instead of posted: for trying schedule intents locally.
        "publish_post": ActionTypeConfig(
            provider="log",
            targets=frozenset({"instagram", "facebook", "linkedin"}),
            options={"echo": True},
        ),
    }


def bind_port(what: str, flag: str, port: int, make: Callable[[], T]) -> T:
    """`make()`, which binds `port`; a busy port is named with the flag that changes it."""
    try:
        return make()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise PortInUseError(
            f"port {port} for {what} is already in use (is another `tickwork dev` running?);"
            f" stop what holds it, or choose another port with {flag} PORT",
            details={"port": port, "flag": flag},
        ) from exc


def check_ports(ports: Sequence[tuple[str, str, int]]) -> None:
    """PortInUseError for the first (what, flag, port) whose port is taken, before anything
    is made or started (a port of 0, any free one, is not checked)."""
    for what, flag, port in ports:
        if port:
            bind_port(what, flag, port, functools.partial(_probe, port))


def _probe(port: int) -> None:
    """Bind `port` on loopback as the local servers do (address reuse on), then let go."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


def sqs_record(
    message: Message, queue: InProcessQueue, received_at: float | None = None
) -> dict[str, Any]:
    """A Lambda SQS event record for an in-process message (`received_at`: when its batch
    was received, time.time())."""
    received_ms = str(int((time.time() if received_at is None else received_at) * 1000))
    return {
        "messageId": message.message_id,
        "receiptHandle": message.receipt_handle,
        "body": message.body,
        "attributes": {
            "ApproximateReceiveCount": str(message.receive_count),
            "SentTimestamp": str(int(message.sent_at * 1000)),
            "SenderId": "tickwork-local",
            "ApproximateFirstReceiveTimestamp": received_ms,
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(message.body.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:local:000000000000:tickwork-{queue.name}",
        "awsRegion": "local",
    }


class LocalRuntime:
    def __init__(
        self,
        database_url: str,
        settings: Settings,
        *,
        tick_interval: float = 60.0,
        expander_interval: float = 3600.0,
        reconciler_interval: float = 60.0,
        resolver_interval: float = 60.0,
        drips_interval: float = 60.0,
        rollup_interval: float = 60.0,
        retention_interval: float = 900.0,
        batch_size: int = 10,
        workers_per_type: int = 2,
        visibility_timeout: float = 6 * DISPATCHER_TIMEOUT_SECONDS,
        max_receive_count: int = 5,
        receiver_port: int = 0,
        api_port: int = 0,
        sandbox_port: int = 0,
        jwt: LocalJwt | None = None,
        on_delivery: Callable[[ReceivedWebhook], None] | None = None,
        on_arrival: Callable[[Arrival], None] | None = None,
        secrets: SecretStore | None = None,
        tick_process: bool = False,
    ) -> None:
        self.database_url = database_url
        # The tick in a process of its own (local/tick_process.py): both cores on a burst.
        self.tick_process = tick_process
        self.tick_interval = tick_interval
        self.expander_interval = expander_interval
        self.reconciler_interval = reconciler_interval
        self.resolver_interval = resolver_interval
        self.drips_interval = drips_interval
        self.rollup_interval = rollup_interval
        self.retention_interval = retention_interval
        self.batch_size = batch_size
        self.workers_per_type = workers_per_type
        self.receiver = bind_port(
            "the webhook receiver", "--receiver-port", receiver_port,
            lambda: WebhookReceiver(DEV_WEBHOOK_SECRET, port=receiver_port,
                                    on_delivery=on_delivery),
        )  # fmt: skip
        try:
            self.sandbox = bind_port(
                "the provider sandbox", "--sandbox-port", sandbox_port,
                lambda: ProviderSandbox(port=sandbox_port, on_arrival=on_arrival),
            )  # fmt: skip
        except PortInUseError:
            self.receiver.server.server_close()
            raise
        # Action types nobody configured (neither TICKWORK_ACTION_TYPES nor the caller's
        # settings) are the local stand-ins: the receiver, the sandbox, printed posts.
        configured = settings.action_types != DEFAULT_ACTION_TYPES
        if not (os.environ.get("TICKWORK_ACTION_TYPES") or configured):
            settings = settings.model_copy(
                update={"action_types": dev_action_types(self.receiver.url, self.sandbox.url)}
            )
        # The receiver and the sandbox listen on loopback, which calls may not reach
        # unless allow-listed.
        settings = settings.model_copy(update={
            "outbound_allowed_networks": settings.outbound_allowed_networks | {"127.0.0.1/32"}
        })  # fmt: skip
        self.settings = settings
        self.queues = InProcessQueues(
            visibility_timeout=visibility_timeout, max_receive_count=max_receive_count
        )
        self.runtime = runtime.Runtime(
            settings=settings,
            db=Database(database_url, SessionLimits.of(settings)),
            queues=self.queues,
            providers=ProviderRegistry(settings),
            secrets=secrets or MemorySecretStore(),
            # The stack's bucket or a folder when configured, else one in the data directory.
            archive=runtime.archive_of(settings)
            or FolderArchiveStore(paths.archive_dir(paths.data_dir())),
        )
        self.jwt = jwt or LocalJwt()
        try:
            self.api = bind_port(
                "the HTTP API", "--api-port", api_port,
                lambda: ApiServer(self._serve_api, self.jwt, port=api_port),
            )  # fmt: skip
        except PortInUseError:
            self.receiver.server.server_close()
            self.sandbox.server.server_close()
            raise
        # Unsubscribe links point at this server unless the caller named a public URL, and
        # are signed with the key kept in the data directory unless one was given.
        self.settings = self.runtime.settings = settings.model_copy(update={
            "public_api_url": settings.public_api_url or self.api.url,
            "unsubscribe_key": check_unsubscribe_key(settings.unsubscribe_key or unsubscribe_key()),
        })  # fmt: skip
        self._stop = threading.Event()
        self._wake = {name: threading.Event() for name in CRONS}
        self._threads: list[threading.Thread] = []
        self._tick_child: TickChild | None = None
        self._gc_thresholds = gc.get_threshold()
        # What each cron run returned, for tests and the benchmark.
        self.ticks: list[dict[str, Any]] = []
        self.expansions: list[dict[str, Any]] = []
        self.reconciliations: list[dict[str, Any]] = []
        self.resolutions: list[dict[str, Any]] = []
        self.drip_advances: list[dict[str, Any]] = []
        self.rollups: list[dict[str, Any]] = []
        self.retentions: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LocalRuntime:
        quiet_powertools()
        self._gc_thresholds = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLDS)
        migrate.migrate(self.database_url)
        # The API logs in as its own role, as in AWS (row-level security it cannot leave).
        self.runtime.api_db = Database(
            local_api_login(self.database_url), SessionLimits.of(self.runtime.settings)
        )
        # Load the handlers before anything runs, as a warm Lambda would have them.
        for name in ("api", "dispatcher", *CRONS):
            handlers.load(name)
        runtime.install(self.runtime)
        # The in-process queue starts empty: rows a previous run had enqueued are released
        # now, not after the redelivery timeout.
        with connect(self.database_url) as conn:
            released = tick.release_enqueued(conn, self.settings)
        if released:
            log.warning("released %d rows enqueued by a previous run", released)
        self.receiver.start()
        self.sandbox.start()
        self.api.start()
        if self.tick_process:
            self._tick_child = TickChild(self).start()
        else:
            self._spawn("tick", self._cron, "tick", self.tick_interval, TICK_TIMEOUT_SECONDS,
                        self.ticks)  # fmt: skip
        self._spawn("expander", self._cron, "expander", self.expander_interval,
                    EXPANDER_TIMEOUT_SECONDS, self.expansions)  # fmt: skip
        self._spawn("reconciler", self._cron, "reconciler", self.reconciler_interval,
                    RECONCILER_TIMEOUT_SECONDS, self.reconciliations)  # fmt: skip
        self._spawn("resolver", self._cron, "resolver", self.resolver_interval,
                    RESOLVER_TIMEOUT_SECONDS, self.resolutions)  # fmt: skip
        self._spawn("drips", self._cron, "drips", self.drips_interval,
                    DRIPS_TIMEOUT_SECONDS, self.drip_advances)  # fmt: skip
        self._spawn("rollup", self._cron, "rollup", self.rollup_interval,
                    ROLLUP_TIMEOUT_SECONDS, self.rollups)  # fmt: skip
        self._spawn("retention", self._cron, "retention", self.retention_interval,
                    RETENTION_TIMEOUT_SECONDS, self.retentions)  # fmt: skip
        for action_type in self.settings.action_types:
            for worker in range(self.workers_per_type):
                self._spawn(f"dispatch-{action_type}-{worker}", self._poll, action_type)
        return self

    @property
    def tick_pid(self) -> int | None:
        """The tick process's pid, when the tick runs in one."""
        return self._tick_child.process.pid if self._tick_child is not None else None

    def trigger_tick(self) -> None:
        """Run the tick now, as if its EventBridge rule fired (after the run in progress,
        if one is)."""
        if self._tick_child is not None:
            self._tick_child.wake.set()
        else:
            self._wake["tick"].set()

    def stop(self) -> None:
        self._stop.set()
        for wake in self._wake.values():
            wake.set()
        if self._tick_child is not None:
            self._tick_child.stop()
            self._tick_child = None
        for thread in self._threads:
            thread.join(timeout=DISPATCHER_TIMEOUT_SECONDS)
        self.receiver.stop()
        self.sandbox.stop()
        self.api.stop()
        runtime.install(None)
        gc.set_threshold(*self._gc_thresholds)
        self.runtime.db.close()
        if self.runtime.api_db is not None:
            self.runtime.api_db.close()

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve_api(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """The API handler, and under /local/ what only this process knows: its in-process
        queues (for `tickwork status` and `tickwork redrive`). The server checked the token."""
        path = str(event.get("rawPath", ""))
        if public.is_public(path):
            # As API Gateway routes them in AWS: the routes without a token to their own Lambda.
            return handlers.load("public")(event, context)
        if not path.startswith(LOCAL_ADMIN_PREFIX):
            return handlers.load("api")(event, context)
        method = event["requestContext"]["http"]["method"]
        only = (event.get("queryStringParameters") or {}).get("type")
        queues = {
            name: self.queues.queue(name)
            for name in self.settings.action_types
            if only is None or name == only
        }
        if method == "GET" and path == LOCAL_ADMIN_PREFIX + "queues":
            body: dict[str, Any] = {name: q.depth() for name, q in queues.items()}
        elif method == "POST" and path == LOCAL_ADMIN_PREFIX + "redrive":
            body = {"moved": {name: q.redrive() for name, q in queues.items()}}
        else:
            body = {"error": {"code": "not_found", "message": f"no route {method} {path}",
                              "details": {}}}  # fmt: skip
            return {"statusCode": 404, "headers": JSON, "body": json.dumps(body)}
        return {"statusCode": 200, "headers": JSON, "body": json.dumps(body)}

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -------------------------------------------------------------------- workers
    def _cron(
        self, name: str, interval: float, timeout: float, results: list[dict[str, Any]]
    ) -> None:
        """Run a scheduled handler now and then every `interval`, as EventBridge would."""
        handler = handlers.load(name)
        while not self._stop.is_set():
            try:
                results.append(
                    handler({"source": "aws.events"}, handlers.LocalContext(name, timeout))
                )
            except Exception:
                log.exception("%s failed", name)
            self._wake[name].wait(interval)
            self._wake[name].clear()

    def _poll(self, action_type: str) -> None:
        handler = handlers.load("dispatcher")
        queue = self.queues.queue(action_type)
        while not self._stop.is_set():
            messages = queue.receive(self.batch_size, wait_seconds=0.2)
            if not messages:
                continue
            received_at = time.time()
            event = {"Records": [sqs_record(m, queue, received_at) for m in messages]}
            context = handlers.LocalContext("dispatcher", DISPATCHER_TIMEOUT_SECONDS)
            try:
                response = handler(event, context)
                failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
            except Exception:
                # Lambda would retry the whole batch after the visibility timeout.
                log.exception("dispatcher failed")
                failed = {message.message_id for message in messages}
            queue.delete([m.receipt_handle for m in messages if m.message_id not in failed])


class TickChild:
    """The tick's process (tick_process.run_ticks), sending through a QueueHost of the
    runtime's queues; its summaries are appended to the runtime's `ticks`."""

    def __init__(self, local: LocalRuntime) -> None:

        context = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self.host = QueueHost(QueueService(local.queues)).start()
        self.stop_event = context.Event()
        self.wake = context.Event()
        self.results: SimpleQueue[dict[str, Any] | None] = context.SimpleQueue()
        spec = TickProcessSpec(
            database_url=local.database_url,
            settings_json=local.settings.model_dump_json(),
            queue_address=self.host.address,
            queue_authkey=self.host.authkey,
            interval=local.tick_interval,
            timeout=TICK_TIMEOUT_SECONDS,
            gc_thresholds=GC_THRESHOLDS,
        )
        self.process = context.Process(
            target=run_ticks, args=(spec, self.stop_event, self.wake, self.results),
            name="tickwork-tick", daemon=True,
        )  # fmt: skip
        self.collector = threading.Thread(
            target=self._collect, args=(local.ticks,), name="tick-results", daemon=True
        )

    def start(self) -> TickChild:
        self.process.start()
        self.collector.start()
        return self

    def _collect(self, ticks: list[dict[str, Any]]) -> None:
        while (summary := self.results.get()) is not None:
            ticks.append(summary)

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        self.process.join(timeout=TICK_TIMEOUT_SECONDS)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        if self.collector.is_alive():
            self.results.put(None)  # the child died before saying it stopped
        self.collector.join(timeout=5)
        self.host.close()
