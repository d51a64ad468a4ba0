"""The docs tell the truth about the API's error codes (docs/api/index.md, the error table)
and the command's options (docs/local.md, the `tickwork` command)."""

from __future__ import annotations

import argparse
import re
from http import HTTPStatus
from pathlib import Path

import tickwork.api  # noqa: F401  (imports every route, so every error class they raise)
from tickwork import cli
from tickwork.api.errors import status_of
from tickwork.platform.errors import TickworkError

ROOT = Path(__file__).resolve().parents[2]
ERRORS_PAGE = (ROOT / "docs/api/index.md").read_text()
COMMAND_PAGE = (ROOT / "docs/local.md").read_text()
SERVER = "layers/tickwork/local/api_server.py"


def _subclasses(cls: type[TickworkError]) -> list[type[TickworkError]]:
    return [c for s in cls.__subclasses__() for c in (s, *_subclasses(s))]


def api_error_codes() -> dict[str, int]:
    """Every code the API answers with, and its status: the domain errors it maps, and the
    ones its error layer and the local server write themselves."""
    codes = {}
    for cls in [TickworkError, *_subclasses(TickworkError)]:
        status = status_of(cls.__new__(cls))
        if status < 500:
            codes[cls.code] = int(status)
    sources = [*(ROOT / "layers/tickwork/api").glob("*.py"), ROOT / SERVER]
    for source in sources:
        for name, code in re.findall(r'HTTPStatus\.([A-Z_]+),\s*"([a-z_]+)"', source.read_text()):
            codes[code] = int(HTTPStatus[name])
    return codes


def documented_error_codes() -> dict[str, int]:
    return {
        code: int(status)
        for code, status in re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", ERRORS_PAGE, re.MULTILINE)
    }


def test_the_docs_list_every_error_code_the_api_returns_with_its_status():
    assert documented_error_codes() == api_error_codes()


def test_the_local_server_answers_only_with_codes_it_names_with_their_status():
    # each of its own answers is written `HTTPStatus.X, "code"`, which the test above reads
    source = (ROOT / SERVER).read_text()
    assert len(re.findall(r"HTTPStatus\.[A-Z_]+", source)) == len(
        re.findall(r'HTTPStatus\.([A-Z_]+),\s*"([a-z_]+)"', source)
    )


def test_the_docs_document_every_option_of_every_command():
    missing = []
    stack = [("tickwork", cli.build_parser())]
    while stack:
        name, parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend((f"{name} {sub}", p) for sub, p in action.choices.items())
                continue
            for option in action.option_strings:
                quoted = re.compile(r"`[^`\n]*" + re.escape(option) + r"(?![\w-])[^`\n]*`")
                documented = quoted.search(COMMAND_PAGE)
                if option.startswith("--") and option != "--help" and not documented:
                    missing.append(f"{name} {option}")
    assert not missing, missing
