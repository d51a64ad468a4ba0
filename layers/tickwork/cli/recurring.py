"""`tickwork recurring`: list, show, pause, resume and end recurring schedules."""

from __future__ import annotations

import argparse
from typing import Any

from tickwork.cli import calls, tables
from tickwork.cli.common import ID_HELP, Run, paging, verbs


def cmd_recurring_list(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    params = calls.page_params(args, status=args.status, action_type=args.type)
    answer = api.call("GET", "/v1/recurring", params=params)
    return calls.respond(args, answer, lambda page: tables.table(
        page["items"], tables.RECURRING, page.get("next_cursor")))  # fmt: skip


def cmd_recurring_show(args: argparse.Namespace) -> int:
    api, schedule_id = calls.caller(args)
    answer = api.call("GET", f"/v1/recurring/{schedule_id}", params={"preview": "5"})
    return calls.respond(args, answer, tables.schedule_detail)


def _transition(verb: str) -> Run:
    def run(args: argparse.Namespace) -> int:
        api, schedule_id = calls.caller(args)
        body = {"reason": args.reason} if getattr(args, "reason", None) else None
        answer = api.call("POST", f"/v1/recurring/{schedule_id}/{verb}", body=body)
        return calls.respond(args, answer, lambda s: f"schedule {s['id']} is now {s['status']}")

    return run


def add_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    recurring = verbs(commands, "recurring", "recurring schedules: list, show, pause, resume,"
                      " end (/v1/recurring)", parents, output)  # fmt: skip
    listing = recurring("list", "the schedules, oldest first (GET /v1/recurring)",
                        cmd_recurring_list)  # fmt: skip
    listing.add_argument("--status", choices=["active", "paused", "ended"], help="only this status")
    listing.add_argument("--type", help="only this action type")
    paging(listing)
    recurring("show", "one schedule and its next 5 occurrences", cmd_recurring_show,
              "recurring_schedules").add_argument("id", help="schedule " + ID_HELP)  # fmt: skip
    pause = recurring("pause", "pause a schedule: its queued occurrences not yet due are"
                      " cancelled", _transition("pause"), "recurring_schedules")  # fmt: skip
    pause.add_argument("id", help="schedule " + ID_HELP)
    pause.add_argument("--reason", help="why, kept with the schedule")
    recurring("resume", "resume a paused schedule from now", _transition("resume"),
              "recurring_schedules").add_argument("id", help="schedule " + ID_HELP)  # fmt: skip
    recurring("end", "end a schedule for good", _transition("end"),
              "recurring_schedules").add_argument("id", help="schedule " + ID_HELP)  # fmt: skip
