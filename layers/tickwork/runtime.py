"""What a handler runs with: settings, database, queues and providers.

In Lambda the runtime is built from the environment on first use and kept warm across
invocations. The local runtime installs its own (in-process queues, local providers) and
then calls the very same handlers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from tickwork.connections.secrets import MemorySecretStore, SecretsManagerStore, SecretStore
from tickwork.platform.archive import ArchiveStore, FolderArchiveStore, S3ArchiveStore
from tickwork.platform.config import Settings, check_unsubscribe_key, settings
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
    # Where removed history is archived (the stack's bucket, a local folder); None: nowhere,
    # and then the retention removes nothing.
    archive: ArchiveStore | None = None

    def api_database(self) -> Database:
        return self.api_db or self.db


class _Slot:
    """The process-wide runtime; a class attribute rather than a module global."""

    runtime: Runtime | None = None
    lock = threading.Lock()


def with_unsubscribe_key(settings: Settings) -> Settings:
    """`settings` with the unsubscribe links' key read from its Secrets Manager secret (in
    AWS), checked like one given directly: a short key stops the start, saying why."""
    if settings.unsubscribe_key or not settings.unsubscribe_key_secret_arn:
        return settings
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415 - lazy: Parameters builds boto3 clients (cold start)

    value: object = parameters.get_secret(settings.unsubscribe_key_secret_arn, max_age=3600)
    key = check_unsubscribe_key(value.decode() if isinstance(value, bytes) else str(value))
    return settings.model_copy(update={"unsubscribe_key": key})


def archive_of(settings: Settings) -> ArchiveStore | None:
    """The archive the settings name: the S3 bucket, else the folder, else none."""
    if settings.archive_bucket:
        return S3ArchiveStore(settings.archive_bucket, settings.archive_prefix)
    if settings.archive_dir:
        return FolderArchiveStore(Path(settings.archive_dir))
    return None


def from_settings(settings: Settings) -> Runtime:
    settings = with_unsubscribe_key(settings)
    return Runtime(
        settings=settings,
        db=Database(resolve_url(settings), SessionLimits.of(settings)),
        queues=SqsQueues(settings.all_queue_urls()),
        providers=ProviderRegistry(settings),
        secrets=SecretsManagerStore(settings.secrets_prefix, settings.secret_max_age_seconds),
        archive=archive_of(settings),
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
