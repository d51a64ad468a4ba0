"""Deploy-time work: the migration function, invoked directly or as a CloudFormation custom
resource (so a stack update migrates the schema before the functions that need it)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tickwork import migrate
from tickwork.config import Settings
from tickwork.db import resolve_url
from tickwork.observability import logger


def run_migrations(settings: Settings) -> list[str]:
    applied = migrate.migrate(resolve_url(settings))
    logger.info("migrations applied", extra={"applied": applied})
    return applied


def _respond(event: dict[str, Any], status: str, reason: str, data: dict[str, Any]) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:1000],
            "PhysicalResourceId": event.get("PhysicalResourceId") or "tickwork-schema",
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data,
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def handle_migration_event(event: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Migrate on Create/Update (or a direct invoke); a Delete leaves the database alone."""
    if "ResponseURL" not in event:
        return {"applied": run_migrations(settings)}
    try:
        applied = [] if event.get("RequestType") == "Delete" else run_migrations(settings)
    except Exception as exc:
        logger.exception("migration failed")
        _respond(event, "FAILED", f"migration failed: {exc}", {})
        return {"applied": [], "error": str(exc)}
    _respond(event, "SUCCESS", "ok", {"Applied": ",".join(applied)})
    return {"applied": applied}
