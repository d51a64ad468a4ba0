"""The benchmark's own scenarios, small: the floor publishes every row through the engine's
statements, and the scale check builds its table and times every operation."""

from __future__ import annotations

from tickwork import bench, bench_scale
from tickwork.db import connect


def test_the_floor_publishes_every_row_once(database_url):
    # Given 3,000 due rows, when the floor drives the tick's, claim's and finalize's SQL
    result = bench.run_floor(database_url, 3000, workers=2, batch=1000, tick_batch=2000)
    # Then every row is published and none is left queued or submitted
    assert result["published"] == 3000
    assert result["drain_seconds"] > 0
    with connect(database_url) as conn:
        left = conn.execute(
            "select count(*) from scheduled_actions where status <> 'published'"
        ).fetchone()
    assert left == (0,)


def test_the_scale_check_times_every_operation_and_changes_nothing(database_url):
    with connect(database_url) as conn:
        workspace = bench_scale.build(conn, future=3000, terminal=300)
        before = conn.execute(
            "select status, count(*) from scheduled_actions group by status order by status"
        ).fetchall()
        timings = bench_scale.measure(conn, workspace, repeat=1)
        after = conn.execute(
            "select status, count(*) from scheduled_actions group by status order by status"
        ).fetchall()
    assert set(timings) == {
        "tick due query (mark 2,000)",
        "claim (1,000)",
        "finalize (1,000)",
        "calendar page (100)",
        "/v1/stats",
    }
    assert all(seconds >= 0 for seconds in timings.values())
    assert timings["claim (1,000)"] > 0
    # Every operation ran in a transaction rolled back: the table is as it was built
    assert before == after == [("published", 300), ("queued", bench_scale.DUE_ROWS + 3000)]
