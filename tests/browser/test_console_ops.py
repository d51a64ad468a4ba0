"""The console's operations and upcoming views on states worth a look: a dead letter
redriven from the page, and tomorrow's hour over its provider's quota."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.browser.conftest import Console
from tests.browser.test_console import schedule
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.queues.memory import Message

QUOTA = 2


def test_an_admin_redrives_a_dead_letter_from_the_page(console: Console) -> None:
    api, page = console.api, console.page
    queue = api.local.queues.queue("webhook")
    # A message a dispatcher kept failing on, for a row that has moved on since.
    body = json.dumps({"ids": ["00000000-0000-4000-8000-000000000000"],
                       "due_at": datetime.now(UTC).isoformat()})  # fmt: skip
    queue.dead_letters.append(Message("dead-1", body, 0.0, 0.0, receive_count=3))
    console.sign_in("alice", api.workspace_a)
    console.open("#/operations")
    assert page.locator('.warning[data-code="dead_letters"]').count() == 1
    page.get_by_role("button", name="Redrive").click()
    done = page.get_by_text("webhook: 1 dead letter(s) back to the queue (in_process)")
    done.wait_for()
    assert queue.dead_letters == []


@pytest.fixture
def console_settings() -> Settings:
    """Webhooks with an hourly quota (the forecast draws it; nothing here enforces it)."""
    types = {"webhook": ActionTypeConfig(provider="webhook", quota_per_hour=QUOTA),
             "log": ActionTypeConfig(provider="log")}  # fmt: skip
    return Settings(action_types=types)


def test_upcoming_shows_the_hour_over_its_quota(console: Console) -> None:
    api, page = console.api, console.page
    hour = (datetime.now(UTC) + timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    for minute in (5, 20, 40):
        schedule(api, hour + timedelta(minutes=minute))
    console.sign_in("alice", api.workspace_a)
    console.open("#/upcoming?hours=24")
    over = page.locator("table.heatmap td.over")
    assert over.count() == 1
    assert over.inner_text() == "3"
    assert f"over the quota of {QUOTA} per hour" in (over.get_attribute("aria-label") or "")
    assert "over their provider's quota" in page.locator("main .warning").inner_text()
