"""`tickwork rules`: list and show automation rules."""

from __future__ import annotations

import argparse
from typing import Any

from tickwork.cli import calls, tables
from tickwork.cli.common import ID_HELP, paging, verbs


def cmd_rules_list(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    enabled = None if args.enabled is None else str(args.enabled == "yes").lower()
    params = calls.page_params(args, enabled=enabled, trigger_type=args.trigger)
    answer = api.call("GET", "/v1/rules", params=params)
    return calls.respond(args, answer, lambda page: tables.table(
        page["items"], tables.RULES, page.get("next_cursor")))  # fmt: skip


def cmd_rules_show(args: argparse.Namespace) -> int:
    api, rule_id = calls.caller(args)
    return calls.respond(args, api.call("GET", f"/v1/rules/{rule_id}"), tables.fields)


def add_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    rules = verbs(commands, "rules", "automation rules: list, show (/v1/rules)", parents, output)
    listing = rules("list", "the rules, oldest first (GET /v1/rules)", cmd_rules_list)
    listing.add_argument("--enabled", choices=["yes", "no"], help="only enabled, or disabled")
    listing.add_argument("--trigger", choices=["event", "time"], help="only this trigger type")
    paging(listing)
    rules("show", "one rule (GET /v1/rules/{id})", cmd_rules_show, "rules").add_argument(
        "id", help="rule " + ID_HELP
    )
