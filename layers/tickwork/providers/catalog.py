"""Each provider's schemas, by provider name: what its connections hold (settings shown
back, credentials kept secret) and what an action's payload must be. Checked when a
connection is written and when an action is scheduled, so refusals come early with the
field at fault, not at fire time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from tickwork.platform.config import MAX_RATE_LIMITS, RateLimit, distinct_limits
from tickwork.platform.errors import InputError
from tickwork.providers import bluesky, mastodon, postmark, ses, slack, twilio
from tickwork.providers.redact import MASK, mask_url
from tickwork.providers.schema import Schema, checked
from tickwork.providers.webhook import PLACEHOLDER, WebhookCredentials, WebhookSettings


@dataclass(frozen=True)
class Kind:
    settings: type[BaseModel]
    credentials: type[BaseModel]
    payload: type[BaseModel] | None
    connection: Literal["required", "optional"]


KINDS: dict[str, Kind] = {
    "webhook": Kind(WebhookSettings, WebhookCredentials, None, "optional"),
    "postmark": Kind(postmark.Settings, postmark.Credentials, postmark.Payload, "required"),
    "twilio": Kind(twilio.Settings, twilio.Credentials, twilio.Payload, "required"),
    "slack": Kind(slack.Settings, slack.Credentials, slack.Payload, "required"),
    "ses": Kind(ses.Settings, ses.Credentials, ses.Payload, "required"),
    "mastodon": Kind(mastodon.Settings, mastodon.Credentials, mastodon.Payload, "required"),
    "bluesky": Kind(bluesky.Settings, bluesky.Credentials, bluesky.Payload, "required"),
}


def kind(provider: str) -> Kind:
    found = KINDS.get(provider)
    if found is None:
        known = ", ".join(sorted(KINDS))
        raise InputError(f"unknown provider {provider!r}; known: {known}", field="provider")
    return found


def check_payload(provider: str, payload: dict[str, Any], *, has_connection: bool) -> None:
    """At schedule time: the payload fits the provider, and a connection is named when the
    provider sends only through one (or none is named when it takes none)."""
    found = KINDS.get(provider)
    if found is None:
        if has_connection:
            raise InputError(
                f"this action type's provider ({provider}) does not send through connections",
                field="connection_id",
            )
        return
    if found.connection == "required" and not has_connection:
        raise InputError(
            f"name the {provider} connection to send through (connection_id)",
            field="connection_id",
        )
    if found.payload is not None:
        checked(found.payload, payload, "payload")


def check_payload_for(provider: str, payload: dict[str, Any], settings: dict[str, Any]) -> None:
    """Limits that depend on the connection: a Mastodon instance's status length."""
    if provider == "mastodon":
        limit = int(settings.get("max_characters") or mastodon.DEFAULT_MAX_CHARACTERS)
        if len(str(payload.get("status", ""))) > limit:
            raise InputError(
                f"payload.status: longer than this instance's {limit} characters",
                field="payload.status",
            )


# A connection's own rate limits live in its settings under this name, beside the
# provider's: at most N sends a second, minute or hour through this account.
RATE_LIMITS_SETTING = "rate_limits"


class _ConnectionLimits(Schema):
    rate_limits: list[RateLimit] = Field(max_length=MAX_RATE_LIMITS)


def connection_limits(settings: dict[str, Any]) -> tuple[RateLimit, ...]:
    """A stored connection's rate limits (checked when written), one per window length."""
    raw = settings.get(RATE_LIMITS_SETTING)
    if not raw:
        return ()
    return distinct_limits(tuple(RateLimit.model_validate(item) for item in raw))


def check_connection(
    provider: str, settings: dict[str, Any] | None, credentials: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """Settings and credentials of a connection, normalized; None stays None (a PATCH).
    The settings may carry the connection's `rate_limits` whatever its provider."""
    found = kind(provider)
    out_settings = None
    out_credentials = None
    if settings is not None:
        own = {k: v for k, v in settings.items() if k != RATE_LIMITS_SETTING}
        out_settings = checked(found.settings, own, "settings").model_dump(
            exclude_none=True, by_alias=True
        )
        if settings.get(RATE_LIMITS_SETTING) is not None:
            limits = checked(
                _ConnectionLimits, {"rate_limits": settings[RATE_LIMITS_SETTING]}, "settings"
            )
            out_settings[RATE_LIMITS_SETTING] = [limit.model_dump() for limit in limits.rate_limits]
    if credentials is not None:
        model = checked(found.credentials, credentials, "credentials")
        out_credentials = {
            k: str(v) for k, v in model.model_dump(exclude_none=True, by_alias=True).items()
        }
    return out_settings, out_credentials


# Settings that are URLs a tenant chose: checked against private addresses when written.
URL_SETTINGS: dict[str, tuple[str, ...]] = {
    "webhook": ("url", "status_url"),
    "mastodon": ("instance_url",),
    "bluesky": ("service_url",),
}


def url_settings(provider: str) -> tuple[str, ...]:
    return URL_SETTINGS.get(provider, ())


def masked_settings(provider: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as shown back, to members and admins alike: URL settings masked
    (`redact.mask_url`). A URL's token is as secret as a credential, and credentials are
    write-only: whoever needs the whole URL gives it again."""
    names = [name for name in url_settings(provider) if isinstance(settings.get(name), str)]
    return settings | {name: mask_url(settings[name], keep=(PLACEHOLDER,)) for name in names}


def unmasked_settings(
    provider: str, given: dict[str, Any], current: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Settings to store: a URL setting given back exactly as it is shown (masked) keeps
    its stored value, so a form can send back what it read; any other masked URL is
    refused (it would be stored, `***` and all, and every call would fail)."""
    kept = dict(given)
    for name in url_settings(provider):
        value, stored = kept.get(name), (current or {}).get(name)
        if not isinstance(value, str):
            continue
        if isinstance(stored, str) and value == mask_url(stored, keep=(PLACEHOLDER,)):
            kept[name] = stored
        elif MASK in value:
            raise InputError(
                f"settings.{name}: {MASK} marks a part hidden when a URL is shown back;"
                " give the whole URL",
                field=f"settings.{name}",
            )
    return kept
