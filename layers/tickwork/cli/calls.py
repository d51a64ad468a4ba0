"""How the commands that call the API (`actions`, `api`, `recurring`, `rules`, ...) find it,
name what they act on, and print its answers and refusals."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from collections.abc import Callable
from typing import Any
from uuid import UUID

from tickwork.cli.common import data_root, database_url, jwt, say, workspace_id
from tickwork.local.paths import require_dev, running_dev
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.platform.errors import InputError


def caller(args: argparse.Namespace, *, workspace_required: bool = True) -> Any:
    """The API, and the id of the action (or schedule, or rule) named on the command line."""
    # Lazy: the API and the providers load only for the commands that call them.
    from tickwork import runtime  # noqa: PLC0415
    from tickwork.cli.client import HttpCaller, InProcessCaller  # noqa: PLC0415

    here = data_root(args)
    settings = Settings.from_env()
    url = args.api_url or None
    dev = running_dev(here)
    if url is None and dev is not None:
        url = dev.api_url
    if url is None and not settings.queue_urls:
        require_dev(here)  # raises, saying how to start it
    workspace: UUID | None = None
    named_id = None
    if workspace_required or args.workspace:
        with connect(database_url(args)) as conn:
            workspace = workspace_id(conn, args.workspace)
            table = getattr(args, "id_table", "scheduled_actions")
            named_id = resolve_id(conn, table, workspace, getattr(args, "id", None))
    named = str(workspace) if workspace is not None else None
    if url is not None:
        token = jwt(args).sign(args.user, ttl_seconds=600)
        return HttpCaller(url, token, named), named_id

    configured = settings.model_copy(update={"database_url": database_url(args)})
    runtime.install(runtime.from_settings(configured))
    return InProcessCaller(args.user, named), named_id


# The tables whose ids a command may give by their first characters.
ID_TABLES = {"scheduled_actions": "action", "recurring_schedules": "schedule", "rules": "rule"}


def resolve_id(conn: Any, table: str, workspace: UUID, given: str | None) -> str | None:
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


def print_error(answer: Any, args: argparse.Namespace, flags: dict[str, str] | None = None) -> int:
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


def respond(
    args: argparse.Namespace, answer: Any, human: Callable[[Any], str],
    flags: dict[str, str] | None = None,
) -> int:  # fmt: skip
    """The answer as JSON (--json) or for people, or the refusal."""
    if not answer.ok:
        return print_error(answer, args, flags)
    print(json.dumps(answer.body, indent=2) if args.json else human(answer.body))
    return 0


def page_params(args: argparse.Namespace, **more: Any) -> dict[str, str]:
    """--limit and --cursor, and the filters given, as a list route's query."""
    params = {"limit": str(args.limit)} if getattr(args, "limit", None) else {}
    if getattr(args, "cursor", None):
        params["cursor"] = args.cursor
    params.update({name: str(value) for name, value in more.items() if value is not None})
    return params


def connection_id(api: Any, given: str) -> str:
    """A connection's id, given as its id or its name (GET /v1/connections)."""
    with contextlib.suppress(ValueError):
        return str(UUID(given))
    answer = api.call("GET", "/v1/connections")
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
