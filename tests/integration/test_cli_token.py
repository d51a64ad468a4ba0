"""`tickwork token`: a JWT the local API accepts, and the workspace and membership it names."""

from __future__ import annotations

from pathlib import Path

from tickwork import cli
from tickwork.local.auth import KEY_FILE, LocalJwt


def test_token_creates_the_workspace_and_an_admin_membership(
    database_url, conn, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    args = ["token", "--workspace", "Initech", "--user", "peter", "--admin", "--create",
            "--timezone", "Europe/Paris", "--database-url", database_url]  # fmt: skip
    assert cli.main(args) == 0
    token = capsys.readouterr().out.strip()
    claims = LocalJwt(Path(tmp_path) / KEY_FILE).verify(f"Bearer {token}")
    assert claims["sub"] == "peter"
    row = conn.execute(
        "select w.timezone, m.role from workspaces w join workspace_members m"
        " on m.workspace_id = w.id where w.name = 'Initech' and m.user_id = 'peter'"
    ).fetchone()
    assert row == ("Europe/Paris", "admin")


def test_token_for_a_missing_workspace_says_how_to_create_it(
    database_url, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["token", "--workspace", "Nope", "--database-url", database_url]) == 2
    assert "--create" in capsys.readouterr().err
