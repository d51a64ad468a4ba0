"""`tickwork recipients`: list and show registered recipients."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from tickwork.cli import calls, tables
from tickwork.cli.common import paging, verbs


def cmd_recipients_list(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    answer = api.call("GET", "/v1/recipients", params=calls.page_params(args))
    return calls.respond(args, answer, lambda page: tables.table(
        page["items"], tables.RECIPIENTS, page.get("next_cursor")))  # fmt: skip


def cmd_recipients_show(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    return calls.respond(
        args, api.call("GET", f"/v1/recipients/{quote(args.id, safe='')}"), tables.fields
    )


def add_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    recipients = verbs(commands, "recipients", "recipients: list, show (/v1/recipients)",
                       parents, output)  # fmt: skip
    paging(recipients("list", "the recipients by id (GET /v1/recipients)", cmd_recipients_list))
    recipients("show", "one recipient, with what they were sent today", cmd_recipients_show
               ).add_argument("id", help="recipient id")  # fmt: skip
