"""The `tickwork` command: the local runtime, its demo and tokens, migrations, and what an
operator needs from a shell (status, actions, recurring schedules, rules, recipients,
connections, any API call, redrive, reset, a workspace's limits)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl, quote
from uuid import UUID

import httpx

from tickwork import __version__, quotas, workspaces
from tickwork.cli import tables
from tickwork.cli.queues import LocalAdmin, QueueAdminError, SqsAdmin
from tickwork.cli.status import gather, render
from tickwork.local.auth import LocalJwt
from tickwork.local.embedded import EmbeddedPostgres, dev_database_url
from tickwork.local.errors import LocalServerError
from tickwork.local.paths import (
    ENV_VAR,
    START_HINT,
    DevServer,
    data_dir,
    default_data_dir,
    dev_record_file,
    jwt_key_file,
    pgdata,
    require_dev,
    running_dev,
)
from tickwork.platform import migrate as migrations
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.platform.errors import InputError, NotFoundError, TickworkError
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow
from tickwork.quotas import MAX_LIMIT, QUOTA_NAMES
from tickwork.suppression.model import REASONS

DEFAULT_API_PORT = 8788
DEFAULT_RECEIVER_PORT = 8787
DEFAULT_SANDBOX_PORT = 8789
DEFAULT_USER = "local-user"


def say(message: str) -> None:
    """Progress and notes go to stderr, so stdout stays for what scripts read."""
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ where things are


def _root(args: argparse.Namespace) -> Path:
    return data_dir(getattr(args, "data_dir", None))


def _embedded_url(root: Path) -> str:

    data = pgdata(root)
    if not (data / "PG_VERSION").exists():
        say(f"initializing a new embedded Postgres in {data} (first start only, ~10-20 s)...")
    elif not (data / "postmaster.pid").exists():
        say(f"starting the embedded Postgres in {data}...")
    url, _ = dev_database_url(root)
    say(f"using the embedded Postgres in {data} (--database-url or DATABASE_URL for your own)")
    return url


def _database_url(args: argparse.Namespace, *, prefer_dev: bool = True) -> str:
    """--database-url, else DATABASE_URL, else the running `tickwork dev`'s database, else
    the embedded Postgres of the data directory."""
    if getattr(args, "database_url", None):
        return str(args.database_url)
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    root = _root(args)
    if prefer_dev:
        dev = running_dev(root)
        if dev is not None:
            return dev.database_url
    return _embedded_url(root)


def _jwt(args: argparse.Namespace) -> Any:

    return LocalJwt(jwt_key_file(_root(args)))


def _workspace_id(conn: Any, key: str | None) -> UUID:
    if not key:
        raise InputError(
            "name the workspace: --workspace NAME_OR_ID (or set TICKWORK_WORKSPACE)",
            field="workspace",
        )
    row = conn.execute(query("find_workspace"), {"key": key}).fetchone()
    if row is None:
        raise NotFoundError(
            f"no workspace {key!r} in this database; `tickwork token --workspace {key}"
            " --create --admin` makes it"
        )
    return UUID(str(row[0]))


# ------------------------------------------------------------------------ commands


def cmd_migrate(args: argparse.Namespace) -> int:
    applied = migrations.migrate(_database_url(args))
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


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

    root = _root(args)
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
    url = _database_url(args, prefer_dev=False)
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
        jwt=_jwt(args),
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

    root = _root(args)
    api_url = args.api_url or require_dev(root).api_url
    with connect(_database_url(args)) as conn:
        client = demo_client(conn, api_url, _jwt(args))
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

    url = _database_url(args)
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
    token = _jwt(args).sign(args.user, ttl_seconds=int(args.hours * 3600))
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

    root = _root(args)
    api_url = args.api_url or require_dev(root).api_url
    with connect(_database_url(args)) as conn:
        print(console_link(conn, api_url, _jwt(args), user=args.user, workspace=args.workspace))
    return 0


def cmd_status(args: argparse.Namespace) -> int:

    root = _root(args)
    settings = Settings.from_env()
    dev = running_dev(root)
    if settings.queue_urls or dev is None:
        enabled, paused = settings.dispatch_enabled, sorted(settings.paused_action_types)
        source = "this shell's environment"
    else:
        enabled, paused = dev.dispatch_enabled, dev.paused_action_types
        source = f"the running tickwork dev, pid {dev.pid}"
    with connect(_database_url(args)) as conn:
        workspace = _workspace_id(conn, args.workspace) if args.workspace else None
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
            admin = LocalAdmin(dev.api_url, _jwt(args).sign("tickwork-cli", ttl_seconds=300))
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
        dev = require_dev(_root(args))
        admin = LocalAdmin(dev.api_url, _jwt(args).sign("tickwork-cli", ttl_seconds=300))
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
    root = _root(args)
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


def cmd_workspace_limits(args: argparse.Namespace) -> int:

    settings = Settings.from_env()
    given = {name: value for name in QUOTA_NAMES if (value := getattr(args, name)) is not None}
    reset = list(QUOTA_NAMES) if "all" in (args.reset or []) else list(args.reset or [])
    with connect(_database_url(args)) as conn:
        workspace = _workspace_id(conn, args.workspace)
        if given or reset:
            limits = quotas.set_limits(conn, workspace, settings, given, reset)
        else:
            limits = quotas.workspace_limits(conn, workspace, settings)
    if args.json:
        body = {"workspace_id": str(workspace), "limits": limits.as_dict(),
                "overridden": sorted(limits.overridden)}  # fmt: skip
        print(json.dumps(body, indent=2))
        return 0
    print(f"limits of workspace {args.workspace} ({workspace}); 0: no limit")
    for name, value in limits.as_dict().items():
        source = "set for this workspace" if name in limits.overridden else "the stack's default"
        print(f"  {name:<25} {value:>10}  {source}")
    say(
        "the stack's defaults shown are this shell's TICKWORK_QUOTA_* (else the built-in"
        " ones); the API applies a change from its next request"
    )
    return 0


# ------------------------------------------------------------------------- actions

_IN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)\s*$")
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_in(value: str) -> timedelta:
    """`30s`, `2m`, `1h`, `1d` as a timedelta; a number without its unit is refused (is `5`
    seconds or minutes?)."""
    match = _IN.match(value)
    if not match:
        bare = re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", value)
        hint = f" (seconds? say {value.strip()}s; minutes: {value.strip()}m)" if bare else ""
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a duration with a unit, like 30s, 5m, 2h or 1d{hint}"
        )
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


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


# The API's names of what `actions schedule` sends, and the flags a person gave them with:
# a refusal reads in the terms of the command line.
SCHEDULE_FLAGS = {
    "connection_id": "--connection", "recipient_id": "--recipient", "action_type": "--type",
    "target_key": "--target", "thing_id": "--thing", "publish_at": "--at/--in",
    "transactional": "--transactional", "payload": "--payload", "date": "--date",
    "time": "--time", "timezone": "--timezone",
}  # fmt: skip


def in_flag_terms(message: str, flags: dict[str, str]) -> str:
    """`message` with the API's field names as the command's flags: snake_case names
    wherever they stand, plain words (date, time, payload) only as the field a message
    starts with (`time: ...`) or names in parentheses (`(time)`)."""
    for field, flag in flags.items():
        if "_" in field:
            message = re.sub(rf"(?<![\w-]){re.escape(field)}(?![\w-])", flag, message)
        else:
            message = re.sub(rf"^{re.escape(field)}(?=[:.])", flag, message)
            message = message.replace(f"({field})", f"({flag})")
    return message


def _caller(args: argparse.Namespace, *, workspace_required: bool = True) -> Any:
    """The API, and the id of the action named on the command line, for the commands that
    call the API (`tickwork actions`, `api`, `recurring`, ...)."""
    # Lazy: the API and the providers load only for the commands that call them.
    from tickwork import runtime  # noqa: PLC0415
    from tickwork.cli.client import HttpCaller, InProcessCaller  # noqa: PLC0415

    root = _root(args)
    settings = Settings.from_env()
    url = args.api_url or None
    dev = running_dev(root)
    if url is None and dev is not None:
        url = dev.api_url
    if url is None and not settings.queue_urls:
        require_dev(root)  # raises, saying how to start it
    workspace: UUID | None = None
    action_id = None
    if workspace_required or args.workspace:
        with connect(_database_url(args)) as conn:
            workspace = _workspace_id(conn, args.workspace)
            table = getattr(args, "id_table", "scheduled_actions")
            action_id = _resolve_id(conn, table, workspace, getattr(args, "id", None))
    named = str(workspace) if workspace is not None else None
    if url is not None:
        token = _jwt(args).sign(args.user, ttl_seconds=600)
        return HttpCaller(url, token, named), action_id

    configured = settings.model_copy(update={"database_url": _database_url(args)})
    runtime.install(runtime.from_settings(configured))
    return InProcessCaller(args.user, named), action_id


# The tables whose ids a command may give by their first characters.
ID_TABLES = {"scheduled_actions": "action", "recurring_schedules": "schedule", "rules": "rule"}


def _resolve_id(conn: Any, table: str, workspace: UUID, given: str | None) -> str | None:
    """A full id, or the one row of `table` in the workspace whose id starts with `given`
    (the 8 characters the tables show), through the primary key's range."""
    if given is None:
        return None
    with contextlib.suppress(ValueError):
        return str(UUID(given))
    digits = given.replace("-", "").lower()
    if not re.fullmatch(r"[0-9a-f]{4,31}", digits):
        return given  # the API answers it (not found, with its own message)
    low = UUID(digits.ljust(32, "0"))
    high = UUID(digits.ljust(32, "f"))
    what = ID_TABLES[table]  # a KeyError here is a bug: only these tables are named
    rows = conn.execute(
        f"select id from {table} where id between %s and %s and workspace_id = %s limit 2",
        (low, high, workspace),
    ).fetchall()
    if len(rows) == 1:
        return str(rows[0][0])
    if len(rows) > 1:
        raise InputError(f"more than one {what} id starts with {given!r}; give more of it")
    return given


def _print_error(answer: Any, args: argparse.Namespace, flags: dict[str, str] | None = None) -> int:
    """The API's refusal on stderr (its fields as the command's `flags`, if given); with
    --json, its answer as it is on stdout."""
    error = answer.error
    message = in_flag_terms(str(error.get("message")), flags or {})
    if args.json:
        print(json.dumps(answer.body, indent=2))
    hint = ""
    if answer.status == 403 and "member" in error.get("message", ""):
        hint = (
            f" (`tickwork token --workspace {args.workspace} --user {args.user} --create"
            " --admin` makes that user an admin)"
        )
    say(f"tickwork: HTTP {answer.status} {error.get('code')}: {message}{hint}")
    return 1


def _action_line(a: dict[str, Any]) -> str:

    publish_at = datetime.fromisoformat(a["publish_at"])
    error = f"  {a['error_code']}" if a.get("error_code") else ""
    return (
        f"{a['id'][:8]:<10}{a['action_type']:<14}{a['target_key']:<12}"
        f"{(a['thing_id'] or '-')[:22]:<24}{publish_at.strftime('%Y-%m-%d %H:%M:%S'):<21}"
        f"{a['status']:<11}{error}"
    )


ACTION_HEADER = (
    f"{'id':<10}{'type':<14}{'target':<12}{'thing':<24}{'due (UTC)':<21}{'status':<11}  error"
)


def _show(a: dict[str, Any]) -> str:
    """An action, a field a line (values that are not text as JSON), the payload last."""
    shown = {key: value for key, value in a.items() if key != "resolved"}
    text = tables.fields(shown, last=["payload"])
    if a.get("resolved"):
        resolved = f"{a['resolved']['rule']}: {a['resolved']['note'] or 'exact'}"
        text += f"\n{'resolved':<{tables.WIDTH}}{resolved}"
    return text


def _respond(
    args: argparse.Namespace, answer: Any, human: Callable[[Any], str],
    flags: dict[str, str] | None = None,
) -> int:  # fmt: skip
    if not answer.ok:
        return _print_error(answer, args, flags)
    print(json.dumps(answer.body, indent=2) if args.json else human(answer.body))
    return 0


def cmd_actions_list(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    params = {"limit": str(args.limit)}
    for name, value in (
        ("from", args.start),
        ("to", args.end),
        ("status", args.status),
        ("action_type", args.type),
        ("thing_id", args.thing),
        ("cursor", args.cursor),
    ):
        if value:
            params[name] = value
    answer = caller.call("GET", "/v1/actions", params=params)

    def human(page: dict[str, Any]) -> str:
        used = page.get("range") or {}
        lines = [f"actions due from {used.get('from')} to {used.get('to')}:", ACTION_HEADER]
        lines += [_action_line(a) for a in page["items"]] or ["(none)"]
        if page.get("next_cursor"):
            lines.append(f"more: --cursor {page['next_cursor']}")
        return "\n".join(lines)

    return _respond(args, answer, human)


def cmd_actions_show(args: argparse.Namespace) -> int:
    caller, action_id = _caller(args)
    return _respond(args, caller.call("GET", f"/v1/actions/{action_id}"), _show)


def _why(answer: dict[str, Any]) -> str:
    """An action's steps for people: when (UTC), then what."""
    lines = [f"action {answer['id']} is {answer['status']} (as of {_utc(answer['as_of'])} UTC):"]
    for step in answer["steps"]:
        when = _utc(step["at"]) if step.get("at") else "now"
        lines.append(f"  {when:<21}{step['text']}")
    return "\n".join(lines)


def _utc(instant: str) -> str:
    return datetime.fromisoformat(instant).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def cmd_actions_why(args: argparse.Namespace) -> int:
    caller, action_id = _caller(args)
    return _respond(args, caller.call("GET", f"/v1/actions/{action_id}/why"), _why)


def _check_when(args: argparse.Namespace) -> None:
    """--date goes with --time (and --timezone only with them), said in flag terms before
    anything is sent."""
    if args.date is not None and args.time is None:
        raise InputError(
            "--date needs --time HH:MM[:SS] (the wall time on that date)", field="time"
        )
    if args.time is not None and args.date is None:
        raise InputError("--time needs --date YYYY-MM-DD (instead of --in or --at)", field="date")
    if args.timezone is not None and args.date is None:
        raise InputError(
            "--timezone goes with --date and --time (an --at time carries its own offset)",
            field="timezone",
        )


def _connection_id(caller: Any, given: str) -> str:
    """A connection's id, given as its id or its name (GET /v1/connections)."""
    with contextlib.suppress(ValueError):
        return str(UUID(given))
    answer = caller.call("GET", "/v1/connections")
    if not answer.ok:
        raise InputError(
            f"--connection {given}: the connections could not be listed:"
            f" {answer.error.get('message')}",
            field="connection",
        )
    items = answer.body.get("items") or []
    found = [c for c in items if c["name"] == given]
    if len(found) == 1:
        return str(found[0]["id"])
    names = ", ".join(sorted(repr(c["name"]) for c in items)) or "none"
    if found:
        raise InputError(
            f"--connection {given}: more than one connection has that name; give its id",
            field="connection",
        )
    raise InputError(
        f"--connection {given}: no connection of this workspace has that name or id; its"
        f" connections: {names} (`tickwork connections list`)",
        field="connection",
    )


def cmd_actions_schedule(args: argparse.Namespace) -> int:

    _check_when(args)
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise InputError(f"--payload is not JSON: {exc}", field="payload") from exc
    caller, _ = _caller(args)
    body: dict[str, Any] = {"action_type": args.type, "target_key": args.target, "payload": payload}
    if args.thing:
        body["thing_id"] = args.thing
    if args.connection:
        body["connection_id"] = _connection_id(caller, args.connection)
    if args.recipient:
        body["recipient_id"] = args.recipient
    if args.transactional:
        body["transactional"] = True
    if args.in_ is not None:
        body["publish_at"] = (utcnow() + args.in_).isoformat()
    elif args.at:
        body["publish_at"] = args.at
    else:
        body["date"], body["time"] = args.date, args.time
        if args.timezone:
            body["timezone"] = args.timezone
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    answer = caller.call("POST", "/v1/actions", body=body, headers=headers)
    if args.quiet and answer.ok and not args.json:
        print(answer.body["id"])
        return 0
    return _respond(args, answer, lambda a: "scheduled:\n" + _show(a), SCHEDULE_FLAGS)


def _transition(verb: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        caller, action_id = _caller(args)
        answer = caller.call("POST", f"/v1/actions/{action_id}/{verb}")
        return _respond(args, answer, lambda a: f"{a['id']} is now {a['status']}")

    return run


# The parents a cancel may name (`--tag`, `--recipient`, `--campaign`, `--entity`).
PARENT_FLAGS = ("tag", "recipient", "campaign", "entity")


def _parents_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, name, None) for name in PARENT_FLAGS)


def _bulk_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {} if args.limit is None else {"limit": args.limit}
    entity = getattr(args, "entity", None)
    entity_type, _, entity_id = entity.partition("/") if entity else (None, "", None)
    for name, value in (
        ("action_type", args.type), ("error_code", args.error_code),
        ("due_from", args.due_from), ("due_to", args.due_to), ("thing_id", args.thing),
        ("target_key", args.target), ("tag", getattr(args, "tag", None)),
        ("recipient_id", getattr(args, "recipient", None)),
        ("campaign_id", getattr(args, "campaign", None)),
        ("entity_type", entity_type), ("entity_id", entity_id if entity else None),
    ):  # fmt: skip
        if value:
            body[name] = value
    return body


def _bulk(verb: str) -> Callable[[argparse.Namespace], int]:
    """`cancel-all`, `retry-all`: POST /v1/actions/bulk-{verb} with the filter, again with
    each answer's `next` until none is left; prints the running count (stderr) and the
    totals."""

    def run(args: argparse.Namespace) -> int:
        caller, _ = _caller(args)
        body = _bulk_body(args)
        totals: dict[str, Any] = {
            "matched": 0, "changed": 0, "skipped": 0, "refused": {}, "exited": 0
        }  # fmt: skip
        calls = 0
        while True:
            answer = caller.call("POST", f"/v1/actions/bulk-{verb}", body=body)
            if not answer.ok:
                if calls:
                    say(f"stopped after {calls} calls: {_bulk_line(verb, totals)}")
                return _print_error(answer, args)
            calls += 1
            _add_up(totals, answer.body)
            if not answer.body.get("next"):
                break
            if not answer.body.get("matched"):
                # A parent's rows left pending are all held this instant (a claim in
                # progress): calling again at once would spin.
                say("the parent's pending rows left are being claimed right now; run again")
                break
            say(f"... {_bulk_line(verb, totals)} so far ({calls} calls)")
            body["after"] = answer.body["next"]
        totals["calls"] = calls
        print(json.dumps(totals, indent=2) if args.json else _bulk_line(verb, totals))
        return 0

    return run


def _cancel(args: argparse.Namespace) -> int:
    """`actions cancel ID`, or with a parent (`--tag`, ...) everything pending of it."""
    if _parents_given(args) == (args.id is not None):
        raise InputError(
            "give an action id, or a parent (--tag, --recipient, --campaign, --entity)"
            " to cancel everything pending of it; not both"
        )
    if args.id is None:
        return _bulk("cancel")(args)
    return _transition("cancel")(args)


def _add_up(totals: dict[str, Any], answer: dict[str, Any]) -> None:
    for name in ("matched", "changed", "skipped", "exited"):
        totals[name] += int(answer.get(name) or 0)
    for reason, count in (answer.get("refused") or {}).items():
        totals["refused"][reason] = totals["refused"].get(reason, 0) + int(count)


def _bulk_line(verb: str, totals: dict[str, Any]) -> str:
    done = "cancelled" if verb == "cancel" else "retried"
    line = (
        f"{done} {totals['changed']} of {totals['matched']} matching;"
        f" {totals['skipped']} skipped (moved on meanwhile)"
    )
    for reason, count in sorted(totals["refused"].items()):
        line += f"; {count} refused ({reason.replace('_', ' ')})"
    if totals.get("exited"):
        line += f"; {totals['exited']} enrollments exited"
    return line


# ---------------------------------------------------------------------- any API call


def _data(value: str | None) -> Any:
    """--data: JSON, or @FILE (@- for stdin) holding it."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        source = value[1:]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
        except OSError as exc:
            raise InputError(
                f"--data {value}: cannot read {source}: {exc.strerror}", field="data"
            ) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"--data is not JSON: {exc}", field="data") from exc


def cmd_api(args: argparse.Namespace) -> int:
    """Any route of the API with the token and the workspace header added; prints the
    answer's body, and on a refusal its code and message on stderr (exit 1)."""
    body = _data(args.data)
    path, _, query_string = args.path.partition("?")
    path = path if path.startswith("/") else "/" + path
    params = dict(parse_qsl(query_string, keep_blank_values=True)) or None
    caller, _ = _caller(args, workspace_required=False)
    answer = caller.call(args.method, path, body=body, params=params)
    if answer.body is not None and answer.body != "":
        text = answer.body if isinstance(answer.body, str) else json.dumps(answer.body, indent=2)
        print(text)
    if not answer.ok:
        error = answer.error
        say(f"tickwork: HTTP {answer.status} {error.get('code')}: {error.get('message')}")
        return 1
    return 0


# --------------------------------------------- recurring, rules, recipients, connections


def _page_params(args: argparse.Namespace, **more: Any) -> dict[str, str]:
    params = {"limit": str(args.limit)} if getattr(args, "limit", None) else {}
    if getattr(args, "cursor", None):
        params["cursor"] = args.cursor
    params.update({name: str(value) for name, value in more.items() if value is not None})
    return params


def cmd_recurring_list(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    params = _page_params(args, status=args.status, action_type=args.type)
    answer = caller.call("GET", "/v1/recurring", params=params)
    return _respond(args, answer, lambda page: tables.table(
        page["items"], tables.RECURRING, page.get("next_cursor")))  # fmt: skip


def cmd_recurring_show(args: argparse.Namespace) -> int:
    caller, schedule_id = _caller(args)
    answer = caller.call("GET", f"/v1/recurring/{schedule_id}", params={"preview": "5"})
    return _respond(args, answer, tables.schedule_detail)


def _recurring_transition(verb: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        caller, schedule_id = _caller(args)
        body = {"reason": args.reason} if getattr(args, "reason", None) else None
        answer = caller.call("POST", f"/v1/recurring/{schedule_id}/{verb}", body=body)
        return _respond(args, answer, lambda s: f"schedule {s['id']} is now {s['status']}")

    return run


def cmd_rules_list(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    enabled = None if args.enabled is None else str(args.enabled == "yes").lower()
    params = _page_params(args, enabled=enabled, trigger_type=args.trigger)
    answer = caller.call("GET", "/v1/rules", params=params)
    return _respond(args, answer, lambda page: tables.table(
        page["items"], tables.RULES, page.get("next_cursor")))  # fmt: skip


def cmd_rules_show(args: argparse.Namespace) -> int:
    caller, rule_id = _caller(args)
    return _respond(args, caller.call("GET", f"/v1/rules/{rule_id}"), tables.fields)


def cmd_recipients_list(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    answer = caller.call("GET", "/v1/recipients", params=_page_params(args))
    return _respond(args, answer, lambda page: tables.table(
        page["items"], tables.RECIPIENTS, page.get("next_cursor")))  # fmt: skip


def cmd_recipients_show(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    return _respond(
        args, caller.call("GET", f"/v1/recipients/{quote(args.id, safe='')}"), tables.fields
    )


def cmd_connections_list(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    params = {"provider": args.provider} if args.provider else None
    answer = caller.call("GET", "/v1/connections", params=params)
    return _respond(args, answer, lambda page: tables.connections(page, args.workspace, args.user))


def cmd_connections_show(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    connection_id = _connection_id(caller, args.id)
    return _respond(args, caller.call("GET", f"/v1/connections/{connection_id}"), tables.fields)


def cmd_suppressions_list(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    params = _page_params(args, channel=args.channel, reason=args.reason)
    answer = caller.call("GET", "/v1/suppressions", params=params)
    return _respond(args, answer, lambda page: tables.table(
        page["items"], tables.SUPPRESSIONS, page.get("next_cursor")))  # fmt: skip


def cmd_suppressions_add(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    body = {"channel": args.channel, "address": args.address, "reason": args.reason,
            "scope": args.scope} | ({"detail": args.detail} if args.detail else {})  # fmt: skip
    answer = caller.call("POST", "/v1/suppressions", body=body)

    def human(entry: dict[str, Any]) -> str:
        state = "suppressed" if answer.status == 201 else "already suppressed"
        return (
            f"{entry['channel']} {entry['address']} {state} ({entry['reason']}, {entry['scope']})"
        )

    return _respond(args, answer, human)


def cmd_suppressions_remove(args: argparse.Namespace) -> int:
    caller, _ = _caller(args)
    path = f"/v1/suppressions/{args.channel}/{quote(args.address, safe='@+')}"
    answer = caller.call("DELETE", path, params={"scope": args.scope})
    return _respond(
        args,
        answer,
        lambda e: (
            f"{e['channel']} {e['address']} removed from the list ({e['reason']}, {e['scope']})"
        ),
    )


# -------------------------------------------------------------------------- parser


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in every --help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        flag = action.nargs == 0  # --admin, --no-demo: a default of True/False says nothing
        if flag or action.default in (None, argparse.SUPPRESS) or action.help is None:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    version = argparse.ArgumentParser(add_help=False)
    version.add_argument("--version", action="version", version=f"tickwork {__version__}")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--data-dir",
        help=f"local state (embedded Postgres, JWT key, the running dev server's record);"
        f" default: ${ENV_VAR}, else {default_data_dir()}",
    )
    where.add_argument(
        "--database-url",
        help="libpq URL; default: DATABASE_URL, else the running `tickwork dev`'s database,"
        " else the embedded Postgres in the data directory",
    )
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--json", action="store_true", help="print JSON for scripts")
    parents = [version, where]

    parser = argparse.ArgumentParser(
        prog="tickwork", description=__doc__, parents=[version], formatter_class=HelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str,
        summary: str,
        run: Callable[[argparse.Namespace], int],
        extra: Sequence[argparse.ArgumentParser] = (),
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary,
            parents=[*parents, *extra],
            formatter_class=HelpFormatter,
        )
        sub.set_defaults(run=run)
        return sub

    command("migrate", "apply pending database migrations", cmd_migrate)
    _local_commands(command)
    _operator_commands(command, output)
    _workspace_commands(commands, parents, output)
    acting = _acting()
    _actions_commands(commands, [*parents, acting], output)
    _api_commands(commands, [*parents, acting], output)
    return parser


Command = Callable[..., argparse.ArgumentParser]


def _local_commands(command: Command) -> None:

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


def _operator_commands(command: Command, output: argparse.ArgumentParser) -> None:
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


def _limit(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number from 0 (no limit) up")
    return number


def _workspace_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    workspace = commands.add_parser(
        "workspace",
        help="a workspace's limits (operators)",
        description="What an operator sets for one workspace.",
        parents=[parents[0]],
        formatter_class=HelpFormatter,
    )
    verbs = workspace.add_subparsers(dest="verb", required=True, metavar="VERB")
    limits = verbs.add_parser(
        "limits",
        help="show a workspace's quotas, or set some for it alone",
        description="Show a workspace's quotas, or set some for it alone (the others keep"
        " the stack's defaults, TICKWORK_QUOTA_*). Connects as the database's owner: the"
        " API cannot change them.",
        parents=[*parents, output],
        formatter_class=HelpFormatter,
    )
    limits.set_defaults(run=cmd_workspace_limits)
    limits.add_argument("workspace", help="workspace name or id")
    for name in QUOTA_NAMES:
        limits.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=_limit,
            metavar="N",
            help=f"set {name} for this workspace (0: no limit)",
        )
    limits.add_argument(
        "--reset",
        action="append",
        choices=[*QUOTA_NAMES, "all"],
        metavar="NAME",
        help="back to the stack's default: a quota's name (as --json prints it) or all; repeatable",
    )


def _acting() -> argparse.ArgumentParser:
    """Options of the commands that call the API: as whom, in which workspace, where."""
    acting = argparse.ArgumentParser(add_help=False)
    acting.add_argument(
        "--workspace",
        default=os.environ.get("TICKWORK_WORKSPACE"),
        help="workspace name or id (env TICKWORK_WORKSPACE)",
    )
    acting.add_argument("--user", default=DEFAULT_USER, help="act as this member")
    acting.add_argument(
        "--api-url",
        help="the API; default: the running `tickwork dev`'s"
        " (in AWS, with TICKWORK_QUEUE_URLS set: the API handler in-process)",
    )
    return acting


def _verbs(
    commands: Any, name: str, summary: str, parents: list[argparse.ArgumentParser],
    output: argparse.ArgumentParser,
) -> Callable[..., argparse.ArgumentParser]:  # fmt: skip
    """A command with verbs (`tickwork NAME VERB`), each taking `parents` and --json."""
    group = commands.add_parser(
        name, help=summary, description=summary, parents=[parents[0]], formatter_class=HelpFormatter
    )
    verbs = group.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        verb_name: str, verb_summary: str, run: Callable[[argparse.Namespace], int],
        table: str | None = None,
    ) -> argparse.ArgumentParser:  # fmt: skip
        sub = verbs.add_parser(
            verb_name, help=verb_summary, description=verb_summary,
            parents=[*parents, output], formatter_class=HelpFormatter,
        )  # fmt: skip
        sub.set_defaults(run=run, id_table=table or "scheduled_actions")
        return cast(argparse.ArgumentParser, sub)

    return verb


def _paging(parser: argparse.ArgumentParser, default: int = 50) -> None:
    parser.add_argument("--limit", type=int, default=default, help="items per page")
    parser.add_argument("--cursor", help="next_cursor of the previous page")


def _api_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    api = commands.add_parser(
        "api",
        help="call any route of the API with a token and the workspace header",
        description="Call any route of the API (GET /v1/rules, POST /v1/recurring, ...) as"
        " --user, in --workspace (the header is left out without one), with --data as the"
        " body; prints the answer's JSON, and a refusal's code and message on stderr (exit 1)."
        " The routes and their bodies: GET /v1/openapi.json, or the API reference.",
        parents=[*parents, output],
        formatter_class=HelpFormatter,
    )
    api.set_defaults(run=cmd_api)
    api.add_argument(
        "method", type=str.upper, choices=["GET", "POST", "PUT", "PATCH", "DELETE"],
        metavar="METHOD", help="GET, POST, PUT, PATCH or DELETE",
    )  # fmt: skip
    api.add_argument("path", help="the route, with a query string if any: /v1/rules?enabled=true")
    api.add_argument("--data", help="the JSON body, or @FILE holding it (@- reads stdin)")

    id_help = "id, or its first 8 characters"
    recurring = _verbs(commands, "recurring", "recurring schedules: list, show, pause, resume,"
                       " end (/v1/recurring)", parents, output)  # fmt: skip
    listing = recurring("list", "the schedules, oldest first (GET /v1/recurring)",
                        cmd_recurring_list)  # fmt: skip
    listing.add_argument("--status", choices=["active", "paused", "ended"], help="only this status")
    listing.add_argument("--type", help="only this action type")
    _paging(listing)
    recurring("show", "one schedule and its next 5 occurrences", cmd_recurring_show,
              "recurring_schedules").add_argument("id", help="schedule " + id_help)  # fmt: skip
    pause = recurring("pause", "pause a schedule: its queued occurrences not yet due are"
                      " cancelled", _recurring_transition("pause"),
                      "recurring_schedules")  # fmt: skip
    pause.add_argument("id", help="schedule " + id_help)
    pause.add_argument("--reason", help="why, kept with the schedule")
    recurring("resume", "resume a paused schedule from now", _recurring_transition("resume"),
              "recurring_schedules").add_argument("id", help="schedule " + id_help)  # fmt: skip
    recurring("end", "end a schedule for good", _recurring_transition("end"),
              "recurring_schedules").add_argument("id", help="schedule " + id_help)  # fmt: skip

    rules = _verbs(commands, "rules", "automation rules: list, show (/v1/rules)", parents, output)
    listing = rules("list", "the rules, oldest first (GET /v1/rules)", cmd_rules_list)
    listing.add_argument("--enabled", choices=["yes", "no"], help="only enabled, or disabled")
    listing.add_argument("--trigger", choices=["event", "time"], help="only this trigger type")
    _paging(listing)
    rules("show", "one rule (GET /v1/rules/{id})", cmd_rules_show, "rules").add_argument(
        "id", help="rule " + id_help
    )

    recipients = _verbs(commands, "recipients", "recipients: list, show (/v1/recipients)",
                        parents, output)  # fmt: skip
    _paging(recipients("list", "the recipients by id (GET /v1/recipients)", cmd_recipients_list))
    recipients("show", "one recipient, with what they were sent today", cmd_recipients_show
               ).add_argument("id", help="recipient id")  # fmt: skip

    _suppressions_commands(commands, parents, output)

    connections = _verbs(commands, "connections", "connections: list, show (/v1/connections)",
                         parents, output)  # fmt: skip
    connections("list", "the workspace's connections (GET /v1/connections)",
                cmd_connections_list).add_argument("--provider",
                                                   help="only this provider")  # fmt: skip
    connections("show", "one connection, never its credentials", cmd_connections_show
                ).add_argument("id", help="connection id or name")  # fmt: skip


def _suppressions_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    suppressions = _verbs(commands, "suppressions", "addresses never to message: list, add,"
                          " remove (/v1/suppressions)", parents, output)  # fmt: skip
    scope_help = "all, campaign:<id> or rule:<id>"
    listing = suppressions("list", "the list, newest first (GET /v1/suppressions)",
                           cmd_suppressions_list)  # fmt: skip
    listing.add_argument("--channel", choices=["email", "sms"], help="only this channel")
    listing.add_argument("--reason", choices=list(REASONS), help="only this reason")
    _paging(listing)
    add = suppressions("add", "suppress an address (POST /v1/suppressions)", cmd_suppressions_add)
    remove = suppressions("remove", "remove an address from the list (a complaint: admins only)",
                          cmd_suppressions_remove)  # fmt: skip
    for verb in (add, remove):
        verb.add_argument("channel", choices=["email", "sms"], help="email or sms")
        verb.add_argument("address", help="an email address or an E.164 phone number")
        verb.add_argument("--scope", default="all", help=scope_help)
    add.add_argument("--reason", choices=list(REASONS), default="manual", help="why")
    add.add_argument("--detail", help="a short note kept with the entry")


def _actions_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    version = parents[0]
    actions_parser = commands.add_parser(
        "actions",
        help="list, show, explain (why), schedule, cancel, retry actions, one or in bulk (the"
        " API's rules)",
        description="Actions through the API: the same validation, messages and codes.",
        parents=[version],
        formatter_class=HelpFormatter,
    )
    verbs = actions_parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        name: str, summary: str, run: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        sub = verbs.add_parser(
            name,
            help=summary,
            description=summary,
            parents=[*parents, output],
            formatter_class=HelpFormatter,
        )
        sub.set_defaults(run=run)
        return cast(argparse.ArgumentParser, sub)

    listing = verb("list", "the calendar (GET /v1/actions)", cmd_actions_list)
    listing.add_argument("--from", dest="start", help="RFC 3339 with offset; default: 24 hours ago")
    listing.add_argument("--to", dest="end", help="RFC 3339 with offset; default: from + 31 days")
    listing.add_argument(
        "--status",
        choices=["queued", "submitted", "published", "failed", "cancelled"],
        help="only this status",
    )
    listing.add_argument("--type", help="only this action type")
    listing.add_argument("--thing", help="only this thing_id")
    listing.add_argument("--limit", type=int, default=100, help="actions per page (1-500)")
    listing.add_argument("--cursor", help="next_cursor of the previous page")
    verb("show", "one action (GET /v1/actions/{id})", cmd_actions_show).add_argument(
        "id", help="action id, or its first 8 characters"
    )
    verb(
        "why",
        "why an action is where it is: its steps, times in UTC (GET /v1/actions/{id}/why)",
        cmd_actions_why,
    ).add_argument("id", help="action id, or its first 8 characters")
    schedule = verb("schedule", "schedule an action (POST /v1/actions)", cmd_actions_schedule)
    schedule.add_argument("--type", required=True, help="action_type, e.g. webhook")
    schedule.add_argument("--target", required=True, help="target_key, e.g. primary")
    schedule.add_argument("--thing", help="thing_id")
    schedule.add_argument("--payload", default="{}", help="JSON object")
    when = schedule.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--in",
        dest="in_",
        type=parse_in,
        metavar="DURATION",
        help="due this long from now: 30s, 5m, 2h, 1d",
    )
    when.add_argument("--at", help="publish_at, RFC 3339 with offset")
    when.add_argument("--date", help="local date YYYY-MM-DD (with --time)")
    schedule.add_argument("--time", help="local time HH:MM[:SS] (with --date)")
    schedule.add_argument("--timezone", help="zone of --date/--time; default: the workspace's")
    schedule.add_argument("--idempotency-key", help="the Idempotency-Key header")
    schedule.add_argument(
        "--connection",
        help="the connection to send through, by id or name (`tickwork connections list`);"
        " email, SMS, chat and posts need one",
    )
    schedule.add_argument(
        "--recipient", help="a registered recipient's id: their quiet hours and caps apply"
    )
    schedule.add_argument(
        "--transactional",
        action="store_true",
        help="exempt from the recipient's quiet hours and caps",
    )
    schedule.add_argument(
        "--quiet", "-q", action="store_true", help="print only the new action's id (for scripts)"
    )
    cancel = verb(
        "cancel",
        "cancel a queued action, or every pending action of a tag, recipient, campaign or"
        " entity (.../bulk-cancel, as cancel-all)",
        _cancel,
    )
    cancel.add_argument("id", nargs="?", help="action id, or its first 8 characters")
    _bulk_arguments(cancel, parents=True)
    verb("retry", "retry a failed action (admins)", _transition("retry")).add_argument(
        "id", help="action id, or its first 8 characters"
    )
    for name, summary in (
        ("cancel-all", "cancel the queued actions matching a filter (.../bulk-cancel)"),
        ("retry-all", "retry the failed actions matching a filter (admins; .../bulk-retry)"),
    ):
        bulk = verb(name, summary, _bulk(name.removesuffix("-all")))
        _bulk_arguments(bulk, parents=name == "cancel-all")


def _bulk_arguments(bulk: argparse.ArgumentParser, *, parents: bool) -> None:
    bulk.add_argument("--type", help="only this action type")
    bulk.add_argument("--error-code", help="only this error_code")
    bulk.add_argument("--due-from", help="publish_at at or after this (RFC 3339 with offset)")
    bulk.add_argument("--due-to", help="publish_at before this (RFC 3339 with offset)")
    bulk.add_argument("--thing", help="only this thing_id")
    bulk.add_argument("--target", help="only this target_key")
    bulk.add_argument(
        "--limit", type=int, default=None,
        help="actions per call (default 500, at most 1000; with a parent 5000 and 10000);"
        " it loops until done",
    )  # fmt: skip
    if not parents:
        return
    parent = bulk.add_mutually_exclusive_group()
    parent.add_argument("--tag", help="every pending action with this tag")
    parent.add_argument(
        "--recipient", help="every pending action to this recipient_id; exits their enrollments"
    )
    parent.add_argument(
        "--campaign", help="this campaign id: exits its enrollments, cancels their steps"
    )
    parent.add_argument(
        "--entity", metavar="TYPE/ID", help="every pending action rules made for the entity"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except TickworkError as exc:
        print(f"tickwork: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): no traceback, and none at exit either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
