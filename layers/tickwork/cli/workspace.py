"""`tickwork workspace limits`: an operator's quotas for one workspace."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tickwork import quotas
from tickwork.cli.common import HelpFormatter, database_url, say, workspace_id
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.quotas import MAX_LIMIT, QUOTA_NAMES


def cmd_workspace_limits(args: argparse.Namespace) -> int:

    settings = Settings.from_env()
    given = {name: value for name in QUOTA_NAMES if (value := getattr(args, name)) is not None}
    reset = list(QUOTA_NAMES) if "all" in (args.reset or []) else list(args.reset or [])
    with connect(database_url(args)) as conn:
        workspace = workspace_id(conn, args.workspace)
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


def _limit(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number from 0 (no limit) up")
    return number


def add_commands(
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
