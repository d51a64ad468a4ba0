"""Where removed history is kept: objects by key, in the stack's S3 bucket (AWS) or a folder
(the local runtime). The retention engine writes an object before it deletes what is in it,
and writes the same key again when it archives the same rows again (idempotent)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from tickwork.platform.errors import TickworkError


class ArchiveError(TickworkError):
    """An archive object could not be written or read."""

    code = "archive"


class ArchiveStore(Protocol):
    """A place for archive objects, by key (`a/b/c.jsonl.gz`)."""

    def put(self, key: str, body: bytes, content_type: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, key: str) -> None: ...

    def where(self, key: str) -> str:
        """The object's address, for logs and manifests (s3://bucket/key, a path)."""
        ...


class S3Client(Protocol):
    """The calls of boto3's S3 client this module makes."""

    def put_object(self, **kwargs: Any) -> Any: ...

    def get_object(self, **kwargs: Any) -> Any: ...

    def delete_object(self, **kwargs: Any) -> Any: ...


class S3ArchiveStore:
    """Objects in an S3 bucket (the stack's ArchiveBucket), under a prefix."""

    def __init__(self, bucket: str, prefix: str = "", client: S3Client | None = None) -> None:
        self._client = client
        self.bucket = bucket
        self.prefix = prefix

    @property
    def client(self) -> S3Client:
        if self._client is None:
            import boto3  # noqa: PLC0415 - lazy: boto3 loads only where AWS is called (cold start)

            self._client = boto3.client("s3")
        return self._client

    def put(self, key: str, body: bytes, content_type: str) -> None:
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.prefix + key, Body=body, ContentType=content_type
            )
        except Exception as exc:  # botocore's errors: the caller deletes nothing
            raise ArchiveError(f"cannot write {self.where(key)}: {exc}") from exc

    def get(self, key: str) -> bytes:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            body: bytes = answer["Body"].read()
        except Exception as exc:
            raise ArchiveError(f"cannot read {self.where(key)}: {exc}") from exc
        return body

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        except Exception as exc:
            raise ArchiveError(f"cannot delete {self.where(key)}: {exc}") from exc

    def where(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"


class FolderArchiveStore:
    """Objects as files under a folder (the local runtime's data directory). A file is
    written beside its place and renamed into it, so a reader never sees half of one."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise ArchiveError(f"archive key {key!r} leaves the archive folder")
        return path

    def put(self, key: str, body: bytes, content_type: str) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".part-")
            with os.fdopen(fd, "wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except OSError as exc:
            raise ArchiveError(f"cannot write {path}: {exc}") from exc

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except OSError as exc:
            raise ArchiveError(f"cannot read {self._path(key)}: {exc}") from exc

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def where(self, key: str) -> str:
        return str(self._path(key))
