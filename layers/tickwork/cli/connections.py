"""`tickwork connections`: list and show the workspace's provider accounts."""

from __future__ import annotations

import argparse
from typing import Any

from tickwork.cli import calls, tables
from tickwork.cli.common import verbs


def cmd_connections_list(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    params = {"provider": args.provider} if args.provider else None
    answer = api.call("GET", "/v1/connections", params=params)
    return calls.respond(
        args, answer, lambda page: tables.connections(page, args.workspace, args.user)
    )


def cmd_connections_show(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    connection_id = calls.connection_id(api, args.id)
    return calls.respond(args, api.call("GET", f"/v1/connections/{connection_id}"), tables.fields)


def add_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    connections = verbs(commands, "connections", "connections: list, show (/v1/connections)",
                        parents, output)  # fmt: skip
    connections("list", "the workspace's connections (GET /v1/connections)",
                cmd_connections_list).add_argument("--provider",
                                                   help="only this provider")  # fmt: skip
    connections("show", "one connection, never its credentials", cmd_connections_show
                ).add_argument("id", help="connection id or name")  # fmt: skip
