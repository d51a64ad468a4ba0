"""`tickwork suppressions`: list, add and remove addresses never to message."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from tickwork.cli import calls, tables
from tickwork.cli.common import paging, verbs
from tickwork.suppression.model import REASONS


def cmd_suppressions_list(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    params = calls.page_params(args, channel=args.channel, reason=args.reason)
    answer = api.call("GET", "/v1/suppressions", params=params)
    return calls.respond(args, answer, lambda page: tables.table(
        page["items"], tables.SUPPRESSIONS, page.get("next_cursor")))  # fmt: skip


def cmd_suppressions_add(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    body = {"channel": args.channel, "address": args.address, "reason": args.reason,
            "scope": args.scope} | ({"detail": args.detail} if args.detail else {})  # fmt: skip
    answer = api.call("POST", "/v1/suppressions", body=body)

    def human(entry: dict[str, Any]) -> str:
        state = "suppressed" if answer.status == 201 else "already suppressed"
        return (
            f"{entry['channel']} {entry['address']} {state} ({entry['reason']}, {entry['scope']})"
        )

    return calls.respond(args, answer, human)


def cmd_suppressions_remove(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    path = f"/v1/suppressions/{args.channel}/{quote(args.address, safe='@+')}"
    answer = api.call("DELETE", path, params={"scope": args.scope})
    return calls.respond(
        args,
        answer,
        lambda e: (
            f"{e['channel']} {e['address']} removed from the list ({e['reason']}, {e['scope']})"
        ),
    )


def add_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    suppressions = verbs(commands, "suppressions", "addresses never to message: list, add,"
                         " remove (/v1/suppressions)", parents, output)  # fmt: skip
    scope_help = "all, campaign:<id> or rule:<id>"
    listing = suppressions("list", "the list, newest first (GET /v1/suppressions)",
                           cmd_suppressions_list)  # fmt: skip
    listing.add_argument("--channel", choices=["email", "sms"], help="only this channel")
    listing.add_argument("--reason", choices=list(REASONS), help="only this reason")
    paging(listing)
    add = suppressions("add", "suppress an address (POST /v1/suppressions)", cmd_suppressions_add)
    remove = suppressions("remove", "remove an address from the list (a complaint: admins only)",
                          cmd_suppressions_remove)  # fmt: skip
    for verb in (add, remove):
        verb.add_argument("channel", choices=["email", "sms"], help="email or sms")
        verb.add_argument("address", help="an email address or an E.164 phone number")
        verb.add_argument("--scope", default="all", help=scope_help)
    add.add_argument("--reason", choices=list(REASONS), default="manual", help="why")
    add.add_argument("--detail", help="a short note kept with the entry")
