"""docs/cost.md holds what tools/cost.py computes from the template as it is."""

from __future__ import annotations

from tools.cost import ROOT, cost, table, template_settings


def test_the_cost_page_shows_what_the_template_costs():
    settings = template_settings()
    assert (settings.memory_mb, settings.batch_size) == (512, 10)
    assert table(settings) in (ROOT / "docs" / "cost.md").read_text()


def test_batching_brings_the_variable_cost_down():
    settings = template_settings()
    one, shipped = cost(settings, 1), cost(settings, settings.default_rows_per_message)
    assert shipped.total < one.total / 3
    # What no batching reduces: the bytes sent to providers.
    assert shipped.nat_usd == one.nat_usd
    assert shipped.invocations == one.invocations / settings.default_rows_per_message
