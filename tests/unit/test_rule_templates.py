"""Tenant templates render data in a sandbox, and conditions read the context (no I/O)."""

from __future__ import annotations

import time

import pytest

from tickwork.rules import metering
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
        "{{ context.n ** 99999 }}",
        "{{ range(context.n * 100000)|list|length }}",
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


# --------------------------------------------------------------------------- budgets
#
# Each hostile template below read its data from the context (so nothing of it can be
# evaluated when it is written): the render fails with a reason naming the field and
# what was exceeded, having done a bounded amount of work. Before the budgets, each one
# ran for seconds to hours, or allocated memory until the process died.

S = "{% set s = context.s %}"
L = "{% set l = context.l %}"


@pytest.fixture
def no_clock(monkeypatch):
    """The CPU-time budget out of the way: what stops a template is then its counts and
    sizes, the same on any machine."""
    monkeypatch.setattr(metering, "MAX_CPU_SECONDS", 3600.0)


def hostile(source: str) -> RenderError:
    with pytest.raises(RenderError) as failed:
        JsonTemplate({"text": source}, "action.payload").render(HOSTILE_CONTEXT)
    assert failed.value.field == "action.payload.text"
    assert failed.value.message.startswith("action.payload.text: ")
    return failed.value


HOSTILE_CONTEXT = {"context": {"n": 9, "s": "ab", "l": [1, 2], "big": "x" * 60_000,
                               "amps": "&" * 60_000, "wide": "é" * 30_000}}  # fmt: skip
DIGITS = "a number of more than 4,300 digits"
VALUE = "a value of more than 262,144 characters or items"
OPERATIONS = "the template used more than 20,000 operations"
BUILT = "the template built more than 1,048,576 characters and items"
COMPARISON = "a comparison of more than 262,144 characters or items"


@pytest.mark.timeout(10)
@pytest.mark.usefixtures("no_clock")
@pytest.mark.parametrize(
    ("source", "reason"),
    [
        # integers: estimated from the operands' bit lengths before they are computed
        ("{% set x = (((context.n ** 64) ** 64) ** 64) ** 64 %}ok", DIGITS),
        ("{{ context.n ** 9999999999 }}", DIGITS),
        ("{% set x = context.n ** 60 %}" + "{% set x = x * x %}" * 30 + "ok", DIGITS),
        ("{{ [context.n ** 4000]|sum * context.n ** 4000 }}", DIGITS),
        # strings and lists: doubled by ~, +, *, join and replace, grown by filters
        (S + "{% set s = s ~ s %}" * 60 + "ok", VALUE),
        (S + "{% set s = s + s %}" * 60 + "ok", VALUE),
        (S + "{% set s = s * 2 %}" * 60 + "ok", VALUE),
        (S + "{% set s = [s, s]|join %}" * 60 + "ok", VALUE),
        (S + "{% set s = s|replace('a', 'aaaaaaaa') %}" * 60 + "ok", VALUE),
        (S + "{% set s = ('x' ~ s)|replace('', s) %}" * 60 + "ok", VALUE),
        (L + "{% set l = l + l %}" * 60 + "ok", VALUE),
        (L + "{% set l = l * 1000 %}" * 60 + "ok", VALUE),
        (L + "{% set l = [l, l] %}" * 60 + "{{ l }}", VALUE),
        (L + "{% set l = [l, l] %}" * 60 + "{{ l|tojson|length }}", VALUE),
        ("{{ context.amps|escape|length }}", VALUE),
        ("{{ (context.wide * 2)|urlencode|length }}", VALUE),
        ("{{ range(1000)|join(context.big) }}", VALUE),
        ("{% set l = [context.big] * 1000 %}{{ l|length }} {{ l|string|length }}", VALUE),
        ("{% set l = [context.big] * 1000 %}{{ l|sort|first }}", VALUE),
        # comparisons: their work is bounded before they run
        ("{% set l = [context.big] * 1000 %}{{ context.big ~ '!' in l }}", COMPARISON),
        ("{% set l = [context.big] * 1000 %}{{ context.big ~ '!' in l|reverse }}", COMPARISON),
        ("{% set l = [context.big] * 1000 %}{{ l|select('in', l|list)|list }}", COMPARISON),
        ("{% set l = range(1000)|list * 200 %}{{ l == l|list }}", COMPARISON),
        ("{{ ([[context.n] * 1000] * 1000)|sum(start=[])|length }}", BUILT),
        # many medium values add up against the render's total
        ("{% for i in range(1000) %}{% set t = context.big ~ i %}{% endfor %}ok", BUILT),
        ("{% set b %}{% for i in range(1000) %}{{ context.big }}{% endfor %}{% endset %}",
         BUILT),
        ("{% set t = context.big ~ context.big %}" * 100 + "ok", BUILT),  # sequential sets
        # loops that build output into a block, and one that only iterates
        ("{% filter upper %}{% for i in range(1000) %}{{ context.big }}{% endfor %}"
         "{% endfilter %}", BUILT),
        ("{% for i in range(context.n * 100) %}" + "{% if i > 1 %}{% endif %}" * 30
         + "{% endfor %}", OPERATIONS),
        # bounds of filters' arguments, and % formatting as a test would do it
        ("{{ context.n|round(99999999, 'ceil') }}", "round() takes a precision of at most 20"),
        ("{{ (context.big * 4)|trim(context.big) }}", "trim() takes at most 100 characters"),
        ("{{ context.l|tojson(99999999) }}", "tojson() takes no indent"),
        ("{{ ('%0' ~ context.n ~ '99999999d') is odd }}", "string formatting with %"),
    ],
)  # fmt: skip
def test_a_hostile_template_fails_its_render_with_the_reason(source, reason):
    failed = hostile(source)
    assert reason in failed.message, failed.message


@pytest.mark.timeout(10)
def test_the_example_that_stalled_everyone_is_bounded():
    # The template stalled the API for 14 s. With the data from the event:
    started = time.monotonic()
    failed = hostile("{% set x = (((context.n**64)**64)**64)**64 %}ok")
    assert DIGITS in failed.message
    assert time.monotonic() - started < 2.0
    # And written as constants, it is refused when the rule is written.
    with pytest.raises(InvalidTemplateError, match="in a constant expression"):
        JsonTemplate({"text": "{% set x = (((9**64)**64)**64)**64 %}ok"}, "action.payload")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("{% set x = (((9**64)**64)**64)**64 %}ok", DIGITS),
        ("{{ 'ab' * 9999999 }}", VALUE),
        ("{{ ('x' * 200000) ~ ('x' * 200000) }}", VALUE),
        ("{{ [1] * 300000 }}", VALUE),
        ("{{ ('aa'|replace('a', 'x' * 200000))|length }}", VALUE),
        ("{{ range(100000)|list|length }}", "range() of more than 1000 items"),
        ("{{ 'x' if context.n else 9 ** 99999 }}", DIGITS),  # the constant branch
        ("{{ context.n + (2 ** 20000) }}", DIGITS),
        ("{% for x in context.l recursive %}{{ loop(x) }}{% endfor %}", "recursive loops"),
        ("{% for x in context.l %}{% for y in x %}{% endfor %}{% endfor %}", "nested"),
        ("{% set b %}{% for x in context.l %}{% for y in x %}{% endfor %}{% endfor %}"
         "{% endset %}", "nested"),
        ("{{ " + "(" * 400 + "1" + ")" * 400 + " }}", "nested too deeply"),
        ("{{ " + "-" * 3000 + "1 }}", "nested too deeply"),
    ],
)  # fmt: skip
def test_what_can_be_seen_when_it_is_written_is_refused_then(source, reason):
    with pytest.raises(InvalidTemplateError) as refused:
        JsonTemplate({"body": {"t": source}}, "action.payload")
    assert refused.value.field == "action.payload.body.t"
    assert reason in refused.value.message, refused.value.message


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ 2 ** 64 }}", str(2**64)),
        ("{{ context.n ** 4000 > 0 }}", "True"),
        ("{{ 'ab' * 3 ~ '!' }}", "ababab!"),
        ("{{ ([1, 2] + [3])|join(',') }}", "1,2,3"),
        ("{{ context.guest.items|sort|reverse|join('') }}", "ba"),
        ("{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum(start=1) }}", "6 4.5"),
        ("{{ 4 is even }} {{ 9 is divisibleby(3) }} {{ 'a' is in 'abc' }}", "True True True"),
        ("{{ context.guest.items|select('==', 'b')|list }}", "['b']"),
        ("{{ 1 < context.n < 5 and not context.n == 4 }}", "True"),
        ("{% set b %}{% for i in range(3) %}{{ i }},{% endfor %}{% endset %}{{ b|trim(',') }}",
         "0,1,2"),
        ("{% filter upper %}{{ context.guest.name }}{% endfilter %}", "ANN"),
        ("{{ 'x' * 100 if context.n > 5 else 'y' }}", "y"),
        ("{{ 3.14159|round(2) }} {{ -context.n }}", "3.14 -3"),
    ],
)  # fmt: skip
def test_what_a_template_may_do_it_still_does(source, expected):
    assert render(source) == expected


def used(source: str) -> tuple[int, int]:
    """The operations and the characters and items one render of `source` used."""
    budget = metering.RenderBudget.of("a test", 1)
    JsonTemplate({"t": source}, "p").render(CONTEXT, budget)
    return budget.limits[0] - budget.operations, budget.limits[1] - budget.built


def test_operations_are_counted_each_one():
    # Every lookup, filter, call, iteration, operator and output chunk counts one, and
    # every value built or read whole counts its size: "Hi ", .guest, .name, upper, its
    # output; "Hi " (3), "Ann" read by upper, "ANN" made by it, and written (3 each)
    assert used("Hi {{ context.guest.name|upper }}") == (5, 12)
    # range(); per item: the item, `+`, its output (1 to 100: 192 characters)
    assert used("{% for i in range(100) %}{{ i + 1 }}{% endfor %}") == (1 + 100 * 3, 192)
    # a `set` block's output counts as it is written, and its value when read whole:
    # .guest, .name, "Ann" and "!" into the block, upper, its output; 3 + 1, 4 + 4, 4
    assert used("{% set b %}{{ context.guest.name }}!{% endset %}{{ b|upper }}") == (6, 16)


def test_renders_that_share_a_budget_stop_when_it_is_spent(no_clock):
    # Given a budget of two renders' worth and a template that uses a whole render's
    budget = metering.RenderBudget.of("the templates of this event", 2)
    spender = JsonTemplate({"text": "{% for i in range(1000) %}" + "{{ i }}" * 30
                            + "{% endfor %}"}, "action.payload")  # fmt: skip
    # When it is rendered three times
    reasons = []
    for _ in range(3):
        with pytest.raises(RenderError) as failed:
            spender.render(HOSTILE_CONTEXT, budget)
        reasons.append(failed.value.message)
    # Then the first two stopped at their own limit and the third never started
    assert reasons[:2] == [f"action.payload.text: {OPERATIONS}"] * 2
    assert reasons[2] == (
        "action.payload: not rendered: the templates of this event used more than 40,000"
        " operations together"
    )
    assert budget.operations <= 0
    # And a normal template after it is refused at once too, naming the shared budget
    with pytest.raises(RenderError, match="not rendered: the templates of this event"):
        JsonTemplate({"t": "Hi"}, "action.payload").render(CONTEXT, budget)


def test_a_render_takes_what_the_budget_has_left(no_clock):
    budget = metering.RenderBudget("the steps of this enrollment", 500, 10**6, 60.0)
    with pytest.raises(RenderError) as failed:
        JsonTemplate({"t": "{% for i in range(1000) %}{% endfor %}"}, "p").render(
            HOSTILE_CONTEXT, budget
        )
    assert failed.value.message == (
        "p.t: the steps of this enrollment used more than 500 operations together"
    )


def test_cpu_time_is_a_backstop(monkeypatch):
    # Given a thread clock that advances a millisecond each time it is read
    ticks = iter(range(10**9))
    monkeypatch.setattr(metering, "thread_time", lambda: next(ticks) / 1000)
    # When a template iterates: the clock is read every 16 operations
    with pytest.raises(RenderError) as failed:
        render("{% for i in range(1000) %}{{ i }}{% endfor %}")
    # Then it stops at its CPU budget, long before its operation budget
    assert "the template used more than 0.05 s of CPU time" in failed.value.message


def test_an_operation_outside_a_render_is_refused():
    with pytest.raises(metering.BudgetExceededError):
        metering.current()
