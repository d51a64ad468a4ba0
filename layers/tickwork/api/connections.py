"""/v1/connections: a workspace's provider accounts. Admins create, change and delete them;
members may list them, read them and name them in actions. Credentials are write-only;
URL settings are shown masked to everyone, and a masked URL sent back keeps the stored one."""

from __future__ import annotations

import contextlib
import secrets
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork import connections
from tickwork.api.callbacks import (
    callback_secret_ref,
    callback_url,
    check_uses_secret,
    connection_callbacks,
)
from tickwork.api.connection_models import (
    CallbackSecretOut,
    CallbacksOut,
    ConnectionList,
    ConnectionOut,
    ConnectionPatch,
    CreateConnection,
    VerifyOut,
)
from tickwork.api.models import responses
from tickwork.api.scope import RequestScope, scope
from tickwork.connections import Connection
from tickwork.connections.secrets import SecretStoreError
from tickwork.feedback.common import CALLBACK_USER
from tickwork.feedback.store import Counts, counts_of
from tickwork.platform.errors import ConflictError
from tickwork.platform.observability import logger
from tickwork.providers import outbound_policy
from tickwork.providers.base import ProviderError, Verified, Via
from tickwork.providers.catalog import check_connection, unmasked_settings, url_settings
from tickwork.providers.http import UnsafeDestinationError, check_url

router = Router()
SECRET_BYTES = 32

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]


def _callbacks(request: RequestScope, row: Connection, counts: Counts | None) -> CallbacksOut:
    supported, setup = connection_callbacks(row.provider)
    headers = dict(router.current_event.headers or {})
    url = callback_url(request.runtime.settings, headers, row.id) if supported else None
    return CallbacksOut(supported=supported, url=url, setup=setup,
                        counts=counts.counts if counts else {},
                        last_at=counts.last_at if counts else None)  # fmt: skip


def _out(request: RequestScope, row: Connection) -> ConnectionOut:
    counts = counts_of(request.conn, request.caller.workspace_id, [row.id]).get(row.id)
    return ConnectionOut.of(row, _callbacks(request, row, counts))


def _checked_settings(request: RequestScope, provider: str, settings: dict[str, Any]) -> None:
    """URLs a tenant configures must be http(s) and resolve to public addresses (422
    `unsafe_url` naming the setting)."""
    policy = outbound_policy(request.runtime.settings)
    for name in url_settings(provider):
        if name in settings:
            try:
                check_url(str(settings[name]), policy)
            except UnsafeDestinationError as exc:
                raise UnsafeDestinationError(
                    f"settings.{name}: {exc.message}", field=f"settings.{name}"
                ) from exc


@router.post(
    "/v1/connections",
    summary="Register a provider account (admins)",
    responses=responses(201, ConnectionOut, "created; credentials stored, never returned"),
)
def create_connection(
    body: CreateConnection, workspace: WorkspaceHeader
) -> Response[ConnectionOut]:
    request = scope(router)
    request.caller.require_admin("add a connection")
    settings, credentials = check_connection(body.provider, body.settings, body.credentials)
    assert settings is not None
    assert credentials is not None
    settings = unmasked_settings(body.provider, settings)
    _checked_settings(request, body.provider, settings)
    row = connections.create(
        request.conn, request.caller.workspace_id, name=body.name, provider=body.provider,
        settings=settings, credentials=credentials, store=request.runtime.secrets,
        created_by=request.caller.user_id,
    )  # fmt: skip
    return Response(status_code=201, content_type=content_types.APPLICATION_JSON,
                    body=_out(request, row))  # fmt: skip


@router.get(
    "/v1/connections",
    summary="List the workspace's connections",
    responses=responses(200, ConnectionList, "every connection not deleted, oldest first"),
)
def list_connections(
    workspace: WorkspaceHeader,
    provider: Annotated[str | None, Query(max_length=63)] = None,
) -> ConnectionList:
    request = scope(router)
    rows = connections.list_all(request.conn, request.caller.workspace_id, provider)
    counts = counts_of(request.conn, request.caller.workspace_id, [row.id for row in rows])
    return ConnectionList(
        items=[ConnectionOut.of(row, _callbacks(request, row, counts.get(row.id))) for row in rows]
    )


@router.get(
    "/v1/connections/<connection_id>",
    summary="Get one connection (never its credentials)",
    responses=responses(200, ConnectionOut, "it"),
)
def get_connection(connection_id: str, workspace: WorkspaceHeader) -> ConnectionOut:
    request = scope(router)
    key = connections.parse_id(connection_id)
    return _out(request, connections.get(request.conn, request.caller.workspace_id, key))


@router.patch(
    "/v1/connections/<connection_id>",
    summary="Rename, change settings or credentials, disable or enable (admins)",
    responses=responses(
        200, ConnectionOut, "changed; new settings or credentials clear the last verification"
    ),
)
def patch_connection(
    connection_id: str, body: ConnectionPatch, workspace: WorkspaceHeader
) -> ConnectionOut:
    request = scope(router)
    request.caller.require_admin("change a connection")
    key = connections.parse_id(connection_id)
    current = connections.get(request.conn, request.caller.workspace_id, key)
    settings, credentials = check_connection(current.provider, body.settings, body.credentials)
    if settings is not None:
        settings = unmasked_settings(current.provider, settings, current.settings)
        _checked_settings(request, current.provider, settings)
    row = connections.update(
        request.conn, request.caller.workspace_id, key, store=request.runtime.secrets,
        name=body.name, settings=settings, credentials=credentials, status=body.status,
    )  # fmt: skip
    return _out(request, row)


@router.delete(
    "/v1/connections/<connection_id>",
    summary="Delete a connection (admins); actions naming it fail as connection_removed",
    responses=responses(200, ConnectionOut, "deleted; its credentials are erased"),
)
def delete_connection(connection_id: str, workspace: WorkspaceHeader) -> ConnectionOut:
    request = scope(router)
    request.caller.require_admin("delete a connection")
    key = connections.parse_id(connection_id)
    row = connections.delete(request.conn, request.caller.workspace_id, key)
    store = request.runtime.secrets

    def erase() -> None:
        try:
            store.delete(row.secret_ref or "")
        except SecretStoreError:
            # The row is deleted and will never be read again; the operator can sweep.
            logger.warning("credentials of a deleted connection remain", extra={"id": str(key)})
        # Most connections never had a callback secret; a deleted one is never read again.
        with contextlib.suppress(SecretStoreError):
            store.delete(callback_secret_ref(store, key))

    request.after_commit.append(erase)
    return _out(request, row)


@router.post(
    "/v1/connections/<connection_id>/verify",
    summary="Check the credentials with the provider's cheapest authenticated call",
    responses=responses(200, VerifyOut, "what the provider said, in plain words"),
)
def verify_connection(connection_id: str, workspace: WorkspaceHeader) -> VerifyOut:
    request = scope(router)
    key = connections.parse_id(connection_id)
    row = connections.get(request.conn, request.caller.workspace_id, key)
    try:
        credentials = request.runtime.secrets.get(row.secret_ref or "")
    except SecretStoreError as exc:
        result = Verified(False, exc.message)
    else:
        via = Via(row.id, row.workspace_id, row.provider, dict(row.settings), credentials)
        try:
            provider = request.runtime.providers.for_provider(row.provider)
        except ProviderError:
            result = Verified(False, f"{row.provider} is not set up on this Tickwork")
        else:
            check = getattr(provider, "verify", None)
            result = check(via) if check else Verified(False, "this provider cannot be verified")
    updated = connections.record_verification(
        request.conn, request.caller.workspace_id, key, result.ok, result.message
    )
    return VerifyOut(ok=result.ok, message=result.message, account=result.account or None,
                     connection=_out(request, updated))  # fmt: skip


@router.post(
    "/v1/connections/<connection_id>/callback-secret",
    summary="Make the connection's callback secret (admins): shown once",
    responses=responses(
        200, CallbackSecretOut,
        "the new secret (it replaces any before) and the callback URL carrying it: give that"
        " URL to the provider (Postmark's webhook URL); other providers' connections take"
        " none (422 callback_secret_unused)",
    ),
)  # fmt: skip
def make_callback_secret(connection_id: str, workspace: WorkspaceHeader) -> CallbackSecretOut:
    request = scope(router)
    request.caller.require_admin("make a connection's callback secret")
    key = connections.parse_id(connection_id)
    row = connections.get(request.conn, request.caller.workspace_id, key)
    check_uses_secret(row.provider)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    store = request.runtime.secrets
    try:
        store.put(callback_secret_ref(store, row.id), {"secret": secret})
    except SecretStoreError as exc:
        raise ConflictError(exc.message) from exc
    url = callback_url(request.runtime.settings, dict(router.current_event.headers), row.id)
    parts = urlsplit(url)
    with_credentials = urlunsplit(parts._replace(netloc=f"{CALLBACK_USER}:{secret}@{parts.netloc}"))
    return CallbackSecretOut(secret=secret, username=CALLBACK_USER, url=with_credentials)
