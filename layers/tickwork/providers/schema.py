"""Schema checks for what tenants give providers (payloads, connection settings and
credentials), as InputErrors naming the field at fault, never echoing the value."""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from tickwork.platform.errors import InputError

M = TypeVar("M", bound=BaseModel)

EMAIL = re.compile(r"^[^@\s<>\"]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}\.)+[A-Za-z]{2,63}$")
# A display name may lead: "Ann <ann@example.com>".
MAILBOX = re.compile(r"^(?:[^<>@\r\n]{0,200}<)?([^<>\s]+@[^<>\s]+)>?$")
E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


class Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def checked(model: type[M], data: Any, prefix: str) -> M:
    """`data` as `model`, or an InputError naming the first field at fault (e.g.
    `payload.to`) with pydantic's reason."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        path = ".".join(str(part) for part in first.get("loc", ()))
        where = f"{prefix}.{path}" if path else prefix
        reason = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
        raise InputError(f"{where}: {reason}", field=where) from exc


def mailbox(value: str) -> str:
    """An address, optionally with a display name; refuses what is not an address."""
    match = MAILBOX.match(value.strip())
    if match is None or not EMAIL.match(match.group(1)):
        raise ValueError("is not an email address")
    return value.strip()


def phone(value: str) -> str:
    if not E164.match(value):
        raise ValueError("is not a phone number in E.164 form (+ and 7 to 15 digits)")
    return value
