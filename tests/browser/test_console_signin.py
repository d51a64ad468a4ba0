"""Signing in to the console through an identity provider: the authorization code flow with
PKCE, against a fake provider on loopback that checks what a real one checks (the
verifier against the challenge, the client, the redirect), and a forged answer refused."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from playwright.sync_api import Browser

from tests.e2e.conftest import Api, running_api
from tickwork.local.auth import LocalJwt
from tickwork.platform.config import Settings

CLIENT_ID = "tickwork-console"


@dataclass
class FakeIdentityProvider:
    """/authorize sends the browser back with a code; /token trades it for a token once,
    given the verifier whose SHA-256 is the challenge /authorize was sent."""

    jwt: LocalJwt
    user: str = "alice"
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    exchanges: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                asked = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path != "/authorize" or asked.get("code_challenge_method") != "S256":
                    self.send_error(400)
                    return
                code = secrets.token_urlsafe(16)
                provider.codes[code] = asked
                back = urlencode({"code": code, "state": asked["state"]})
                self.send_response(302)
                self.send_header("Location", f"{asked['redirect_uri']}?{back}")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                provider.exchanges.append(form)
                asked = provider.codes.pop(form.get("code", ""), None)
                digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
                challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
                valid = (
                    asked is not None
                    and form.get("grant_type") == "authorization_code"
                    and asked["code_challenge"] == challenge
                    and form.get("client_id") == asked["client_id"] == CLIENT_ID
                    and form.get("redirect_uri") == asked["redirect_uri"]
                )
                body = (
                    {"access_token": provider.jwt.sign(provider.user), "token_type": "Bearer"}
                    if valid
                    else {"error": "invalid_grant"}
                )
                self.send_response(200 if valid else 400)
                self.send_header("Content-Type", "application/json")
                # The console calls from the API's origin: a simple CORS request.
                self.send_header("Access-Control-Allow-Origin", self.headers.get("Origin", "*"))
                self.end_headers()
                self.wfile.write(json.dumps(body).encode())

        return Handler


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[FakeIdentityProvider]:
    fake = FakeIdentityProvider(LocalJwt(tmp_path / "jwt-secret"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()


@pytest.fixture
def oidc_api(database_url: str, tmp_path: Path, provider: FakeIdentityProvider) -> Iterator[Api]:
    settings = Settings(
        console_authorize_url=f"{provider.url}/authorize",
        console_token_url=f"{provider.url}/token",
        console_client_id=CLIENT_ID,
    )
    with running_api(database_url, tmp_path, settings) as running:
        yield running


def test_signs_in_with_the_identity_provider_by_pkce(
    browser: Browser, oidc_api: Api, provider: FakeIdentityProvider
) -> None:
    page = browser.new_page()
    page.goto(f"{oidc_api.url}/console/")
    page.locator("#signin-workspace").fill(oidc_api.workspace_a)
    page.locator("form[aria-labelledby=oidc-title] button").click()
    page.locator("#top .ws").wait_for()
    assert page.locator("#top .ws").inner_text() == "Acme"
    # One exchange, with a verifier (never sent to /authorize, which saw only its hash).
    [exchange] = provider.exchanges
    assert len(exchange["code_verifier"]) >= 43
    # The code is gone from the address once used.
    assert "code=" not in page.url
    page.close()


def test_an_answer_to_a_sign_in_not_started_here_is_refused(
    browser: Browser, oidc_api: Api, provider: FakeIdentityProvider
) -> None:
    page = browser.new_page()
    page.goto(f"{oidc_api.url}/console/?code=stolen&state=forged")
    notice = page.locator(".signin .notice")
    notice.wait_for()
    assert "does not belong to a sign-in started here" in notice.inner_text()
    assert provider.exchanges == []
    page.close()
