"""The local runtime with its API server, and API clients for two workspaces."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tickwork import workspaces
from tickwork.local.auth import LocalJwt
from tickwork.local.demo import ApiClient
from tickwork.local.runner import LocalRuntime
from tickwork.platform.config import Settings


@dataclass
class Api:
    local: LocalRuntime
    admin: ApiClient  # admin of workspace A (zone America/New_York)
    member: ApiClient  # member of workspace A
    outsider: ApiClient  # admin of workspace B
    workspace_a: str
    workspace_b: str

    @property
    def url(self) -> str:
        return self.local.api.url


@contextmanager
def running_api(
    database_url: str, tmp_path: Path, settings: Settings, **options: Any
) -> Iterator[Api]:
    """The local runtime with `settings` (and LocalRuntime `options`), workspaces A and B
    and their clients."""
    jwt = LocalJwt(tmp_path / "jwt-secret")
    options.setdefault("tick_interval", 60)
    with LocalRuntime(database_url, settings, jwt=jwt, **options) as local:
        conn = local.runtime.db.connection()
        a, _ = workspaces.ensure(conn, "Acme", timezone="America/New_York")
        b, _ = workspaces.ensure(conn, "Globex")
        workspaces.add_member(conn, a, "alice", "admin")
        workspaces.add_member(conn, a, "mallory-member", "member")
        workspaces.add_member(conn, b, "bob", "admin")
        yield Api(
            local,
            ApiClient(local.api.url, jwt.sign("alice"), str(a)),
            ApiClient(local.api.url, jwt.sign("mallory-member"), str(a)),
            ApiClient(local.api.url, jwt.sign("bob"), str(b)),
            str(a),
            str(b),
        )


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with running_api(database_url, tmp_path, Settings()) as running:
        yield running
