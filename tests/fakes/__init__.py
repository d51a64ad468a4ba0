"""Fake provider servers over real HTTP on loopback, speaking each provider's wire format."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from tickwork.actions.model import Claimed
from tickwork.platform.observability import logger
from tickwork.providers.base import Via
from tickwork.providers.http import OutboundPolicy

# Fakes listen on loopback, which the outbound guard refuses unless allow-listed.
LOOPBACK = OutboundPolicy.allowing(["127.0.0.0/8"])


class OperatorLog:
    """Every line the Tickwork logger writes while installed, formatted as in production."""

    def __init__(self) -> None:

        self.lines: list[str] = []
        lines = self.lines

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(self.format(record))

        self._logger = logger
        self._handler = Collect()
        self._handler.setFormatter(logger.registered_formatter)

    def __enter__(self) -> OperatorLog:
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def an_action(**overrides: Any) -> Claimed:
    """A claimed row as the dispatcher hands it to a provider."""
    fields: dict[str, Any] = {
        "id": uuid4(), "workspace_id": uuid4(), "action_type": "webhook", "thing_id": None,
        "target_key": "primary", "payload": {}, "publish_at": datetime.now(UTC),
        "status": "submitted", "attempt_count": 1, "manual_retries": 0,
        "next_attempt_at": None, "source": "api", "connection_id": None,
        "recipient_id": None, "transactional": False,
    }  # fmt: skip
    fields.update(overrides)
    return Claimed(**fields)


def a_via(provider: str, settings: dict[str, Any], credentials: dict[str, str]) -> Via:
    return Via(uuid4(), uuid4(), provider, settings, credentials)
