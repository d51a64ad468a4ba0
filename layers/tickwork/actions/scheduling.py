"""Scheduling an action: validation a person can act on, the payload checked against its
provider and connection, the recipient's quiet hours, then the insert; reschedule as
cancel + insert with lineage.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from tickwork import connections
from tickwork.actions.model import (
    MAX_KEY_LENGTH,
    PAYLOAD_MAX_BYTES,
    Action,
    NewAction,
    Scheduled,
    Transition,
    check_tags,
    fields_of,
    payload_size,
)
from tickwork.actions.store import by_dedupe_key, cancel, insert
from tickwork.platform.config import INTERNAL_ACTION_TYPES, Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import (
    IdempotencyKeyReusedError,
    InputError,
    PastTimeError,
    PayloadTooLargeError,
    UnknownActionTypeError,
    UnknownTargetError,
)
from tickwork.platform.wallclock import require_aware
from tickwork.providers import unsubscribe
from tickwork.providers.catalog import check_payload, check_payload_for
from tickwork.recipients.policy import at_creation
from tickwork.suppression import links


def _check_key(value: str | None, name: str, *, required: bool) -> None:
    if value is None:
        if required:
            raise InputError(f"{name} is required", field=name)
        return
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string", field=name)
    if len(value) > MAX_KEY_LENGTH:
        raise InputError(f"{name} is longer than {MAX_KEY_LENGTH} characters", field=name)


def validate(new: NewAction, settings: Settings, now: datetime) -> NewAction:
    """Check a new action against the rules a person can act on; returns it with UTC time."""
    action_type = settings.action_type(new.action_type)
    if action_type is None or new.action_type in INTERNAL_ACTION_TYPES:
        known = ", ".join(sorted(set(settings.action_types) - INTERNAL_ACTION_TYPES))
        raise UnknownActionTypeError(
            f"unknown action_type {new.action_type!r}; known types: {known}", field="action_type"
        )
    _check_key(new.target_key, "target_key", required=True)
    if action_type.targets is not None and new.target_key not in action_type.targets:
        allowed = ", ".join(sorted(action_type.targets))
        raise UnknownTargetError(
            f"target_key {new.target_key!r} is not a target of {new.action_type};"
            f" allowed: {allowed}",
            field="target_key",
        )
    _check_key(new.thing_id, "thing_id", required=False)
    _check_key(new.dedupe_key, "dedupe_key", required=False)
    if not isinstance(new.payload, dict):
        raise InputError("payload must be a JSON object", field="payload")
    size = payload_size(new.payload)
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"payload is {size} bytes; the limit is {PAYLOAD_MAX_BYTES} bytes",
            field="payload",
            details={"limit": PAYLOAD_MAX_BYTES, "size": size},
        )
    publish_at = require_aware(new.publish_at)
    earliest = now - timedelta(seconds=settings.past_grace_seconds)
    if publish_at < earliest:
        raise PastTimeError(
            f"publish_at {publish_at.isoformat()} is in the past; schedule a future time"
            " or use send-now",
            field="publish_at",
        )
    if publish_at > now + timedelta(days=settings.max_horizon_days):
        raise InputError(
            f"publish_at {publish_at.isoformat()} is more than {settings.max_horizon_days}"
            " days ahead",
            field="publish_at",
        )
    check_payload(action_type.provider, new.payload, has_connection=new.connection_id is not None)
    tags = check_tags(new.tags)
    if new.publish_at is publish_at and tags == new.tags:
        return new
    return NewAction(**{**fields_of(new), "publish_at": publish_at, "tags": tags})


def schedule(
    conn: Connection, workspace_id: UUID, new: NewAction, settings: Settings, now: datetime
) -> Scheduled:
    """Insert a queued action after validating it. Same dedupe key → the first row."""
    checked = validate(new, settings, now)
    if checked.connection_id is not None:
        provider = settings.action_types[checked.action_type].provider
        found = connections.require_usable(conn, workspace_id, checked.connection_id, provider)
        check_payload_for(provider, checked.payload, found.settings)
        wants_link = unsubscribe.wanted(provider, checked.payload, found.settings) is not None
        if wants_link and not links.configured(settings):
            # Refused now rather than failed at its time: the operator's setting is missing.
            raise links.UnsubscribeUnavailableError(
                "this message would carry an unsubscribe link, which this stack cannot make:"
                " the operator sets public_api_url (TICKWORK_PUBLIC_API_URL) and the"
                " unsubscribe key",
                field="payload.unsubscribe",
            )
    if checked.recipient_id is not None:
        checked = at_creation(conn, workspace_id, checked)
    return insert(conn, workspace_id, checked)


def schedule_once(
    conn: Connection, workspace_id: UUID, new: NewAction, settings: Settings, now: datetime
) -> Scheduled:
    """`schedule`, where a repeated dedupe (idempotency) key returns the first row only if
    the request is the same; the key reused for a different action is refused.

    The key is looked up first: a retried request gets the first result whatever happened
    to the action since (published, so the publish guard would refuse a new row; or its
    time passed, so validation would)."""
    first = by_dedupe_key(conn, workspace_id, new.dedupe_key)
    if first is not None:
        result = Scheduled(first, created=False)
    else:
        result = schedule(conn, workspace_id, new, settings, now)
    if not result.created and not same_request(result.action, new):
        raise IdempotencyKeyReusedError(
            "this Idempotency-Key was already used for a different action; use a new key",
            details={"action_id": str(result.action.id)},
        )
    return result


def same_request(existing: Action, new: NewAction) -> bool:
    return (
        existing.action_type == new.action_type
        and existing.target_key == new.target_key
        and existing.thing_id == new.thing_id
        and existing.payload == new.payload
        # quiet hours may have moved the first row: it was asked for at its original time
        and (existing.original_publish_at or existing.publish_at) == require_aware(new.publish_at)
        and existing.recipient_id == new.recipient_id
        and existing.connection_id == new.connection_id
        and existing.tags == check_tags(new.tags)
    )


def reschedule(
    conn: Connection,
    workspace_id: UUID,
    action_id: UUID,
    publish_at: datetime,
    settings: Settings,
    now: datetime,
    *,
    source: str | None = None,
    created_by: str | None = None,
    timezone: str | None = None,
) -> tuple[Transition, Action | None]:
    """Cancel a queued row and insert its replacement at `publish_at`, in one transaction.
    `timezone`: the zone of the wall time it moves to (else the old row's is kept).

    Returns the cancel transition and the new row (None when the old row was not queued:
    then nothing was written)."""
    with conn.transaction():
        cancelled = cancel(conn, workspace_id, action_id)
        if not cancelled.changed or cancelled.action is None:
            return cancelled, None
        old = cancelled.action
        replacement = NewAction(
            action_type=old.action_type,
            target_key=old.target_key,
            publish_at=publish_at,
            payload=old.payload,
            thing_id=old.thing_id,
            source=source or old.source,
            created_by=created_by or old.created_by,
            rescheduled_from=old.id,
            recurring_schedule_id=old.recurring_schedule_id,
            connection_id=old.connection_id,
            recipient_id=old.recipient_id,
            transactional=old.transactional,
            timezone=old.timezone if timezone is None else timezone,
            tags=old.tags,
        )
        scheduled = schedule(conn, workspace_id, replacement, settings, now)
    return cancelled, scheduled.action
