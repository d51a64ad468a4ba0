"""A fake Bluesky PDS: createSession/refreshSession, createRecord (a taken record key is a
500 InternalServerError, as the PDS answers today), getRecord and resolveHandle, in the XRPC
wire format (`{"error", "message"}` bodies, 429 with ratelimit-* headers). It counts posts."""

from __future__ import annotations

import itertools
import threading
from typing import Any

from tests.fakes.server import Answer, FakeServer, Seen

HANDLE = "tickwork.bsky.social"
APP_PASSWORD = "abcd-efgh-ijkl-mnop"
DID = "did:plc:tickworkfake0001"
HANDLES = {"alice.bsky.social": "did:plc:alice0000000001"}


def xrpc_error(status: int, error: str, message: str = "", headers: dict[str, str] | None = None):
    return Answer(status, {"error": error, "message": message or error}, headers or {})


class FakeBluesky(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, dict[str, Any]] = {}  # rkey -> record
        self.posts = 0
        self.sessions = 0
        self._tokens = itertools.count(1)
        self.access: set[str] = set()
        self.refresh: set[str] = set()
        self.lose_answers = 0  # create the record, then answer 502
        self._posting = threading.Lock()

    def expire_sessions(self) -> None:
        self.access.clear()

    def _new_session(self) -> Answer:
        n = next(self._tokens)
        access, refresh = f"access-{n}", f"refresh-{n}"
        self.access.add(access)
        self.refresh.add(refresh)
        self.sessions += 1
        return Answer(200, {"did": DID, "handle": HANDLE, "accessJwt": access,
                            "refreshJwt": refresh, "active": True})  # fmt: skip

    def answer(self, seen: Seen) -> Answer:
        token = seen.headers.get("authorization", "").removeprefix("Bearer ")
        path = seen.path.removeprefix("/xrpc/")
        if path == "com.atproto.server.createSession":
            body = seen.json()
            if (body.get("identifier"), body.get("password")) != (HANDLE, APP_PASSWORD):
                return xrpc_error(401, "AuthenticationRequired", "Invalid identifier or password")
            return self._new_session()
        if path == "com.atproto.server.refreshSession":
            if token not in self.refresh:
                return xrpc_error(400, "ExpiredToken", "Token has expired")
            self.refresh.discard(token)
            return self._new_session()
        if path == "com.atproto.identity.resolveHandle":
            handle = seen.query.get("handle", [""])[0]
            if handle not in HANDLES:
                return xrpc_error(400, "InvalidRequest", "Unable to resolve handle")
            return Answer(200, {"did": HANDLES[handle]})
        if token not in self.access:
            return xrpc_error(400, "ExpiredToken", "Token has expired")
        if path == "com.atproto.repo.getRecord":
            rkey = seen.query.get("rkey", [""])[0]
            if rkey not in self.records:
                return xrpc_error(400, "RecordNotFound", f"Could not locate record: {rkey}")
            return Answer(200, {"uri": f"at://{DID}/app.bsky.feed.post/{rkey}",
                                "cid": f"bafyrei{rkey}", "value": self.records[rkey]})  # fmt: skip
        if path == "com.atproto.repo.createRecord":
            return self._create(seen.json())
        return xrpc_error(404, "MethodNotImplemented")

    def _create(self, body: dict[str, Any]) -> Answer:
        record = body.get("record") or {}
        rkey = body.get("rkey") or f"auto{len(self.records)}"
        if not record.get("text"):
            return xrpc_error(400, "InvalidRequest", "Record/text must be a string")
        with self._posting:
            if rkey in self.records:
                return xrpc_error(500, "InternalServerError", "Internal Server Error")
            self.records[rkey] = record
            self.posts += 1
            if self.lose_answers:
                self.lose_answers -= 1
                return Answer(502, "<html>Bad Gateway</html>")
        return Answer(200, {"uri": f"at://{DID}/app.bsky.feed.post/{rkey}",
                            "cid": f"bafyrei{rkey}"})  # fmt: skip
