"""Every error the API returns has one shape, `{"error": {"code", "message", "details"}}`,
and its status comes from the error's class, mapped here and nowhere else."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import psycopg
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from tickwork.api.models import ErrorBody, ErrorDetail
from tickwork.platform.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InputError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    TickworkError,
)
from tickwork.platform.observability import logger
from tickwork.rules.conditions import InvalidConditionError

# Most specific first.
STATUS_OF: list[tuple[type[TickworkError], HTTPStatus]] = [
    (PayloadTooLargeError, HTTPStatus.REQUEST_ENTITY_TOO_LARGE),
    (RateLimitedError, HTTPStatus.TOO_MANY_REQUESTS),
    (BadRequestError, HTTPStatus.BAD_REQUEST),
    (InputError, HTTPStatus.UNPROCESSABLE_ENTITY),
    (NotFoundError, HTTPStatus.NOT_FOUND),
    (ConflictError, HTTPStatus.CONFLICT),
    (AuthenticationError, HTTPStatus.UNAUTHORIZED),
    (ForbiddenError, HTTPStatus.FORBIDDEN),
]


def error_json(code: str, message: str, details: dict[str, Any] | None = None) -> str:
    """The error body. It never fails: details that cannot be serialized (a lone surrogate
    echoed from the input, say) are dropped rather than failing the answer."""
    try:
        return ErrorBody(
            error=ErrorDetail(code=code, message=message, details=details or {})
        ).model_dump_json()
    except (ValueError, TypeError):
        safe = message.encode("utf-8", "backslashreplace").decode("utf-8")
        return ErrorBody(error=ErrorDetail(code=code, message=safe)).model_dump_json()


def error_response(
    status: HTTPStatus,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Response[str]:
    return Response(
        status_code=status.value,
        content_type=content_types.APPLICATION_JSON,
        body=error_json(code, message, details),
        headers=headers,
    )


def error_result(
    status: HTTPStatus,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The same error as a Lambda proxy result, for answers given before the resolver runs."""
    return {
        "statusCode": status.value,
        "headers": {"Content-Type": content_types.APPLICATION_JSON, **(headers or {})},
        "body": error_json(code, message, details),
        "isBase64Encoded": False,
    }


def headers_of(error: TickworkError) -> dict[str, str] | None:
    if isinstance(error, RateLimitedError):
        return {"Retry-After": str(error.retry_after_seconds)}
    return None


def status_of(error: TickworkError) -> HTTPStatus:
    for cls, status in STATUS_OF:
        if isinstance(error, cls):
            return status
    return HTTPStatus.INTERNAL_SERVER_ERROR


def _field(loc: Any) -> str:
    """`payload.items[2]`; the part of the request (`body`) when the error is about all of it."""
    parts = [part for part in (loc or ()) if part not in ("body", "query", "header", "path")]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or (str(loc[0]) if loc else "body")


def _problem(error: Any) -> str:
    """Pydantic's message without its "Value error, " prefix (our validators' own words)."""
    if error.get("type") == "value_error" and (error.get("ctx") or {}).get("error"):
        return str(error["ctx"]["error"])
    message = str(error.get("msg") or "invalid")
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    field, value = _field(error.get("loc")), error.get("input")
    if field in RANGE_PARAMETERS and isinstance(value, str) and " " in value:
        message += (
            "; a '+' in a URL reads as a space: URL-encode the value (send + as %2B),"
            " or give the time in UTC with Z"
        )
    return message


def _in_conditions(loc: Any) -> bool:
    """Whether a problem lies in a rule's conditions or a drip step's (`conditions[0].op`,
    `steps[1].conditions`), where the domain's own checks answer `invalid_condition`."""
    parts = [part for part in (loc or ()) if part != "body"]
    return parts[:1] == ["conditions"] or (
        len(parts) >= 3 and parts[0] == "steps" and isinstance(parts[1], int)
        and parts[2] == "conditions"
    )  # fmt: skip


# Query parameters that are instants with offsets, where an unencoded + arrives as a space.
RANGE_PARAMETERS = frozenset({"from", "to"})
WORKSPACE_HEADER = "X-Workspace-Id"


def allowed_methods(app: APIGatewayHttpResolver, path: str) -> list[str]:
    """Methods some route serves at `path`, for a 405's Allow header: a static route's
    alone where one names the path (`/v1/actions/bulk-cancel` is no action id)."""
    static = {route.method for route in app._static_routes if route.rule.match(path)}
    if static:
        return sorted(static)
    return sorted({route.method for route in app._dynamic_routes if route.rule.match(path)})


def register(app: APIGatewayHttpResolver) -> None:
    @app.exception_handler(TickworkError)
    def domain_error(error: TickworkError) -> Response[str]:
        return error_response(
            status_of(error), error.code, error.message, error.details, headers_of(error)
        )

    @app.exception_handler(RequestUnsupportedContentType)
    def unsupported(error: RequestUnsupportedContentType) -> Response[str]:
        return error_response(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        )

    @app.exception_handler(RequestValidationError)
    def invalid_request(error: RequestValidationError) -> Response[str]:
        problems = [
            {"field": _field(e.get("loc")), "problem": _problem(e), "type": e.get("type")}
            for e in error.errors()
        ]
        if any(p["type"] == "json_invalid" for p in problems):
            return error_response(
                HTTPStatus.BAD_REQUEST, "bad_request", "the request body is not valid JSON"
            )
        if any(p["field"].lower() == WORKSPACE_HEADER.lower() for p in problems):
            # A malformed request, as the docs say, whatever the route.
            raw = app.current_event.headers.get(WORKSPACE_HEADER.lower()) or ""
            return error_response(
                HTTPStatus.BAD_REQUEST,
                "bad_request",
                f"{WORKSPACE_HEADER} {raw[:60]!r} is not a workspace id (a UUID)"
                if raw
                else f"the {WORKSPACE_HEADER} header is required: the workspace to act in",
                {"field": WORKSPACE_HEADER},
            )
        first = problems[0] if problems else {"field": "body", "problem": "invalid"}
        # Problems only in conditions (an unknown operator, too many) are the conditions'
        # own code, as the domain answers for those it finds; anything else besides them
        # is invalid_input, listing every problem.
        locs = [e.get("loc") for e in error.errors()]
        in_conditions = bool(locs) and all(_in_conditions(loc) for loc in locs)
        return error_response(
            HTTPStatus.UNPROCESSABLE_ENTITY,
            InvalidConditionError.code if in_conditions else "invalid_input",
            f"{first['field']}: {first['problem']}",
            {"errors": problems},
        )

    @app.exception_handler(psycopg.DataError)
    def unstorable(error: psycopg.DataError) -> Response[str]:
        # A backstop for values no domain check caught (NUL characters, huge numbers).
        return error_response(
            HTTPStatus.UNPROCESSABLE_ENTITY, "invalid_input", f"a value cannot be stored: {error}"
        )

    @app.exception_handler(psycopg.OperationalError)
    def database_down(error: psycopg.OperationalError) -> Response[str]:
        logger.exception("database unavailable")
        return error_response(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "unavailable",
            "the service is briefly unavailable; retry",
        )

    @app.exception_handler(Exception)
    def unexpected(error: Exception) -> Response[str]:
        # A bug of ours, never the caller's input: logged with its trace, answered plainly.
        logger.exception("unhandled error")
        return error_response(
            HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "something went wrong on our side"
        )

    @app.not_found
    def not_found(error: Exception) -> Response[str]:
        event = app.current_event
        allowed = allowed_methods(app, event.path)
        if allowed:
            return error_response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "method_not_allowed",
                f"{event.http_method} is not allowed on {event.path[:200]}; use"
                f" {' or '.join(allowed)}",
                {"allowed": allowed},
                headers={"Allow": ", ".join(allowed)},
            )
        return error_response(
            HTTPStatus.NOT_FOUND, "not_found", f"no route {event.http_method} {event.path[:200]}"
        )
