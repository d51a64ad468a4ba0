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
from tickwork.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InputError,
    NotFoundError,
    PayloadTooLargeError,
    TickworkError,
)
from tickwork.observability import logger

# Most specific first.
STATUS_OF: list[tuple[type[TickworkError], HTTPStatus]] = [
    (PayloadTooLargeError, HTTPStatus.REQUEST_ENTITY_TOO_LARGE),
    (BadRequestError, HTTPStatus.BAD_REQUEST),
    (InputError, HTTPStatus.UNPROCESSABLE_ENTITY),
    (NotFoundError, HTTPStatus.NOT_FOUND),
    (ConflictError, HTTPStatus.CONFLICT),
    (AuthenticationError, HTTPStatus.UNAUTHORIZED),
    (ForbiddenError, HTTPStatus.FORBIDDEN),
]


def error_response(
    status: HTTPStatus, code: str, message: str, details: dict[str, Any] | None = None
) -> Response[str]:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, details=details or {}))
    return Response(
        status_code=status.value,
        content_type=content_types.APPLICATION_JSON,
        body=body.model_dump_json(),
    )


def error_result(
    status: HTTPStatus, code: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The same error as a Lambda proxy result, for answers given before the resolver runs."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, details=details or {}))
    return {
        "statusCode": status.value,
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": body.model_dump_json(),
        "isBase64Encoded": False,
    }


def status_of(error: TickworkError) -> HTTPStatus:
    for cls, status in STATUS_OF:
        if isinstance(error, cls):
            return status
    return HTTPStatus.INTERNAL_SERVER_ERROR


def _field(loc: Any) -> str:
    parts = [str(part) for part in (loc or ()) if part not in ("body", "query", "header", "path")]
    return ".".join(parts)


def register(app: APIGatewayHttpResolver) -> None:
    @app.exception_handler(TickworkError)
    def domain_error(error: TickworkError) -> Response[str]:
        return error_response(status_of(error), error.code, error.message, error.details)

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
            {"field": _field(e.get("loc")), "problem": str(e.get("msg")), "type": e.get("type")}
            for e in error.errors()
        ]
        if any(p["type"] == "json_invalid" for p in problems):
            return error_response(
                HTTPStatus.BAD_REQUEST, "bad_request", "the request body is not valid JSON"
            )
        first = problems[0] if problems else {"field": "", "problem": "invalid"}
        where = f"{first['field']}: " if first["field"] else ""
        return error_response(
            HTTPStatus.UNPROCESSABLE_ENTITY,
            "invalid_input",
            f"{where}{first['problem']}",
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
        return error_response(
            HTTPStatus.NOT_FOUND, "not_found", f"no route {event.http_method} {event.path}"
        )
