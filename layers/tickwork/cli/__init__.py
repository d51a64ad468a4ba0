"""The `tickwork` command: the local runtime, its demo and tokens, migrations, and what an
operator needs from a shell (status, actions, recurring schedules, rules, recipients,
connections, any API call, redrive, reset, a workspace's limits)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tickwork import __version__
from tickwork.cli import (
    actions,
    api,
    connections,
    local,
    ops,
    recipients,
    recurring,
    rules,
    suppressions,
    workspace,
)
from tickwork.cli.common import HelpFormatter, Run, acting
from tickwork.local.paths import ENV_VAR, default_data_dir
from tickwork.platform.errors import TickworkError


def build_parser() -> argparse.ArgumentParser:
    """Every command, one module per group (tickwork.cli.<group>), in the order --help lists
    them."""
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
        name: str, summary: str, run: Run, extra: Sequence[argparse.ArgumentParser] = ()
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

    ops.add_migrate(command)
    local.add_commands(command)
    ops.add_commands(command, output)
    workspace.add_commands(commands, parents, output)
    calling = [*parents, acting()]
    actions.add_commands(commands, calling, output)
    api.add_commands(commands, calling, output)
    recurring.add_commands(commands, calling, output)
    rules.add_commands(commands, calling, output)
    recipients.add_commands(commands, calling, output)
    suppressions.add_commands(commands, calling, output)
    connections.add_commands(commands, calling, output)
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
    except BrokenPipeError:
        # The reader went away (`... | head`): no traceback, and none at exit either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
