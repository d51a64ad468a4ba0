"""Retention (docs/retention.md): finished rows older than their workspace's retention leave
the hot tables, archived first, in bounded batches.

Each batch:
1. reads (one short read-committed transaction, no lock) up to `retention_batch_size` of a
   workspace's finished rows past the cutoff, in due order, that nothing live refers to, with their
   attempts, change-log entries, rule results, drip-step links, digests and digest items,
   each as Postgres writes it as JSON;
2. writes them as gzip JSON Lines, one object per kind, workspace, day (of `finished_at`,
   UTC) and part, then the part's manifest (counts, SHA-256, time range), under keys named
   by a hash of the part's action rows: archiving the same rows again writes the same keys,
   and a part of other rows never overwrites one;
3. locks those rows without waiting (SKIP LOCKED; a row changed since step 1, or now under
   legal hold, is not locked) and deletes them and what hangs on them, one short transaction
   with a 100 ms lock timeout;
4. writes a part whose rows were not all removed again with those that were (its own name)
   and deletes the first (none removed: the part goes).

A crash after 2 leaves rows archived and still in place: the next run archives them again
under the same keys. A crash after 3 and before 4 leaves a part holding rows still in place
as well as removed ones: the next run archives the former again in another part (a row may
then be in the archive twice, never in it no times). Nothing is deleted that is not in the
archive.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.platform.archive import ArchiveError, ArchiveStore
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.observability import emit, logger
from tickwork.platform.sql import query
from tickwork.runtime import Runtime

_WORKSPACES = query("retention_workspaces")
_CANDIDATES = query("retention_candidates")
_SESSION = query("retention_session")
_LOCK = query("retention_lock")
_RELEASE_ENROLLMENTS = query("retention_release_enrollments")
_DELETE_DIGESTS = query("retention_delete_digests")
_DELETE_ACTIONS = query("retention_delete_actions")
_ACTIONS = query("archive_actions")
# What leaves with an action, each kind its own object (and Athena table).
CHILD_KINDS = {
    "attempts": query("archive_attempts"),
    "changes": query("archive_changes"),
    "rule_actions": query("archive_rule_actions"),
    "enrollment_actions": query("archive_enrollment_actions"),
    "digests": query("archive_digests"),
    "digest_items": query("archive_digest_items"),
}
KINDS = ("actions", *CHILD_KINDS)
MANIFEST_VERSION = 1
# The oldest possible keyset position: before every row.
_START = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))


def data_key(kind: str, workspace_id: UUID, day: date, part: str) -> str:
    return f"{kind}/workspace_id={workspace_id}/day={day.isoformat()}/part-{part}.jsonl.gz"


def manifest_key(workspace_id: UUID, day: date, part: str) -> str:
    return f"manifests/workspace_id={workspace_id}/day={day.isoformat()}/part-{part}.json"


@dataclass
class Part:
    """The rows of one workspace finished on one day (UTC) that one batch archives."""

    workspace_id: UUID
    day: date
    action_ids: list[UUID]
    finished: list[datetime]
    lines: dict[str, list[str]]  # kind -> JSON lines, actions first
    owners: dict[str, list[UUID]]  # kind -> the action each line belongs to

    @property
    def name(self) -> str:
        """A hash of the part's action rows as archived: the same rows, the same name."""
        digest = hashlib.sha256("\n".join(sorted(self.lines["actions"])).encode("utf-8"))
        return digest.hexdigest()[:32]

    def keeping(self, removed: set[UUID]) -> Part | None:
        """This part with only the rows removed (None: none were)."""
        kept = [i for i, action_id in enumerate(self.action_ids) if action_id in removed]
        if not kept:
            return None
        lines: dict[str, list[str]] = {}
        owners: dict[str, list[UUID]] = {}
        for kind, kind_lines in self.lines.items():
            pairs = [
                (line, owner)
                for line, owner in zip(kind_lines, self.owners[kind], strict=True)
                if owner in removed
            ]
            lines[kind] = [line for line, _ in pairs]
            owners[kind] = [owner for _, owner in pairs]
        return Part(
            workspace_id=self.workspace_id,
            day=self.day,
            action_ids=[self.action_ids[i] for i in kept],
            finished=[self.finished[i] for i in kept],
            lines=lines,
            owners=owners,
        )


def _gzip(lines: list[str]) -> tuple[bytes, bytes]:
    """(the JSON Lines text, its gzip) - the same bytes for the same lines (mtime 0)."""
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    return text, gzip.compress(text, mtime=0)


def write_part(store: ArchiveStore, part: Part) -> dict[str, Any]:
    """The part's objects, then its manifest (written last: a manifest names a whole part)."""
    part_name = part.name
    files: dict[str, Any] = {}
    for kind in KINDS:
        text, body = _gzip(part.lines.get(kind, []))
        key = data_key(kind, part.workspace_id, part.day, part_name)
        store.put(key, body, "application/gzip")
        files[kind] = {
            "key": key,
            "rows": len(part.lines.get(kind, [])),
            "sha256": hashlib.sha256(text).hexdigest(),
            "gzip_sha256": hashlib.sha256(body).hexdigest(),
            "bytes": len(body),
        }
    manifest = {
        "version": MANIFEST_VERSION,
        "workspace_id": str(part.workspace_id),
        "day": part.day.isoformat(),
        "part": part_name,
        "finished_from": min(part.finished).isoformat(),
        "finished_to": max(part.finished).isoformat(),
        "counts": {kind: files[kind]["rows"] for kind in KINDS},
        "files": files,
    }
    body = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")
    store.put(manifest_key(part.workspace_id, part.day, part_name), body, "application/json")
    return manifest


def drop_part(store: ArchiveStore, workspace_id: UUID, day: date, name: str) -> None:
    store.delete(manifest_key(workspace_id, day, name))
    for kind in KINDS:
        store.delete(data_key(kind, workspace_id, day, name))


def read_manifest(store: ArchiveStore, workspace_id: UUID, day: date, name: str) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(store.get(manifest_key(workspace_id, day, name)))
    return manifest


def read_lines(store: ArchiveStore, key: str, sha256: str | None = None) -> list[str]:
    """An archive object's JSON lines (each a row as Postgres wrote it), checked against the
    manifest's checksum when one is given."""
    text = gzip.decompress(store.get(key))
    if sha256 is not None and hashlib.sha256(text).hexdigest() != sha256:
        raise ArchiveError(f"{store.where(key)} does not match its manifest's checksum")
    return text.decode("utf-8").splitlines()


def read_part(store: ArchiveStore, manifest: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every row of a part by kind, its checksums verified: the restore helper."""
    return {
        kind: [json.loads(line) for line in read_lines(store, entry["key"], entry["sha256"])]
        for kind, entry in manifest["files"].items()
    }


@dataclass
class RetentionRun:
    """What one run did."""

    workspaces: int = 0
    batches: int = 0
    parts: int = 0
    removed: int = 0
    # Archived but left in place: changed, locked by someone else, or put under legal hold
    # since they were read (the next run looks at them again).
    left: int = 0
    archived: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    out_of_budget: bool = False
    skipped_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "workspaces": self.workspaces,
            "batches": self.batches,
            "parts": self.parts,
            "removed": self.removed,
            "left": self.left,
            "archived": dict(self.archived),
            "out_of_budget": self.out_of_budget,
            "skipped_reason": self.skipped_reason,
        }


@dataclass
class _Batch:
    parts: list[Part]
    updated_at: dict[UUID, datetime]
    last: tuple[datetime, UUID]


def _read_batch(
    conn: Connection, workspace_id: UUID, cutoff: datetime, after: tuple[datetime, UUID], limit: int
) -> _Batch | None:
    with conn.transaction():
        candidates = conn.execute(_CANDIDATES, {
            "workspace_id": workspace_id, "cutoff": cutoff, "after_at": after[0],
            "after_id": after[1], "limit": limit,
        }).fetchall()  # fmt: skip
        if not candidates:
            return None
        ids = [row[0] for row in candidates]
        actions = conn.execute(_ACTIONS, {"ids": ids}).fetchall()
        children = {
            kind: conn.execute(statement, {"ids": ids}).fetchall()
            for kind, statement in CHILD_KINDS.items()
        }
    day_of: dict[UUID, date] = {}
    parts: dict[date, Part] = {}
    for action_id, finished_at, line in actions:
        day = finished_at.astimezone(UTC).date()
        day_of[action_id] = day
        part = parts.get(day)
        if part is None:
            part = parts[day] = Part(
                workspace_id, day, [], [], defaultdict(list), defaultdict(list)
            )
        part.action_ids.append(action_id)
        part.finished.append(finished_at)
        part.lines["actions"].append(line)
        part.owners["actions"].append(action_id)
    for kind, rows in children.items():
        for action_id, line in rows:
            part = parts[day_of[action_id]]
            part.lines[kind].append(line)
            part.owners[kind].append(action_id)
    last = candidates[-1]
    return _Batch(
        parts=sorted(parts.values(), key=lambda p: p.day),
        updated_at={row[0]: row[1] for row in candidates},
        last=(last[2], last[0]),
    )


def _remove(
    conn: Connection, workspace_id: UUID, cutoff: datetime, updated_at: dict[UUID, datetime]
) -> set[UUID]:
    """Lock what is still as archived (skipping what others hold) and delete it."""
    try:
        with conn.transaction():
            conn.execute(_SESSION)
            locked = [row[0] for row in conn.execute(_LOCK, {
                "workspace_id": workspace_id, "cutoff": cutoff,
                "ids": list(updated_at), "updated_ats": list(updated_at.values()),
            }).fetchall()]  # fmt: skip
            if not locked:
                return set()
            conn.execute(_RELEASE_ENROLLMENTS, {"ids": locked})
            conn.execute(_DELETE_DIGESTS, {"ids": locked})
            return {row[0] for row in conn.execute(_DELETE_ACTIONS, {"ids": locked}).fetchall()}
    except (
        psycopg.errors.LockNotAvailable,
        psycopg.errors.QueryCanceled,
        psycopg.errors.ForeignKeyViolation,
    ) as exc:
        # Something held a row this batch must change, or took one of its rows as a running
        # enrollment's step since the lock: nothing is removed, nothing waited on.
        logger.warning("retention batch gave way", extra={"error": str(exc)})
        return set()


def remove_workspace(
    conn: Connection,
    store: ArchiveStore,
    workspace_id: UUID,
    cutoff: datetime,
    *,
    batch_size: int,
    deadline: float,
    run: RetentionRun,
    clock: Callable[[], float] = time.monotonic,
    pause: float = 0.0,
) -> None:
    """Archive then remove one workspace's finished rows older than `cutoff`, batch by batch,
    until none are left or the deadline passes."""
    after = _START
    first = True
    while True:
        if not first and pause:
            time.sleep(pause)  # the database's time between batches is the engine's
        first = False
        if clock() >= deadline:
            run.out_of_budget = True
            return
        batch = _read_batch(conn, workspace_id, cutoff, after, batch_size)
        if batch is None:
            return
        after = batch.last
        run.batches += 1
        for part in batch.parts:
            write_part(store, part)  # archive first: an error here deletes nothing
        removed = _remove(conn, workspace_id, cutoff, batch.updated_at)
        for part in batch.parts:
            kept = part.keeping(removed)
            if kept is None:
                drop_part(store, part.workspace_id, part.day, part.name)
                continue
            if len(kept.action_ids) != len(part.action_ids):
                write_part(store, kept)  # first: a crash here leaves both, never neither
                drop_part(store, part.workspace_id, part.day, part.name)
            run.parts += 1
            for kind in KINDS:
                run.archived[kind] += len(kept.lines.get(kind, []))
        run.removed += len(removed)
        run.left += len(batch.updated_at) - len(removed)


def run_retention(
    conn: Connection,
    settings: Settings,
    store: ArchiveStore | None,
    *,
    now: datetime,
    clock: Callable[[], float] = time.monotonic,
    workspace_ids: Iterable[UUID] | None = None,
) -> RetentionRun:
    """One pass over every workspace not under legal hold (or those named)."""
    run = RetentionRun()
    if not settings.retention_enabled:
        run.skipped_reason = "disabled"
        return run
    if store is None:
        run.skipped_reason = "no_archive"
        return run
    deadline = clock() + settings.retention_budget_seconds
    only = set(workspace_ids) if workspace_ids is not None else None
    rows = conn.execute(_WORKSPACES, {"default_days": settings.retention_days}).fetchall()
    for workspace_id, days in rows:
        if only is not None and workspace_id not in only:
            continue
        run.workspaces += 1
        remove_workspace(
            conn, store, workspace_id, now - timedelta(days=days),
            batch_size=settings.retention_batch_size, deadline=deadline, run=run, clock=clock,
            pause=settings.retention_pause_seconds,
        )  # fmt: skip
        if run.out_of_budget:
            break
    return run


def handle_retention(context: LambdaContext, runtime: Runtime) -> dict[str, Any]:
    started = time.monotonic()
    conn = runtime.db.connection()
    row = conn.execute(query("retention_now")).fetchone()
    assert row is not None
    done = run_retention(conn, runtime.settings, runtime.archive, now=row[0])
    elapsed = time.monotonic() - started
    # RetentionElapsed's sample count is what the "not running" alarm watches.
    emit(
        {"RetentionRemoved": done.removed, "RetentionParts": done.parts},
        seconds={"RetentionElapsed": elapsed},
    )
    summary = done.as_dict() | {"elapsed_seconds": round(elapsed, 3)}
    if done.skipped_reason == "no_archive":
        logger.error("retention: no archive configured, nothing removed", extra=summary)
    else:
        logger.info("retention", extra=summary)
    return summary
