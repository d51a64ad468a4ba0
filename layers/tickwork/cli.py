"""The `tickwork` command: migrations, the local runtime and its demo."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Sequence

import httpx

from tickwork import migrate as migrations
from tickwork.errors import TickworkError
from tickwork.local.embedded import dev_database_url
from tickwork.sql import query


def _database_url(explicit: str | None) -> str:
    if explicit:
        return explicit
    url, server = dev_database_url()
    if server is not None:
        print(
            "using the embedded Postgres in .tickwork/pgdata (set DATABASE_URL to use your own)",
            file=sys.stderr,
        )
    return url


def cmd_migrate(args: argparse.Namespace) -> int:
    applied = migrations.migrate(_database_url(args.database_url))
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from tickwork.config import Settings
    from tickwork.connections.secrets import FileSecretStore
    from tickwork.local import sandbox
    from tickwork.local.demo import demo_client, seed_demo, seed_provider_demo
    from tickwork.local.embedded import DEV_DATA_DIR
    from tickwork.local.receiver import describe
    from tickwork.local.runner import LocalRuntime

    url = _database_url(args.database_url)
    local = LocalRuntime(
        url,
        Settings.from_env(),
        tick_interval=args.tick_interval,
        workers_per_type=args.workers,
        batch_size=args.batch_size,
        receiver_port=args.receiver_port,
        api_port=args.api_port,
        on_delivery=lambda delivery: print(describe(delivery), flush=True),
        on_arrival=lambda arrival: print(sandbox.describe(arrival), flush=True),
        # Connections' credentials, kept beside the embedded database's data.
        secrets=FileSecretStore(DEV_DATA_DIR.parent.resolve() / "secrets.json"),
    )
    local.start()
    print(
        f"tickwork is running: API at {local.api.url}/v1 (docs: {local.api.url}/v1/openapi.json),"
        f" tick every {args.tick_interval:g}s (look-ahead {local.settings.lookahead_seconds}s),"
        f" {args.workers} dispatcher(s) per action type, webhook receiver at {local.receiver.url}"
    )
    if args.demo:
        client = demo_client(local.runtime.db.connection(), local.api.url, local.jwt)
        plan = seed_demo(client, count=4, first=2, last=8, move_by=3)
        print(
            f"scheduled {len(plan.ids) - 1} demo webhooks through the API (one cancelled, one"
            " rescheduled); they arrive below. `make demo` in another terminal schedules more."
        )
        seed_provider_demo(client, local.sandbox.url)
        print(
            "scheduled an email, an SMS, a Slack message and a Mastodon post through the Demo"
            f" workspace's connections; the provider sandbox at {local.sandbox.url} prints"
            " them as they arrive."
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
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tickwork.db import connect
    from tickwork.local.auth import LocalJwt
    from tickwork.local.demo import demo_client, seed_demo, watch

    url = _database_url(args.database_url)
    with connect(url) as conn:
        client = demo_client(conn, args.api_url, LocalJwt())
    try:
        plan = seed_demo(client, args.count, args.first, args.last)
    except httpx.TransportError:
        print(f"no API at {args.api_url}: start `make dev` first (in another terminal)")
        return 1
    print(
        f"scheduled {args.count} webhooks due {args.first:g}-{args.last:g} s from now through"
        f" {args.api_url}; cancelled {len(plan.cancelled)}, rescheduled {len(plan.rescheduled)}."
        " Watching until they settle (they arrive in the `make dev` terminal)."
    )
    if watch(client, plan.ids, timeout=args.timeout):
        print("all settled.")
        return 0
    print("not all settled in time: is `make dev` running against the same database?")
    return 1


def cmd_token(args: argparse.Namespace) -> int:
    from tickwork import workspaces
    from tickwork.db import connect
    from tickwork.local.auth import LocalJwt

    url = _database_url(args.database_url)
    migrations.migrate(url)
    with connect(url) as conn:
        if args.create:
            workspace_id, created = workspaces.ensure(conn, args.workspace, timezone=args.timezone)
        else:
            row = conn.execute(query("find_workspace"), {"key": args.workspace}).fetchone()
            if row is None:
                print(f"no workspace {args.workspace!r}; add --create to make it", file=sys.stderr)
                return 2
            workspace_id, created = row[0], False
        if args.create or args.admin:
            workspaces.add_member(
                conn, workspace_id, args.user, "admin" if args.admin else "member"
            )
    token = LocalJwt().sign(args.user, ttl_seconds=int(args.hours * 3600))
    print(
        f"{'created ' if created else ''}workspace {workspace_id}; token for {args.user}."
        f" Use: -H 'Authorization: Bearer <token>' -H 'X-Workspace-Id: {workspace_id}'",
        file=sys.stderr,
    )
    if args.export:
        print(f"export TOKEN={token} WS={workspace_id}")
    else:
        print(token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tickwork", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    url_help = "default: DATABASE_URL, else the embedded Postgres in .tickwork/"

    migrate = commands.add_parser("migrate", help="apply pending database migrations")
    migrate.add_argument("--database-url", help=url_help)
    migrate.set_defaults(run=cmd_migrate)

    dev = commands.add_parser("dev", help="run Tickwork locally, whole, in one process")
    dev.add_argument("--database-url", help=url_help)
    dev.add_argument("--tick-interval", type=float, default=60.0, help="seconds (default 60)")
    dev.add_argument("--workers", type=int, default=2, help="dispatchers per action type")
    dev.add_argument("--batch-size", type=int, default=10, help="messages per dispatch")
    dev.add_argument("--receiver-port", type=int, default=8787, help="local webhook receiver")
    dev.add_argument("--api-port", type=int, default=8788, help="local HTTP API")
    dev.add_argument("--no-demo", dest="demo", action="store_false",
                     help="do not schedule the few demo webhooks at start")  # fmt: skip
    dev.set_defaults(run=cmd_dev)

    demo = commands.add_parser("demo", help="schedule demo webhooks and watch them settle")
    demo.add_argument("--database-url", help=url_help)
    demo.add_argument("--api-url", default="http://127.0.0.1:8788", help="the `make dev` API")
    demo.add_argument("--count", type=int, default=12)
    demo.add_argument("--first", type=float, default=5.0, help="seconds until the first is due")
    demo.add_argument("--last", type=float, default=40.0, help="seconds until the last is due")
    demo.add_argument("--timeout", type=float, default=90.0)
    demo.set_defaults(run=cmd_demo)

    token = commands.add_parser("token", help="print a JWT for the local API")
    token.add_argument("--workspace", required=True, help="workspace id or name")
    token.add_argument("--user", default="local-user", help="the token's subject")
    token.add_argument("--admin", action="store_true", help="make the user an admin")
    token.add_argument("--create", action="store_true",
                       help="create the workspace and the membership if missing")  # fmt: skip
    token.add_argument("--timezone", default="UTC", help="zone of a created workspace")
    token.add_argument("--hours", type=float, default=12.0, help="validity")
    token.add_argument("--export", action="store_true",
                       help="print `export TOKEN=... WS=...` for eval in a shell")  # fmt: skip
    token.add_argument("--database-url", help=url_help)
    token.set_defaults(run=cmd_token)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except TickworkError as exc:
        print(f"tickwork: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
