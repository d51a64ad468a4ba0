"""The benchmark's own scenarios, small: the floor publishes every row through the engine's
statements, the scale check builds its table and times every operation, and the tenants'
bench runs each phase and times every quiet webhook, the sustained search rises until a
step misses."""

from __future__ import annotations

import argparse

import pytest

from tickwork import rollup
from tickwork.platform.db import connect
from tools import bench, bench_removal, bench_scale, bench_suppression, bench_tenants


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
        schema = (
            "select indexdef from pg_indexes where tablename = 'scheduled_actions'"
            " union all select conname || pg_get_constraintdef(oid) from pg_constraint"
            " where conrelid = 'scheduled_actions'::regclass"
            "    or confrelid = 'scheduled_actions'::regclass"
        )
        indexes = sorted(conn.execute(schema).fetchall())
        workspace = bench_scale.build(conn, future=3000, terminal=300)
        # the load dropped and rebuilt the indexes and keys: all are back, as they were
        assert sorted(conn.execute(schema).fetchall()) == indexes
        before = conn.execute(
            "select status, count(*) from scheduled_actions group by status order by status"
        ).fetchall()
        timings = bench_scale.measure({"one": conn}, {"one": workspace}, repeat=1)["one"]
        after = conn.execute(
            "select status, count(*) from scheduled_actions group by status order by status"
        ).fetchall()
        # the rollup counts what was loaded
        counts = {(c["status"], c["count"]) for c in rollup.counts(conn, workspace)}
    assert set(timings) == {
        "calendar page (100)",
        "/v1/stats",
        "  its counts (the rollup)",
        "  its due backlog",
        "  its lag (rows due in 1 h)",
        "`tickwork status`",
        "(/v1/stats before: a scan)",
        "tick pass (2,000)",
        "claim (1,000)",
        "finalize (1,000)",
    }
    assert all(seconds >= 0 for seconds in timings.values())
    assert timings["claim (1,000)"] > 0
    # Every operation ran in a transaction rolled back: the table is as it was built
    assert before == after == [("published", 300), ("queued", bench_scale.DUE_ROWS + 3000)]
    assert counts == {("published", 300), ("queued", bench_scale.DUE_ROWS + 3000)}


def test_a_burst_through_the_runtime_fires_each_row_once_from_a_triggered_tick(database_url):
    for tick_process in (False, True):
        # Given 400 rows already due when the (running) runtime's tick is triggered
        result = bench.run_engine(database_url, 400, 0.0, workers=2, batch=100, lead=0.0,
                                  tick_process=tick_process)  # fmt: skip
        # Then that one tick enqueued them all and each was delivered once
        assert result["tick_enqueued"] == 400
        assert result["delivered"] == result["distinct"] == 400
        assert result["drain_seconds"] > 0
        assert result["transactions"] > 0
        # And the WAL it wrote: at least the 400 rows' three updates, as whole bytes
        assert result["wal_bytes"] > 400 * 3 * 50
        # And the tick's own CPU is reported when it ran in a process of its own
        assert (result["tick_cpu"] is not None) == tick_process


def test_the_sustained_search_rises_until_a_step_misses_and_reports_each(database_url, monkeypatch):
    # Given two small steps of rows each due at its own instant over two seconds
    seen: list[int] = []
    found = bench.search_sustained(
        database_url, [300, 600], 2.0, on_step=lambda s: seen.append(s.rows)
    )
    # Then each step delivered each row once, and both were reported
    assert [s.rows for s in found] == seen == [300, 600]
    for step in found:
        assert step.result["delivered"] == step.result["distinct"] == step.rows
        assert step.rate == step.rows / 2.0
    # And a step over the bound ends the search there
    monkeypatch.setattr(bench, "SUSTAINED_P99_MS", -1.0)
    [missed] = bench.search_sustained(database_url, [300, 600], 2.0)
    assert (missed.rows, missed.on_time) == (300, False)


def test_a_sustained_step_is_on_time_only_when_every_row_came_within_the_bound():
    quick = bench.Lags(0.001, 0.002, 0.003, 0.004)
    assert bench.Step(100, 1.0, {"distinct": 100, "lags": quick}).on_time
    # A row missing fails the step, however quick the others were
    assert not bench.Step(100, 1.0, {"distinct": 99, "lags": quick}).on_time
    slow = bench.Lags(0.001, 0.05, bench.SUSTAINED_P99_MS / 1000 + 0.001, 0.2)
    assert not bench.Step(100, 1.0, {"distinct": 100, "lags": slow}).on_time


def test_the_sustained_steps_must_rise():
    assert bench.steps("1000,5000") == (1000, 5000)
    for text in ("5000,1000", "0,10", "10,10", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.steps(text)


def test_the_tenants_bench_runs_each_phase_and_times_every_quiet_webhook(database_url):
    # Given a small plan: one short round of each phase, a burst of 2 events x 3 rules
    plan = bench_tenants.Plan(seconds=1.0, rounds=1, burst_rules=3, burst_events=2)
    results = bench_tenants.run(database_url, plan)
    # Then every phase ran once, the quiet workspace's calls were answered and every
    # webhook it scheduled arrived and was timed
    assert sorted(results) == sorted(bench_tenants.PHASES)
    for [phase] in results.values():
        assert phase.expected > 0
        assert len(phase.lateness) == phase.expected
        assert len(phase.api) == 2 * phase.expected
        assert phase.notes == []
    # And the hostile template failed its rule while its event was answered; each burst
    # event made one action per rule
    [alone], [template], [burst] = (results[p] for p in ("alone", "template", "burst"))
    assert alone.events == []
    assert template.events
    assert all((e.status, e.number) == (200, 1) for e in template.events)
    assert [(e.status, e.number) for e in burst.events] == [(200, 3), (200, 3)]


def test_the_suppression_bench_claims_and_holds_what_it_should(database_url):
    results = bench_suppression.run(database_url, rows=50, entries=200, turns=2, named=True)
    cases = list(results.values())
    assert [c["claim_actions"][1] for c in cases] == [50, 50, 50]
    # the checking claim takes them all until one in ten is on the list
    assert [c["claim_addressed_actions"][1] for c in cases] == [50, 50, 45]


def test_the_removal_scenario_removes_every_old_row_beside_the_workload(
    pg_admin_url, monkeypatch, capsys
):
    # Given a small scenario: 2,000 old rows, a 2,000-row burst, 1,000 future rows
    monkeypatch.setattr(bench_removal, "BURST", 2000)
    monkeypatch.setattr(bench_removal, "FUTURE", 1000)
    monkeypatch.setattr(bench_removal, "CYCLES", 1)
    monkeypatch.setattr(bench_removal, "DATABASE", "tickwork_bench_removal_test")
    # When it runs
    assert bench_removal.run(pg_admin_url, 2000, pause=0.0) == 0
    # Then the removal took every old row and its attempt, and the figures are printed
    out = capsys.readouterr().out
    assert "removal: 2,000 rows and 2,000 attempts" in out
    assert "cycle 1: +2,000, -2,000" in out
    assert "burst drain (rows/s)" in out
    assert "lock waits (+ removal):" in out


def test_the_removal_rounds_alternate_with_the_workload_alone_and_finish_the_rest(
    pg_admin_url, monkeypatch, capsys
):
    # Given the small scenario in three rounds, each removal stopped at a 1-second budget
    # and pausing between batches of 100, so the rounds leave old rows for the end
    monkeypatch.setattr(bench_removal, "BURST", 1000)
    monkeypatch.setattr(bench_removal, "FUTURE", 1000)
    monkeypatch.setattr(bench_removal, "WAVE", 100)
    monkeypatch.setattr(bench_removal, "CYCLES", 1)
    monkeypatch.setattr(bench_removal, "DATABASE", "tickwork_bench_removal_rounds_test")
    assert bench_removal.run(pg_admin_url, 3000, pause=0.05, rounds=3, budget=1, steady=500) == 0
    out = capsys.readouterr().out
    # Then each round is reported beside its own runs alone, with the ratios' medians
    assert "round 3 of 3 (the removal's budget 1 s):" in out
    assert out.count("lock waits (alone):") == 3
    assert "median" in out
    assert "removal rate (rows/s):" in out
    # and what the rounds left is removed to the end, then the steady state's cycle
    assert "the rest: " in out
    assert "after all the old rows left" in out
    assert "cycle 1: +500, -500" in out


def test_more_than_one_removal_round_needs_a_budget(pg_admin_url):
    with pytest.raises(ValueError, match="needs a budget"):
        bench_removal.run(pg_admin_url, 10, rounds=3)
