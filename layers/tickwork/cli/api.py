"""`tickwork api METHOD PATH`: any route of the API, with a token and the workspace header."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from tickwork.cli import calls
from tickwork.cli.common import HelpFormatter, say
from tickwork.platform.errors import InputError


def _data(value: str | None) -> Any:
    """--data: JSON, or @FILE (@- for stdin) holding it."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        source = value[1:]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
        except OSError as exc:
            raise InputError(
                f"--data {value}: cannot read {source}: {exc.strerror}", field="data"
            ) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"--data is not JSON: {exc}", field="data") from exc


def cmd_api(args: argparse.Namespace) -> int:
    """Any route of the API with the token and the workspace header added; prints the
    answer's body, and on a refusal its code and message on stderr (exit 1)."""
    body = _data(args.data)
    path, _, query_string = args.path.partition("?")
    path = path if path.startswith("/") else "/" + path
    params = dict(parse_qsl(query_string, keep_blank_values=True)) or None
    api, _ = calls.caller(args, workspace_required=False)
    answer = api.call(args.method, path, body=body, params=params)
    if answer.body is not None and answer.body != "":
        text = answer.body if isinstance(answer.body, str) else json.dumps(answer.body, indent=2)
        print(text)
    if not answer.ok:
        error = answer.error
        say(f"tickwork: HTTP {answer.status} {error.get('code')}: {error.get('message')}")
        return 1
    return 0


def add_commands(
    commands: Any, parents: list[argparse.ArgumentParser], output: argparse.ArgumentParser
) -> None:
    api = commands.add_parser(
        "api",
        help="call any route of the API with a token and the workspace header",
        description="Call any route of the API (GET /v1/rules, POST /v1/recurring, ...) as"
        " --user, in --workspace (the header is left out without one), with --data as the"
        " body; prints the answer's JSON, and a refusal's code and message on stderr (exit 1)."
        " The routes and their bodies: GET /v1/openapi.json, or the API reference.",
        parents=[*parents, output],
        formatter_class=HelpFormatter,
    )
    api.set_defaults(run=cmd_api)
    api.add_argument(
        "method", type=str.upper, choices=["GET", "POST", "PUT", "PATCH", "DELETE"],
        metavar="METHOD", help="GET, POST, PUT, PATCH or DELETE",
    )  # fmt: skip
    api.add_argument("path", help="the route, with a query string if any: /v1/rules?enabled=true")
    api.add_argument("--data", help="the JSON body, or @FILE holding it (@- reads stdin)")
