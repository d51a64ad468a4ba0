"""Errors of the local runtime and the commands that talk to it."""

from __future__ import annotations

from tickwork.platform.errors import TickworkError


class LocalRuntimeError(TickworkError):
    code = "local"


class PortInUseError(LocalRuntimeError):
    code = "port_in_use"


class LocalServerError(LocalRuntimeError):
    """No `tickwork dev` answers where one was expected."""

    code = "no_local_server"
