"""Where local state lives: one data directory, never the current one.

`--data-dir`, else `TICKWORK_DATA_DIR`, else the user data directory of the platform
(`~/.local/share/tickwork` on Linux, `~/Library/Application Support/tickwork` on macOS).
It holds the embedded Postgres (`pgdata/`), the key that signs local JWTs (`jwt-secret`),
the key that signs unsubscribe links (`unsubscribe-key`) and, while `tickwork dev` runs, a
record of it (`dev.json`: its pid and the URLs of its API, webhook receiver and provider
sandbox) through which other commands find the running server.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from platformdirs import user_data_dir

from tickwork.local.errors import LocalServerError

ENV_VAR = "TICKWORK_DATA_DIR"
START_HINT = "start it with `make dev` (or `tickwork dev`) in another terminal"


def default_data_dir() -> Path:
    return Path(user_data_dir("tickwork", appauthor=False))


def data_dir(explicit: str | Path | None = None) -> Path:
    """The data directory, as an absolute path (created if missing)."""
    chosen = explicit or os.environ.get(ENV_VAR) or default_data_dir()
    path = Path(chosen).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def archive_dir(root: Path) -> Path:
    """Where the local runtime's retention archives removed history (docs/retention.md)."""
    return root / "archive"


def pgdata(root: Path) -> Path:
    return root / "pgdata"


def jwt_key_file(root: Path) -> Path:
    return root / "jwt-secret"


def unsubscribe_key_file(root: Path) -> Path:
    return root / "unsubscribe-key"


def dev_record_file(root: Path) -> Path:
    return root / "dev.json"


@dataclass(frozen=True)
class DevServer:
    """A running `tickwork dev`, as it recorded itself in the data directory."""

    pid: int
    api_url: str
    receiver_url: str
    database_url: str
    dispatch_enabled: bool
    paused_action_types: list[str]
    sandbox_url: str = ""  # the provider sandbox (absent from records of older versions)

    def write(self, root: Path) -> None:
        target = dev_record_file(root)
        partial = target.with_suffix(".tmp")
        partial.write_text(json.dumps(asdict(self), indent=2))
        partial.chmod(0o600)
        partial.replace(target)

    @staticmethod
    def clear(root: Path, pid: int) -> None:
        """Remove the record, if it is still this process's."""
        found = DevServer.read(root)
        if found is not None and found.pid == pid:
            dev_record_file(root).unlink(missing_ok=True)

    @staticmethod
    def read(root: Path) -> DevServer | None:
        try:
            raw = json.loads(dev_record_file(root).read_text())
            return DevServer(**raw)
        except (OSError, ValueError, TypeError):
            return None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        return True
    return True


def running_dev(root: Path) -> DevServer | None:
    """The `tickwork dev` serving this data directory, or None (a stale record is ignored)."""
    found = DevServer.read(root)
    if found is None or not process_alive(found.pid):
        return None
    return found


def require_dev(root: Path) -> DevServer:
    """The running `tickwork dev`, or LocalServerError saying how to start one."""
    found = DevServer.read(root)
    if found is None:
        raise LocalServerError(
            f"no `tickwork dev` is running for data directory {root}; {START_HINT}"
        )
    if not process_alive(found.pid):
        raise LocalServerError(
            f"the `tickwork dev` recorded in {dev_record_file(root)} (pid {found.pid}) is no"
            f" longer running; {START_HINT}"
        )
    return found
