"""The tools' tests use the suite's database fixtures (a real Postgres: the server named by
DATABASE_URL, else an embedded one)."""

from tests.conftest import _local_data_dir, _session_database, database_url, pg_admin_url

__all__ = ["_local_data_dir", "_session_database", "database_url", "pg_admin_url"]
