"""Keyset cursors: the last row of a page, (a time, an id), as an opaque URL-safe token the
next request hands back. A token this API did not make is the caller's input error (422)."""

from __future__ import annotations

import base64
from datetime import datetime
from uuid import UUID

from tickwork.platform.errors import InputError


def encode_cursor(at: datetime, row_id: UUID) -> str:
    raw = f"{at.isoformat()}|{row_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, row_id = base64.urlsafe_b64decode(padded.encode()).decode().split("|")
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive")
        return parsed, UUID(row_id)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError("cursor is not one this API returned", field="cursor") from exc
