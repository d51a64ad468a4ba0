"""Each cron runs alone (its own Lambda in AWS, its own timer locally): a stats rollup that
raises does not stop drip steps from advancing, and a drip advance that raises does not
stop the rollup."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import tickwork.engine.drips
import tickwork.rollup
from tests.e2e.conftest import Api, running_api
from tests.waiting import wait_for
from tickwork.platform.config import Settings


class Broken:
    """Stands in for a cron's work: raises, and counts how often it was called."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
        raise RuntimeError("broken on purpose")


@pytest.fixture
def broken() -> Broken:
    return Broken()


def fast_crons(database_url: str, tmp_path: Path) -> Any:
    return running_api(database_url, tmp_path, Settings(), drips_interval=0.2, rollup_interval=0.2)


@pytest.fixture
def rollup_broken(
    monkeypatch: pytest.MonkeyPatch, broken: Broken, database_url: str, tmp_path: Path
) -> Iterator[Api]:
    monkeypatch.setattr(tickwork.rollup, "compact", broken)
    with fast_crons(database_url, tmp_path) as running:
        yield running


@pytest.fixture
def drips_broken(
    monkeypatch: pytest.MonkeyPatch, broken: Broken, database_url: str, tmp_path: Path
) -> Iterator[Api]:
    monkeypatch.setattr(tickwork.engine.drips, "advance_ready", broken)
    with fast_crons(database_url, tmp_path) as running:
        yield running


def step(text: str) -> dict[str, Any]:
    return {"wait": {"delay_seconds": 0},
            "action": {"action_type": "webhook", "target_key": "primary",
                       "payload": {"text": text}}}  # fmt: skip


def test_a_failing_rollup_does_not_stop_drip_steps(rollup_broken, broken):
    api = rollup_broken
    api.admin.call("PUT", "/v1/recipients/ann", json={"timezone": "UTC"})
    campaign = api.admin.call("POST", "/v1/campaigns", json={
        "name": "welcome", "steps": [step("one"), step("two"), step("three")]})  # fmt: skip
    eid = api.admin.call("POST", f"/v1/campaigns/{campaign['id']}/enrollments",
                         json={"recipient_id": "ann"})["id"]  # fmt: skip
    # Every step after the first is made by the drip advance
    wait_for(
        lambda: api.admin.call("GET", f"/v1/enrollments/{eid}")["status"] == "completed",
        timeout=20,
    )
    texts = [d.body["data"]["payload"]["text"] for d in api.local.receiver.deliveries]
    assert texts == ["one", "two", "three"]
    # while the rollup ran and failed, again and again
    assert broken.calls >= 2
    assert api.local.rollups == []
    assert len(api.local.drip_advances) >= 2


def test_a_failing_drip_advance_does_not_stop_the_rollup(drips_broken, broken):
    api = drips_broken
    made = api.admin.call("POST", "/v1/actions", json={
        "action_type": "log", "target_key": "x", "payload": {"text": "hi"},
        "publish_at": datetime.now(UTC).isoformat()})  # fmt: skip
    done = wait_for(
        lambda: (
            (a := api.admin.call("GET", f"/v1/actions/{made['id']}"))["status"] == "published" and a
        ),
        timeout=20,
    )
    assert done["status"] == "published"
    # The rollup keeps running and merging what the finishes counted
    wait_for(lambda: len(api.local.rollups) >= 2, timeout=20)
    stats = api.admin.call("GET", "/v1/stats")
    assert {"status": "published", "action_type": "log", "count": 1} in stats["counts"]
    # while the drip advance ran and failed, again and again
    wait_for(lambda: broken.calls >= 2)
    assert api.local.drip_advances == []
