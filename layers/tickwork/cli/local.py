"""`tickwork dev`, `demo`, `console` and `token`: the local runtime, its demo, a signed-in
link to its console, and tokens for its API."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading

import httpx

from tickwork import workspaces
from tickwork.cli.common import DEFAULT_USER, Command, data_root, database_url, jwt, say
from tickwork.local.errors import LocalServerError
from tickwork.local.paths import START_HINT, DevServer, require_dev, running_dev
from tickwork.platform import migrate as migrations
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.platform.sql import query

DEFAULT_API_PORT = 8788
DEFAULT_RECEIVER_PORT = 8787
DEFAULT_SANDBOX_PORT = 8789


def cmd_dev(args: argparse.Namespace) -> int:
    # Lazy: the local runtime (API, providers, uvicorn) loads only for the commands that run
    # it, so `tickwork --help` and the ops commands start in a third of the time.
    from tickwork.connections.secrets import FileSecretStore  # noqa: PLC0415
    from tickwork.local import sandbox  # noqa: PLC0415
    from tickwork.local.demo import (  # noqa: PLC0415
        console_link,
        demo_client,
        seed_console_demo,
        seed_demo,
        seed_provider_demo,
    )
    from tickwork.local.logs import FORMAT_VAR  # noqa: PLC0415
    from tickwork.local.receiver import describe  # noqa: PLC0415
    from tickwork.local.runner import LocalRuntime, check_ports  # noqa: PLC0415

    root = data_root(args)
    other = running_dev(root)
    if other is not None:
        raise LocalServerError(
            f"`tickwork dev` is already running for {root} (pid {other.pid}, API at"
            f" {other.api_url}); stop it first (Ctrl-C in its terminal), or give this one"
            " another --data-dir"
        )
    # Before a database is made or started: a port another `tickwork dev` holds is named
    # with the flag that changes it.
    check_ports([
        ("the HTTP API", "--api-port", args.api_port),
        ("the webhook receiver", "--receiver-port", args.receiver_port),
        ("the provider sandbox", "--sandbox-port", args.sandbox_port),
    ])  # fmt: skip
    url = database_url(args, prefer_dev=False)
    settings = Settings.from_env()
    # The engine's warnings as a line each, beside the deliveries (local/logs.py).
    os.environ.setdefault(FORMAT_VAR, "text")
    say("migrating the schema and starting the engine...")
    local = LocalRuntime(
        url,
        settings,
        tick_interval=args.tick_interval or settings.tick_interval_seconds,
        workers_per_type=args.workers,
        batch_size=args.batch_size,
        receiver_port=args.receiver_port,
        api_port=args.api_port,
        sandbox_port=args.sandbox_port,
        jwt=jwt(args),
        on_delivery=lambda delivery: print(describe(delivery), flush=True),
        on_arrival=lambda arrival: print(sandbox.describe(arrival), flush=True),
        # Connections' credentials, kept in the data directory (readable by its owner only).
        secrets=FileSecretStore(root / "secrets.json"),
        # Both cores on a burst: the tick marks and sends while the dispatchers work.
        tick_process=True,
    )
    local.start()
    DevServer(
        pid=os.getpid(),
        api_url=local.api.url,
        receiver_url=local.receiver.url,
        database_url=url,
        dispatch_enabled=local.settings.dispatch_enabled,
        paused_action_types=sorted(local.settings.paused_action_types),
        sandbox_url=local.sandbox.url,
    ).write(root)
    try:
        print(
            f"tickwork is running: API at {local.api.url}/v1 (docs: {local.api.url}/v1/openapi"
            f".json), tick every {local.tick_interval:g} s (look-ahead"
            f" {local.settings.lookahead_seconds} s), {args.workers} dispatcher(s) per action"
            f" type, webhook receiver at {local.receiver.url}, provider sandbox at"
            f" {local.sandbox.url}, data in {root}"
        )
        print(
            "each delivery prints a line: times in UTC; 'late by' is the arrival at the"
            " receiver minus the action's publish_at; then the payload, in short"
        )
        if args.demo:
            client = demo_client(local.runtime.db.connection(), local.api.url, local.jwt)
            plan = seed_demo(client, count=4, first=2, last=8, move_by=3)
            print(
                f"scheduled {len(plan.ids) - 1} demo webhooks through the API (one cancelled,"
                " one rescheduled); they arrive below. `make demo` in another terminal"
                " schedules more."
            )
            seed_provider_demo(client, local.sandbox.url)
            print(
                "scheduled an email, an SMS, a Slack message and a Mastodon post through the"
                " Demo workspace's connections; the provider sandbox at"
                f" {local.sandbox.url} prints them as they arrive."
            )
            seed_console_demo(client)
        link = console_link(local.runtime.db.connection(), local.api.url, local.jwt)
        print(
            f"console (signed in as the Demo workspace's admin for an hour; `tickwork console`"
            f" prints a new link): {link}"
        )
        print("Ctrl-C stops.", flush=True)
        stopped = threading.Event()
        # Explicit handlers: a shell that starts us in the background ignores SIGINT for us.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stopped.set())
        with contextlib.suppress(KeyboardInterrupt):
            stopped.wait()
        print("\nstopping...", flush=True)
        local.stop()
    finally:
        DevServer.clear(root, os.getpid())
    print("stopped.", flush=True)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    # Lazy: the local runtime (API, providers, uvicorn) loads only for the commands that run
    # it, so `tickwork --help` and the ops commands start in a third of the time.
    from tickwork.local.demo import LEGEND, demo_client, seed_demo, watch  # noqa: PLC0415

    root = data_root(args)
    api_url = args.api_url or require_dev(root).api_url
    with connect(database_url(args)) as conn:
        client = demo_client(conn, api_url, jwt(args))
    try:
        plan = seed_demo(client, args.count, args.first, args.last)
    except httpx.TransportError:
        raise LocalServerError(f"no API answers at {api_url}; {START_HINT}") from None
    print(
        f"scheduled {args.count} webhooks due {args.first:g}-{args.last:g} s from now through"
        f" {api_url}; cancelled {len(plan.cancelled)}, rescheduled {len(plan.rescheduled)}."
        " Watching until they settle (they arrive in the `make dev` terminal)."
    )
    print(LEGEND)
    if watch(client, plan.ids, timeout=args.timeout):
        print("all settled.")
        return 0
    print("not all settled in time: is `make dev` running against the same database?")
    return 1


def cmd_token(args: argparse.Namespace) -> int:

    url = database_url(args)
    migrations.migrate(url)
    with connect(url) as conn:
        if args.create:
            workspace_id, created = workspaces.ensure(
                conn, args.workspace, timezone=args.timezone or "UTC"
            )
        else:
            row = conn.execute(query("find_workspace"), {"key": args.workspace}).fetchone()
            if row is None:
                say(f"no workspace {args.workspace!r}; add --create to make it")
                return 2
            workspace_id, created = row[0], False
        if not created and args.timezone:
            found = conn.execute(
                "select timezone from workspaces where id = %s", (workspace_id,)
            ).fetchone()
            if found and found[0] != args.timezone:
                say(
                    f"note: workspace {args.workspace!r} already exists with zone {found[0]};"
                    f" --timezone {args.timezone} was not applied (an admin changes it with"
                    " PATCH /v1/workspace)"
                )
        if args.create or args.admin:
            workspaces.add_member(
                conn, workspace_id, args.user, "admin" if args.admin else "member"
            )
    token = jwt(args).sign(args.user, ttl_seconds=int(args.hours * 3600))
    say(
        f"{'created ' if created else ''}workspace {workspace_id}; token for {args.user}, valid"
        f" {args.hours:g} h. Use: -H 'Authorization: Bearer <token>' -H 'X-Workspace-Id:"
        f" {workspace_id}'"
    )
    if args.export:
        print(f"export TOKEN={token} WS={workspace_id}")
    else:
        print(token)
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    from tickwork.local.demo import console_link  # noqa: PLC0415

    root = data_root(args)
    api_url = args.api_url or require_dev(root).api_url
    with connect(database_url(args)) as conn:
        print(console_link(conn, api_url, jwt(args), user=args.user, workspace=args.workspace))
    return 0


def positive_hours(value: str) -> float:
    try:
        hours = float(value)
    except ValueError:
        hours = 0.0
    if not 0 < hours <= 24 * 366:  # NaN is refused too: every comparison with it is false
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of hours above 0 (up to a year), e.g. 12 or 0.5"
        )
    return hours


def add_commands(command: Command) -> None:
    """dev, demo, console, token."""
    dev = command("dev", "run Tickwork locally, whole, in one process", cmd_dev)
    dev.add_argument(
        "--tick-interval", type=float, default=None,
        help="seconds between ticks (default: TICKWORK_TICK_INTERVAL_SECONDS, 60)",
    )  # fmt: skip
    dev.add_argument("--workers", type=int, default=2, help="dispatchers per action type")
    dev.add_argument("--batch-size", type=int, default=10, help="messages per dispatch")
    dev.add_argument(
        "--receiver-port",
        type=int,
        default=DEFAULT_RECEIVER_PORT,
        help="port of the local webhook receiver",
    )
    dev.add_argument(
        "--api-port", type=int, default=DEFAULT_API_PORT, help="port of the local HTTP API"
    )
    dev.add_argument(
        "--sandbox-port",
        type=int,
        default=DEFAULT_SANDBOX_PORT,
        help="port of the local provider sandbox (fixed, so the Demo workspace's Mastodon and"
        " Bluesky connections, which name it, work after a restart)",
    )
    dev.add_argument(
        "--no-demo",
        dest="demo",
        action="store_false",
        help="do not schedule the few demo webhooks at start",
    )

    demo = command("demo", "schedule demo webhooks and watch them settle", cmd_demo)
    demo.add_argument("--api-url", help="the API; default: the running `tickwork dev`'s")
    demo.add_argument("--count", type=int, default=12, help="how many webhooks to schedule")
    demo.add_argument("--first", type=float, default=5.0, help="seconds until the first is due")
    demo.add_argument("--last", type=float, default=40.0, help="seconds until the last is due")
    demo.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds to watch before giving up on them settling",
    )

    console = command("console", "print a link that opens the web console signed in", cmd_console)
    console.add_argument("--api-url", help="the API; default: the running `tickwork dev`'s")
    console.add_argument(
        "--workspace", default="Demo", help="workspace id or name (made if missing)"
    )
    console.add_argument("--user", default="demo-admin", help="who signs in (an admin there)")

    token = command("token", "print a JWT for the local API", cmd_token)
    token.add_argument("--workspace", required=True, help="workspace id or name")
    token.add_argument("--user", default=DEFAULT_USER, help="the token's subject")
    token.add_argument("--admin", action="store_true", help="make the user an admin")
    token.add_argument(
        "--create", action="store_true", help="create the workspace and the membership if missing"
    )
    token.add_argument(
        "--timezone",
        help="zone of a created workspace; default UTC (an existing workspace keeps its zone)",
    )
    token.add_argument(
        "--hours", type=positive_hours, default=12.0, help="how long the token is valid"
    )
    token.add_argument(
        "--export", action="store_true", help="print `export TOKEN=... WS=...` for eval in a shell"
    )
