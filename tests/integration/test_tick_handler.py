"""The tick Lambda handler: its summary and the metrics it emits (EMF on stdout)."""

from __future__ import annotations

import json
from datetime import timedelta

from tests.engine import seed
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import runtime as runtime_slot


def test_the_tick_handler_returns_its_summary_and_emits_metrics(
    monkeypatch, capsys, conn, workspace, runtime, now
):
    seed(conn, workspace, 3, now - timedelta(seconds=1))
    seed(conn, workspace, 2, now - timedelta(seconds=1), action_type="webhook")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    runtime_slot.install(runtime)
    try:
        summary = load_handler("tick").handler({}, FakeLambdaContext(remaining_ms=60_000))
    finally:
        runtime_slot.install(None)
    assert summary["due"] == 5
    assert summary["enqueued_by_type"] == {"log": 3, "webhook": 2}
    assert summary["dispatch_enabled"] is True
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    totals = next(b for b in blobs if "TickEnqueued" in b)
    assert totals["TickEnqueued"] == [5.0]
    assert totals["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Tickwork"
    per_type = {b["action_type"]: b["Enqueued"] for b in blobs if "action_type" in b}
    assert per_type == {"log": [3.0], "webhook": [2.0]}
