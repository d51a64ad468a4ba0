"""What the docs show a user to paste works: every request body in docs/ is sent to the local
API and answered 2xx, every action types value is read by Settings, and the shell examples
run against the API. One API for all of them, so it stays fast.

The convention (docs/*.md): an HTML comment on the line before a fenced block says what the
block is; the site does not show it.

    <!-- example: POST /v1/recurring -->
        a body for that route, sent as it is as an admin of the workspace. A jsonc block may
        hold several bodies, each sent; its whole-line `//` comments are dropped. `{id}` in
        the path is the id the page's previous example answered with; a `<...>` string in a
        body is one of PLACEHOLDERS (what only the user knows, such as their connection's id).
    <!-- example: action types -->
        a value of TICKWORK_ACTION_TYPES (the stack's ActionTypes parameter).
    <!-- example: shell -->
        commands run by bash with API (the API's URL), TOKEN (an admin's token) and WS (the
        workspace's id) set; a curl answered 4xx or 5xx fails it.
    <!-- example: shown -->
        not sent: an answer, a part of a body shown in its context, or a body's shape.

Every json and jsonc block in docs/ carries one, but those that include a file of examples/
(`--8<--`): test_examples.py runs the scripts that send those.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tickwork.platform.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!-- example: (?P<what>.+?) -->$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
# The example hosts the docs name, resolved to a public address (there may be no DNS here,
# and the API refuses private ones).
PUBLIC = "93.184.215.14"
EXAMPLE_HOSTS = {"example.com", "hooks.example.com"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    what: str | None  # the marker's text, None without one
    text: str

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def blocks() -> list[Block]:
    """Every fenced block of docs/, in page order, with the marker before it (if any)."""
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        lines = path.read_text().splitlines()
        index = 0
        while index < len(lines):
            fence = FENCE.match(lines[index])
            if fence is None:
                index += 1
                continue
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            marker = MARKER.match(lines[index - 1]) if index else None
            found.append(Block(
                str(path.relative_to(DOCS)), index + 1, fence["lang"],
                marker["what"] if marker else None, "\n".join(lines[index + 1 : end]),
            ))  # fmt: skip
            index = end + 1
    return found


def bodies(block: Block) -> list[Any]:
    """The JSON values of a block, its whole-line // comments dropped."""
    text = "\n".join(line for line in block.text.splitlines() if not line.strip().startswith("//"))
    decoder, values, at = json.JSONDecoder(), [], 0
    while (at := _skip_space(text, at)) < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def test_every_json_block_says_what_it_is() -> None:
    unmarked = [
        b.where for b in blocks()
        if b.lang in {"json", "jsonc"} and b.what is None and "--8<--" not in b.text
    ]  # fmt: skip
    assert not unmarked, f"mark each with <!-- example: ... --> (see {__name__}): {unmarked}"
    kinds = {b.what for b in blocks() if b.what is not None}
    odd = {k for k in kinds if k not in {"action types", "shell", "shown"}
           and not re.fullmatch(r"(POST|PUT|PATCH) /v1/\S+", k)}  # fmt: skip
    assert not odd, odd


@pytest.mark.parametrize(
    "block", [b for b in blocks() if b.what == "action types"], ids=lambda b: b.where
)
def test_each_action_types_example_is_read(block: Block) -> None:
    [value] = bodies(block)
    settings = Settings.model_validate({"action_types": value})
    assert set(settings.action_types) >= set(value)


def resolve_example_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def resolve(host: str, *args: Any, **kwargs: Any) -> Any:
        if host in EXAMPLE_HOSTS:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC, args[0] if args else 443))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


def placeholders(api: Api) -> dict[str, str]:
    """What the docs leave to the user, made here: a recipient `ann`, a Postmark connection."""
    api.admin.call("PUT", "/v1/recipients/ann", json={"timezone": "Europe/Berlin"})
    postmark = json.loads((ROOT / "examples" / "connections" / "postmark.json").read_text())
    connection = api.admin.call("POST", "/v1/connections", json=postmark)
    return {"<the connection's id>": connection["id"]}


def filled(value: Any, known: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: filled(v, known) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, known) for v in value]
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        return known[value]
    return value


def run_shell(api: Api, block: Block) -> str | None:
    """The block run by bash as the docs' reader would; None if it ran, else why not."""
    token = api.admin.http.headers["Authorization"].removeprefix("Bearer ")
    env = {**os.environ, "API": api.url, "TOKEN": token, "WS": api.workspace_a}
    script = 'set -euo pipefail\ncurl() { command curl --silent --fail-with-body "$@"; }\n'
    done = subprocess.run(
        ["bash", "-c", script + block.text],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return None if done.returncode == 0 else f"{done.stdout}{done.stderr}"


def test_every_request_the_docs_show_is_answered_2xx(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolve_example_hosts(monkeypatch)
    known = placeholders(api)
    failures, sent = [], 0
    answered: dict[str, str] = {}  # page -> the id its last example answered with
    for block in blocks():
        if block.what == "shell":
            sent += 1
            if (why := run_shell(api, block)) is not None:
                failures.append(f"{block.where}: {why}")
            continue
        if block.what is None or " /v1/" not in block.what:
            continue
        method, path = block.what.split(" ", 1)
        for body in bodies(block):
            sent += 1
            route = path.replace("{id}", answered.get(block.page, "{id}"))
            answer = api.admin.http.request(method, route, json=filled(body, known))
            if not 200 <= answer.status_code < 300:
                failures.append(f"{block.where}: {method} {route} {answer.status_code}"
                                f" {answer.text}")  # fmt: skip
            elif isinstance(answer.json(), dict) and "id" in answer.json():
                answered[block.page] = str(answer.json()["id"])
    assert sent >= 15, "the docs' examples were not found"
    assert not failures, "\n".join(failures)
