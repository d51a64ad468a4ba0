"""Providers by name, and the registry from action type to provider instance."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tickwork.platform.config import Settings
from tickwork.providers.base import Provider, ProviderError
from tickwork.providers.bluesky import BlueskyProvider
from tickwork.providers.event import EventProvider
from tickwork.providers.http import OutboundPolicy, UnsafeDestinationError
from tickwork.providers.log import LogProvider
from tickwork.providers.mastodon import MastodonProvider
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.rest import RestProvider
from tickwork.providers.ses import SesProvider
from tickwork.providers.slack import SlackProvider
from tickwork.providers.twilio import TwilioProvider
from tickwork.providers.webhook import WebhookProvider

Factory = Callable[[dict[str, Any], Settings], Provider]


def outbound_policy(settings: Settings) -> OutboundPolicy:
    try:
        return OutboundPolicy.allowing(sorted(settings.outbound_allowed_networks))
    except UnsafeDestinationError as exc:
        raise ProviderError(f"TICKWORK_OUTBOUND_ALLOWED_NETWORKS: {exc.message}") from exc


def _rest(cls: type[RestProvider]) -> Factory:
    def build(options: dict[str, Any], settings: Settings) -> Provider:
        return cls(
            options,
            timeout=settings.provider_timeout_seconds,
            policy=outbound_policy(settings),
            max_body_bytes=settings.provider_max_response_bytes,
        )

    return build


FACTORIES: dict[str, Factory] = {
    "log": lambda options, settings: LogProvider(options),
    "postmark": _rest(PostmarkProvider),
    "twilio": lambda options, settings: _rest(TwilioProvider)(
        {"status_callback_base": settings.public_api_url, **options}, settings
    ),
    "slack": _rest(SlackProvider),
    "mastodon": _rest(MastodonProvider),
    "bluesky": _rest(BlueskyProvider),
    "ses": lambda options, settings: SesProvider(
        options,
        timeout=settings.provider_timeout_seconds,
        max_body_bytes=settings.provider_max_response_bytes,
    ),
    # Outcome events: a tenant's endpoint gets a short deadline, so a slow one holds a
    # dispatcher slot briefly; the event type's long retry budget makes up for it.
    "event": lambda options, settings: EventProvider(
        options,
        timeout=min(settings.provider_timeout_seconds, 5.0),
        policy=outbound_policy(settings),
        max_body_bytes=settings.provider_max_response_bytes,
    ),
    "webhook": lambda options, settings: WebhookProvider(
        options,
        timeout=settings.provider_timeout_seconds,
        policy=outbound_policy(settings),
        max_body_bytes=settings.provider_max_response_bytes,
    ),
}


class ProviderRegistry:
    """One provider instance per action type, built on first use from the settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._providers: dict[str, Provider] = {}
        self._lock = threading.Lock()

    def for_action_type(self, action_type: str) -> Provider:
        with self._lock:
            provider = self._providers.get(action_type)
            if provider is None:
                config = self.settings.action_type(action_type)
                if config is None:
                    raise ProviderError(f"unknown action type {action_type!r}")
                factory = FACTORIES.get(config.provider)
                if factory is None:
                    raise ProviderError(
                        f"action type {action_type!r} names unknown provider {config.provider!r}"
                    )
                provider = factory(config.options, self.settings)
                self._providers[action_type] = provider
            return provider

    def for_fallback(self, action_type: str, name: str) -> Provider:
        """The instance of fallback provider `name` of `action_type` (its failover options),
        built on first use like the type's own."""
        key = f"{action_type}>{name}"
        with self._lock:
            provider = self._providers.get(key)
            if provider is None:
                config = self.settings.action_type(action_type)
                fallbacks = config.failover.providers if config and config.failover else ()
                entry = next((f for f in fallbacks if f.provider == name), None)
                factory = FACTORIES.get(name)
                if entry is None or factory is None:
                    raise ProviderError(
                        f"action type {action_type!r} has no fallback provider {name!r}"
                    )
                provider = factory(entry.options, self.settings)
                self._providers[key] = provider
            return provider

    def for_provider(self, name: str) -> Provider:
        """An instance of provider `name` for connection checks: the one an action type
        using it has (with its options, e.g. a local fake server's URL), else a default."""
        for action_type, config in self.settings.action_types.items():
            if config.provider == name:
                return self.for_action_type(action_type)
        factory = FACTORIES.get(name)
        if factory is None:
            raise ProviderError(f"unknown provider {name!r}")
        return factory({}, self.settings)

    def register(self, action_type: str, provider: Provider, fallback: str | None = None) -> None:
        """Use `provider` for `action_type`, or for its fallback provider named `fallback`
        (the local runtime and tests)."""
        if fallback is not None:
            action_type = f"{action_type}>{fallback}"
        with self._lock:
            self._providers[action_type] = provider
