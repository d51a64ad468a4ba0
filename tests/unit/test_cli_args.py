"""The command line speaks in its own terms: what it refuses before calling anything, the
API's refusals in flag names, values printed as JSON or text (never a Python repr), the
engine's warnings as one line in the dev terminal, and the Makefile and the quick start
as a new user runs them."""

from __future__ import annotations

import argparse
import io
import logging
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tickwork import cli
from tickwork.cli import actions, calls, tables
from tickwork.local import logs
from tickwork.local.receiver import ReceivedWebhook, describe
from tickwork.platform.observability import logger

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = ["actions", "schedule", "--workspace", "Acme", "--type", "webhook", "--target", "p"]


def refused(capsys, *args: str) -> tuple[int, str]:
    """The exit code and stderr of a command refused before it calls anything."""
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's refusals
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("given", ["5", "90", " 2.5 "])
def test_a_duration_without_a_unit_is_refused(capsys, given):
    code, err = refused(capsys, *SCHEDULE, "--in", given)
    assert code == 2
    assert f"argument --in: {given!r} is not a duration with a unit" in err
    assert f"say {given.strip()}s; minutes: {given.strip()}m" in err


def test_durations_with_units_are_read():
    assert actions.parse_in("30s").total_seconds() == 30
    assert actions.parse_in("5m").total_seconds() == 300
    assert actions.parse_in("1.5h").total_seconds() == 5400
    assert actions.parse_in("1d").total_seconds() == 86400


@pytest.mark.parametrize("hours", ["0", "-1", "nan", "soon", "100000"])
def test_a_token_for_no_time_is_refused(capsys, hours):
    code, err = refused(capsys, "token", "--workspace", "Acme", "--hours", hours)
    assert code == 2
    assert f"argument --hours: {hours!r} is not a number of hours above 0" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--date", "2027-01-01"], "--date needs --time HH:MM[:SS]"),
        (["--in", "5s", "--time", "09:00"], "--time needs --date YYYY-MM-DD"),
        (["--at", "2027-01-01T09:00:00Z", "--timezone", "Asia/Tokyo"], "--timezone goes with"),
        (["--in", "5s", "--payload", "{not json"], "--payload is not JSON"),
    ],
)
def test_when_and_payload_are_checked_in_flag_terms_before_any_call(capsys, extra, message):
    # No `tickwork dev` runs and no database is named: the refusal comes first
    code, err = refused(capsys, *SCHEDULE, *extra)
    assert code == 2
    assert err.startswith(f"tickwork: {message}")


def test_the_apis_field_names_read_as_the_commands_flags():
    flags = actions.SCHEDULE_FLAGS
    assert (
        calls.in_flag_terms("name the postmark connection to send through (connection_id)", flags)
        == "name the postmark connection to send through (--connection)"
    )
    assert calls.in_flag_terms("time: must be HH:MM[:SS]", flags) == "--time: must be HH:MM[:SS]"
    assert calls.in_flag_terms("no action_type 'x'; target_key primary", flags) == (
        "no --type 'x'; --target primary"
    )
    # plain words stay words where they are not the field
    assert calls.in_flag_terms("at a time in the payload", flags) == "at a time in the payload"


# The commands in the order `tickwork --help` lists them, and the module of each.
COMMANDS = {
    "migrate": "ops", "dev": "local", "demo": "local", "console": "local", "token": "local",
    "status": "ops", "redrive": "ops", "reset": "ops", "workspace": "workspace",
    "actions": "actions", "api": "api", "recurring": "recurring", "rules": "rules",
    "recipients": "recipients", "suppressions": "suppressions", "connections": "connections",
}  # fmt: skip


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [found] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found.choices)


def test_each_command_group_is_a_module_of_its_own_in_the_help_order():
    commands = subcommands(cli.build_parser())
    assert list(commands) == list(COMMANDS)
    for name, sub in commands.items():
        verbs = subcommands(sub) if sub.get_default("run") is None else {"": sub}
        for verb, parser in verbs.items():
            run = parser.get_default("run")
            assert run.__module__ == f"tickwork.cli.{COMMANDS[name]}", (name, verb)


def test_why_gives_every_time_in_the_answers_zone_and_names_it():
    answer = {
        "id": "0b6c7f7e", "status": "queued", "as_of": "2026-12-08T00:30:00+00:00",
        "timezone": "Europe/Paris",
        "steps": [{"code": "created", "at": "2026-12-07T23:00:00+00:00", "text": "Created."},
                  {"code": "held", "at": None, "text": "Held."}],
    }  # fmt: skip
    assert actions.why_text(answer).splitlines() == [
        "action 0b6c7f7e is queued (as of 2026-12-08 01:30:00 CET); times in Europe/Paris:",
        "  2026-12-08 00:00:00 CET  Created.",
        "  now                      Held.",
    ]


def test_values_print_as_text_or_json_never_a_python_repr():
    answer = {"ok": True, "caps": {"sms": 2}, "days": ["mon"], "none": None, "name": "x"}
    text = tables.fields(answer)
    assert "True" not in text
    assert "{'" not in text
    assert "caps  " in text
    assert text.splitlines() == [
        f"{'ok':<22}true",
        f"{'caps':<22}" + '{"sms": 2}',
        f"{'days':<22}" + '["mon"]',
        f"{'none':<22}-",
        f"{'name':<22}x",
    ]
    # a long field name still leaves a gap before its value
    assert "max_failures_before_pause  5" in tables.fields({"max_failures_before_pause": 5})
    rows = tables.table([{"id": "abcdef1234", "name": "n" * 40}], [
        ("id", 10, lambda r: r["id"][:8]), ("name", 12, lambda r: r["name"])])  # fmt: skip
    assert rows.splitlines()[1] == "abcdef12  " + "n" * 9 + "…"  # cut to the column, less 2
    assert tables.table([], [("id", 10, lambda r: r)]).splitlines()[1] == "(none)"


def test_a_delivery_line_ends_with_its_payload_in_short():
    body = {"data": {"id": "27307ae6-0000", "target_key": "primary", "thing_id": "t",
                     "publish_at": "2026-05-01T06:58:44+00:00",
                     "payload": {"text": "hello " * 30}}}  # fmt: skip
    line = describe(ReceivedWebhook("msg_x", 1777618724.5, True, body))
    assert '  payload {"text":"hello hello' in line
    assert line.endswith("…")
    assert len(line.split("  payload ")[1]) == 60
    assert "\n" not in line


def test_the_dev_terminal_shows_a_warning_as_one_readable_line(monkeypatch):
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    before = handler.formatter
    monkeypatch.setenv(logs.FORMAT_VAR, "text")
    logs.use_readable_lines()
    printed = io.StringIO()
    stream = handler.setStream(printed)
    try:
        logger.warning(
            "provider call did not succeed",
            extra={"action_id": "37b8d0b4-4c70-472d-b97a-09a58c1be3a2", "status": 503,
                   "answer": {"error": "x" * 200}},
        )  # fmt: skip
        logging.getLogger("tickwork.local").warning("released %d rows", 3)
        lines = printed.getvalue().splitlines()
    finally:
        handler.setFormatter(before)
        handler.setStream(stream)
    assert len(lines) == 2
    first, second = lines
    assert re.match(r"^\d\d:\d\d:\d\d\.\d{3}  WARNING  provider call did not succeed ", first)
    assert " action_id=37b8d0b4 status=503 answer=" in first
    assert first.endswith("…")
    assert "{" not in first.split("answer=")[0]  # no JSON log line around it
    assert second.endswith("WARNING  released 3 rows")


def test_the_json_log_lines_stay_unless_text_is_asked_for(monkeypatch):
    handler = logger.registered_handler
    assert handler is not None
    monkeypatch.delenv(logs.FORMAT_VAR, raising=False)
    logs.use_readable_lines()
    assert not isinstance(handler.formatter, logs.ReadableFormatter)


def test_make_demo_passes_its_arguments():
    ran = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "demo", "ARGS=--count 3 --last 20"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert ".venv/bin/tickwork demo --count 3 --last 20" in ran.stdout


def quick_start_commands(page: Path) -> list[str]:
    """The `tickwork` command lines of a page's shell blocks, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(), re.DOTALL)
    text = "\n".join(blocks).replace("\\\n", " ")
    found = []
    for raw in text.splitlines():
        line = raw.split("  #")[0].strip()
        if ".venv/bin/tickwork " not in line:
            continue
        # ID=$(.venv/bin/tickwork actions schedule ... --quiet): the command inside
        inner = re.search(r"\$\((\.venv/bin/tickwork [^)]*)\)", line)
        found.append(inner.group(1) if inner else line[line.index(".venv/bin/tickwork") :])
    return found


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_quick_start_can_be_pasted_as_it_is(page):
    commands = quick_start_commands(ROOT / page)
    assert len(commands) >= 4
    for command in commands:
        assert "<" not in command, f"a placeholder in {page}: {command}"
        argv = shlex.split(command)[1:]
        cli.build_parser().parse_args(argv)  # every flag exists and every value parses
