"""Bluesky (AT Protocol): `com.atproto.repo.createRecord` of an `app.bsky.feed.post`, with a
session from the handle and an app password (`com.atproto.server.createSession`, refreshed
with `refreshSession` when the access token expires). The record key is derived from the
action (a TID built from its publish time and id), so a retried create can never post twice:
before creating again, the provider reads that key back (`getRecord`) and, if the post is
there, counts it as delivered. The record's `uri` is the provider id.

| answer | outcome |
|---|---|
| createRecord 200 `uri` | delivered (uri) |
| the record key already holds our post (a retry) | delivered |
| the key holds another record | rejected `rkey_collision` |
| 400 `InvalidRequest` and other 400s | rejected `invalid_request` |
| 413 | rejected `payload_too_large` |
| 401/400 `ExpiredToken`, `InvalidToken` | session refreshed and the create retried once |
| createSession 401 `AuthenticationRequired` | rejected `auth_failed` |
| `AccountTakedown`, `AccountDeactivated` | rejected `account_suspended` |
| 429 `RateLimitExceeded` | transient (`ratelimit-reset` or Retry-After honoured) |
| createSession unanswered or 5xx | transient (nothing was posted) |
| createRecord 5xx, timeouts after sending | ambiguous, retried with the same record key |

Lookup (`lookup`): `com.atproto.repo.getRecord` at the action's record key in the account's
repo. Our post there (same text and createdAt) is found, with its at-uri (and cid); 400
`RecordNotFound` is absent, authoritatively: the PDS holds the repo, so there is no index
to lag (a post a person deleted reads as absent too). Another record under the key, sign-in
failures and other answers are unknown.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tickwork.actions.model import Claimed
from tickwork.providers.base import (
    Absent,
    Ambiguous,
    Delivered,
    Found,
    LookupResult,
    Outcome,
    Rejected,
    Transient,
    Unknown,
    Verified,
    Via,
)
from tickwork.providers.http import Redactor, Reply, reset_after_seconds, retry_after_seconds
from tickwork.providers.rest import RestProvider, field, safe_lookup, unanswered
from tickwork.providers.schema import Schema

COLLECTION = "app.bsky.feed.post"
MAX_GRAPHEMES = 300
MAX_BYTES = 3000
TID_ALPHABET = "234567abcdefghijklmnopqrstuvwxyz"
HANDLE = re.compile(r"^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]{2,}$")
LINK = re.compile(r"https?://[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]]")
MENTION = re.compile(r"(?<![\w@])@(([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]{2,})")
EXPIRED = frozenset({"ExpiredToken", "InvalidToken"})
SUSPENDED = frozenset({"AccountTakedown", "AccountDeactivated", "AccountSuspended"})


def graphemes(text: str) -> int:
    """User-perceived characters, near enough: combining marks, variation selectors and
    characters joined by a zero-width joiner count with what they follow."""
    count = 0
    joined = False
    for char in text:
        if char == "\u200d":
            joined = True
            continue
        if unicodedata.combining(char) or "\ufe00" <= char <= "\ufe0f" or joined:
            joined = False
            continue
        if "\U0001f3fb" <= char <= "\U0001f3ff":  # skin tone modifiers
            continue
        count += 1
    return count


class Settings(Schema):
    handle: str = Field(min_length=3, max_length=253)
    service_url: str = Field(default="https://bsky.social", min_length=8, max_length=300)

    @field_validator("handle")
    @classmethod
    def _handle(cls, value: str) -> str:
        value = value.removeprefix("@")
        if not HANDLE.match(value):
            raise ValueError("is not a handle (like alice.bsky.social)")
        return value


class Credentials(Schema):
    app_password: str = Field(min_length=8, max_length=100)


class Feature(Schema):
    type: Literal["link", "mention", "tag"]
    uri: str | None = Field(default=None, max_length=2000)
    did: str | None = Field(default=None, pattern=r"^did:[a-z]+:[a-zA-Z0-9._:%-]+$")
    tag: str | None = Field(default=None, min_length=1, max_length=640)

    @model_validator(mode="after")
    def _shape(self) -> Feature:
        if self.type == "link" and not (self.uri and LINK.fullmatch(self.uri)):
            raise ValueError("a link needs an http(s) uri")
        if self.type == "mention" and not self.did:
            raise ValueError("a mention needs a did")
        if self.type == "tag" and not self.tag:
            raise ValueError("a tag needs a tag")
        return self


class Facet(Schema):
    byte_start: int = Field(ge=0)
    byte_end: int = Field(gt=0)
    features: list[Feature] = Field(min_length=1, max_length=10)


class Payload(Schema):
    text: str = Field(min_length=1, max_length=MAX_BYTES)
    langs: list[str] | None = Field(default=None, max_length=3)
    facets: list[Facet] | None = Field(
        default=None, max_length=100,
        description="explicit rich text; links and @mentions in the text are found anyway",
    )  # fmt: skip

    @field_validator("langs")
    @classmethod
    def _langs(cls, value: list[str] | None) -> list[str] | None:
        for lang in value or []:
            if not re.fullmatch(r"[a-zA-Z]{2,3}(-[a-zA-Z0-9]{1,8})*", lang):
                raise ValueError(f"{lang!r} is not a BCP 47 language tag")
        return value

    @model_validator(mode="after")
    def _limits(self) -> Payload:
        size = len(self.text.encode())
        if size > MAX_BYTES:
            raise ValueError(f"text is {size} bytes; Bluesky allows {MAX_BYTES}")
        if graphemes(self.text) > MAX_GRAPHEMES:
            raise ValueError(f"text is longer than {MAX_GRAPHEMES} characters")
        encoded = self.text.encode()
        for facet in self.facets or []:
            if facet.byte_end > size or facet.byte_start >= facet.byte_end:
                raise ValueError("a facet's byte range lies outside the text")
            try:
                encoded[facet.byte_start : facet.byte_end].decode()
            except UnicodeDecodeError as exc:
                raise ValueError("a facet's byte range splits a character") from exc
        return self


def rkey_for(action: Claimed) -> str:
    """A TID (the record key type of posts) that depends only on the action: its publish
    time to the second, and 30 bits from its id, so two actions never share one."""
    digest = hashlib.sha256(action.id.bytes).digest()
    seconds = int(action.publish_at.astimezone(UTC).timestamp())
    micros = seconds * 1_000_000 + int.from_bytes(digest[:4], "big") % 1_000_000
    value = (micros << 10) | (int.from_bytes(digest[4:6], "big") % 1024)
    return "".join(TID_ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(13)))


def created_at(action: Claimed) -> str:
    # The publish time, not the send time: the same on every attempt.
    return action.publish_at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def ours(value: Any, text: str, created: str) -> bool:
    """Whether a record read back is the post this action makes."""
    return bool(field(value, "text") == text and field(value, "createdAt") == created)


def auto_facets(text: str, resolve: Any) -> list[dict[str, Any]]:
    """Links and @mentions found in the text, as facets (byte offsets into UTF-8)."""
    facets: list[dict[str, Any]] = []

    def span(start: int, end: int) -> dict[str, int]:
        return {"byteStart": len(text[:start].encode()), "byteEnd": len(text[:end].encode())}

    for match in LINK.finditer(text):
        facets.append({"index": span(*match.span()), "features": [
            {"$type": "app.bsky.richtext.facet#link", "uri": match.group(0)}]})  # fmt: skip
    for match in MENTION.finditer(text):
        did = resolve(match.group(1))
        if did:
            facets.append({"index": span(*match.span()), "features": [
                {"$type": "app.bsky.richtext.facet#mention", "did": did}]})  # fmt: skip
    return facets


def explicit_facets(facets: list[Facet]) -> list[dict[str, Any]]:
    out = []
    for facet in facets:
        features = []
        for f in facet.features:
            key = {"link": "uri", "mention": "did", "tag": "tag"}[f.type]
            features.append({"$type": f"app.bsky.richtext.facet#{f.type}", key: getattr(f, key)})
        out.append({"index": {"byteStart": facet.byte_start, "byteEnd": facet.byte_end},
                    "features": features})  # fmt: skip
    return out


@dataclass
class Session:
    fingerprint: str
    did: str
    access: str
    refresh: str


def _error(reply: Reply) -> str:
    return str(field(reply.json(), "error") or "")


class BlueskyProvider(RestProvider):
    name = "bluesky"
    default_api_url = "https://bsky.social"
    idempotent = True
    # Records stay until deleted; the window bounds how long a row may wait for an answer.
    lookup_retention = timedelta(days=30)
    # A create cut off by a timeout may still be committing on the PDS.
    lookup_grace = timedelta(minutes=5)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _base(via: Via) -> str:
        return str(via.settings.get("service_url") or BlueskyProvider.default_api_url).rstrip("/")

    @staticmethod
    def _fingerprint(via: Via) -> str:
        text = f"{via.settings['handle']}:{via.credentials['app_password']}"
        return hashlib.sha256(text.encode()).hexdigest()

    # ------------------------------------------------------------------ sessions
    def _session(self, via: Via, redactor: Redactor, *, fresh: bool = False) -> Session | Outcome:
        key = str(via.id)
        with self._lock:
            cached = self._sessions.get(key)
        if cached and cached.fingerprint == self._fingerprint(via) and not fresh:
            return cached
        if cached and fresh:
            refreshed = self._refresh(via, cached, redactor)
            if refreshed is not None:
                return refreshed
        url = f"{self._base(via)}/xrpc/com.atproto.server.createSession"
        body = {"identifier": via.settings["handle"], "password": via.credentials["app_password"]}
        reply = self.request("session", "POST", url, redactor, json=body)
        if not isinstance(reply, Reply):
            # No session, so nothing was posted: safe to try again.
            return Transient(f"Bluesky sign-in failed: {unanswered(reply)}")
        data = reply.json()
        if reply.status == 200 and field(data, "accessJwt") and field(data, "did"):
            session = Session(self._fingerprint(via), str(data["did"]), str(data["accessJwt"]),
                              str(data.get("refreshJwt") or ""))  # fmt: skip
            with self._lock:
                self._sessions[key] = session
            return session
        self.log("session", url, reply, redactor)
        error = _error(reply)
        detail = f"Bluesky sign-in: HTTP {reply.status} {redactor.code(error) or ''}".strip()
        if reply.status == 429:
            return Transient(detail, self._wait(reply))
        if reply.status >= 500:
            return Transient(detail)
        if error in SUSPENDED:
            return Rejected("account_suspended", detail)
        return Rejected("auth_failed", detail + ": check the handle and app password")

    def _refresh(self, via: Via, old: Session, redactor: Redactor) -> Session | None:
        url = f"{self._base(via)}/xrpc/com.atproto.server.refreshSession"
        reply = self.request("session", "POST", url, redactor,
                             headers={"authorization": f"Bearer {old.refresh}"})  # fmt: skip
        if not isinstance(reply, Reply) or reply.status != 200:
            return None
        data = reply.json()
        if not field(data, "accessJwt"):
            return None
        did = str(data.get("did") or old.did)
        refresh = str(data.get("refreshJwt") or old.refresh)
        session = Session(old.fingerprint, did, str(data["accessJwt"]), refresh)
        with self._lock:
            self._sessions[str(via.id)] = session
        return session

    @staticmethod
    def _wait(reply: Reply) -> float | None:
        reset = reset_after_seconds(reply.headers.get("ratelimit-reset"))
        return reset if reset is not None else retry_after_seconds(reply.headers.get("retry-after"))

    # --------------------------------------------------------------------- posts
    def _existing(
        self, via: Via, session: Session, rkey: str, record: dict[str, Any], redactor: Redactor
    ) -> Outcome | None:
        """Our post under `rkey` if it is there (delivered), another record (a collision),
        or None when the key is free or the read gave no answer."""
        reply = self._get_record(via, session, rkey, redactor)
        if not isinstance(reply, Reply) or reply.status != 200:
            return None
        data = reply.json()
        uri = str(field(data, "uri") or f"at://{session.did}/{COLLECTION}/{rkey}")
        if ours(field(data, "value"), record["text"], record["createdAt"]):
            return Delivered(uri)
        return Rejected("rkey_collision", f"the record key {rkey} holds another record")

    def _get_record(
        self, via: Via, session: Session, rkey: str, redactor: Redactor
    ) -> Reply | Outcome:
        url = f"{self._base(via)}/xrpc/com.atproto.repo.getRecord"
        params = {"repo": session.did, "collection": COLLECTION, "rkey": rkey}
        return self.request("lookup", "GET", url, redactor, params=params,
                            headers={"authorization": f"Bearer {session.access}"})  # fmt: skip

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult:
        return safe_lookup(self.name, action, self.timeout, lambda: self._lookup(action, via))

    def _lookup(self, action: Claimed, via: Via | None) -> LookupResult:
        if via is None:
            return Unknown("Bluesky is asked only through the action's connection")
        payload = Payload.model_validate(action.payload)
        redactor = Redactor.of(via.credentials, via.settings.get("service_url"))
        rkey = rkey_for(action)
        session = self._session(via, redactor)
        reply: Reply | Outcome | None = None
        for _ in range(2):  # once more with a fresh session if the token expired
            if not isinstance(session, Session):
                return Unknown(f"Bluesky sign-in: {unanswered(session)}")
            reply = self._get_record(via, session, rkey, redactor)
            if not isinstance(reply, Reply) or _error(reply) not in EXPIRED:
                break
            session = self._session(via, redactor, fresh=True)
        if not isinstance(reply, Reply):
            return Unknown(f"Bluesky getRecord: {unanswered(reply) if reply else 'no answer'}")
        data = reply.json()
        error = _error(reply)
        if reply.status == 200 and isinstance(session, Session):
            if not ours(field(data, "value"), payload.text, created_at(action)):
                return Unknown(f"the record key {rkey} holds another record")
            uri = str(field(data, "uri") or f"at://{session.did}/{COLLECTION}/{rkey}")
            cid = field(data, "cid")
            return Found(uri, f"cid {cid}" if cid else "")
        if reply.status == 400 and error == "RecordNotFound":
            return Absent(f"no record at {rkey}")
        self.log(action.id, f"{self._base(via)}/xrpc/com.atproto.repo.getRecord", reply,
                 redactor)  # fmt: skip
        return Unknown(f"Bluesky getRecord answered HTTP {reply.status} "
                       f"{redactor.code(error) or ''}".rstrip())  # fmt: skip

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_required", "Bluesky posts only through a connection")
        payload = Payload.model_validate(action.payload)
        redactor = Redactor.of(via.credentials, via.settings.get("service_url"))
        session = self._session(via, redactor)
        if not isinstance(session, Session):
            return session
        rkey = rkey_for(action)
        record: dict[str, Any] = {
            "$type": COLLECTION,
            "text": payload.text,
            "createdAt": created_at(action),
        }
        if payload.langs:
            record["langs"] = payload.langs
        facets = explicit_facets(payload.facets) if payload.facets else auto_facets(
            payload.text, lambda handle: self._resolve(via, handle, redactor)
        )  # fmt: skip
        if facets:
            record["facets"] = facets
        if action.attempt_count > 1:
            found = self._existing(via, session, rkey, record, redactor)
            if found is not None:
                return found
        result = self._create(action, via, session, rkey, record, redactor)
        if isinstance(result, Session):  # the token expired: once more, with a new session
            result = self._create(action, via, result, rkey, record, redactor)
        if isinstance(result, Session):
            return Rejected("auth_failed", "Bluesky refused a fresh session")
        return result

    def _create(
        self, action: Claimed, via: Via, session: Session, rkey: str, record: dict[str, Any],
        redactor: Redactor,
    ) -> Outcome | Session:  # fmt: skip
        url = f"{self._base(via)}/xrpc/com.atproto.repo.createRecord"
        body = {"repo": session.did, "collection": COLLECTION, "rkey": rkey, "record": record}
        reply = self.request(action.id, "POST", url, redactor, json=body,
                             headers={"authorization": f"Bearer {session.access}"})  # fmt: skip
        if not isinstance(reply, Reply):
            return reply
        data = reply.json()
        if reply.status == 200 and field(data, "uri"):
            return Delivered(str(data["uri"]))
        self.log(action.id, url, reply, redactor)
        error = _error(reply)
        # XRPC documents its error body as {error, message}: a code-shaped error and the
        # message, sanitized, are shown.
        message = redactor.message(field(data, "message"))
        detail = f"Bluesky HTTP {reply.status} {redactor.code(error) or ''}".rstrip()
        detail += f": {message}" if message else ""
        if error in EXPIRED or reply.status == 401:
            # Not processed with a bad token: a new session, and the caller tries again.
            return self._session(via, redactor, fresh=True)
        if reply.status == 429:
            return Transient(detail, self._wait(reply))
        if error == "RecordAlreadyExists" or (reply.status >= 500 and action.attempt_count > 1):
            # The key is taken: by our earlier attempt, or by a collision. Look.
            found = self._existing(via, session, rkey, record, redactor)
            if found is not None:
                return found
        if reply.status >= 500:
            return Ambiguous(detail)
        if error in SUSPENDED:
            return Rejected("account_suspended", detail)
        if reply.status == 413:
            return Rejected("payload_too_large", detail)
        return Rejected("invalid_request", detail)

    def _resolve(self, via: Via, handle: str, redactor: Redactor) -> str | None:
        url = f"{self._base(via)}/xrpc/com.atproto.identity.resolveHandle"
        reply = self.request("resolve", "GET", url, redactor, params={"handle": handle})
        if isinstance(reply, Reply) and reply.status == 200:
            did = field(reply.json(), "did")
            return str(did) if did else None
        return None

    def verify(self, via: Via) -> Verified:
        redactor = Redactor.of(via.credentials, via.settings.get("service_url"))
        session = self._session(via, redactor, fresh=False)
        if isinstance(session, Session):
            return Verified(True, "the app password works", via.settings.get("handle"))
        return Verified(False, str(getattr(session, "message", "sign-in failed")))
