"""Where connections' credentials live: Secrets Manager in AWS (one secret per connection,
read through Powertools' cached parameters), a file of the local runtime, or memory (tests).
Values are dicts of strings; nothing here logs them."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from tickwork.platform.errors import TickworkError

# The tag naming a connection secret's provider. IAM reads it: the public function may read
# only Twilio connections' credentials (Twilio signs its callbacks with the auth token).
PROVIDER_TAG: Final = "tickwork:provider"


class SecretStoreError(TickworkError):
    """The store could not be read or written (an outage, a missing secret)."""

    code = "secret_store"


class SecretStore(Protocol):
    def ref(self, connection_id: str) -> str: ...

    def put(
        self, ref: str, values: dict[str, str], tags: Mapping[str, str] | None = None
    ) -> None: ...

    def get(self, ref: str) -> dict[str, str]: ...

    def delete(self, ref: str) -> None: ...


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SecretStoreError("the stored credentials are not an object")
    return {str(k): str(v) for k, v in value.items()}


class MemorySecretStore:
    def __init__(self) -> None:
        self._values: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def ref(self, connection_id: str) -> str:
        return f"memory/connections/{connection_id}"

    def put(self, ref: str, values: dict[str, str], tags: Mapping[str, str] | None = None) -> None:
        # Tags matter to IAM only: nothing here reads them.
        with self._lock:
            self._values[ref] = dict(values)

    def get(self, ref: str) -> dict[str, str]:
        with self._lock:
            found = self._values.get(ref)
        if found is None:
            raise SecretStoreError("no credentials stored for this connection")
        return dict(found)

    def delete(self, ref: str) -> None:
        with self._lock:
            self._values.pop(ref, None)


class FileSecretStore(MemorySecretStore):
    """The local runtime's store: one JSON file, readable by its owner only."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        if path.exists():
            self._values = {k: _strings(v) for k, v in json.loads(path.read_text()).items()}

    def ref(self, connection_id: str) -> str:
        return f"local/connections/{connection_id}"

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(self._values, out)
        tmp.replace(self.path)

    def put(self, ref: str, values: dict[str, str], tags: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self._values[ref] = dict(values)
            self._save()

    def delete(self, ref: str) -> None:
        with self._lock:
            self._values.pop(ref, None)
            self._save()


class SecretsManagerStore:
    """One secret per connection, named `<prefix>/connections/<id>` (IAM scopes the
    functions to that prefix). Reads are cached for `max_age` seconds per Lambda."""

    def __init__(self, prefix: str, max_age: int, client: Any = None) -> None:
        self.prefix = prefix.rstrip("/")
        self.max_age = max_age
        self._client = client
        self._reader: Any = None

    def client(self) -> Any:
        if self._client is None:
            import boto3  # noqa: PLC0415 - lazy: boto3 loads only where AWS is called (cold start)

            self._client = boto3.client("secretsmanager")
        return self._client

    def ref(self, connection_id: str) -> str:
        return f"{self.prefix}/connections/{connection_id}"

    def put(self, ref: str, values: dict[str, str], tags: Mapping[str, str] | None = None) -> None:
        """Create or replace the secret, with `tags` (kept on a secret that existed, so a
        secret made before it had them gets them when its credentials change)."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - lazy: botocore loads only where AWS is called (cold start)

        text = json.dumps(values)
        pairs = [{"Key": key, "Value": value} for key, value in (tags or {}).items()]
        try:
            try:
                self.client().create_secret(Name=ref, SecretString=text, Tags=pairs)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ResourceExistsException":
                    raise
                self.client().put_secret_value(SecretId=ref, SecretString=text)
                if pairs:
                    self.client().tag_resource(SecretId=ref, Tags=pairs)
        except (BotoCoreError, ClientError) as exc:
            raise SecretStoreError("the credentials could not be stored; try again") from exc

    def get(self, ref: str) -> dict[str, str]:
        from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415 - lazy: Parameters builds boto3 clients (cold start)

        if self._reader is None:
            # Powertools' provider keeps the cache (max_age) for this store's reads.
            self._reader = parameters.SecretsProvider(boto3_client=self.client())
        try:
            value = self._reader.get(ref, transform="json", max_age=self.max_age)
        except parameters.exceptions.GetParameterError as exc:
            raise SecretStoreError("the connection's credentials could not be read") from exc
        except parameters.exceptions.TransformParameterError as exc:
            raise SecretStoreError("the stored credentials are not JSON") from exc
        return _strings(value)

    def delete(self, ref: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - lazy: botocore loads only where AWS is called (cold start)

        try:
            self.client().delete_secret(SecretId=ref, ForceDeleteWithoutRecovery=True)
        except (BotoCoreError, ClientError) as exc:
            raise SecretStoreError("the credentials could not be deleted") from exc
