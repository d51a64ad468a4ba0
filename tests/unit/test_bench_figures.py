"""The benchmark's own figures: the disk probe times real syncs, and a late delivery is
put down to the disk only when a sync stalled while it waited."""

from __future__ import annotations

import time
from uuid import uuid4

from tests.waiting import wait_for
from tickwork.providers.log import Delivery
from tools.bench import SyncProbe, cpu_times, late_behind_stalls, steal_share


def delivery(due_at: float, lag: float) -> Delivery:
    return Delivery(uuid4(), due_at + lag, due_at)


def test_a_late_delivery_is_the_disks_only_when_a_sync_stalled_while_it_waited():
    deliveries = [
        delivery(100.0, 0.002),  # on time
        delivery(101.0, 0.080),  # late, a stall from 100.99 to 101.05 overlaps it
        delivery(102.0, 0.090),  # late, the only stall near it ended before it was due
        delivery(103.0, 0.060),  # late, a stall began while it waited
    ]
    stalls = [(100.99, 0.06), (101.90, 0.09), (103.05, 0.03)]
    assert late_behind_stalls(deliveries, stalls) == (3, 2)
    assert late_behind_stalls(deliveries, []) == (3, 0)
    assert late_behind_stalls(deliveries, stalls, late=0.1) == (0, 0)


def test_the_probe_times_durable_writes_in_its_directory_and_leaves_nothing(tmp_path):
    before = time.time()
    with SyncProbe(tmp_path) as probe:
        wait_for(lambda: len(probe.samples) >= 3)
    assert probe.samples
    assert all(before <= started <= time.time() and took > 0 for started, took in probe.samples)
    assert probe.stalls(over=0.0) == probe.samples
    assert "fdatasync" in str(probe)
    assert "over 50 ms" in str(probe)
    assert list(tmp_path.iterdir()) == []


def test_steal_is_the_hosts_share_of_the_cpu_time_between_two_readings():
    # user, nice, system, idle, iowait, irq, softirq, steal
    before = [100, 0, 50, 1000, 5, 0, 2, 10]
    after = [160, 0, 70, 1100, 5, 0, 2, 30]  # 200 ticks spent, 20 of them stolen
    assert steal_share(before, after) == 0.1
    assert steal_share(before, before) == 0.0
    assert steal_share(None, after) is None


def test_the_machines_cpu_times_are_read_by_kind_and_only_grow():
    first = cpu_times()
    if first is None:  # no /proc on this system
        assert steal_share(first, cpu_times()) is None
        return
    # The counters move in clock ticks (10 ms) of every CPU, busy or idle: wait until they do.

    def moved() -> list[int] | None:
        later = cpu_times()
        return later if later is not None and sum(later) > sum(first) else None

    second = wait_for(moved)
    assert len(first) == len(second) == 8
    assert all(later >= earlier for earlier, later in zip(first, second, strict=True))
    assert sum(second) > sum(first)
