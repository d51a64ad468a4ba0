"""`tickwork console`: a new link to the web console, signed in, for a running dev."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt as pyjwt

from tests.e2e.test_cli_local import dev, run
from tickwork.local.demo import CONSOLE_TOKEN_SECONDS

__all__ = ["dev"]  # the fixture, used by name


def test_console_prints_a_link_that_signs_in_as_an_admin(dev, capsys):
    code, out, err = run(capsys, "console", "--workspace", "Globex", "--user", "gina")
    assert code == 0, err
    link = urlsplit(out.strip())
    assert (link.scheme, link.netloc, link.path) == ("http", urlsplit(dev.api.url).netloc,
                                                     "/console/")  # fmt: skip
    # The token is in the fragment only: nothing a server would log.
    assert link.query == ""
    fragment = {k: v[0] for k, v in parse_qs(link.fragment).items()}
    claims = pyjwt.decode(fragment["token"], options={"verify_signature": False})
    assert claims["sub"] == "gina"
    assert abs(claims["exp"] - time.time() - CONSOLE_TOKEN_SECONDS) < 60
    answer = httpx.get(
        f"{dev.api.url}/v1/workspace",
        headers={"Authorization": f"Bearer {fragment['token']}",
                 "X-Workspace-Id": fragment["workspace"]},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert (answer.json()["name"], answer.json()["role"]) == ("Globex", "admin")
    page = httpx.get(f"{dev.api.url}/console/")
    assert page.status_code == 200
    assert "Tickwork console" in page.text
