"""The web console: static files (HTML, CSS, ES modules, no build step) served under
`/console/` by the API function itself, its sign-in settings as `/console/config.json` and
the time zones it offers as `/console/zones.json`.

Served by the API rather than a bucket and CDN of their own because the console then shares
the API's origin: no CORS, one Content-Security-Policy that allows nothing but this origin
(and the identity provider's token endpoint), nothing more to deploy or keep in step. The
files hold no data: the page reads everything through `/v1` with the person's own token,
so these routes need none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

from tickwork.platform.config import Settings
from tickwork.platform.wallclock import zone_names

PREFIX = "/console"
CONFIG_PATH = f"{PREFIX}/config.json"
ZONES_PATH = f"{PREFIX}/zones.json"

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}


@dataclass(frozen=True)
class Asset:
    body: str
    content_type: str


@cache
def _asset(name: str) -> Asset | None:
    suffix = name[name.rfind(".") :] if "." in name else ""
    content_type = _TYPES.get(suffix)
    if content_type is None or any(part in {"", ".", ".."} for part in name.split("/")):
        return None
    found = files("tickwork.console").joinpath("static", *name.split("/"))
    if not found.is_file():
        return None
    return Asset(found.read_text(encoding="utf-8"), content_type)


@cache
def _zones_document() -> str:
    """The zones the page offers, by their current IANA names only (a browser's own list
    has old ones, Asia/Calcutta beside Asia/Kolkata), and the old names mapped to them."""
    names = zone_names()
    return json.dumps({"zones": names.canonical, "aliases": names.aliases})


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def content_security_policy(settings: Settings) -> str:
    """Scripts, styles and calls from this origin only; no inline script or style, no
    frames, forms post nowhere. The token endpoint's origin is the one exception."""
    connect = ["'self'"]
    if settings.console_token_url:
        parts = urlsplit(settings.console_token_url)
        connect.append(f"{parts.scheme}://{parts.netloc}")
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            f"connect-src {' '.join(connect)}",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ]
    )


def sign_in_config(settings: Settings) -> dict[str, Any]:
    """What the page needs to sign a person in: the OIDC endpoints and client, or none
    (then it asks for a pasted token)."""
    oidc = None
    if settings.console_authorize_url and settings.console_token_url and settings.console_client_id:
        oidc = {
            "authorize_url": settings.console_authorize_url,
            "token_url": settings.console_token_url,
            "client_id": settings.console_client_id,
            "scopes": settings.console_scopes,
        }
    return {"oidc": oidc}


def serve(method: str, path: str, settings: Settings) -> dict[str, Any]:
    """An API Gateway (payload v2) result for a console path."""
    if method not in {"GET", "HEAD"}:
        return _result(405, "text/plain; charset=utf-8", "the console is read with GET", settings,
                       {"Allow": "GET, HEAD"})  # fmt: skip
    if path in {PREFIX, PREFIX + "/"}:
        if path == PREFIX:
            return _result(308, "text/plain; charset=utf-8", "", settings,
                           {"Location": PREFIX + "/"})  # fmt: skip
        path = PREFIX + "/index.html"
    if path == CONFIG_PATH:
        return _result(200, _TYPES[".json"], json.dumps(sign_in_config(settings)), settings)
    if path == ZONES_PATH:
        return _result(200, _TYPES[".json"], _zones_document(), settings)
    asset = _asset(path[len(PREFIX) + 1 :])
    if asset is None:
        return _result(404, "text/plain; charset=utf-8", "no such console file", settings)
    return _result(200, asset.content_type, asset.body, settings)


def _result(
    status: int, content_type: str, body: str, settings: Settings,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    headers = {
        "Content-Type": content_type,
        "Content-Security-Policy": content_security_policy(settings),
        "X-Content-Type-Options": "nosniff",
        # The page's address never leaves it (a sign-in code or token in it, a workspace id).
        "Referrer-Policy": "no-referrer",
        # Small files, always checked: a deploy is seen at the next load.
        "Cache-Control": "no-cache",
        **(extra or {}),
    }
    return {"statusCode": status, "headers": headers, "body": body, "isBase64Encoded": False}
