"""The `tickwork` command: migrate, and the local runtime's commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tickwork import migrate as migrations
from tickwork.errors import TickworkError
from tickwork.local.embedded import dev_database_url


def _database_url(explicit: str | None) -> str:
    if explicit:
        return explicit
    url, server = dev_database_url()
    if server is not None:
        print(f"using the embedded Postgres at {server.url()} (set DATABASE_URL to use your own)")
    return url


def cmd_migrate(args: argparse.Namespace) -> int:
    applied = migrations.migrate(_database_url(args.database_url))
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    url = _database_url(None)
    applied = migrations.migrate(url)
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    print("the database is ready; the local runtime (tick, queues, dispatchers) is not built yet")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tickwork", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    migrate = commands.add_parser("migrate", help="apply pending database migrations")
    migrate.add_argument("--database-url", help="default: DATABASE_URL, else the embedded Postgres")
    migrate.set_defaults(run=cmd_migrate)

    dev = commands.add_parser("dev", help="run Tickwork locally")
    dev.set_defaults(run=cmd_dev)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except TickworkError as exc:
        print(f"tickwork: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
