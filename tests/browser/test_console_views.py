"""Every view of the console on the demo's data: it renders, axe-core finds no serious or
critical accessibility violation, the keyboard reaches it, and a screenshot is taken (into
TICKWORK_CONSOLE_SCREENSHOTS when set: `make screenshots` writes the docs' pictures)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.browser.conftest import Console
from tests.browser.test_console import failed_action, schedule
from tickwork.local.demo import seed_console_demo, seed_demo

SERIOUS = {"serious", "critical"}


@pytest.fixture
def demo(console: Console, database_url: str) -> dict[str, Any]:
    api = console.api
    plan = seed_demo(api.admin, count=4, first=1, last=3, move_by=2)
    spread = seed_console_demo(api.admin)
    failed = failed_action(api, database_url)
    campaign = api.admin.call("GET", "/v1/campaigns")["items"][0]
    moved = next(iter(plan.rescheduled.values()))
    return {"spread": spread, "failed": failed, "campaign": campaign["id"], "moved": moved}


def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TICKWORK_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def views(demo: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(picture name, address, what must be on it)."""
    day = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    return [
        ("calendar-week", f"#/calendar?view=week&date={day}", ".chip"),
        ("calendar-month", f"#/calendar?view=month&date={day}", ".chip"),
        ("calendar-day", f"#/calendar?view=day&date={day}", "td[data-hour]"),
        ("action", f"#/actions/{demo['moved']}", ".why-steps li"),
        ("action-failed", f"#/actions/{demo['failed']}", ".why-steps li"),
        ("failures", f"#/failures?from={yesterday}", "tr[data-id]"),
        ("upcoming", "#/upcoming?hours=72", "table.heatmap td.heat-1, table.heatmap td.heat-4"),
        ("schedules", "#/schedules", "tr[data-id]"),
        ("rules", "#/rules", "tr[data-id]"),
        ("campaigns", "#/campaigns", "tr[data-id]"),
        ("enrollments", f"#/campaigns/{demo['campaign']}", "tr[data-id]"),
        ("recipients", "#/recipients", "tr[data-id]"),
        ("operations", "#/operations", "h2"),
    ]  # fmt: skip


def serious(page: Any) -> list[str]:
    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v["impact"] in SERIOUS
    ]


def test_each_view_renders_passes_axe_and_is_pictured(
    console: Console, demo: dict[str, Any], tmp_path: Path
) -> None:
    page = console.page
    folder = shots(tmp_path)
    console.sign_in("alice", console.api.workspace_a)
    found: dict[str, list[str]] = {}
    for name, address, expected in views(demo):
        console.open(address)
        page.locator(expected).first.wait_for()
        assert page.locator("main .error-box").count() == 0, (name, page.inner_text("main"))
        found[name] = serious(page)
        page.screenshot(path=str(folder / f"{name}.png"))
    assert found == {name: [] for name, _, _ in views(demo)}


def test_the_sign_in_page_passes_axe(console: Console, tmp_path: Path) -> None:
    page = console.page
    page.goto(console.base)
    page.locator("#signin-token").wait_for()
    assert serious(page) == []
    page.screenshot(path=str(shots(tmp_path) / "sign-in.png"))


def test_the_keyboard_reaches_the_calendar_and_opens_an_action(console: Console) -> None:
    api, page = console.api, console.page
    made = schedule(api, datetime.now(UTC) + timedelta(hours=1))
    console.sign_in("alice", api.workspace_a)
    console.open(f"#/calendar?view=day&date={made['publish_at'][:10]}")
    # Moved to a view, focus is on its heading (where a screen reader starts reading).
    assert page.evaluate("document.activeElement.id") == "calendar-title"
    # On a page load, the first Tab reaches the skip link.
    page.reload()
    page.locator("main h1").wait_for()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    chip = page.locator(f'.chip[data-id="{made["id"]}"]')
    chip.focus()
    page.keyboard.press("Enter")
    page.locator("#action-title").wait_for()
    assert page.evaluate("location.hash") == f"#/actions/{made['id']}"
