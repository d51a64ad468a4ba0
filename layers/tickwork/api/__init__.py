"""The HTTP API: Powertools' API Gateway HTTP API resolver, request and response bodies
validated with pydantic, routes split by resource, the OpenAPI document made from them."""

from __future__ import annotations

from functools import cache
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, content_types
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import __version__
from tickwork.api import (
    actions,
    campaigns,
    changes,
    enrollments,
    entities,
    errors,
    events,
    forecast,
    intents,
    recipients,
    recurring,
    rules,
    workspace,
)
from tickwork.api.scope import tenancy

MAX_BODY_BYTES = 256 * 1024
OPENAPI_PATH = "/v1/openapi.json"

DESCRIPTION = """Schedule actions (webhooks, messages, posts) to fire at a time, and manage
them. Authenticate with a bearer JWT; name the workspace in `X-Workspace-Id`. Errors are
`{"error": {"code", "message", "details"}}`."""


def build() -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver(enable_validation=True)
    app.use([tenancy])
    app.include_router(actions.router)
    app.include_router(workspace.router)
    app.include_router(intents.router)
    app.include_router(recurring.router)
    app.include_router(rules.router)
    app.include_router(events.router)
    app.include_router(entities.router)
    app.include_router(campaigns.router)
    app.include_router(enrollments.router)
    app.include_router(recipients.router)
    app.include_router(forecast.router)
    app.include_router(changes.router)
    errors.register(app)
    return app


def openapi_json(app: APIGatewayHttpResolver) -> str:
    return app.get_openapi_json_schema(
        title="Tickwork",
        version=__version__,
        description=DESCRIPTION,
        security_schemes={"bearer": HTTPBearer(bearerFormat="JWT")},
        security=[{"bearer": []}],
    )


app = build()


@cache
def openapi_document() -> str:
    return openapi_json(app)


def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Resolve one API Gateway HTTP API (payload v2) event. Oversized bodies are refused
    before anything parses them."""
    http = event.get("requestContext", {}).get("http", {})
    if http.get("method") == "GET" and event.get("rawPath") == OPENAPI_PATH:
        # The document describes the API to anyone; it is not a workspace's resource.
        return {
            "statusCode": 200,
            "headers": {"Content-Type": content_types.APPLICATION_JSON},
            "body": openapi_document(),
            "isBase64Encoded": False,
        }
    body = event.get("body") or ""
    headers = {key.lower(): value for key, value in (event.get("headers") or {}).items()}
    content_type = headers.get("content-type", "").strip().lower()
    if body and content_type and not content_type.startswith("application/json"):
        return errors.error_result(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            f"send the body as application/json, not {content_type[:100]}",
        )
    if len(body) > MAX_BODY_BYTES:
        return errors.error_result(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            "payload_too_large",
            f"the request body is larger than {MAX_BODY_BYTES} bytes",
            {"limit": MAX_BODY_BYTES},
        )
    return app.resolve(event, context)
