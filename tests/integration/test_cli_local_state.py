"""Local state lives in one data directory, whatever the current directory: `tickwork token`,
`migrate` and `reset` from different folders find (and delete) the same state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tickwork import cli
from tickwork.local.auth import LocalJwt
from tickwork.local.paths import DevServer, data_dir, jwt_key_file, pgdata

TICKWORK = [sys.executable, "-m", "tickwork.cli"]


def test_token_creates_the_workspace_and_an_admin_membership(
    database_url, conn, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "state"
    args = [
        "token",
        "--workspace",
        "Initech",
        "--user",
        "peter",
        "--admin",
        "--create",
        "--timezone",
        "Europe/Paris",
        "--database-url",
        database_url,
        "--data-dir",
        str(root),
    ]
    assert cli.main(args) == 0
    token = capsys.readouterr().out.strip()
    claims = LocalJwt(jwt_key_file(root)).verify(f"Bearer {token}")
    assert claims["sub"] == "peter"
    assert not (tmp_path / ".tickwork").exists()
    row = conn.execute(
        "select w.timezone, m.role from workspaces w join workspace_members m"
        " on m.workspace_id = w.id where w.name = 'Initech' and m.user_id = 'peter'"
    ).fetchone()
    assert row == ("Europe/Paris", "admin")


def test_token_says_when_an_existing_workspace_keeps_its_zone(database_url, capsys):
    base = ["token", "--workspace", "Zoned", "--create", "--database-url", database_url]
    assert cli.main([*base, "--timezone", "Asia/Tokyo"]) == 0
    capsys.readouterr()
    assert cli.main([*base, "--timezone", "Europe/Berlin"]) == 0
    err = capsys.readouterr().err
    assert "already exists with zone Asia/Tokyo" in err
    assert "--timezone Europe/Berlin was not applied" in err


def test_token_for_a_missing_workspace_says_how_to_create_it(database_url, capsys):
    assert cli.main(["token", "--workspace", "Nope", "--database-url", database_url]) == 2
    assert "--create" in capsys.readouterr().err


def test_the_data_dir_comes_from_the_flag_then_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TICKWORK_DATA_DIR", str(tmp_path / "from-env"))
    monkeypatch.chdir(tmp_path)
    assert data_dir() == tmp_path / "from-env"
    assert data_dir("relative") == tmp_path / "relative"  # made absolute at once
    monkeypatch.delenv("TICKWORK_DATA_DIR")
    assert data_dir().is_absolute()
    assert data_dir().name == "tickwork"


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TICKWORK, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_commands_from_other_folders_share_the_embedded_database_and_key(tmp_path):
    # Given no DATABASE_URL, a data directory, and three unrelated working directories
    root = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {"TICKWORK_DATA_DIR": str(root), "PYTHONUNBUFFERED": "1"}
    folders = [tmp_path / name for name in ("a", "b", "c")]
    for folder in folders:
        folder.mkdir()
    # When a workspace is made from one folder and looked up from another
    made = run(["token", "--workspace", "Acme", "--create", "--admin"], folders[0], env)
    assert made.returncode == 0, made.stderr
    assert "initializing a new embedded Postgres" in made.stderr  # the first start says so
    found = run(["token", "--workspace", "Acme"], folders[1], env)
    # Then the second finds it, with the same signing key, and no folder got state of its own
    assert found.returncode == 0, found.stderr
    LocalJwt(jwt_key_file(root)).verify(f"Bearer {found.stdout.strip()}")
    assert (pgdata(root) / "PG_VERSION").exists()
    assert not any((folder / ".tickwork").exists() for folder in folders)
    # And `tickwork reset --yes` from a third folder deletes that state
    reset = run(["reset", "--yes"], folders[2], env)
    assert reset.returncode == 0, reset.stderr
    assert "deleted" in reset.stdout
    assert not pgdata(root).exists()
    assert not jwt_key_file(root).exists()


def test_reset_asks_first_and_keeps_everything_on_no(tmp_path, monkeypatch, capsys):
    root = tmp_path / "data"
    jwt_key_file(data_dir(root)).write_text("k")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    assert cli.main(["reset", "--data-dir", str(root)]) == 0
    assert jwt_key_file(root).exists()
    assert "nothing deleted" in capsys.readouterr().out


def test_reset_without_a_terminal_wants_yes(tmp_path, monkeypatch, capsys):
    root = tmp_path / "data"
    jwt_key_file(data_dir(root)).write_text("k")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    assert cli.main(["reset", "--data-dir", str(root)]) == 2
    assert "--yes" in capsys.readouterr().err
    assert jwt_key_file(root).exists()


def test_reset_refuses_while_tickwork_dev_runs(tmp_path, capsys):
    root = data_dir(tmp_path / "data")
    jwt_key_file(root).write_text("k")
    DevServer(
        os.getpid(), "http://127.0.0.1:1", "http://127.0.0.1:2/hooks", "postgresql://x", True, []
    ).write(root)
    assert cli.main(["reset", "--yes", "--data-dir", str(root)]) == 2
    assert f"(pid {os.getpid()}) is using" in capsys.readouterr().err
    assert jwt_key_file(root).exists()


@pytest.mark.parametrize(
    "command", ["migrate", "dev", "demo", "token", "status", "redrive", "reset", "actions"]
)
def test_every_command_answers_version(command, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("tickwork 0.")


def test_every_option_has_help_and_shows_its_default():
    parser = cli.build_parser()
    seen = 0
    stack = [parser]
    while stack:
        current = stack.pop()
        for action in current._actions:
            if action.choices and isinstance(action.choices, dict):
                stack.extend(action.choices.values())  # subcommands
                continue
            if not action.option_strings or action.dest in ("help", "version"):
                continue
            assert action.help, f"{current.prog} {action.option_strings} has no help"
            seen += 1
            if action.default not in (None, False, True) and action.nargs != 0:
                text = current.format_help()
                assert f"(default: {action.default})" in " ".join(text.split()), (
                    f"{current.prog} {action.option_strings}"
                )
    assert seen > 40
