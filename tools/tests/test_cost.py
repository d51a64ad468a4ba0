"""docs/cost.md holds what tools/cost.py computes from the template as it is, and the
arithmetic adds up: per million actions sent, per million created through the API, and a
month of what does not grow with actions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tools.cost import (
    ACTIONS,
    HOURS_A_MONTH,
    MINUTES_A_MONTH,
    ROOT,
    alarm_metrics,
    api_cost,
    api_table,
    cost,
    created_through_the_api,
    cron_invocations,
    fixed_costs,
    fixed_table,
    fixed_total,
    load,
    table,
    template_settings,
)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load()


def changed(template: dict[str, Any], parameter: str, default: Any) -> dict[str, Any]:
    mutated = copy.deepcopy(template)
    mutated["Parameters"][parameter]["Default"] = default
    return mutated


def line(template: dict[str, Any], starts: str) -> float:
    (found,) = [c.usd for c in fixed_costs(template) if c.what.startswith(starts)]
    return found


def test_the_cost_page_shows_what_the_template_costs(template):
    settings = template_settings(template)
    assert (settings.memory_mb, settings.batch_size) == (512, 10)
    page = (ROOT / "docs" / "cost.md").read_text()
    assert table(settings) in page
    assert api_table(template, settings) in page
    assert fixed_table(template) in page
    # The headline states the two totals the tables end with.
    headline = (
        f"**At the defaults: ${fixed_total(template):,.2f} a month, and"
        f" ${created_through_the_api(template, settings):.2f} per million actions created"
        " through the API and sent.**"
    )
    assert headline in " ".join(page.split())


def test_batching_brings_the_variable_cost_down(template):
    settings = template_settings(template)
    one, shipped = cost(settings, 1), cost(settings, settings.default_rows_per_message)
    assert shipped.total < one.total / 3
    # What no batching reduces: the bytes sent to providers.
    assert shipped.nat_usd == one.nat_usd
    assert shipped.invocations == one.invocations / settings.default_rows_per_message


def test_creating_through_the_api_costs_a_request_and_a_call_each(template):
    settings = template_settings(template)
    api = api_cost(template)
    # $1.00 a million HTTP API requests; a million calls of 50 ms at 512 MB
    assert api.requests_usd == pytest.approx(1.00)
    assert api.lambda_usd == pytest.approx(0.20 + ACTIONS * 0.05 * 0.5 * 0.0000133334)
    # More than sending the same actions costs at the shipped default
    sent = cost(settings, settings.default_rows_per_message).total
    assert api.total > sent
    assert created_through_the_api(template, settings) == pytest.approx(api.total + sent)
    # and it follows the API function's memory
    bigger = copy.deepcopy(template)
    bigger["Resources"]["ApiFunction"]["Properties"]["MemorySize"] = 1024
    assert api_cost(bigger).lambda_usd - api.lambda_usd == pytest.approx(
        ACTIONS * 0.05 * 0.5 * 0.0000133334
    )


def test_the_month_is_the_sum_of_its_lines(template):
    lines = fixed_costs(template)
    assert fixed_total(template) == pytest.approx(sum(c.usd for c in lines))
    # Each line the issue named is there, priced
    named = [c.what.split(" (")[0] for c in lines]
    for what in ("database instance", "database storage", "RDS Proxy", "interface endpoints",
                 "the stack's secrets", "KMS key", "alarms", "custom metrics", "crons",
                 "archive bucket"):  # fmt: skip
        assert what in named
    assert line(template, "the stack's secrets") == pytest.approx(3 * 0.40)
    assert line(template, "KMS key") == pytest.approx(1.00)
    # Four interface endpoints in two zones, every hour of the month
    assert line(template, "interface endpoints") == pytest.approx(4 * 2 * 0.01 * HOURS_A_MONTH)


def test_multi_az_bills_the_instance_and_the_storage_twice(template):
    single = changed(template, "DatabaseMultiAz", "false")
    for what in ("database instance", "database storage"):
        assert line(template, what) == pytest.approx(2 * line(single, what))
    assert line(template, "database storage") == pytest.approx(2 * 50 * 0.115)
    assert line(template, "RDS Proxy") == line(single, "RDS Proxy")


def test_alarms_are_billed_per_metric_they_read():
    alarm = {"Type": "AWS::CloudWatch::Alarm"}
    template = {"Resources": {
        "Plain": {**alarm, "Properties": {"MetricName": "Errors"}},
        "Math": {**alarm, "Properties": {"Metrics": [
            {"Id": "a", "MetricStat": {}}, {"Id": "b", "MetricStat": {}},
            {"Id": "c", "Expression": "a + b"},
        ]}},
        "Fn::ForEach::PerActionType": ["ActionType", ["x", "y", "z"], {
            "${ActionType}Alarm": {**alarm, "Properties": {"MetricName": "Failed"}},
        }],
    }}  # fmt: skip
    assert alarm_metrics(template) == 1 + 2 + 3


def test_the_crons_follow_their_schedules(template):
    every_minute = MINUTES_A_MONTH
    slower = changed(template, "TickIntervalSeconds", "300")
    assert cron_invocations(template) - cron_invocations(slower) == pytest.approx(
        every_minute - every_minute / 5, abs=1
    )
