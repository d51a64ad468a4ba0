"""What may be shown of a URL or of a provider's answer, to a tenant or in a log.

One rule for URLs, `mask_url`, used wherever a URL is shown: in `last_error` and the
ledger, in connection answers (to members and admins alike), in log lines and in the
resolver's detail. It keeps the scheme, the port and what reads as words, and replaces
with `***` everything that can carry a secret:

- userinfo (`user:password@`), whole;
- every query value (the names stay, when they read as words) and the fragment;
- each path segment and host-name label that does not read as words. A part reads as
  words when it is at most 4 characters of letters, digits, `-`, `_`, `.`, `~` (`v1`,
  `api`: too short to be a secret), or is made of letter runs joined by `-`, `_`, `.` or
  `~`, each run at most 20 letters and lower case, upper case or CamelCase (`hooks`,
  `IncomingWebhook`, `order-created`). A digit in a longer part, a long run, letters in
  random case or any other character is a token: Slack's `/services/T…/B…/<secret>`
  and Discord's `/api/webhooks/<id>/<token>` show as `/services/***/***/***` and
  `/api/webhooks/***/***`; `https://eo3x8k2.m.pipedream.net` as `https://***.m.pipedream.net`.

IP literals are shown whole (an address carries no secret). What the rule cannot see is a
secret that reads as a word; such a word is shown.

Free text (an exception's message, a provider's documented message field) goes through
`sanitize`: known secrets and the secret parts of the URLs of the call removed, URLs in it
masked, key=value secrets, bearer tokens and long token-like strings removed, bounded. A
webhook receiver's body is never used at all (see `webhook.py`); a provider API's answer
only through its documented code and message fields.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, unquote_plus

import httpx

MASK = "***"
UNPARSABLE = "[unparsable URL]"
EXCERPT_CHARS = 160
LOG_EXCERPT_CHARS = 2000
# What a documented error code may look like (Slack's `channel_not_found`, SES's
# `MessageRejected`, Bluesky's `InvalidRequest`): anything else is not shown as a code.
_CODE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

_SHORT = re.compile(r"[A-Za-z0-9_.~-]{1,4}")
_RUN = re.compile(r"[a-z]{1,20}|[A-Z]{1,20}|[A-Z]?[a-z]+(?:[A-Z][a-z]{2,})*")
_SEPARATORS = re.compile(r"[-_.~]")
_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")


def reads_as_words(part: str) -> bool:
    """Whether a path segment, host label or query name may be shown (the rule above)."""
    if _SHORT.fullmatch(part):
        return True
    runs = _SEPARATORS.split(part)
    return all(len(run) <= 20 and _RUN.fullmatch(run) for run in runs)


def _shown(part: str, keep: Iterable[str]) -> str:
    return part if part == "" or part in keep or reads_as_words(part) else MASK


def mask_url(url: str | httpx.URL, keep: Iterable[str] = ()) -> str:
    """The one form of a URL anyone is shown (see the module's notes). Parts equal to one
    of `keep` are shown as they are (a template's `{webhook_id}`)."""
    keep = tuple(keep)
    try:
        parsed = httpx.URL(str(url))
    except (httpx.InvalidURL, TypeError, ValueError):
        return UNPARSABLE
    if not parsed.scheme or not parsed.host:
        return UNPARSABLE
    host = parsed.host
    if ":" in host:
        host = f"[{host}]"
    elif not _IPV4.fullmatch(host):
        host = ".".join(_shown(label, keep) for label in host.split("."))
    userinfo = f"{MASK}@" if parsed.userinfo else ""
    port = f":{parsed.port}" if parsed.port else ""
    path = "/".join(_shown(segment, keep) for segment in parsed.path.split("/"))
    shown = f"{parsed.scheme}://{userinfo}{host}{port}{path}"
    if parsed.query:
        pairs = []
        for pair in parsed.query.decode("ascii", "replace").split("&"):
            name, has_value, value = pair.partition("=")
            name = _shown(unquote_plus(name), keep)
            value = value if unquote_plus(value) in keep else MASK
            pairs.append(f"{name}={value}" if has_value else name)
        shown += "?" + "&".join(pairs)
    if parsed.fragment:
        shown += f"#{MASK}"
    return shown


def url_secrets(url: str | httpx.URL) -> list[str]:
    """The parts of a URL that `mask_url` hides, as they may appear in free text (an
    exception's message, an answer echoing the URL), to be removed from it."""
    try:
        parsed = httpx.URL(str(url))
    except (httpx.InvalidURL, TypeError, ValueError):
        return [str(url)]  # no parts to tell apart: the whole of it
    found: list[str] = []
    userinfo = parsed.userinfo.decode("ascii", "replace")
    if userinfo:
        found += [userinfo, unquote(userinfo), *unquote(userinfo).split(":", 1)]
    parts = [*parsed.host.split("."), *parsed.path.split("/")]
    found += [part for part in parts if part and not reads_as_words(part)]
    for pair in parsed.query.decode("ascii", "replace").split("&"):
        name, _, value = pair.partition("=")
        found += [v for v in (name, value, unquote_plus(value)) if v and not reads_as_words(v)]
    if parsed.fragment:
        found.append(parsed.fragment)
    return found


# A URL in text, without the punctuation that may follow it in a sentence.
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]*[^\s\"'<>.,;:!?)\]]")
_SECRETISH = re.compile(
    r"(?i)((?:pass(?:word)?|secret|token|api[_-]?key|auth(?:orization)?|bearer|sig(?:nature)?"
    r"|credential|session|cookie)[\"']?\s*[:=]\s*[\"']?(?:bearer\s+|basic\s+)?)"
    r"(?!\*\*\*(?:[\s\"',;&}#]|$))[^\s\"',;&}]+"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_LONG_TOKEN = re.compile(r"[A-Za-z0-9_+/=.-]{40,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def sanitize(text: str, secrets: Iterable[str] = (), limit: int = EXCERPT_CHARS) -> str:
    """A bounded excerpt of free text safe to show: known secret values removed, URLs
    masked, key=value secrets, bearer tokens and long token-like strings removed; control
    characters flattened."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    text = _URL.sub(lambda m: mask_url(m.group(0)), text)
    text = _SECRETISH.sub(lambda m: m.group(1) + "[redacted]", text)
    text = _BEARER.sub(lambda m: m.group(1) + " [redacted]", text)
    text = _LONG_TOKEN.sub("[redacted]", text)
    text = " ".join(_CONTROL.sub(" ", text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Redactor:
    """Secrets of one call (tokens, passwords, the secret parts of its URLs), removed from
    anything shown or logged."""

    secrets: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, *values: object) -> Redactor:
        """Secrets from strings, mappings of strings (credentials), and URLs: of a string
        with a scheme, the parts `mask_url` hides (the URL itself is masked where it is
        shown in full)."""
        found: list[str] = []
        for value in values:
            items = value.values() if isinstance(value, Mapping) else [value]
            for item in items:
                if isinstance(item, str):
                    found.extend(url_secrets(item) if "://" in item else [item])
        return cls(tuple(found))

    def tenant(self, text: str) -> str:
        return sanitize(text, self.secrets, EXCERPT_CHARS)

    def operator(self, text: str) -> str:
        return sanitize(text, self.secrets, LOG_EXCERPT_CHARS)

    def code(self, value: object) -> str | None:
        """A provider's documented error code, when it is one (an int, or a code-shaped
        string that is none of the call's secrets); else None."""
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return str(value)
        if isinstance(value, str) and _CODE.fullmatch(value) and value == self.tenant(value):
            return value
        return None

    def message(self, value: object) -> str:
        """A provider's documented error message field, sanitized; '' when absent."""
        return self.tenant(value) if isinstance(value, str) else ""

    def error(self, exc: BaseException) -> dict[str, str]:
        """An exception for the operator's log: its type and redacted message, and where
        it was raised (file, line and code of each frame; no values)."""
        frames = traceback.format_tb(exc.__traceback__)
        return {"error": self.operator(f"{type(exc).__name__}: {exc}"),
                "traceback": "".join(frames)[-LOG_EXCERPT_CHARS:]}  # fmt: skip
