"""What a handler runs with: settings, database, queues and providers.

In Lambda the runtime is built from the environment on first use and kept warm across
invocations. The local runtime installs its own (in-process queues, local providers) and
then calls the very same handlers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tickwork.connections.secrets import MemorySecretStore, SecretsManagerStore, SecretStore
from tickwork.platform.config import Settings, settings
from tickwork.platform.db import Database, SessionLimits, resolve_url
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.queues.sqs import SqsQueues
from tickwork.providers import ProviderRegistry


@dataclass
class Runtime:
    settings: Settings
    db: Database
    queues: QueuePort
    providers: ProviderRegistry
    # The API's login (row-level security it cannot leave) where it differs from `db`: the
    # local runtime runs API and workers in one process. In AWS the API function's `db` is
    # that login already.
    api_db: Database | None = None
    # Connections' credentials (Secrets Manager in AWS, a file or memory locally).
    secrets: SecretStore = field(default_factory=MemorySecretStore)

    def api_database(self) -> Database:
        return self.api_db or self.db


class _Slot:
    """The process-wide runtime; a class attribute rather than a module global."""

    runtime: Runtime | None = None
    lock = threading.Lock()


def from_settings(settings: Settings) -> Runtime:

    return Runtime(
        settings=settings,
        db=Database(resolve_url(settings), SessionLimits.of(settings)),
        queues=SqsQueues(settings.all_queue_urls()),
        providers=ProviderRegistry(settings),
        secrets=SecretsManagerStore(settings.secrets_prefix, settings.secret_max_age_seconds),
    )


def install(runtime: Runtime | None) -> None:
    """Make `runtime` the one handlers use (None: go back to building from the environment)."""
    with _Slot.lock:
        _Slot.runtime = runtime


def current_settings() -> Settings:
    """The settings handlers run with, without building a runtime (no database, no AWS
    client): the installed runtime's, else the environment's."""
    with _Slot.lock:
        if _Slot.runtime is not None:
            return _Slot.runtime.settings
    return settings()


def current() -> Runtime:
    with _Slot.lock:
        if _Slot.runtime is None:
            _Slot.runtime = from_settings(Settings.from_env())
        return _Slot.runtime
