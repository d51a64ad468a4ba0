"""What every `tickwork` command shares: where its data and database are, which workspace it
means, how it talks to people (stderr for notes), and the pieces its parsers are made of."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from tickwork.local.auth import LocalJwt
from tickwork.local.embedded import dev_database_url
from tickwork.local.paths import data_dir, jwt_key_file, pgdata, running_dev
from tickwork.platform.errors import InputError, NotFoundError
from tickwork.platform.sql import query

DEFAULT_USER = "local-user"

# A command's parser maker: `command(name, summary, run, extra_parents)`.
Command = Callable[..., argparse.ArgumentParser]
Run = Callable[[argparse.Namespace], int]


def say(message: str) -> None:
    """Progress and notes go to stderr, so stdout stays for what scripts read."""
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ where things are


def data_root(args: argparse.Namespace) -> Path:
    return data_dir(getattr(args, "data_dir", None))


def _embedded_url(here: Path) -> str:
    data = pgdata(here)
    if not (data / "PG_VERSION").exists():
        say(f"initializing a new embedded Postgres in {data} (first start only, ~10-20 s)...")
    elif not (data / "postmaster.pid").exists():
        say(f"starting the embedded Postgres in {data}...")
    url, _ = dev_database_url(here)
    say(f"using the embedded Postgres in {data} (--database-url or DATABASE_URL for your own)")
    return url


def database_url(args: argparse.Namespace, *, prefer_dev: bool = True) -> str:
    """--database-url, else DATABASE_URL, else the running `tickwork dev`'s database, else
    the embedded Postgres of the data directory."""
    if getattr(args, "database_url", None):
        return str(args.database_url)
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    here = data_root(args)
    if prefer_dev:
        dev = running_dev(here)
        if dev is not None:
            return dev.database_url
    return _embedded_url(here)


def jwt(args: argparse.Namespace) -> LocalJwt:
    return LocalJwt(jwt_key_file(data_root(args)))


def workspace_id(conn: Any, key: str | None) -> UUID:
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


# -------------------------------------------------------------------------- parsers


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in every --help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        flag = action.nargs == 0  # --admin, --no-demo: a default of True/False says nothing
        if flag or action.default in (None, argparse.SUPPRESS) or action.help is None:
            return action.help
        return super()._get_help_string(action)


def acting() -> argparse.ArgumentParser:
    """Options of the commands that call the API: as whom, in which workspace, where."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--workspace",
        default=os.environ.get("TICKWORK_WORKSPACE"),
        help="workspace name or id (env TICKWORK_WORKSPACE)",
    )
    parser.add_argument("--user", default=DEFAULT_USER, help="act as this member")
    parser.add_argument(
        "--api-url",
        help="the API; default: the running `tickwork dev`'s"
        " (in AWS, with TICKWORK_QUEUE_URLS set: the API handler in-process)",
    )
    return parser


def verbs(
    commands: Any, name: str, summary: str, parents: list[argparse.ArgumentParser],
    output: argparse.ArgumentParser,
) -> Callable[..., argparse.ArgumentParser]:  # fmt: skip
    """A command with verbs (`tickwork NAME VERB`), each taking `parents` and --json."""
    group = commands.add_parser(
        name, help=summary, description=summary, parents=[parents[0]], formatter_class=HelpFormatter
    )
    subparsers = group.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        verb_name: str, verb_summary: str, run: Run, table: str | None = None,
    ) -> argparse.ArgumentParser:  # fmt: skip
        sub = subparsers.add_parser(
            verb_name, help=verb_summary, description=verb_summary,
            parents=[*parents, output], formatter_class=HelpFormatter,
        )  # fmt: skip
        sub.set_defaults(run=run, id_table=table or "scheduled_actions")
        return cast(argparse.ArgumentParser, sub)

    return verb


def paging(parser: argparse.ArgumentParser, default: int = 50) -> None:
    parser.add_argument("--limit", type=int, default=default, help="items per page")
    parser.add_argument("--cursor", help="next_cursor of the previous page")


ID_HELP = "id, or its first 8 characters"
