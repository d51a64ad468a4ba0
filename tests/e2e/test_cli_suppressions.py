"""`tickwork suppressions list|add|remove` against the local runtime: tables, --json, exit
codes, and a member refused the removal of a complaint."""

from __future__ import annotations

from tests.e2e.test_cli_local import dev, run, run_json

__all__ = ["dev"]  # the fixture, used by name


def test_add_list_and_remove(dev, capsys):
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    acme = ["--workspace", "Acme"]
    code, out, _ = run(capsys, "suppressions", "add", "email", "Ann <Ann@Example.com>", *acme)
    assert (code, out.strip()) == (0, "email ann@example.com suppressed (manual, all)")
    code, out, _ = run(capsys, "suppressions", "add", "email", "ann@example.com", *acme,
                       "--reason", "complaint")  # fmt: skip
    assert (code, out.strip()) == (0, "email ann@example.com already suppressed (manual, all)")
    added = run_json(capsys, "suppressions", "add", "sms", "+1 555 010 0000", *acme,
                     "--reason", "complaint", "--detail", "reported as spam")  # fmt: skip
    assert (added["address"], added["reason"]) == ("+15550100000", "complaint")
    # A table, newest first, and filters
    code, out, _ = run(capsys, "suppressions", "list", *acme)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split()[:4] == ["channel", "address", "reason", "scope"]
    assert [line.split()[:3] for line in lines[1:3]] == [
        ["sms", "+15550100000", "complaint"], ["email", "ann@example.com", "manual"]]  # fmt: skip
    only = run_json(capsys, "suppressions", "list", *acme, "--channel", "email")["items"]
    assert [e["address"] for e in only] == ["ann@example.com"]
    # A member may not remove a complaint: the API's code on stderr, exit 1
    assert run(capsys, "token", "--workspace", "Acme", "--user", "mia", "--create")[0] == 0
    code, _, err = run(capsys, "suppressions", "remove", "sms", "+15550100000", *acme,
                       "--user", "mia")  # fmt: skip
    assert code == 1
    assert "HTTP 403 forbidden" in err
    code, out, _ = run(capsys, "suppressions", "remove", "sms", "+15550100000", *acme)
    assert (code, out.strip()) == (0, "sms +15550100000 removed from the list (complaint, all)")
    # Bad input is the API's clear refusal
    code, _, err = run(capsys, "suppressions", "add", "sms", "hello", *acme)
    assert code == 1
    assert "invalid_address" in err
    code, _, err = run(capsys, "suppressions", "remove", "email", "bob@example.com", *acme)
    assert (code, "not_found" in err) == (1, True)
