"""The HTTP API: Powertools' API Gateway HTTP API resolver, request and response bodies
validated with pydantic, routes split by resource, the OpenAPI document made from them."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import cache
from http import HTTPStatus
from typing import Any, cast

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, content_types
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import __version__
from tickwork.api import (
    actions,
    campaigns,
    changes,
    connections,
    digests,
    enrollments,
    entities,
    errors,
    event_endpoints,
    events,
    forecast,
    intents,
    operations,
    public,
    recipients,
    recurring,
    rules,
    suppressions,
    workspace,
)
from tickwork.api.request import check_event, decode_body, request_checks
from tickwork.api.scope import tenancy
from tickwork.platform.errors import TickworkError

MAX_BODY_BYTES = 256 * 1024
OPENAPI_PATH = "/v1/openapi.json"

DESCRIPTION = """Schedule actions (webhooks, messages, posts) to fire at a time, and manage
them. Authenticate with a bearer JWT; name the workspace in `X-Workspace-Id`. Errors are
`{"error": {"code", "message", "details"}}`."""


class _RequestState(threading.local):
    event: BaseProxyEvent | None = None
    lambda_context: LambdaContext | None = None
    context: dict[str, Any] | None = None
    frames: list[str] | None = None


class ConcurrentResolver(APIGatewayHttpResolver):
    """Powertools' resolver keeps the current event and the routing context in shared state
    (class attributes); here they are per thread, so one resolver serves several requests at
    once (the local server's threads; Lambda runs one at a time either way)."""

    def __init__(self, **kwargs: Any) -> None:
        self._state = _RequestState()
        self._startup: dict[str, Any] = {}
        super().__init__(**kwargs)
        # What the constructor and include_router put in the context is every request's start.
        self._startup, self._state.context = self._state.context or {}, None

    @property
    def current_event(self) -> APIGatewayProxyEventV2:
        assert isinstance(self._state.event, APIGatewayProxyEventV2), "no request resolved"
        return self._state.event

    @current_event.setter
    def current_event(self, value: BaseProxyEvent) -> None:
        self._state.event = value

    @property
    def lambda_context(self) -> LambdaContext:
        assert self._state.lambda_context is not None, "no request is being resolved"
        return self._state.lambda_context

    @lambda_context.setter
    def lambda_context(self, value: LambdaContext) -> None:
        self._state.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        return self._startup if self._state.context is None else self._state.context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._state.context = value

    @property
    def processed_stack_frames(self) -> list[str]:
        if self._state.frames is None:
            self._state.frames = []
        return self._state.frames

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._state.frames = value

    def _resolve(self) -> ResponseBuilder[Any]:
        # A path a static route names is that resource only: `/v1/actions/bulk-cancel` is
        # never read as the action `bulk-cancel` of GET /v1/actions/{id}. Another method on
        # it is a 405 naming the static route's methods (errors.allowed_methods).
        path = self._remove_prefix(self.current_event.path)
        method = self.current_event.http_method.upper()
        static = [route for route in self._static_routes if route.rule.match(path)]
        if static and all(route.method != method for route in static):
            return self._handle_not_found(method=method, path=path)
        return super()._resolve()

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        state = self._state
        state.event = self._to_proxy_event(cast(dict[str, Any], event))
        state.lambda_context = context
        state.context = dict(self._startup)
        try:
            return self._build_response(self._resolve())
        finally:
            state.event = state.lambda_context = state.context = None


def build() -> APIGatewayHttpResolver:
    app = ConcurrentResolver(enable_validation=True)
    app.use([request_checks, tenancy])
    app.include_router(actions.router)
    app.include_router(workspace.router)
    app.include_router(intents.router)
    app.include_router(recurring.router)
    app.include_router(rules.router)
    app.include_router(events.router)
    app.include_router(digests.router)
    app.include_router(event_endpoints.router)
    app.include_router(entities.router)
    app.include_router(connections.router)
    app.include_router(campaigns.router)
    app.include_router(enrollments.router)
    app.include_router(recipients.router)
    app.include_router(forecast.router)
    app.include_router(changes.router)
    app.include_router(operations.router)
    app.include_router(suppressions.router)
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
    if public.is_public(event.get("rawPath", "")):
        # The console's files, unsubscribe links and providers' callbacks: in AWS their own
        # function (PublicFunction) serves them; here the same code, for the local runtime.
        return public.handle(event, context)
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
    try:
        if event.get("isBase64Encoded") and body:
            # API Gateway sends bodies it does not take for text as base64: read them as
            # UTF-8 JSON here, once, so nothing below sees bytes.
            body = decode_body(body)
            event = {**event, "body": body, "isBase64Encoded": False}
        check_event(event, body)
    except TickworkError as exc:
        return errors.error_result(errors.status_of(exc), exc.code, exc.message, exc.details)
    return app.resolve(event, context)
