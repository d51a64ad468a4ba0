"""`tickwork actions`: list, show, explain (why), schedule, cancel and retry actions, one or
in bulk, through the API (its validation, messages and codes)."""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo

from tickwork.cli import calls, tables
from tickwork.cli.common import ID_HELP, HelpFormatter, Run, say
from tickwork.platform.errors import InputError
from tickwork.platform.wallclock import utcnow

_IN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)\s*$")
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_in(value: str) -> timedelta:
    """`30s`, `2m`, `1h`, `1d` as a timedelta; a number without its unit is refused (is `5`
    seconds or minutes?)."""
    match = _IN.match(value)
    if not match:
        bare = re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", value)
        hint = f" (seconds? say {value.strip()}s; minutes: {value.strip()}m)" if bare else ""
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a duration with a unit, like 30s, 5m, 2h or 1d{hint}"
        )
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


# The API's names of what `actions schedule` sends, and the flags a person gave them with:
# a refusal reads in the terms of the command line.
SCHEDULE_FLAGS = {
    "connection_id": "--connection", "recipient_id": "--recipient", "action_type": "--type",
    "target_key": "--target", "thing_id": "--thing", "publish_at": "--at/--in",
    "transactional": "--transactional", "payload": "--payload", "date": "--date",
    "time": "--time", "timezone": "--timezone", "tags": "--tag",
}  # fmt: skip


# ------------------------------------------------------------------------ reading


ACTIONS: list[tables.Column] = [
    ("id", 10, lambda a: a["id"][:8]),
    ("type", 14, lambda a: a["action_type"]),
    ("target", 12, lambda a: a["target_key"]),
    ("thing", 24, lambda a: a["thing_id"]),
    ("due (UTC)", 21, lambda a: tables.utc(a["publish_at"])),
    ("status", 11, lambda a: a["status"]),
    ("tags", 26, tables.tags),
    ("error", 24, lambda a: a.get("error_code") or ""),
]


def _show(a: dict[str, Any]) -> str:
    """An action, a field a line (values that are not text as JSON), the payload last."""
    shown = {key: value for key, value in a.items() if key != "resolved"}
    text = tables.fields(shown, last=["payload"])
    if a.get("resolved"):
        resolved = f"{a['resolved']['rule']}: {a['resolved']['note'] or 'exact'}"
        text += f"\n{'resolved':<{tables.WIDTH}}{resolved}"
    return text


def cmd_actions_list(args: argparse.Namespace) -> int:
    api, _ = calls.caller(args)
    params = {"limit": str(args.limit)}
    for name, value in (
        ("from", args.start),
        ("to", args.end),
        ("status", args.status),
        ("action_type", args.type),
        ("thing_id", args.thing),
        ("tag", args.tag),
        ("cursor", args.cursor),
    ):
        if value:
            params[name] = value
    answer = api.call("GET", "/v1/actions", params=params)

    def human(page: dict[str, Any]) -> str:
        used = page.get("range") or {}
        heading = f"actions due from {used.get('from')} to {used.get('to')}:"
        return heading + "\n" + tables.table(page["items"], ACTIONS, page.get("next_cursor"))

    return calls.respond(args, answer, human, {"tag": "--tag"})


def cmd_actions_show(args: argparse.Namespace) -> int:
    api, action_id = calls.caller(args)
    return calls.respond(args, api.call("GET", f"/v1/actions/{action_id}"), _show)


def why_text(answer: dict[str, Any]) -> str:
    """An action's steps for people: when, then what; every time in the one zone the
    answer's sentences use, named in the first line."""
    zone = ZoneInfo(answer["timezone"])

    def local(instant: str) -> str:
        return datetime.fromisoformat(instant).astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")

    lines = [
        f"action {answer['id']} is {answer['status']} (as of {local(answer['as_of'])});"
        f" times in {answer['timezone']}:"
    ]
    width = max([len(local(answer["as_of"])), *(len(local(s["at"])) for s in answer["steps"]
                                                 if s.get("at"))]) + 2  # fmt: skip
    for step in answer["steps"]:
        when = local(step["at"]) if step.get("at") else "now"
        lines.append(f"  {when:<{width}}{step['text']}")
    return "\n".join(lines)


def cmd_actions_why(args: argparse.Namespace) -> int:
    api, action_id = calls.caller(args)
    params = {"timezone": args.timezone} if args.timezone else None
    answer = api.call("GET", f"/v1/actions/{action_id}/why", params=params)
    return calls.respond(args, answer, why_text, {"timezone": "--timezone"})


# --------------------------------------------------------------------- scheduling


def _check_when(args: argparse.Namespace) -> None:
    """--date goes with --time (and --timezone only with them), said in flag terms before
    anything is sent."""
    if args.date is not None and args.time is None:
        raise InputError(
            "--date needs --time HH:MM[:SS] (the wall time on that date)", field="time"
        )
    if args.time is not None and args.date is None:
        raise InputError("--time needs --date YYYY-MM-DD (instead of --in or --at)", field="date")
    if args.timezone is not None and args.date is None:
        raise InputError(
            "--timezone goes with --date and --time (an --at time carries its own offset)",
            field="timezone",
        )


def cmd_actions_schedule(args: argparse.Namespace) -> int:
    _check_when(args)
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise InputError(f"--payload is not JSON: {exc}", field="payload") from exc
    api, _ = calls.caller(args)
    body: dict[str, Any] = {"action_type": args.type, "target_key": args.target, "payload": payload}
    if args.thing:
        body["thing_id"] = args.thing
    if args.connection:
        body["connection_id"] = calls.connection_id(api, args.connection)
    if args.recipient:
        body["recipient_id"] = args.recipient
    if args.transactional:
        body["transactional"] = True
    if args.tags:
        body["tags"] = args.tags
    if args.in_ is not None:
        body["publish_at"] = (utcnow() + args.in_).isoformat()
    elif args.at:
        body["publish_at"] = args.at
    else:
        body["date"], body["time"] = args.date, args.time
        if args.timezone:
            body["timezone"] = args.timezone
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    answer = api.call("POST", "/v1/actions", body=body, headers=headers)
    if args.quiet and answer.ok and not args.json:
        print(answer.body["id"])
        return 0
    return calls.respond(args, answer, lambda a: "scheduled:\n" + _show(a), SCHEDULE_FLAGS)


def _transition(verb: str) -> Run:
    def run(args: argparse.Namespace) -> int:
        api, action_id = calls.caller(args)
        answer = api.call("POST", f"/v1/actions/{action_id}/{verb}")
        return calls.respond(args, answer, lambda a: f"{a['id']} is now {a['status']}")

    return run


# -------------------------------------------------------------------------- in bulk

# The parents a cancel may name (`--tag`, `--recipient`, `--campaign`, `--entity`).
PARENT_FLAGS = ("tag", "recipient", "campaign", "entity")


def _parents_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, name, None) for name in PARENT_FLAGS)


def _bulk_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {} if args.limit is None else {"limit": args.limit}
    entity = getattr(args, "entity", None)
    entity_type, _, entity_id = entity.partition("/") if entity else (None, "", None)
    for name, value in (
        ("action_type", args.type), ("error_code", args.error_code),
        ("due_from", args.due_from), ("due_to", args.due_to), ("thing_id", args.thing),
        ("target_key", args.target), ("tag", getattr(args, "tag", None)),
        ("recipient_id", getattr(args, "recipient", None)),
        ("campaign_id", getattr(args, "campaign", None)),
        ("entity_type", entity_type), ("entity_id", entity_id if entity else None),
    ):  # fmt: skip
        if value:
            body[name] = value
    return body


def _bulk(verb: str) -> Run:
    """`cancel-all`, `retry-all`: POST /v1/actions/bulk-{verb} with the filter, again with
    each answer's `next` until none is left; prints the running count (stderr) and the
    totals."""

    def run(args: argparse.Namespace) -> int:
        api, _ = calls.caller(args)
        body = _bulk_body(args)
        totals: dict[str, Any] = {
            "matched": 0, "changed": 0, "skipped": 0, "refused": {}, "exited": 0,
            "paused_schedules": [],
        }  # fmt: skip
        count = 0
        while True:
            answer = api.call("POST", f"/v1/actions/bulk-{verb}", body=body)
            if not answer.ok:
                if count:
                    say(f"stopped after {count} calls: {_bulk_line(verb, totals)}")
                return calls.print_error(answer, args)
            count += 1
            _add_up(totals, answer.body)
            if not answer.body.get("next"):
                break
            if not answer.body.get("matched") and not answer.body.get("paused_schedules"):
                # A parent's rows left pending are all held this instant (a claim in
                # progress): calling again at once would spin.
                say("the parent's pending rows left are being claimed right now; run again")
                break
            say(f"... {_bulk_line(verb, totals)} so far ({count} calls)")
            body["after"] = answer.body["next"]
        totals["calls"] = count
        if verb != "cancel":
            del totals["paused_schedules"]
        print(json.dumps(totals, indent=2) if args.json else _bulk_line(verb, totals))
        return 0

    return run


def _cancel(args: argparse.Namespace) -> int:
    """`actions cancel ID`, or with a parent (`--tag`, ...) everything pending of it."""
    if _parents_given(args) == (args.id is not None):
        raise InputError(
            "give an action id, or a parent (--tag, --recipient, --campaign, --entity)"
            " to cancel everything pending of it; not both"
        )
    if args.id is None:
        return _bulk("cancel")(args)
    return _transition("cancel")(args)


def _add_up(totals: dict[str, Any], answer: dict[str, Any]) -> None:
    for name in ("matched", "changed", "skipped", "exited"):
        totals[name] += int(answer.get(name) or 0)
    for reason, count in (answer.get("refused") or {}).items():
        totals["refused"][reason] = totals["refused"].get(reason, 0) + int(count)
    totals["paused_schedules"] += answer.get("paused_schedules") or []


def _bulk_line(verb: str, totals: dict[str, Any]) -> str:
    done = "cancelled" if verb == "cancel" else "retried"
    line = (
        f"{done} {totals['changed']} of {totals['matched']} matching;"
        f" {totals['skipped']} skipped (moved on meanwhile)"
    )
    for reason, count in sorted(totals["refused"].items()):
        line += f"; {count} refused ({reason.replace('_', ' ')})"
    if totals.get("exited"):
        line += f"; {totals['exited']} enrollments exited"
    paused = totals.get("paused_schedules") or []
    if paused:
        line += (
            f"; paused {len(paused)} recurring schedule{'s' if len(paused) > 1 else ''}"
            f" ({', '.join(paused)}): they would have made more"
        )
    return line


# -------------------------------------------------------------------------- parser


def add_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    version = parents[0]
    actions_parser = commands.add_parser(
        "actions",
        help="list, show, explain (why), schedule, cancel, retry actions, one or in bulk (the"
        " API's rules)",
        description="Actions through the API: the same validation, messages and codes.",
        parents=[version],
        formatter_class=HelpFormatter,
    )
    subparsers = actions_parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, summary: str, run: Run) -> argparse.ArgumentParser:
        sub = subparsers.add_parser(
            name,
            help=summary,
            description=summary,
            parents=[*parents, output],
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
    listing.add_argument("--tag", help="only actions with this tag")
    listing.add_argument("--limit", type=int, default=100, help="actions per page (1-500)")
    listing.add_argument("--cursor", help="next_cursor of the previous page")
    verb("show", "one action (GET /v1/actions/{id})", cmd_actions_show).add_argument(
        "id", help="action " + ID_HELP
    )
    why = verb(
        "why",
        "why an action is where it is: its steps, every time in one zone, named"
        " (GET /v1/actions/{id}/why)",
        cmd_actions_why,
    )
    why.add_argument("id", help="action " + ID_HELP)
    why.add_argument(
        "--timezone",
        help="the zone to show every time in, e.g. Europe/Paris; default: the zone the action"
        " was scheduled in, else the workspace's",
    )
    _schedule_arguments(verb("schedule", "schedule an action (POST /v1/actions)",
                             cmd_actions_schedule))  # fmt: skip
    cancel = verb(
        "cancel",
        "cancel a queued action, or every pending action of a tag, recipient, campaign or"
        " entity (.../bulk-cancel, as cancel-all)",
        _cancel,
    )
    cancel.add_argument("id", nargs="?", help="action " + ID_HELP)
    _bulk_arguments(cancel, parents=True)
    verb("retry", "retry a failed action (admins)", _transition("retry")).add_argument(
        "id", help="action " + ID_HELP
    )
    for name, summary in (
        ("cancel-all", "cancel the queued actions matching a filter (.../bulk-cancel)"),
        ("retry-all", "retry the failed actions matching a filter (admins; .../bulk-retry)"),
    ):
        bulk = verb(name, summary, _bulk(name.removesuffix("-all")))
        _bulk_arguments(bulk, parents=name == "cancel-all")


def _schedule_arguments(schedule: argparse.ArgumentParser) -> None:
    schedule.add_argument("--type", required=True, help="action_type, e.g. webhook")
    schedule.add_argument("--target", required=True, help="target_key, e.g. primary")
    schedule.add_argument("--thing", help="thing_id")
    schedule.add_argument("--payload", default="{}", help="JSON object")
    when = schedule.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--in",
        dest="in_",
        type=parse_in,
        metavar="DURATION",
        help="due this long from now: 30s, 5m, 2h, 1d",
    )
    when.add_argument("--at", help="publish_at, RFC 3339 with offset")
    when.add_argument("--date", help="local date YYYY-MM-DD (with --time)")
    schedule.add_argument("--time", help="local time HH:MM[:SS] (with --date)")
    schedule.add_argument("--timezone", help="zone of --date/--time; default: the workspace's")
    schedule.add_argument("--idempotency-key", help="the Idempotency-Key header")
    schedule.add_argument(
        "--connection",
        help="the connection to send through, by id or name (`tickwork connections list`);"
        " email, SMS, chat and posts need one",
    )
    schedule.add_argument(
        "--recipient", help="a registered recipient's id: their quiet hours and caps apply"
    )
    schedule.add_argument(
        "--transactional",
        action="store_true",
        help="exempt from the recipient's quiet hours and caps",
    )
    schedule.add_argument(
        "--tag",
        dest="tags",
        action="append",
        metavar="TAG",
        help="a label of your own, e.g. podcast:42 (repeatable, up to 10): `actions list"
        " --tag` finds it, `actions cancel --tag` cancels everything pending with it",
    )
    schedule.add_argument(
        "--quiet", "-q", action="store_true", help="print only the new action's id (for scripts)"
    )


def _bulk_arguments(bulk: argparse.ArgumentParser, *, parents: bool) -> None:
    bulk.add_argument("--type", help="only this action type")
    bulk.add_argument("--error-code", help="only this error_code")
    bulk.add_argument("--due-from", help="publish_at at or after this (RFC 3339 with offset)")
    bulk.add_argument("--due-to", help="publish_at before this (RFC 3339 with offset)")
    bulk.add_argument("--thing", help="only this thing_id")
    bulk.add_argument("--target", help="only this target_key")
    bulk.add_argument(
        "--limit", type=int, default=None,
        help="actions per call (default 500, at most 1000; with a parent 5000 and 10000);"
        " it loops until done",
    )  # fmt: skip
    if not parents:
        return
    parent = bulk.add_mutually_exclusive_group()
    parent.add_argument(
        "--tag",
        help="every pending action with this tag; pauses the active recurring schedules that"
        " carry it",
    )
    parent.add_argument(
        "--recipient",
        help="every pending action to this recipient_id; exits their enrollments and pauses"
        " their active recurring schedules",
    )
    parent.add_argument(
        "--campaign", help="this campaign id: exits its enrollments, cancels their steps"
    )
    parent.add_argument(
        "--entity", metavar="TYPE/ID", help="every pending action rules made for the entity"
    )
