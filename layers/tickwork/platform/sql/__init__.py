"""Named SQL queries, kept in `.sql` files beside this module and loaded once.

A file holds any number of queries, each introduced by a `-- name: <query_name>` line.
Queries use psycopg named parameters (`%(name)s`). Modules bind the queries they use at
import time with `query("name")`, so a misspelt name fails on import, not in production.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def _parse(text: str, source: str) -> dict[str, str]:
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        statement = body.strip()
        if not statement:
            raise ValueError(f"query {name!r} in {source} is empty")
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {source}")
        queries[name] = statement
    return queries


def _load_all() -> dict[str, str]:
    queries: dict[str, str] = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, statement in _parse(entry.read_text(encoding="utf-8"), entry.name).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined in more than one file")
            queries[name] = statement
    return queries


_QUERIES = _load_all()


def query(name: str) -> LiteralString:
    """The SQL text of a named query. Raises KeyError for an unknown name."""
    # The text comes from files shipped in this package, never from input: it is as
    # trustworthy as a literal, which is what psycopg's typing asks for.
    return _QUERIES[name]


def names() -> frozenset[str]:
    return frozenset(_QUERIES)
