"""Local JWTs: what API Gateway's JWT authorizer checks in AWS (signature, issuer,
audience, expiry), done by the local API server with a key kept in the data directory; and
the local key of unsubscribe links, kept there too (a Secrets Manager secret in AWS)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import jwt

from tickwork.local.paths import data_dir, jwt_key_file, unsubscribe_key_file
from tickwork.platform.errors import AuthenticationError

ISSUER = "tickwork-local"
AUDIENCE = "tickwork"
ALGORITHM = "HS256"


def _kept_key(key_file: Path) -> str:
    """The key in `key_file`, made (32 random bytes, hex) the first time."""
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_hex(32))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


def unsubscribe_key(key_file: Path | None = None) -> str:
    """The key that signs local unsubscribe links: links sent by one `tickwork dev` keep
    working after a restart, as they do across deploys in AWS."""
    return _kept_key(key_file or unsubscribe_key_file(data_dir()))


class LocalJwt:
    def __init__(self, key_file: Path | None = None) -> None:
        self._key = _kept_key(key_file or jwt_key_file(data_dir()))

    def sign(self, subject: str, ttl_seconds: int = 12 * 3600) -> str:
        now = int(time.time())
        claims = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": now,
                  "exp": now + ttl_seconds}  # fmt: skip
        return jwt.encode(claims, self._key, algorithm=ALGORITHM)

    def verify(self, authorization: str | None) -> dict[str, Any]:
        """The claims of a `Bearer <token>` header, or AuthenticationError."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthenticationError("send Authorization: Bearer <token> (`tickwork token`)")
        token = authorization.split(" ", 1)[1].strip()
        try:
            claims: dict[str, Any] = jwt.decode(
                token, self._key, algorithms=[ALGORITHM], audience=AUDIENCE, issuer=ISSUER,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )  # fmt: skip
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError("the bearer token has expired; get a new one") from exc
        except jwt.PyJWTError as exc:
            # The library's words ("Invalid header padding") tell a caller nothing to do.
            raise AuthenticationError(
                "the bearer token is not a valid token of this API; get a new one"
            ) from exc
        return claims
