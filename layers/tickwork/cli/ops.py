"""`tickwork migrate`, `status`, `redrive` and `reset`: what an operator runs on the engine
itself (the schema, what is happening, dead letters, local data)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from tickwork.cli.common import Command, data_root, database_url, jwt, say, workspace_id
from tickwork.cli.queues import LocalAdmin, QueueAdminError, SqsAdmin
from tickwork.cli.status import gather, render
from tickwork.local.embedded import EmbeddedPostgres
from tickwork.local.errors import LocalServerError
from tickwork.local.paths import dev_record_file, jwt_key_file, pgdata, require_dev, running_dev
from tickwork.platform import migrate as migrations
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.platform.errors import InputError
from tickwork.platform.wallclock import utcnow


def cmd_migrate(args: argparse.Namespace) -> int:
    applied = migrations.migrate(database_url(args))
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_status(args: argparse.Namespace) -> int:

    root = data_root(args)
    settings = Settings.from_env()
    dev = running_dev(root)
    if settings.queue_urls or dev is None:
        enabled, paused = settings.dispatch_enabled, sorted(settings.paused_action_types)
        source = "this shell's environment"
    else:
        enabled, paused = dev.dispatch_enabled, dev.paused_action_types
        source = f"the running tickwork dev, pid {dev.pid}"
    with connect(database_url(args)) as conn:
        workspace = workspace_id(conn, args.workspace) if args.workspace else None
        status = gather(
            conn,
            now=utcnow(),
            workspace_id=workspace,
            window_seconds=args.window,
            stuck_timeout_seconds=settings.stuck_timeout_seconds,
            dispatch_enabled=enabled,
            paused_action_types=paused,
            switches_from=source,
        )
    try:
        if settings.queue_urls:
            status.queues, status.queues_from = SqsAdmin(settings.queue_urls).depths(), "SQS"
        elif dev is not None:
            admin = LocalAdmin(dev.api_url, jwt(args).sign("tickwork-cli", ttl_seconds=300))
            status.queues = admin.depths()
            status.queues_from = f"in-process, tickwork dev pid {dev.pid}"
        else:
            status.notes.append(
                f"queues: no `tickwork dev` is running for {root}, so there are no in-process"
                " queues to show (in AWS set TICKWORK_QUEUE_URLS)"
            )
    except QueueAdminError as exc:
        status.notes.append(f"queues: {exc.message}")
    if dev is not None:
        status.dev = {"pid": dev.pid, "api_url": dev.api_url, "receiver_url": dev.receiver_url,
                      "sandbox_url": dev.sandbox_url or None, "data_dir": str(root)}  # fmt: skip
    if args.json:
        print(json.dumps(status.as_json(), indent=2))
    else:
        sys.stdout.write(render(status))
    return 0


def cmd_redrive(args: argparse.Namespace) -> int:

    settings = Settings.from_env()
    admin: SqsAdmin | LocalAdmin
    if settings.queue_urls:
        admin = SqsAdmin(settings.queue_urls)
        known = sorted(settings.queue_urls)
    else:
        dev = require_dev(data_root(args))
        admin = LocalAdmin(dev.api_url, jwt(args).sign("tickwork-cli", ttl_seconds=300))
        known = sorted(admin.depths())
    if args.type is not None and args.type not in known:
        raise InputError(
            f"--type {args.type}: no queue for that action type; the queues:"
            f" {', '.join(known) or 'none'}",
            field="type",
        )
    results = admin.redrive(args.type)
    if args.json:
        print(json.dumps([vars(r) for r in results], indent=2))
        return 0
    for r in results:
        how = {
            "move_task": f"SQS move task {r.task_handle}",
            "by_hand": "moved by hand",
            "in_process": "in-process queue",
            "none": "no dead letters",
        }[r.method]
        print(f"{r.action_type}: {r.moved} dead letter(s) back to the queue ({how})")
    if not results:
        print("no queue to redrive")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    root = data_root(args)
    dev = running_dev(root)
    if dev is not None:
        raise LocalServerError(
            f"`tickwork dev` (pid {dev.pid}) is using {root}; stop it first (Ctrl-C in its"
            " terminal)"
        )
    targets = [p for p in (pgdata(root), jwt_key_file(root), dev_record_file(root)) if p.exists()]
    if not targets:
        print(f"nothing to reset in {root}")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            say("tickwork reset deletes local data: run it in a terminal, or add --yes")
            return 2
        answer = input(
            f"This deletes Tickwork's local data in {root}: the embedded database (every"
            " workspace and action) and the local JWT key (tokens stop working). Type 'yes' to"
            " go on: "
        )
        if answer.strip().lower() != "yes":
            print("nothing deleted.")
            return 0
    data = pgdata(root)
    if (data / "postmaster.pid").exists():
        say("stopping the embedded Postgres...")
        EmbeddedPostgres(data).stop()
    for target in targets:
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    print(f"deleted {', '.join(t.name for t in targets)} in {root}.")
    if os.environ.get("DATABASE_URL"):
        print("DATABASE_URL is set: that database was not touched.")
    return 0


def add_migrate(command: Command) -> None:
    command("migrate", "apply pending database migrations", cmd_migrate)


def add_commands(command: Command, output: argparse.ArgumentParser) -> None:
    """status, redrive, reset (migrate is the first command: `add_migrate`)."""
    status = command(
        "status", "what is happening: backlog, lag, outcomes, queues", cmd_status, [output]
    )
    status.add_argument("--workspace", help="only this workspace (name or id); default: all")
    status.add_argument(
        "--window", type=int, default=3600, help="seconds of history for lag and outcomes"
    )

    redrive = command(
        "redrive",
        "move dead letters back to their queue (SQS in AWS, the"
        " running `tickwork dev`'s in-process queues locally)",
        cmd_redrive,
        [output],
    )
    redrive.add_argument("--type", help="only this action type's queue; default: every queue")

    reset = command(
        "reset", "delete local data (embedded database, JWT key); asks first", cmd_reset
    )
    reset.add_argument("--yes", action="store_true", help="do not ask")
