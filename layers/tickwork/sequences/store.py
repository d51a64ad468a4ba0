"""Campaigns and enrollments in the database: create, enroll, advance, exit.

Each step becomes one ordinary scheduled_actions row (source `sequence`, dedupe key
`enrollment:step`, addressed to the enrollment's recipient), made through
`actions.schedule`, so validation, quiet hours and the unique dedupe key apply: a retried
advance can never make a second send.

The next step is made when the previous one was published or skipped, never all at once:
a trigger on scheduled_actions stamps the step's ledger row (`enrollment_actions.done_at`)
when it becomes published or cancelled, and the advance pass (`advance_ready`, run by the
reconciler cron) makes the next row. The dispatcher runs no extra statement for it, and
the trigger never locks an enrollment (exits lock the enrollment, then the action).
The advance is an optimistic lock (`WHERE current_step = $old`): of two concurrent
advancers one moves the enrollment and makes the row, the other changes nothing.

A step with a `digest` or a `limit` is decided when it is due, not in advance: the
enrollment waits (`next_send_at`, no current action) and the advance pass, once it is due,
locks the enrollment and, in one transaction, checks the step's conditions and collects it
into the recipient's shared digest, makes its row (its key had room), or drops it (it had
none); a collected or dropped step moves the enrollment on at once, as a sent one would,
and its change log entry (`digest` on the digest's action, or `drop`) names the enrollment.

An exit marks the enrollment exited and cancels its pending step in one transaction. A
step a dispatcher has already claimed cannot be cancelled (the conditional UPDATE says
so): then it is sent, and the enrollment records `exit_outcome` `in_flight`; no further
step is made either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.actions import model, scheduling, store
from tickwork.actions.bulk import Exits
from tickwork.actions.model import Action, NewAction, action_from_row
from tickwork.digests.model import SHARED_ACTION_SOURCE, Item, Window
from tickwork.digests.store import Added, add_item, shared
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, storable
from tickwork.platform.errors import ConflictError, InputError, NotFoundError
from tickwork.platform.observability import emit, logger
from tickwork.platform.sql import query
from tickwork.platform.wallclock import require_aware, zone
from tickwork.recipients.model import check_recipient_id
from tickwork.recipients.store import find_recipient
from tickwork.rules import unsubscribe_url
from tickwork.rules.conditions import first_failing
from tickwork.rules.events import has_nul
from tickwork.rules.metering import FEW_RENDERS, MANY_RENDERS, RenderBudget
from tickwork.rules.produce import take_key
from tickwork.rules.templating import JsonTemplate, RenderError
from tickwork.sequences.model import (
    EXITED,
    SOURCE,
    Campaign,
    CampaignInput,
    Enrollment,
    Step,
    context,
    dedupe_key,
    enrollment_from_row,
    step_time,
    steps_from_json,
    validate_campaign,
)

_INSERT_CAMPAIGN = query("insert_campaign")
_GET_CAMPAIGN = query("get_campaign")
_LIST_CAMPAIGNS = query("list_campaigns")
_INSERT_ENROLLMENT = query("insert_enrollment")
_GET_ENROLLMENT_OF = query("get_enrollment_of")
_GET_ENROLLMENT = query("get_enrollment")
_GET_ENROLLMENT_BY_ID = query("get_enrollment_by_id")
_LIST_ENROLLMENTS = query("list_enrollments")
_SET_STEP_ACTION = query("set_step_action")
_INSERT_LEDGER = query("insert_enrollment_action")
_ADVANCE = query("advance_enrollment")
_COMPLETE = query("complete_enrollment")
_FOLLOW = query("follow_rescheduled_step")
_RECORD_ERROR = query("record_step_error")
_READY = query("ready_steps")
_MARK_ADVANCED = query("mark_advanced")
_EXIT = query("exit_enrollment")
_SET_EXIT_OUTCOME = query("set_exit_outcome")
_LOG_EXIT = query("log_exit")
_ACTIVE_OF_CAMPAIGN = query("active_enrollments_of_campaign")
_ACTIVE_OF_RECIPIENT = query("active_enrollments_of_recipient")
_UPDATE_DATA = query("update_enrollment_data")
_EXIT_EVENT = query("exit_event_enrollments")
_ENROLLMENT_ACTIONS = query("enrollment_actions")
_WAIT = query("wait_for_step")
_WAITING = query("waiting_enrollments")
_LOCK_WAITING = query("lock_waiting_enrollment")
_LOG_STEP = query("log_step_change")

MAX_DATA_BYTES = 65536


def campaign_from_row(row: dict[str, Any], settings: Settings) -> Campaign:
    return Campaign(
        id=row["id"], workspace_id=row["workspace_id"], name=row["name"],
        steps=steps_from_json(row["steps"], settings), exit_events=list(row["exit_events"]),
        cap_policy=row["cap_policy"], created_by=row["created_by"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )  # fmt: skip


# ---------------------------------------------------------------------------- campaigns


def create_campaign(
    conn: Connection, workspace_id: UUID, given: CampaignInput, settings: Settings,
    created_by: str | None,
) -> Campaign:  # fmt: skip
    steps, exit_events = validate_campaign(given, settings)
    with storable(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _INSERT_CAMPAIGN,
            {"workspace_id": workspace_id, "name": given.name.strip(),
             "steps": Jsonb([s.as_json() for s in steps]), "exit_events": exit_events,
             "cap_policy": given.cap_policy, "created_by": created_by},
        ).fetchone()  # fmt: skip
    assert row is not None
    return campaign_from_row(row, settings)


def get_campaign(
    conn: Connection, workspace_id: UUID, campaign_id: UUID, settings: Settings
) -> Campaign:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _GET_CAMPAIGN, {"id": campaign_id, "workspace_id": workspace_id}
        ).fetchone()
    if row is None:
        raise NotFoundError(f"no campaign {campaign_id} in this workspace")
    return campaign_from_row(row, settings)


def list_campaigns(
    conn: Connection, workspace_id: UUID, settings: Settings, *, limit: int,
    after: tuple[datetime, UUID] | None,
) -> list[Campaign]:  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _LIST_CAMPAIGNS,
            {"workspace_id": workspace_id, "limit": limit,
             "after_created_at": after[0] if after else None,
             "after_id": after[1] if after else None},
        ).fetchall()  # fmt: skip
    return [campaign_from_row(row, settings) for row in rows]


# -------------------------------------------------------------------------- enrollments


@dataclass(frozen=True)
class Enrolled:
    enrollment: Enrollment
    created: bool


def _check_data(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError("data must be a JSON object", field="data")
    if has_nul(data):
        raise InputError("data contains a NUL character, which cannot be stored", field="data")
    if model.payload_size(data) > MAX_DATA_BYTES:
        raise InputError(f"data is larger than {MAX_DATA_BYTES} bytes", field="data")
    return data


def enroll(
    conn: Connection, workspace_id: UUID, campaign_id: UUID, recipient_id: str,
    data: dict[str, Any], settings: Settings, now: datetime, *,
    starts_at: datetime | None = None, created_by: str | None = None,
) -> Enrolled:  # fmt: skip
    """Enroll a recipient, making the first step's row; the same (campaign, recipient)
    again returns the first enrollment, whatever its state."""
    check_recipient_id(recipient_id)
    data = _check_data(data)
    start = now if starts_at is None else require_aware(starts_at, field="starts_at")
    start = max(start, now)
    campaign = get_campaign(conn, workspace_id, campaign_id, settings)
    recipient = find_recipient(conn, workspace_id, recipient_id)
    if recipient is None:
        raise NotFoundError(
            f"no recipient {recipient_id!r} in this workspace; register it with"
            " PUT /v1/recipients/{id} first"
        )
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _INSERT_ENROLLMENT,
            {"workspace_id": workspace_id, "campaign_id": campaign_id,
             "recipient_id": recipient_id, "data": Jsonb(data), "starts_at": start},
        ).fetchone()  # fmt: skip
        if row is None:
            existing = cur.execute(
                _GET_ENROLLMENT_OF,
                {"workspace_id": workspace_id, "campaign_id": campaign_id,
                 "recipient_id": recipient_id},
            ).fetchone()  # fmt: skip
            assert existing is not None
            return Enrolled(enrollment_from_row(existing), created=False)
        enrollment = enrollment_from_row(row)
        _place(conn, enrollment, campaign, start, settings, now, created_by)
        fresh = cur.execute(
            _GET_ENROLLMENT, {"id": enrollment.id, "workspace_id": workspace_id}
        ).fetchone()
    assert fresh is not None
    return Enrolled(enrollment_from_row(fresh), created=True)


@dataclass(frozen=True)
class _Waiting:
    """The step is decided when it is due: the enrollment waits for it."""


def _make_step(
    conn: Connection, enrollment: Enrollment, campaign: Campaign, index: int, base: datetime,
    settings: Settings, now: datetime, created_by: str | None, budget: RenderBudget,
    due: datetime | None = None,
) -> Action | _Waiting | None:  # fmt: skip
    """The row of step `index` (the enrollment already points at it), or None when the
    step makes none: then the enrollment moves on. A step that cannot be made has its
    reason recorded (a step whose template fails, or exceeds its budget, is rendered once,
    never again); one decided when due waits for its time (`_Waiting`), then is collected
    or dropped (None) or made. `due`: the time of a step that waited."""
    step = campaign.steps[index]
    recipient = find_recipient(conn, enrollment.workspace_id, enrollment.recipient_id)
    timezone = recipient.timezone if recipient else "UTC"
    asked = due if due is not None else step_time(step, enrollment.starts_at, base, zone(timezone))
    at = max(asked, now)
    if step.decided_when_due and at > now:
        conn.execute(_WAIT, {"id": enrollment.id, "step": index, "at": at})
        return _Waiting()
    ctx = context(
        enrollment.id,
        enrollment.campaign_id,
        enrollment.recipient_id,
        enrollment.data,
        timezone,
        index,
    )
    try:
        # Stored steps were checked when written; one the sandbox has since grown stricter
        # about no longer compiles: skipped with the reason like any other failure.
        target_t, payload_t = step.templates()
        target = target_t.render(ctx, budget)
        with conn.transaction():
            if step.decided_when_due:
                decided = _decide(conn, enrollment, step, index, str(target), ctx, timezone,
                                  settings, now, budget)  # fmt: skip
                if decided is None:
                    return None
            payload = unsubscribe_url.fill(
                payload_t.render(unsubscribe_url.context(ctx), budget),
                settings, enrollment.workspace_id, campaign_id=enrollment.campaign_id,
            )  # fmt: skip
            new = NewAction(
                action_type=step.action_type, target_key=target, publish_at=at,
                payload=payload, dedupe_key=dedupe_key(enrollment.id, index), source=SOURCE,
                created_by=created_by, recipient_id=enrollment.recipient_id,
            )  # fmt: skip
            scheduled = scheduling.schedule(conn, enrollment.workspace_id, new, settings, now)
    except (RenderError, InputError, ConflictError) as exc:
        message = f"step {index} was skipped: {exc.message}"[:2000]
        conn.execute(_RECORD_ERROR, {"id": enrollment.id, "message": message})
        logger.warning(
            "a drip step could not be made",
            extra={"enrollment_id": str(enrollment.id), "reason": message},
        )
        return None
    action = scheduled.action
    conn.execute(
        _INSERT_LEDGER,
        {"action_id": action.id, "workspace_id": enrollment.workspace_id,
         "enrollment_id": enrollment.id, "step_index": index},
    )  # fmt: skip
    conn.execute(
        _SET_STEP_ACTION,
        {"id": enrollment.id, "step": index, "action_id": action.id,
         "next_send_at": action.publish_at},
    )  # fmt: skip
    return action


class _NoRoom(Exception):
    """The step's key had its limit's count in the window."""


def _decide(
    conn: Connection, enrollment: Enrollment, step: Step, index: int, target: str,
    ctx: dict[str, Any], timezone: str, settings: Settings, now: datetime,
    budget: RenderBudget,
) -> bool | None:  # fmt: skip
    """A step that collects or is limited, now that it is due, in the caller's transaction:
    True when it is to be made alone (its key had room), None when it was skipped by its
    conditions, collected into a digest or dropped by its limit (its change log says which).
    Raises what rendering or collecting raises, having written nothing."""
    failing = first_failing(step.conditions, ctx)
    if failing is not None:
        _log_step(conn, enrollment, None, "skip", f"step {index} skipped: {failing}")
        return None
    limit = step.key_limit
    key = enrollment.recipient_id
    if limit is not None and limit.key is not None:
        key = str(JsonTemplate(limit.key, "action.limit.key").render(ctx, budget))
    if step.digest is not None:
        digest_key = (
            str(JsonTemplate(step.digest.key, "action.digest.key").render(ctx, budget))
            if step.digest.key is not None else ""
        )  # fmt: skip
        try:
            with conn.transaction():
                added = _collect(conn, enrollment, step, index, step.digest.window, digest_key,
                                 target, ctx, timezone, settings, now, budget)  # fmt: skip
                # A limit on a step that collects counts the digests it opens.
                if (
                    added.outcome == "opened"
                    and limit is not None
                    and not take_key(conn, enrollment.workspace_id, None, limit, key, now)
                ):
                    raise _NoRoom  # fmt: skip
        except _NoRoom:
            assert limit is not None
            _log_step(conn, enrollment, None, "drop",
                      f"step {index} dropped: its key had {limit.words()} digests")  # fmt: skip
            return None
        _log_collected(conn, enrollment, index, added)
        return None
    assert limit is not None
    if take_key(conn, enrollment.workspace_id, None, limit, key, now):
        return True
    if limit.excess == "drop" or limit.digest_window is None:
        _log_step(conn, enrollment, None, "drop",
                  f"step {index} dropped: its key already had {limit.words()}")  # fmt: skip
        return None
    added = _collect(conn, enrollment, step, index, limit.digest_window, key, target, ctx,
                     timezone, settings, now, budget)  # fmt: skip
    _log_collected(conn, enrollment, index, added)
    return None


def _collect(
    conn: Connection, enrollment: Enrollment, step: Step, index: int, window: Window,
    key: str, target: str, ctx: dict[str, Any], timezone: str, settings: Settings,
    now: datetime, budget: RenderBudget,
) -> Added:  # fmt: skip
    """The step as an item of the recipient's shared digest for the key and window: the
    item is what the step's template sees (`data`, `recipient`, `enrollment`) and which
    step it is; the digest's payload is the step's template rendered with its items."""
    collect = shared(enrollment.workspace_id, step.action_type, window, target, key,
                     enrollment.recipient_id, timezone)  # fmt: skip
    item = Item(
        f"step:{dedupe_key(enrollment.id, index)}",
        ctx | {"source": "sequence", "step": {"index": index, "name": step.name}},
        now,
    )
    _, payload_t = step.templates()

    def compose(view: dict[str, Any]) -> NewAction:
        payload = unsubscribe_url.fill(
            payload_t.render(unsubscribe_url.context(ctx | view), budget),
            settings, enrollment.workspace_id, campaign_id=enrollment.campaign_id,
        )  # fmt: skip
        return NewAction(
            action_type=step.action_type, target_key=target, publish_at=now, payload=payload,
            source=SHARED_ACTION_SOURCE, recipient_id=enrollment.recipient_id,
        )  # fmt: skip

    return add_item(conn, collect, item, compose, settings, now)


def _log_collected(conn: Connection, enrollment: Enrollment, index: int, added: Added) -> None:
    if added.outcome == "duplicate":
        reason = f"step {index} was already in digest {added.digest_id}"
    else:
        reason = f"step {index} collected into digest {added.digest_id} ({added.count} items)"
    _log_step(conn, enrollment, added.action_id, "digest", reason)


def _log_step(
    conn: Connection, enrollment: Enrollment, action_id: UUID | None, kind: str, reason: str
) -> None:
    conn.execute(_LOG_STEP, {
        "workspace_id": enrollment.workspace_id, "action_id": action_id,
        "enrollment_id": enrollment.id, "kind": kind, "reason": reason,
    })  # fmt: skip


def _load(conn: Connection, workspace_id: UUID | None, enrollment_id: UUID) -> Enrollment | None:
    with conn.cursor(row_factory=dict_row) as cur:
        if workspace_id is None:
            row = cur.execute(_GET_ENROLLMENT_BY_ID, {"id": enrollment_id}).fetchone()
        else:
            row = cur.execute(
                _GET_ENROLLMENT, {"id": enrollment_id, "workspace_id": workspace_id}
            ).fetchone()
    return enrollment_from_row(row) if row else None


def get_enrollment(conn: Connection, workspace_id: UUID, enrollment_id: UUID) -> Enrollment:
    found = _load(conn, workspace_id, enrollment_id)
    if found is None:
        raise NotFoundError(f"no enrollment {enrollment_id} in this workspace")
    return found


def enrollment_actions(conn: Connection, enrollment_id: UUID) -> list[tuple[int, Action]]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_ENROLLMENT_ACTIONS, {"enrollment_id": enrollment_id}).fetchall()
    return [(int(r["step_index"]), action_from_row(r)) for r in rows]


def list_enrollments(
    conn: Connection, workspace_id: UUID, campaign_id: UUID, *, status: str | None,
    limit: int, after: UUID | None,
) -> list[Enrollment]:  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _LIST_ENROLLMENTS,
            {"workspace_id": workspace_id, "campaign_id": campaign_id, "status": status,
             "limit": limit, "after": after},
        ).fetchall()  # fmt: skip
    return [enrollment_from_row(r) for r in rows]


def update_data(
    conn: Connection, workspace_id: UUID, enrollment_id: UUID, data: dict[str, Any]
) -> Enrollment:
    """Replace an enrollment's data: steps not yet fired check their conditions on it."""
    data = _check_data(data)
    with storable(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _UPDATE_DATA, {"id": enrollment_id, "workspace_id": workspace_id, "data": Jsonb(data)}
        ).fetchone()
    if row is None:
        raise NotFoundError(f"no enrollment {enrollment_id} in this workspace")
    return enrollment_from_row(row)


# --------------------------------------------------------------------------------- exits


def exit_enrollment(
    conn: Connection, workspace_id: UUID, enrollment_id: UUID, reason: str, actor: str
) -> Enrollment:
    """Exit an active enrollment and cancel its pending step, at once. Exiting an exited
    one changes nothing; a completed one cannot exit (ConflictError)."""
    reason = (reason or "exited").strip()[:500] or "exited"
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _EXIT, {"id": enrollment_id, "workspace_id": workspace_id, "reason": reason}
        ).fetchone()
        if row is None:
            current = get_enrollment(conn, workspace_id, enrollment_id)
            if current.status == "exited":
                return current
            raise ConflictError(
                f"only active enrollments can exit; this one is {current.status}",
                details={"status": current.status},
            )
        exited = enrollment_from_row(row)
        outcome = "none"
        if exited.current_action_id is not None:
            done = store.cancel(
                conn, workspace_id, exited.current_action_id, reason=EXITED,
                message=f"enrollment exited: {reason}",
            )  # fmt: skip
            if done.changed:
                outcome = "cancelled"  # the cancel trigger records the exit
            elif done.action is not None and done.action.status in ("submitted", "queued"):
                outcome = "in_flight"
        if outcome != "cancelled":
            cur.execute(
                _LOG_EXIT,
                {"workspace_id": workspace_id, "action_id": exited.current_action_id,
                 "enrollment_id": exited.id, "actor": actor,
                 "reason": reason if outcome == "none"
                 else f"{reason}; the pending step was already being sent"},
            )  # fmt: skip
        final = cur.execute(_SET_EXIT_OUTCOME, {"id": exited.id, "outcome": outcome}).fetchone()
    assert final is not None
    return enrollment_from_row(final)


def exit_outcome(enrollment: Enrollment, steps: list[tuple[int, Action]]) -> str | None:
    """What became of the step pending at the exit: `cancelled`, `sent` (a dispatcher had
    it already), `in_flight` (still being sent), `none` (nothing was pending)."""
    outcome = enrollment.exit_outcome
    if outcome != "in_flight":
        return outcome
    pending = next((a for _, a in steps if a.id == enrollment.current_action_id), None)
    if pending is None:
        return outcome
    if pending.status == "published":
        return "sent"
    if pending.status == "cancelled":
        return "cancelled"  # handed back at admission: the enrollment had exited
    return outcome


def exit_on_event(
    conn: Connection, workspace_id: UUID, event_type: str, recipient_id: str, actor: str
) -> list[UUID]:
    """Exit the recipient's active enrollments in campaigns that exit on `event_type`."""
    rows = conn.execute(
        _EXIT_EVENT,
        {"workspace_id": workspace_id, "recipient_id": recipient_id, "event_type": event_type},
    ).fetchall()
    exited = []
    for (enrollment_id,) in rows:
        done = exit_enrollment(conn, workspace_id, enrollment_id, f"event {event_type}", actor)
        if done.status == "exited":
            exited.append(enrollment_id)
    return exited


def exit_active(
    conn: Connection,
    workspace_id: UUID,
    *,
    campaign_id: UUID | None = None,
    recipient_id: str | None = None,
    limit: int,
    reason: str,
    actor: str,
) -> Exits:
    """Exit up to `limit` running enrollments of a campaign, or of a recipient in any
    campaign, each as `exit_enrollment` does (its pending step cancelled, no further step
    made): a bulk cancel by campaign or recipient, whose advance would otherwise make the
    next step of a cancelled one."""
    params: dict[str, Any] = {"workspace_id": workspace_id, "limit": limit}
    if campaign_id is not None:
        sql, params = _ACTIVE_OF_CAMPAIGN, params | {"campaign_id": campaign_id}
    else:
        assert recipient_id is not None
        sql, params = _ACTIVE_OF_RECIPIENT, params | {"recipient_id": recipient_id}
    rows = conn.execute(sql, params).fetchall()
    exited = cancelled = 0
    for (enrollment_id,) in rows:
        done = exit_enrollment(conn, workspace_id, enrollment_id, reason, actor)
        if done.status == "exited":
            exited += 1
            cancelled += done.exit_outcome == "cancelled"
    return Exits(taken=len(rows), exited=exited, cancelled=cancelled)


# ------------------------------------------------------------------------------- advance


@dataclass
class AdvanceSummary:
    enrollments: int = 0
    advanced: int = 0
    completed: int = 0
    followed: int = 0
    lost: int = 0  # another advancer (or an exit) got there first
    errors: int = 0
    decided: int = 0  # steps decided when due (collected, dropped or made)
    made: list[UUID] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"enrollments": self.enrollments, "advanced": self.advanced,
                "completed": self.completed, "followed": self.followed, "lost": self.lost,
                "errors": self.errors, "decided": self.decided}  # fmt: skip


def _place(
    conn: Connection, enrollment: Enrollment, campaign: Campaign, base: datetime,
    settings: Settings, now: datetime, created_by: str | None,
    budget: RenderBudget | None = None, due: datetime | None = None,
) -> Action | None:  # fmt: skip
    """Make the row of the step the enrollment points at; a step that cannot be made is
    skipped (its reason in `last_error`) for the next, as is one collected or dropped when
    due, and past the last step the enrollment completes. The steps' renders share `budget`
    (by default, a few renders' worth for this enrollment), so a campaign of failing steps
    costs a bounded time. `due`: the time of the step the enrollment waited for."""
    if budget is None:
        budget = RenderBudget.of("the steps of this enrollment", FEW_RENDERS)
    while True:
        index = enrollment.current_step
        made = _make_step(
            conn, enrollment, campaign, index, base, settings, now, created_by, budget, due
        )
        due = None
        if isinstance(made, _Waiting):
            return None
        if made is not None:
            return made
        params = {"id": enrollment.id, "old_step": index, "new_step": index + 1,
                  "action_id": None}  # fmt: skip
        with conn.cursor(row_factory=dict_row) as cur:
            if index + 1 >= len(campaign.steps):
                cur.execute(_COMPLETE, params)
                return None
            row = cur.execute(_ADVANCE, params).fetchone()
        if row is None:
            return None
        enrollment, base = enrollment_from_row(row), now


def advance(
    conn: Connection, enrollment_id: UUID, action_id: UUID, done_at: datetime,
    settings: Settings, now: datetime, summary: AdvanceSummary | None = None,
    budgets: dict[UUID, RenderBudget] | None = None,
) -> Action | None:  # fmt: skip
    """Move an enrollment on from the step whose row `action_id` was published or cancelled
    at `done_at`: make the next step's row, or complete it. An advancer that finds the
    enrollment elsewhere (another advancer was first, it exited) changes nothing.
    `budgets` holds one render budget per workspace for a pass over many enrollments."""
    summary = summary if summary is not None else AdvanceSummary()
    summary.enrollments += 1
    enrollment = _load(conn, None, enrollment_id)
    if (
        enrollment is None
        or enrollment.status != "active"
        or enrollment.current_action_id != action_id
    ):
        summary.lost += 1
        return None
    campaign = get_campaign(conn, enrollment.workspace_id, enrollment.campaign_id, settings)
    old, new = enrollment.current_step, enrollment.current_step + 1
    params = {"id": enrollment.id, "old_step": old, "new_step": new, "action_id": action_id}
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        followed = cur.execute(_FOLLOW, {"id": enrollment.id, "action_id": action_id}).fetchone()
        if followed is not None:
            cur.execute(
                _INSERT_LEDGER,
                {"action_id": followed["id"], "workspace_id": followed["workspace_id"],
                 "enrollment_id": enrollment.id, "step_index": old},
            )  # fmt: skip
            summary.followed += 1
            return None
        if new >= len(campaign.steps):
            done = cur.execute(_COMPLETE, params).fetchone()
            if done is None:
                summary.lost += 1
            else:
                summary.completed += 1
            return None
        moved = cur.execute(_ADVANCE, params).fetchone()
        if moved is None:
            summary.lost += 1
            return None
        budget = None
        if budgets is not None:
            budget = budgets.setdefault(
                enrollment.workspace_id,
                RenderBudget.of("this workspace's drip steps in this pass", MANY_RENDERS),
            )
        made = _place(
            conn, enrollment_from_row(moved), campaign, done_at, settings, now, None, budget
        )
    summary.advanced += 1
    if made is not None:
        summary.made.append(made.id)
    return made


def advance_ready(
    conn: Connection, settings: Settings, now: datetime, *, limit: int = 500
) -> AdvanceSummary:
    """The advance pass: every step published or cancelled since the last pass moves its
    enrollment on. Concurrent passes are safe (the optimistic lock and the dedupe key).
    Each workspace's step templates share one render budget in a pass: a tenant's
    templates cannot hold up the others' steps for more than that (its steps past it are
    skipped with the reason)."""
    summary = AdvanceSummary()
    budgets: dict[UUID, RenderBudget] = {}
    for action_id, enrollment_id, _, done_at in conn.execute(_READY, {"limit": limit}).fetchall():
        try:
            advance(conn, enrollment_id, action_id, done_at, settings, now, summary, budgets)
            conn.execute(_MARK_ADVANCED, {"action_id": action_id})
        except Exception:
            summary.errors += 1
            logger.exception("advancing an enrollment failed", extra={"id": str(enrollment_id)})
    for (enrollment_id,) in conn.execute(_WAITING, {"now": now, "limit": limit}).fetchall():
        try:
            decide_due(conn, enrollment_id, settings, now, summary, budgets)
        except Exception:
            summary.errors += 1
            logger.exception("deciding a due step failed", extra={"id": str(enrollment_id)})
    return summary


def decide_due(
    conn: Connection, enrollment_id: UUID, settings: Settings, now: datetime,
    summary: AdvanceSummary | None = None, budgets: dict[UUID, RenderBudget] | None = None,
) -> Action | None:  # fmt: skip
    """Decide the step an enrollment waited for, now that it is due: collected, dropped
    (the enrollment moves on to the next step) or made, under the enrollment's row lock,
    in one transaction. A pass that finds it locked or no longer waiting changes nothing."""
    summary = summary if summary is not None else AdvanceSummary()
    summary.enrollments += 1
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_LOCK_WAITING, {"id": enrollment_id, "now": now}).fetchone()
        if row is None:
            summary.lost += 1
            return None
        enrollment = enrollment_from_row(row)
        campaign = get_campaign(conn, enrollment.workspace_id, enrollment.campaign_id, settings)
        budget = None
        if budgets is not None:
            budget = budgets.setdefault(
                enrollment.workspace_id,
                RenderBudget.of("this workspace's drip steps in this pass", MANY_RENDERS),
            )
        made = _place(conn, enrollment, campaign, now, settings, now, None, budget,
                      due=enrollment.next_send_at)  # fmt: skip
    summary.decided += 1
    if made is not None:
        summary.made.append(made.id)
    return made


def emit_metrics(summary: AdvanceSummary) -> None:
    emit({
        "SequencesAdvanced": summary.advanced, "SequencesCompleted": summary.completed,
        "SequencesLost": summary.lost, "SequencesErrors": summary.errors,
    })  # fmt: skip
