"""A newcomer's first minute: `tickwork dev` prints the console's link, and the link opens
the calendar, signed in, with the demo's actions on it."""

from __future__ import annotations

import re
import subprocess
import time

from playwright.sync_api import Browser

from tests.e2e.test_local_runtime import dev_process, read_until

__all__ = ["dev_process"]  # the fixture, used by name

FIRST_MINUTE = 60.0


def test_the_printed_link_opens_the_calendar_with_the_demo_on_it(
    browser: Browser, dev_process: tuple[subprocess.Popen[str], list[str], str]
) -> None:
    started = time.monotonic()
    process, lines, api_url = dev_process
    [line] = read_until(process, lines, r"^console ", 1, timeout=FIRST_MINUTE)
    found = re.search(r"(http://\S+/console/#token=\S+&workspace=\S+)", line)
    assert found, line
    assert found.group(1).startswith(f"{api_url}/console/#token=")
    page = browser.new_page()
    page.goto(found.group(1))
    page.locator("#top .ws").wait_for()
    assert page.locator("#top .ws").inner_text() == "Demo"
    assert page.locator("#top .role").inner_text() == "admin"
    # The token left the address bar as soon as the page read it.
    assert "token=" not in page.url
    page.locator(".chip").first.wait_for()
    assert time.monotonic() - started < FIRST_MINUTE
    assert page.locator(".chip").count() >= 4
    page.close()
