"""The console's files as the API serves them: what is served, with which headers, what is
refused; and the page's rules (no inline script or style, no HTML from data, nothing from
another origin) checked on the files themselves."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any
from zoneinfo import available_timezones

import pytest

from tickwork import console
from tickwork.api import handle
from tickwork.platform.config import Settings
from tickwork.platform.errors import ConfigError

STATIC = Path(str(files("tickwork.console").joinpath("static")))


def get(path: str, method: str = "GET") -> dict[str, Any]:
    event = {
        "version": "2.0", "rawPath": path, "headers": {},
        "requestContext": {"http": {"method": method, "path": path}},
    }  # fmt: skip
    result: dict[str, Any] = handle(event, None)  # type: ignore[arg-type]
    return result


def test_the_page_is_served_with_a_strict_policy() -> None:
    page = get("/console/")
    assert page["statusCode"] == 200
    assert page["headers"]["Content-Type"].startswith("text/html")
    policy = page["headers"]["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "style-src 'self'" in policy
    assert "unsafe" not in policy
    assert "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert page["headers"]["Referrer-Policy"] == "no-referrer"
    assert page["headers"]["X-Content-Type-Options"] == "nosniff"
    assert get("/console")["statusCode"] == 308
    assert get("/console")["headers"]["Location"] == "/console/"


@pytest.mark.parametrize(
    ("path", "kind"),
    [("/console/app.js", "text/javascript"), ("/console/console.css", "text/css"),
     ("/console/views/calendar.js", "text/javascript"), ("/console/favicon.svg", "image/svg")],
)  # fmt: skip
def test_files_are_served_with_their_types(path: str, kind: str) -> None:
    answer = get(path)
    assert answer["statusCode"] == 200
    assert answer["headers"]["Content-Type"].startswith(kind)


@pytest.mark.parametrize(
    "path",
    ["/console/nope.js", "/console/../api/__init__.py", "/console/views/../../__init__.py",
     "/console/__init__.py", "/console/static/app.js", "/console//app.js"],
)  # fmt: skip
def test_anything_else_is_not_found(path: str) -> None:
    assert get(path)["statusCode"] == 404


def test_only_get_reads_it() -> None:
    answer = get("/console/app.js", method="POST")
    assert (answer["statusCode"], answer["headers"]["Allow"]) == (405, "GET, HEAD")


def test_sign_in_is_a_pasted_token_without_an_issuer() -> None:
    assert json.loads(get("/console/config.json")["body"]) == {"oidc": None}


def test_the_zones_offered_are_the_current_iana_names_and_old_ones_map_to_them() -> None:
    answer = get("/console/zones.json")
    assert answer["headers"]["Content-Type"].startswith("application/json")
    document = json.loads(answer["body"])
    offered = document["zones"]
    assert {"Asia/Kolkata", "Asia/Kathmandu", "Europe/Amsterdam", "UTC"} <= set(offered)
    assert not {"Asia/Calcutta", "Asia/Katmandu", "Asia/Saigon", "US/Eastern"} & set(offered)
    assert document["aliases"]["Asia/Calcutta"] == "Asia/Kolkata"
    assert document["aliases"]["Asia/Katmandu"] == "Asia/Kathmandu"
    # Every one offered is one the API takes, and every old name maps to one offered.
    assert set(offered) <= available_timezones()
    assert set(document["aliases"].values()) <= set(offered)


def test_sign_in_uses_the_issuer_when_configured() -> None:
    settings = Settings(
        console_authorize_url="https://auth.example.com/oauth2/authorize",
        console_token_url="https://auth.example.com/oauth2/token",
        console_client_id="abc123",
    )
    assert console.sign_in_config(settings) == {
        "oidc": {
            "authorize_url": "https://auth.example.com/oauth2/authorize",
            "token_url": "https://auth.example.com/oauth2/token",
            "client_id": "abc123", "scopes": "openid",
        }
    }  # fmt: skip
    # The token endpoint is the one origin besides ours the page may call.
    policy = console.content_security_policy(settings)
    assert "connect-src 'self' https://auth.example.com;" in policy


@pytest.mark.parametrize(
    "url", ["http://auth.example.com/authorize", "javascript:alert(1)", "https://", "ftp://x/y"]
)
def test_sign_in_endpoints_must_be_https(url: str) -> None:
    with pytest.raises(ConfigError, match="https"):
        Settings.from_env({"TICKWORK_CONSOLE_AUTHORIZE_URL": url})


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text_in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1][0] == "script" and data.strip():
            self.text_in_script = True


def test_the_page_has_no_inline_script_or_style() -> None:
    parser = _Tags()
    parser.feed((STATIC / "index.html").read_text())
    scripts = [attrs for tag, attrs in parser.tags if tag == "script"]
    assert scripts
    assert all(attrs.get("src") for attrs in scripts)
    assert not parser.text_in_script
    assert not any(tag == "style" for tag, _ in parser.tags)
    assert not any("style" in attrs or any(a.startswith("on") for a in attrs)
                   for _, attrs in parser.tags)  # fmt: skip


SCRIPTS = sorted(STATIC.rglob("*.js"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(STATIC)))
def test_scripts_build_the_page_from_text_never_html(script: Path) -> None:
    source = script.read_text()
    # What a tenant stored is set as text (util.h): nothing parses it as markup or code.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "setAttribute(\"style\""):  # fmt: skip
        assert sink not in source, f"{script.name} uses {sink}"
    # Nothing is loaded from another origin (every dependency is in this folder).
    assert not re.search(r"""(from|import)\s*\(?\s*["']https?:""", source)
    for imported in re.findall(r"""from\s+["'](\.[^"']+)["']""", source):
        assert (script.parent / imported).resolve().is_file(), f"{script.name}: {imported}"
