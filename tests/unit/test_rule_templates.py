"""Tenant templates render data in a sandbox, and conditions read the context (no I/O)."""

from __future__ import annotations

import pytest

from tickwork.rules.conditions import InvalidConditionError, first_failing, parse_conditions
from tickwork.rules.model import EVENT_ROOTS, bounded_key, with_generation
from tickwork.rules.templating import (
    MAX_OUTPUT_CHARS,
    InvalidTemplateError,
    JsonTemplate,
    RenderError,
)

CONTEXT = {
    "context": {"guest": {"name": "Ann", "items": ["a", "b"]}, "n": 3},
    "reference": {"at": "2027-03-28T13:00:00+00:00"},
}


def render(source: str) -> str:
    rendered: str = JsonTemplate({"t": source}, "action.payload").render(CONTEXT)["t"]
    return rendered


def test_strings_render_from_the_context_and_the_rest_is_kept():
    template = JsonTemplate(
        {"text": "Hi {{ context.guest.name|upper }}", "count": 2, "tags": ["{{ context.n }}"]},
        "action.payload",
    )
    assert template.render(CONTEXT) == {"text": "Hi ANN", "count": 2, "tags": ["3"]}


def test_a_key_named_like_a_method_is_data():
    # `items` is a dict method in Python; in a template it is the guest's key
    assert render("{{ context.guest.items|join(',') }}") == "a,b"


def test_dates_format_in_a_zone():
    assert render("{{ reference.at|datetime('%d.%m. %H:%M', 'Europe/Berlin') }}") == "28.03. 15:00"


@pytest.mark.parametrize(
    "source",
    [
        "{{ context.guest.phone }}",  # missing field: strict, never half-rendered
        "{{ context.__class__ }}",
        "{{ context.guest.name.upper() }}",  # no methods
        "{{ 'x' * 100000 }}",
        "{{ '%s' % context.n }}",
        "{{ 9 ** 999 }}",
        "{{ range(100000)|list|length }}",
        "{{ lipsum(3) }}",
    ],
)
def test_what_the_sandbox_refuses_fails_the_render_naming_the_field(source):
    with pytest.raises(RenderError) as failed:
        render(source)
    assert failed.value.field == "action.payload.t"


@pytest.mark.parametrize(
    "source",
    [
        "{{ context.guest.name",
        "{% macro m() %}{% endmacro %}",
        "{% include 'x' %}",
        "{{ x|indent(9999) }}",
        "{{ x|attr('__class__') }}",
        "{% for a in b %}{% for c in d %}{% endfor %}{% endfor %}",
        "x" * 10_001,
    ],
)
def test_a_template_that_does_not_compile_is_refused_naming_the_field(source):
    with pytest.raises(InvalidTemplateError) as refused:
        JsonTemplate({"body": {"t": source}}, "action.payload")
    assert refused.value.field == "action.payload.body.t"


def test_output_is_bounded():
    big = {"context": {"s": "y" * 40_000}}
    with pytest.raises(RenderError, match=str(MAX_OUTPUT_CHARS)):
        JsonTemplate({"t": "{{ context.s }}{{ context.s }}"}, "p").render(big)


def test_conditions_hold_or_say_why_not():
    conditions = parse_conditions(
        [
            {"path": "context.n", "op": "gte", "value": 3},
            {"path": "context.guest.name", "op": "in", "value": ["Ann", "Bea"]},
            {"path": "context.guest.phone", "op": "missing"},
        ],
        EVENT_ROOTS,
    )
    assert first_failing(conditions, CONTEXT) is None
    assert first_failing(conditions, {"context": {"n": 2}}) == "context.n is 2, not gte 3"
    # a number compared with a string is false, with the reason
    why = first_failing(conditions[:1], {"context": {"n": "3"}})
    assert why is not None
    assert "cannot be compared" in why


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([{"path": "context.x", "op": "between", "value": 1}], "conditions[0].op"),
        ([{"path": "other.x", "op": "eq", "value": 1}], "conditions[0].path"),
        ([{"path": "context..x", "op": "eq", "value": 1}], "conditions[0].path"),
        ([{"path": "context.x", "op": "gt", "value": True}], "conditions[0].value"),
        ([{"path": "context.x", "op": "exists", "value": 1}], "conditions[0].value"),
        ([{"path": "context.x", "op": "eq", "value": {"a": 1}}], "conditions[0].value"),
        ([{"path": "context.x", "op": "eq", "colour": 1}], "conditions[0].colour"),
        ("not a list", "conditions"),
    ],
)
def test_a_condition_that_cannot_be_evaluated_is_refused(raw, field):
    with pytest.raises(InvalidConditionError) as refused:
        parse_conditions(raw, EVENT_ROOTS)
    assert refused.value.field == field


def test_long_keys_keep_a_readable_head_and_fit_with_a_generation():
    key = bounded_key("r:" + "x" * 500)
    assert key.startswith("r:xxx")
    assert len(with_generation(key, 12)) <= 200
    assert bounded_key("short") == "short"
    assert with_generation("k", 1) == "k"
