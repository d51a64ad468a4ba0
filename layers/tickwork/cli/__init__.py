"""The `tickwork` command: the local runtime, its demo and tokens, migrations, and what an
operator needs from a shell (status, actions, redrive, reset, a workspace's limits)."""

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
from uuid import UUID

import httpx

from tickwork import __version__, quotas, workspaces
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

DEFAULT_API_PORT = 8788
DEFAULT_RECEIVER_PORT = 8787
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
    from tickwork.local.receiver import describe  # noqa: PLC0415
    from tickwork.local.runner import LocalRuntime  # noqa: PLC0415

    root = _root(args)
    other = running_dev(root)
    if other is not None:
        raise LocalServerError(
            f"`tickwork dev` is already running for {root} (pid {other.pid}, API at"
            f" {other.api_url}); stop it first (Ctrl-C in its terminal), or give this one"
            " another --data-dir"
        )
    url = _database_url(args, prefer_dev=False)
    settings = Settings.from_env()
    say("migrating the schema and starting the engine...")
    local = LocalRuntime(
        url,
        settings,
        tick_interval=args.tick_interval,
        workers_per_type=args.workers,
        batch_size=args.batch_size,
        receiver_port=args.receiver_port,
        api_port=args.api_port,
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
    ).write(root)
    try:
        print(
            f"tickwork is running: API at {local.api.url}/v1 (docs: {local.api.url}/v1/openapi"
            f".json), tick every {args.tick_interval:g} s (look-ahead"
            f" {local.settings.lookahead_seconds} s), {args.workers} dispatcher(s) per action"
            f" type, webhook receiver at {local.receiver.url}, data in {root}"
        )
        print(
            "each delivery prints a line: times in UTC; 'late by' is the arrival at the"
            " receiver minus the action's publish_at"
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
    else:
        dev = require_dev(_root(args))
        admin = LocalAdmin(dev.api_url, _jwt(args).sign("tickwork-cli", ttl_seconds=300))
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

_IN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)?\s*$")
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, None: 1}


def parse_in(value: str) -> timedelta:
    """`30s`, `2m`, `1h`, `90` (seconds) as a timedelta."""
    match = _IN.match(value)
    if not match:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration like 30s, 5m, 2h or 1d")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _caller(args: argparse.Namespace) -> Any:
    """The API, and the workspace id, for `tickwork actions`."""
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
    with connect(_database_url(args)) as conn:
        workspace = _workspace_id(conn, args.workspace)
        action_id = _resolve_id(conn, workspace, getattr(args, "id", None))
    if url is not None:
        token = _jwt(args).sign(args.user, ttl_seconds=600)
        return HttpCaller(url, token, str(workspace)), action_id

    configured = settings.model_copy(update={"database_url": _database_url(args)})
    runtime.install(runtime.from_settings(configured))
    return InProcessCaller(args.user, str(workspace)), action_id


def _resolve_id(conn: Any, workspace: UUID, given: str | None) -> str | None:
    """A full action id, or the one action of the workspace whose id starts with `given`
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
    rows = conn.execute(
        "select id from scheduled_actions where id between %s and %s and workspace_id = %s limit 2",
        (low, high, workspace),
    ).fetchall()
    if len(rows) == 1:
        return str(rows[0][0])
    if len(rows) > 1:
        raise InputError(f"more than one action id starts with {given!r}; give more of it")
    return given


def _print_error(answer: Any, args: argparse.Namespace) -> int:
    error = answer.error
    if args.json:
        print(json.dumps(answer.body, indent=2))
    hint = ""
    if answer.status == 403 and "member" in error.get("message", ""):
        hint = (
            f" (`tickwork token --workspace {args.workspace} --user {args.user} --create"
            " --admin` makes that user an admin)"
        )
    say(f"tickwork: HTTP {answer.status} {error.get('code')}: {error.get('message')}{hint}")
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
    lines = [
        f"{key:<22}{'-' if value is None else value}"
        for key, value in a.items()
        if key not in ("payload", "resolved")
    ]
    if a.get("resolved"):
        lines.append(f"{'resolved':<22}{a['resolved']['rule']}: {a['resolved']['note'] or 'exact'}")
    lines.append(f"{'payload':<22}{json.dumps(a['payload'])}")
    return "\n".join(lines)


def _respond(args: argparse.Namespace, answer: Any, human: Callable[[Any], str]) -> int:
    if not answer.ok:
        return _print_error(answer, args)
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


def cmd_actions_schedule(args: argparse.Namespace) -> int:

    caller, _ = _caller(args)
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise InputError(f"--payload is not JSON: {exc}", field="payload") from exc
    body: dict[str, Any] = {"action_type": args.type, "target_key": args.target, "payload": payload}
    if args.thing:
        body["thing_id"] = args.thing
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
    return _respond(args, answer, lambda a: "scheduled:\n" + _show(a))


def _transition(verb: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        caller, action_id = _caller(args)
        answer = caller.call("POST", f"/v1/actions/{action_id}/{verb}")
        return _respond(args, answer, lambda a: f"{a['id']} is now {a['status']}")

    return run


def _bulk(verb: str) -> Callable[[argparse.Namespace], int]:
    """`cancel-all`, `retry-all`: POST /v1/actions/bulk-{verb} with the filter, again with
    each answer's `next` until none is left; prints the totals."""

    def run(args: argparse.Namespace) -> int:
        caller, _ = _caller(args)
        body: dict[str, Any] = {"limit": args.limit}
        for name, value in (
            ("action_type", args.type), ("error_code", args.error_code),
            ("due_from", args.due_from), ("due_to", args.due_to), ("thing_id", args.thing),
            ("target_key", args.target),
        ):  # fmt: skip
            if value:
                body[name] = value
        totals: dict[str, Any] = {"matched": 0, "changed": 0, "skipped": 0, "refused": {}}
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
            body["after"] = answer.body["next"]
        totals["calls"] = calls
        print(json.dumps(totals, indent=2) if args.json else _bulk_line(verb, totals))
        return 0

    return run


def _add_up(totals: dict[str, Any], answer: dict[str, Any]) -> None:
    for name in ("matched", "changed", "skipped"):
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
    return line


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
    _actions_commands(commands, parents, output)
    return parser


Command = Callable[..., argparse.ArgumentParser]


def _local_commands(command: Command) -> None:

    dev = command("dev", "run Tickwork locally, whole, in one process", cmd_dev)
    dev.add_argument("--tick-interval", type=float, default=60.0, help="seconds between ticks")
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
    token.add_argument("--hours", type=float, default=12.0, help="how long the token is valid")
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


def _actions_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    version = parents[0]
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
            parents=[*parents, acting, output],
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
    when.add_argument("--in", dest="in_", type=parse_in, help="due this long from now: 30s, 5m")
    when.add_argument("--at", help="publish_at, RFC 3339 with offset")
    when.add_argument("--date", help="local date YYYY-MM-DD (with --time)")
    schedule.add_argument("--time", help="local time HH:MM[:SS] (with --date)")
    schedule.add_argument("--timezone", help="zone of --date/--time; default: the workspace's")
    schedule.add_argument("--idempotency-key", help="the Idempotency-Key header")
    verb("cancel", "cancel a queued action", _transition("cancel")).add_argument(
        "id", help="action id, or its first 8 characters"
    )
    verb("retry", "retry a failed action (admins)", _transition("retry")).add_argument(
        "id", help="action id, or its first 8 characters"
    )
    for name, summary in (
        ("cancel-all", "cancel the queued actions matching a filter (.../bulk-cancel)"),
        ("retry-all", "retry the failed actions matching a filter (admins; .../bulk-retry)"),
    ):
        bulk = verb(name, summary, _bulk(name.removesuffix("-all")))
        bulk.add_argument("--type", help="only this action type")
        bulk.add_argument("--error-code", help="only this error_code")
        bulk.add_argument("--due-from", help="publish_at at or after this (RFC 3339 with offset)")
        bulk.add_argument("--due-to", help="publish_at before this (RFC 3339 with offset)")
        bulk.add_argument("--thing", help="only this thing_id")
        bulk.add_argument("--target", help="only this target_key")
        bulk.add_argument(
            "--limit", type=int, default=500, help="actions per call (1-1000); it loops until done"
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
