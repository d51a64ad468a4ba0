"""Migration 0020 cuts receivers' bodies out of what earlier versions stored: an action's
last_error, the ledger's excerpt, the change log's reason and a paused schedule's reason."""

from __future__ import annotations

from tickwork.platform import migrate
from tickwork.platform.db import connect

OLD = "HTTP 400 from http://127.0.0.1:8080: denied for svc_billing sk_live_4eC39HqLyjWDarjtT1zdp7dc"
GAVE_UP = "HTTP 500 from https://hooks.example.com: <h1>oops</h1> (gave up after 5 attempts)"
HANDLED = "the provider's answer could not be handled (KeyError): HTTP 404 from http://h.example: x"
KEPT = [
    "Postmark HTTP 422 ErrorCode 300: Invalid 'To' address",
    "HTTP 503 from https://hooks.example.com (gave up after 5 attempts)",
    "could not connect to http://127.0.0.1:1 (ConnectError)",
    "HTTP 400 Bad Request from https://h.example/***: refused by the receiver",
]


def test_receivers_bodies_are_cut_from_stored_text_and_nothing_else_changes(empty_database_url):
    # Given a database as the versions before 0020 left it
    every = migrate.load(migrate.default_directory())
    with connect(empty_database_url) as conn:
        migrate.apply(conn, [m for m in every if m.version < "0020"])
        (workspace,) = conn.execute(  # type: ignore[misc]
            "insert into workspaces (name) values ('Acme') returning id"
        ).fetchone()
        texts = [OLD, GAVE_UP, HANDLED, *KEPT]
        ids = []
        for text in texts:
            (action_id,) = conn.execute(  # type: ignore[misc]
                "insert into scheduled_actions (workspace_id, action_type, target_key,"
                " publish_at, status, finished_at, last_error)"
                " values (%s, 'webhook', 'primary', now(), 'failed', now(), %s) returning id",
                (workspace, text),
            ).fetchone()
            ids.append(action_id)
            conn.execute(
                "insert into action_attempts (action_id, attempt, workspace_id, started_at,"
                " outcome, excerpt) values (%s, 1, %s, now(), 'rejected', %s)",
                (action_id, workspace, text[:300]),
            )
            conn.execute(
                "insert into action_changes (workspace_id, action_id, kind, actor, reason)"
                " values (%s, %s, 'cancel', 'alice', %s)",
                (workspace, action_id, text),
            )
        conn.execute(
            "insert into recurring_schedules (workspace_id, action_type, target_key, rrule,"
            " dtstart, timezone, status, paused_reason, paused_at, last_materialized_through)"
            " values (%s, 'webhook', 'primary', 'FREQ=DAILY', '2026-01-01T09:00', 'UTC',"
            " 'paused', %s, now(), now())",
            (workspace, f"paused automatically after 5 failed occurrences in a row; the last"
                        f" one failed with provider_rejected: {OLD}"),
        )  # fmt: skip
        # When 0020 is applied
        applied = migrate.apply(conn, every)
        # Then the bodies are gone, the rest of each text is as it was
        assert "0020_scrub_receiver_bodies" in applied
        expected = [
            "HTTP 400 from http://127.0.0.1:8080",
            "HTTP 500 from https://hooks.example.com (gave up after 5 attempts)",
            "the provider's answer could not be handled (KeyError): HTTP 404 from http://h.example",
            *KEPT,
        ]
        for table, column in [("scheduled_actions", "last_error"), ("action_attempts", "excerpt"),
                              ("action_changes", "reason")]:  # fmt: skip
            key = "id" if table == "scheduled_actions" else "action_id"
            found = dict(conn.execute(f"select {key}, {column} from {table}").fetchall())
            assert [found[i] for i in ids] == expected, table
        (paused,) = conn.execute(  # type: ignore[misc]
            "select paused_reason from recurring_schedules"
        ).fetchone()
        assert paused.endswith("failed with provider_rejected: HTTP 400 from http://127.0.0.1:8080")
        dumped = str(conn.execute("select * from scheduled_actions").fetchall())
        assert "svc_billing" not in dumped
        assert "sk_live_" not in dumped
