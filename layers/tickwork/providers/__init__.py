"""Providers by name, and the registry from action type to provider instance."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tickwork.config import Settings
from tickwork.providers.base import Provider, ProviderError
from tickwork.providers.http import OutboundPolicy, UnsafeDestinationError
from tickwork.providers.log import LogProvider
from tickwork.providers.webhook import WebhookProvider

Factory = Callable[[dict[str, Any], Settings], Provider]


def outbound_policy(settings: Settings) -> OutboundPolicy:
    try:
        return OutboundPolicy.allowing(sorted(settings.outbound_allowed_networks))
    except UnsafeDestinationError as exc:
        raise ProviderError(f"TICKWORK_OUTBOUND_ALLOWED_NETWORKS: {exc.message}") from exc


FACTORIES: dict[str, Factory] = {
    "log": lambda options, settings: LogProvider(options),
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

    def register(self, action_type: str, provider: Provider) -> None:
        """Use `provider` for `action_type` (the local runtime and tests)."""
        with self._lock:
            self._providers[action_type] = provider
