"""Keyset cursors: what a page hands out comes back as the same (time, id); anything else
is the caller's input error naming the field, never a 500."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID, uuid4

import pytest

from tickwork.platform.errors import InputError
from tickwork.platform.paging import decode_cursor, encode_cursor


@pytest.mark.parametrize(
    "at",
    [datetime(2027, 3, 14, 2, 30, 0, 123456, tzinfo=UTC),
     datetime(2027, 1, 1, tzinfo=timezone(timedelta(hours=-5)))],
)  # fmt: skip
def test_a_cursor_comes_back_as_the_row_it_names(at):
    row_id = uuid4()
    token = encode_cursor(at, row_id)
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert decode_cursor(token) == (at, row_id)


# A fixed id: xdist's workers must collect the same test ids, so none is random.
SOME_ID = UUID("3355e212-8c0f-4949-a243-efa4f0c83e9d")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    ["not-a-cursor", "!!!!", "", _b64(b"2027-01-01T00:00:00+00:00"),
     _b64(b"2027-01-01T00:00:00|" + str(SOME_ID).encode()),  # naive time
     _b64(b"2027-01-01T00:00:00+00:00|not-a-uuid"), _b64(b"a|b|c"), _b64(b"\xff\xfe|\x00"),
     encode_cursor(datetime(2027, 1, 1, tzinfo=UTC), SOME_ID)[:-3]],  # cut short
)  # fmt: skip
def test_a_tampered_cursor_is_an_input_error_on_the_cursor_field(token):
    with pytest.raises(InputError) as caught:
        decode_cursor(token)
    assert caught.value.message == "cursor is not one this API returned"
    assert caught.value.field == "cursor"
