"""Checks every request passes before any route sees it, so routes added later inherit them.

Two places: `check_event` runs on the raw API Gateway event before the resolver (the body's
JSON, its depth and numbers, lone surrogates anywhere), and the `request_checks` middleware
runs on the matched route after Powertools' validation (path parameters percent-decoded,
bodies that are not the object a route documents, instants outside the scheduling
horizon)."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from datetime import datetime
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from pydantic import BaseModel

from tickwork import runtime
from tickwork.platform.errors import BadRequestError, InputError, InvalidTimeError
from tickwork.platform.wallclock import check_horizon, utcnow

# Deeper JSON than this is refused: no payload needs it, and nesting is what makes parsers
# and serializers recurse (pydantic's stops near 255 levels, Python's json near 1000).
MAX_JSON_DEPTH = 64
# Python refuses to convert integers longer than this to or from text (CVE-2020-10735).
MAX_INT_DIGITS = 4300

_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogate(text: str, where: str) -> None:
    found = _SURROGATE.search(text)
    if found:
        raise InputError(
            f"{where} contains a lone surrogate (\\u{ord(found.group()):04x}) at character"
            f" {found.start()}: send valid Unicode (UTF-8)",
            field=where,
        )


def _path(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "body"


def check_json(value: Any) -> None:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH or with lone surrogates in any string
    (keys too), naming where. Iterative: a hostile document cannot exhaust the stack."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        node, where = stack.pop()
        if len(where) > MAX_JSON_DEPTH:
            raise InputError(
                f"the request body nests deeper than {MAX_JSON_DEPTH} levels (at"
                f" {_path(where[:3])}...): flatten it",
                field=_path(where[:1]),
                details={"max_depth": MAX_JSON_DEPTH},
            )
        if isinstance(node, str):
            _no_surrogate(node, _path(where))
        elif isinstance(node, dict):
            for key, item in node.items():
                _no_surrogate(key, _path([*where, key]) + " (a key)")
                stack.append((item, [*where, key]))
        elif isinstance(node, list):
            stack.extend((item, [*where, index]) for index, item in enumerate(node))


def parse_body(body: str) -> Any:
    """The body's JSON, or the domain error that says what is wrong with it."""
    try:
        parsed = json.loads(body)
    except RecursionError as exc:
        raise InputError(
            f"the request body nests deeper than {MAX_JSON_DEPTH} levels: flatten it",
            field="body",
            details={"max_depth": MAX_JSON_DEPTH},
        ) from exc
    except json.JSONDecodeError as exc:
        raise BadRequestError(
            f"the request body is not valid JSON: {exc.msg} (character {exc.pos})"
        ) from exc
    except ValueError as exc:  # an integer longer than Python converts
        raise InputError(
            f"the request body has a number with more than {MAX_INT_DIGITS} digits;"
            " send it as a string",
            field="body",
            details={"max_digits": MAX_INT_DIGITS},
        ) from exc
    check_json(parsed)
    return parsed


def decode_body(encoded: str) -> str:
    """A base64 body as text; bytes that are not UTF-8 are a 400, never replaced."""
    try:
        return base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise BadRequestError("the request body is not valid UTF-8 text") from exc


def check_event(event: dict[str, Any], body: str) -> None:
    """Every check that needs no route: query, path and headers, then the body."""
    for name, value in (event.get("queryStringParameters") or {}).items():
        try:
            _no_surrogate(f"{name}={value}", f"query parameter {name!r}")
        except InputError as exc:
            raise BadRequestError(exc.message, details=exc.details) from exc
    if body:
        parse_body(body)


# ------------------------------------------------------------------- per route


def _expects_object(field: Any) -> bool:
    """True when a body parameter is a model (or an optional one), not a list or a scalar."""
    annotation = field.field_info.annotation
    members = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ()
    for kind in members or (annotation,):
        if kind is NoneType:
            continue
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            return False
    return True


def _decoded(name: str, value: str) -> str:
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError as exc:
        raise BadRequestError(
            f"the path parameter {name} is not valid UTF-8 once percent-decoded",
            field=name,
        ) from exc


# A model may name fields whose instant, outside the horizon, is refused with an error of
# its own rather than InvalidTimeError: `OUT_OF_HORIZON = {"until": InvalidRecurrenceError}`
# (a recurring schedule's until bounds its rule, as an UNTIL inside the rule does).
OUT_OF_HORIZON = "OUT_OF_HORIZON"
Refusal = type[InputError]


def _instants(
    value: Any, where: str, refusal: Refusal = InvalidTimeError
) -> Iterator[tuple[str, datetime, Refusal]]:
    """The instants in a validated parameter, each with its field (`steps[2].at`) and the
    error that refuses it outside the horizon: in the value itself, in a model's fields, and
    in lists or maps of models (payloads, plain JSON, are not walked: they hold no instants,
    only strings)."""
    if isinstance(value, datetime):
        yield where, value, refusal
    elif isinstance(value, BaseModel):
        own: dict[str, Refusal] = getattr(type(value), OUT_OF_HORIZON, {})
        for name, info in type(value).model_fields.items():
            field = info.alias or name
            yield from _instants(
                getattr(value, name),
                f"{where}.{field}" if where else field,
                own.get(name, InvalidTimeError),
            )
    elif isinstance(value, list | tuple | dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(item, BaseModel | datetime):
                yield from _instants(item, f"{where}[{key!r}]" if isinstance(key, str)
                                     else f"{where}[{key}]", refusal)  # fmt: skip


def check_instants(dependant: Any, args: dict[str, Any]) -> None:
    """Every instant a route receives, in its query or its body, lies within the scheduling
    horizon (TICKWORK_MAX_HORIZON_DAYS of now, ahead or ago); routes keep their own tighter
    rules (publish_at not in the past, ...)."""
    found = [
        *(hit for p in dependant.query_params for hit in _instants(args.get(p.name), p.alias)),
        # A body's fields are named without the body's own name (`publish_at`).
        *(hit for p in dependant.body_params for hit in _instants(args.get(p.name), "")),
    ]
    if found:
        days = runtime.current().settings.max_horizon_days
        now = utcnow()
        for where, instant, refusal in found:
            try:
                check_horizon(instant, now, days, field=where)
            except InvalidTimeError as exc:
                if refusal is InvalidTimeError:
                    raise
                raise refusal(exc.message, field=where, details=exc.details) from exc


def request_checks(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[Any]:
    """Path parameters percent-decoded (as API Gateway decodes `pathParameters`), a body
    that is not a JSON object refused where the route documents an object (Powertools would
    take the first item of a list: `[null, null]` as no body), and instants outside the
    scheduling horizon refused (422, naming the field)."""
    route = app.context.get("_route")
    dependant = getattr(route, "dependant", None)
    args: dict[str, Any] = app.context.get("_route_args", {})
    if dependant is not None:
        for param in dependant.path_params:
            if isinstance(args.get(param.name), str):
                decoded = _decoded(param.name, args[param.name])
                _no_surrogate(decoded, param.name)
                args[param.name] = decoded
        body = app.current_event.body
        expects_object = any(_expects_object(f) for f in dependant.body_params)
        if body and expects_object and not isinstance(json.loads(body), dict):
            raise InputError(
                "the request body must be a JSON object (or absent, where it is optional)",
                field="body",
            )
        check_instants(dependant, args)
    return next_middleware(app)
