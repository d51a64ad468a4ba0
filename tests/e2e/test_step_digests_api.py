"""Drip steps that collect, over real HTTP against the local runtime: two campaigns' steps
join the recipient's shared digest, which sends one webhook listing both; a step asking for
a digest it cannot have is a 422 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Api, running_api
from tests.e2e.test_api import error_of
from tickwork.platform.config import Settings


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with running_api(database_url, tmp_path, Settings(), drips_interval=0.5) as running:
        yield running


def collecting(name: str, digest: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "wait": {"delay_seconds": 0},
            "action": {"action_type": "webhook", "target_key": "primary",
                       "payload": {"text": "{{ items | map(attribute='step.name') | join(',') }}"},
                       "digest": digest}}  # fmt: skip


def test_two_campaigns_steps_make_one_webhook_through_the_shared_digest(api):
    api.admin.call("PUT", "/v1/recipients/ann", json={"timezone": "UTC"})
    digest = {"key": "activity", "window": {"seconds": 2}}
    enrollments = []
    for name in ("welcome", "tips"):
        made = api.admin.call("POST", "/v1/campaigns",
                              json={"name": name, "steps": [collecting(name, digest)]})  # fmt: skip
        assert made["steps"][0]["action"]["digest"] == digest | {"shared": True}
        enrollments.append(api.admin.call(
            "POST", f"/v1/campaigns/{made['id']}/enrollments",
            json={"recipient_id": "ann", "data": {}}))  # fmt: skip
    [shared] = api.member.call("GET", "/v1/digests")["items"]
    assert (shared["source"], shared["rule_id"], shared["item_count"]) == ("shared", None, 2)
    for enrollment in enrollments:
        assert api.member.call("GET", f"/v1/enrollments/{enrollment['id']}")["status"] == (
            "completed")  # fmt: skip
    # Its action lists both steps (the tick sends it at the window's end)
    action = api.member.call("GET", f"/v1/actions/{shared['action_id']}")
    assert (action["payload"], action["source"]) == ({"text": "welcome,tips"}, "digest")
    assert [c["kind"] for c in action["changes"]] == ["digest"] * 3


def test_a_step_digest_that_is_not_shared_is_a_422_naming_the_field(api):
    step = collecting("x", {"window": {"seconds": 2}, "shared": False})
    answer = api.admin.http.post("/v1/campaigns", json={"name": "x", "steps": [step]})
    error = error_of(answer, 422)
    assert error["details"]["field"] == "steps[0].action.digest.shared"
