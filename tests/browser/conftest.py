"""The web console in a real browser: Debian's `chromium`, driven headless by Playwright
(its Python package drives the system browser; nothing is downloaded at test time).

Without chromium the tests are skipped with a message naming the package, unless
TICKWORK_REQUIRE_BROWSER is set (CI sets it): then its absence fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.e2e.conftest import Api, running_api
from tickwork.local.auth import LocalJwt
from tickwork.platform.config import Settings

CHROMIUM_FLAGS = [
    # As root in a container there is no user namespace for chromium's sandbox.
    "--no-sandbox",
    "--disable-gpu",
    # This machine's network is closed: no update, sync or first-run calls.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MISSING = (
    "the browser tests need Debian's chromium package (`apt-get install chromium`), "
    "driven by Playwright from PyPI; none found"
)


def chromium_path() -> str | None:
    return os.environ.get("TICKWORK_CHROMIUM") or shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    path = chromium_path()
    if path is None:
        if os.environ.get("TICKWORK_REQUIRE_BROWSER"):
            pytest.fail(MISSING + " and TICKWORK_REQUIRE_BROWSER is set")
        pytest.skip(MISSING)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


class Console:
    """A browser tab on the console of one local runtime."""

    def __init__(self, api: Api, page: Page, jwt: LocalJwt) -> None:
        self.api = api
        self.page = page
        self.jwt = jwt
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        # A confirm() a test clicks through is accepted.
        page.on("dialog", lambda dialog: dialog.accept())

    @property
    def base(self) -> str:
        return f"{self.api.url}/console/"

    def link(self, user: str, workspace: str, ttl_seconds: int = 600) -> str:
        token = self.jwt.sign(user, ttl_seconds=ttl_seconds)
        return f"{self.base}#token={token}&workspace={workspace}"

    def sign_in(self, user: str, workspace: str) -> None:
        self.page.goto(self.link(user, workspace))
        self.page.locator("#top .ws").wait_for()

    def open(self, hash_path: str) -> None:
        self.page.goto(self.base + hash_path)
        self.page.locator("main h1").first.wait_for()
        self.page.locator("main .loading").wait_for(state="detached")

    def set_zone(self, zone: str) -> None:
        self.page.select_option("#zone", zone)
        self.page.wait_for_function(
            "zone => localStorage.getItem('tickwork.zone') === zone", arg=zone
        )


@pytest.fixture
def console_settings() -> Settings:
    """The runtime's settings (a test module overrides this fixture to change them)."""
    return Settings()


@pytest.fixture
def console_api(database_url: str, tmp_path: Path, console_settings: Settings) -> Iterator[Api]:
    with running_api(database_url, tmp_path, console_settings) as running:
        yield running


@pytest.fixture
def console(browser: Browser, console_api: Api, tmp_path: Path) -> Iterator[Console]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id="UTC")
    page = context.new_page()
    page.set_default_timeout(10_000)
    tab = Console(console_api, page, LocalJwt(tmp_path / "jwt-secret"))
    yield tab
    context.close()
    assert not tab.errors, f"the page raised: {tab.errors}"
