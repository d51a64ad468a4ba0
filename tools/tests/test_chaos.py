"""The fault-injection suite's small variant: real processes, every message twice, kill -9 at
chosen points, a restart of a private embedded Postgres (never the test server), a hostile
receiver. `make chaos` runs the full one."""

from __future__ import annotations

from tools.chaos import ChaosPlan, run


def test_faults_cost_nothing_but_documented_ambiguous_duplicates():
    report = run(ChaosPlan.small(), "pytest tests/integration/test_chaos.py", out=lambda _: None)
    summary = "\n".join(report.lines())
    # Then nothing was lost, stranded, sent twice unexplained, or recorded failed when delivered
    assert report.violations == dict.fromkeys(report.violations, 0), summary
    assert report.statuses.get("published", 0) + report.statuses.get("failed", 0) == 240, summary
    # And the faults did happen: the restart, kills at the chosen points, hostile answers
    assert report.outage_seconds > 0.5, summary
    assert report.kills, summary
    assert {"429", "503", "slow"} <= set(report.receiver_replies), summary
