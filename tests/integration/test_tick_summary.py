"""A tick's summary names what it did to which rows (id, type, outcome), up to a bound with a
count of the rest, and the tick Lambda logs it as one JSON line."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from tests.engine import RecordingQueues, seed
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import runtime as runtime_slot
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig
from tickwork.platform.observability import logger


def entries(items: list[dict[str, str]]) -> set[tuple[str, str, str]]:
    return {(item["id"], item["type"], item["outcome"]) for item in items}


def test_each_row_the_tick_touched_has_an_entry_with_its_outcome(conn, workspace, settings, now):
    strict = settings.model_copy(update={"action_types": {
        **settings.action_types, "log": ActionTypeConfig(provider="log", max_lateness_seconds=60),
    }})  # fmt: skip
    [zombie] = seed(conn, workspace, 1, now - timedelta(hours=1), action_type="webhook")
    conn.execute(
        "update scheduled_actions set status = 'submitted', attempt_count = 1,"
        " enqueued_at = now() - interval '21 minutes',"
        " submitted_at = now() - interval '20 minutes' where id = %s",
        (zombie,),
    )
    [stale] = seed(conn, workspace, 1, now - timedelta(minutes=5))
    [lost] = seed(conn, workspace, 1, now - timedelta(minutes=21), action_type="webhook")
    # (the tick's pass that reached it was 20 minutes ago)
    conn.execute(
        "with passed as (insert into tick_watermarks (action_type, due_at, id)"
        "                select action_type, due_at, id from action_queue where id = %(id)s"
        "                returning action_type, due_at, id)"
        " insert into tick_passes (action_type, upto_due, upto_id, passed_at)"
        " select action_type, due_at, id, now() - interval '20 minutes' from passed",
        {"id": lost},
    )
    [refused] = seed(conn, workspace, 1, now - timedelta(seconds=20))
    [sent] = seed(conn, workspace, 1, now + timedelta(seconds=30), action_type="webhook")
    [far] = seed(conn, workspace, 1, now + timedelta(hours=2))
    queues = RecordingQueues()
    queues.refuse = {refused}

    summary = run_tick(conn, queues, strict)

    assert entries(summary.as_dict()["items"]) == {
        (str(zombie), "webhook", "stuck"),
        (str(stale), "log", "expired"),
        (str(lost), "webhook", "redelivered"),
        (str(lost), "webhook", "enqueued"),
        (str(refused), "log", "send_failed"),
        (str(sent), "webhook", "enqueued"),
    }
    assert str(far) not in {item["id"] for item in summary.items}
    assert summary.as_dict()["items_omitted"] == 0


def test_entries_stop_at_the_bound_and_the_rest_are_counted(conn, workspace, settings, now):
    ids = seed(conn, workspace, 250, now - timedelta(seconds=5), spread=timedelta(seconds=1))
    # Several passes, so the bound holds across them
    bounded = settings.model_copy(update={"tick_summary_items": 100, "tick_batch_size": 70})
    summary = run_tick(conn, RecordingQueues(), bounded).as_dict()
    assert summary["enqueued"] == 250
    assert len(summary["items"]) == 100
    assert summary["items_omitted"] == 150
    assert {item["outcome"] for item in summary["items"]} == {"enqueued"}
    # The first rows the tick marked (in due order) are the ones named
    assert [item["id"] for item in summary["items"]] == [str(i) for i in ids[:100]]


def test_a_bound_of_zero_keeps_counts_only(conn, workspace, settings, now):
    seed(conn, workspace, 30, now - timedelta(seconds=5))
    counts_only = settings.model_copy(update={"tick_summary_items": 0})
    summary = run_tick(conn, RecordingQueues(), counts_only).as_dict()
    assert (summary["items"], summary["items_omitted"], summary["enqueued"]) == ([], 30, 30)


def test_the_tick_lambda_logs_its_summary_with_entries_as_one_json_line(
    caplog, conn, workspace, runtime, now
):
    ids = seed(conn, workspace, 3, now - timedelta(seconds=5))
    # At INFO, as the stack's LogLevel default (a local runtime earlier in the process may
    # have quietened the logger; caplog puts the level back after the test).
    caplog.set_level(logging.INFO, logger=logger.name)
    runtime_slot.install(runtime)
    try:
        returned = load_handler("tick").handler({}, FakeLambdaContext(remaining_ms=60_000))
    finally:
        runtime_slot.install(None)
    [record] = [r for r in caplog.records if r.getMessage() == "tick"]
    # As Powertools writes it to the function's log group
    line = logger.registered_formatter.format(record)
    assert "\n" not in line
    logged = json.loads(line)
    assert entries(logged["items"]) == {(str(i), "log", "enqueued") for i in ids}
    assert logged["items_omitted"] == 0
    assert logged["enqueued"] == 3
    assert returned["items"] == logged["items"]
