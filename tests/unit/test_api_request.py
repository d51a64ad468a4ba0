"""The checks every API request passes before a route sees it (no I/O)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from tickwork.api import handle
from tickwork.api.errors import error_json
from tickwork.api.request import MAX_JSON_DEPTH, check_json, decode_body, parse_body
from tickwork.platform.errors import BadRequestError, InputError, InvalidTimeError
from tickwork.platform.wallclock import parse_date, require_aware, resolve_wall_time, to_utc


def nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_depth_is_checked_without_recursion():
    check_json({"a": nested(MAX_JSON_DEPTH - 1)})
    with pytest.raises(InputError, match=f"deeper than {MAX_JSON_DEPTH}"):
        check_json({"a": nested(MAX_JSON_DEPTH)})
    with pytest.raises(InputError, match="deeper"):
        check_json(nested(200_000))  # far past Python's recursion limit


def test_lone_surrogates_are_found_in_keys_and_values_with_their_place():
    with pytest.raises(InputError, match=r"payload\.items\[1\] contains a lone surrogate"):
        check_json({"payload": {"items": ["ok", "x\ud800"]}})
    with pytest.raises(InputError, match=r"\(a key\)"):
        check_json({"payload": {"\udfff": 1}})
    check_json({"payload": {"emoji": "\U0001f600", "accents": "café"}})


def test_parse_body_names_what_is_wrong():
    with pytest.raises(BadRequestError, match="not valid JSON"):
        parse_body("{'a': 1}")
    with pytest.raises(InputError, match="more than 4300 digits"):
        parse_body('{"n": ' + "7" * 5000 + "}")
    with pytest.raises(InputError, match="deeper"):
        parse_body("[" * 100_000 + "]" * 100_000)
    assert parse_body('{"n": ' + "7" * 4000 + "}")["n"] > 0


def test_base64_bodies_must_be_utf8():
    assert decode_body(base64.b64encode("café".encode()).decode()) == "café"
    with pytest.raises(BadRequestError, match="UTF-8"):
        decode_body(base64.b64encode(b'{"t": "\xff"}').decode())
    event = {
        "version": "2.0", "rawPath": "/v1/actions", "headers": {},
        "requestContext": {"http": {"method": "POST"}}, "isBase64Encoded": True,
        "body": base64.b64encode(b'{"t": "\xfe"}').decode(),
    }  # fmt: skip
    result = handle(event, None)  # type: ignore[arg-type]
    assert result["statusCode"] == 400
    assert json.loads(result["body"])["error"]["code"] == "bad_request"


def test_an_error_body_never_fails_to_serialize():
    body = json.loads(error_json("unknown_target", "'\\ud800' is not a target", {"t": "\ud800"}))
    assert body["error"]["code"] == "unknown_target"


def test_instants_and_wall_times_that_overflow_in_utc_are_refused():
    low = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    high = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))
    for instant in (low, high):
        with pytest.raises(InvalidTimeError, match="outside the years 1-9999"):
            require_aware(instant)
        with pytest.raises(ValueError, match="outside the years 1-9999"):
            to_utc(instant)
    with pytest.raises(InvalidTimeError, match="outside the years 1-9999"):
        resolve_wall_time(date(1, 1, 1), time(0, 0), ZoneInfo("Europe/Berlin"))
    with pytest.raises(InvalidTimeError, match="outside the years 1-9999"):
        resolve_wall_time(date(9999, 12, 31), time(23, 59), ZoneInfo("America/Caracas"))
    assert to_utc(datetime(2027, 1, 1, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)


def test_a_day_that_does_not_exist_is_not_called_malformed():
    with pytest.raises(InvalidTimeError, match=r"'2027-02-30' does not exist"):
        parse_date("2027-02-30")
    with pytest.raises(InvalidTimeError, match="YYYY-MM-DD form"):
        parse_date("30/02/2027")
