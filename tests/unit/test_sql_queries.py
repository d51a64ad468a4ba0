import pytest

from tickwork.platform import sql
from tickwork.platform.sql import _parse


def test_named_queries_are_split_by_name_lines():
    text = "-- preamble\n-- name: first\nselect 1\n\n-- name: second\n-- a comment\nselect 2\n"
    assert _parse(text, "x.sql") == {"first": "select 1", "second": "-- a comment\nselect 2"}


def test_a_name_defined_twice_is_refused():
    with pytest.raises(ValueError, match="defined twice"):
        _parse("-- name: a\nselect 1\n-- name: a\nselect 2\n", "x.sql")


def test_an_empty_query_is_refused():
    with pytest.raises(ValueError, match="is empty"):
        _parse("-- name: a\n\n-- name: b\nselect 1\n", "x.sql")


def test_the_shipped_queries_load():
    assert {"claim_actions", "finalize_actions", "due_after_watermark"} <= sql.names()
    with pytest.raises(KeyError):
        sql.query("no_such_query")


def test_the_addressed_claim_claims_the_rows_the_claim_does():
    # claim_addressed_actions is claim_actions with suppression in its SET: the rows it
    # takes (WHERE) and what it answers (RETURNING) must stay the same.
    def tail(name: str) -> str:
        text = sql.query(name)
        return text[text.index("\nwhere id = any") :]

    assert tail("claim_addressed_actions") == tail("claim_actions")


def test_a_wave_of_publications_leaves_what_any_finalize_leaves():
    # finalize_published is finalize_actions for publications alone: what a published row
    # leaves behind (its queue entry, its counts, its message id, outcome events) must stay
    # the same text in both.
    def leaves(name: str) -> str:
        text = sql.query(name)
        return text[
            text.index("), published as (") : text.index("\n)", text.index("outcome_events as ("))
        ]

    assert "delete from action_queue" in leaves("finalize_published")
    assert leaves("finalize_published") == leaves("finalize_actions")
