"""What the API's answers look like in a terminal: a line per field or a table, values as
JSON where they are not plain text (never a Python repr)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

WIDTH = 22


def value_text(value: Any, limit: int | None = None) -> str:
    """A field's value for people: `-` for none, text as it is, anything else as compact
    JSON (true, 3, {"a":1}); cut to `limit` characters if given."""
    if value is None:
        text = "-"
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, separators=(", ", ": "), ensure_ascii=False, default=str)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def fields(answer: dict[str, Any], last: Iterable[str] = ()) -> str:
    """One line per field, `last` at the end (a payload reads best after the rest)."""
    tail = [key for key in last if key in answer]
    keys = [key for key in answer if key not in tail] + tail
    width = max([WIDTH, *(len(key) + 2 for key in keys)])
    return "\n".join(f"{key:<{width}}{value_text(answer[key])}" for key in keys)


def utc(instant: str | None) -> str:
    if not instant:
        return "-"
    return datetime.fromisoformat(instant).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


Column = tuple[str, int, Callable[[dict[str, Any]], Any]]


def table(items: list[dict[str, Any]], columns: list[Column], cursor: str | None = None) -> str:
    """A header, a row per item (or `(none)`), and the cursor of the next page if any."""
    lines = ["".join(f"{title:<{width}}" for title, width, _ in columns).rstrip()]
    for item in items:
        cells = [value_text(get(item), width - 2) for _, width, get in columns]
        lines.append(
            "".join(f"{cell:<{width}}" for cell, (_, width, _) in zip(cells, columns, strict=True))
            .rstrip()
        )  # fmt: skip
    if not items:
        lines.append("(none)")
    if cursor:
        lines.append(f"more: --cursor {cursor}")
    return "\n".join(lines)


def _trigger(trigger: dict[str, Any]) -> str:
    if trigger["type"] == "event":
        return f"event {trigger.get('event')}"
    offset = int(trigger.get("offset_seconds") or 0)
    return f"{trigger.get('entity_type')}.{trigger.get('reference')} {offset:+d} s"


def _quiet(windows: list[dict[str, Any]]) -> str:
    spans = [f"{w.get('start', '?')}-{w.get('end', '?')}" for w in windows]
    return ", ".join(spans) or "-"


def _verified(connection: dict[str, Any]) -> str:
    if connection.get("verify_ok") is None:
        return "not yet (below)"
    return ("ok " if connection["verify_ok"] else "FAILED ") + utc(connection.get("verified_at"))


def tags(item: dict[str, Any]) -> str:
    """An action's or a schedule's tags, comma-separated (`-` for none)."""
    return ",".join(item.get("tags") or []) or "-"


RECURRING: list[Column] = [
    ("id", 10, lambda s: s["id"][:8]),
    ("type", 12, lambda s: s["action_type"]),
    ("target", 12, lambda s: s["target_key"]),
    ("status", 9, lambda s: s["status"]),
    ("rule", 34, lambda s: s["rrule"]),
    ("from (local)", 21, lambda s: s["dtstart"][:19].replace("T", " ")),
    ("zone", 20, lambda s: s["timezone"]),
    ("failures", 9, lambda s: s["consecutive_failures"]),
    ("tags", 26, tags),
]
RULES: list[Column] = [
    ("id", 10, lambda r: r["id"][:8]),
    ("name", 26, lambda r: r["name"]),
    ("on", 5, lambda r: "yes" if r["enabled"] else "no"),
    ("trigger", 30, lambda r: _trigger(r["trigger"])),
    ("action", 24, lambda r: f"{r['action']['action_type']} → {r['action']['target_key']}"),
    ("last error", 30, lambda r: r.get("last_error")),
]
RECIPIENTS: list[Column] = [
    ("recipient", 24, lambda r: r["recipient_id"]),
    ("zone", 20, lambda r: r["timezone"]),
    ("quiet hours", 26, lambda r: _quiet(r["quiet_hours"])),
    ("caps", 24, lambda r: ", ".join(f"{k} {v}" for k, v in r["caps"].items()) or "-"),
    ("sent today", 20, lambda r: ", ".join(f"{k} {v}" for k, v in r["sent_today"].items()) or "0"),
]
SUPPRESSIONS: list[Column] = [
    ("channel", 8, lambda e: e["channel"]),
    ("address", 34, lambda e: e["address"]),
    ("reason", 13, lambda e: e["reason"]),
    ("scope", 46, lambda e: e["scope"]),
    ("source", 24, lambda e: e["source"]),
    ("added (UTC)", 20, lambda e: utc(e["created_at"])),
]
CONNECTIONS: list[Column] = [
    ("id", 38, lambda c: c["id"]),
    ("name", 22, lambda c: c["name"]),
    ("provider", 10, lambda c: c["provider"]),
    ("status", 10, lambda c: c["status"]),
    ("verified", 22, _verified),
]


def connections(page: dict[str, Any], workspace: str | None, user: str) -> str:
    """The connections, then for each not verified yet the command that verifies it (the
    provider's cheapest authenticated call: POST /v1/connections/{id}/verify)."""
    text = table(page["items"], CONNECTIONS, page.get("next_cursor"))
    acting = f" --workspace {shlex.quote(workspace)}" if workspace else ""
    acting += f" --user {shlex.quote(user)}"
    unverified = [c for c in page["items"] if c.get("verify_ok") is None]
    if unverified:
        text += "\nnot verified yet: check the credentials with the provider by\n" + "\n".join(
            f"  tickwork api POST /v1/connections/{c['id']}/verify{acting}" for c in unverified
        )
    return text


def schedule_detail(schedule: dict[str, Any]) -> str:
    """A recurring schedule: its fields, then its next occurrences a line each."""
    upcoming = schedule.get("next_occurrences")
    text = fields({k: v for k, v in schedule.items() if k != "next_occurrences"}, ["payload"])
    if upcoming:
        text += "\nnext occurrences (local):\n" + "\n".join(f"  {o['local']}" for o in upcoming)
    return text
