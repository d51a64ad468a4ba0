"""Request and response bodies of /v1/campaigns, /v1/enrollments, /v1/recipients,
/v1/forecast and /v1/changes (pydantic; they make the OpenAPI document). Values are checked
by the domain (tickwork.sequences, tickwork.recipients), which names the field in its 422s;
these models give the shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from tickwork.actions.model import Action
from tickwork.api.models import ActionOut, Instant, Strict
from tickwork.api.rules_models import ActionTemplateIn, ConditionIn
from tickwork.changes import Change
from tickwork.engine.failover import FailoverReason
from tickwork.forecast import Bucket
from tickwork.ledger.attempts import AttemptRow
from tickwork.platform.wallclock import local_rendering
from tickwork.recipients.store import StoredRecipient
from tickwork.sequences.model import Campaign, Enrollment
from tickwork.sequences.store import exit_outcome

ChangeKind = Literal[
    "cancel",
    "reschedule",
    "defer",
    "quiet_hours",
    "skip",
    "drop",
    "exit",
    "digest",
    "flush",
    "throttled",
    "retry",
]

# ------------------------------------------------------------------------------ recipients


class QuietWindowIn(Strict):
    """A weekly window in the recipient's zone; an end not after the start runs past
    midnight (21:00-08:00)."""

    days: list[str] = Field(
        default=["mon", "tue", "wed", "thu", "fri", "sat", "sun"], max_length=7,
        examples=[["mon", "tue", "wed", "thu", "fri"]],
    )  # fmt: skip
    start: str = Field(max_length=8, examples=["21:00"])
    end: str = Field(max_length=8, examples=["08:00"])


class RecipientIn(Strict):
    timezone: str = Field(max_length=64, examples=["Asia/Tokyo"])
    quiet_hours: list[QuietWindowIn] = Field(default_factory=list, max_length=21)
    caps: dict[str, int] = Field(
        default_factory=dict,
        description="messages per action type per calendar day in the recipient's zone",
        examples=[{"sms": 2}],
    )
    cap_policy: Literal["defer", "drop"] = Field(
        default="defer",
        description="over the cap: deferred to the next allowed slot, or dropped",
    )


class RecipientOut(BaseModel):
    recipient_id: str
    timezone: str
    quiet_hours: list[dict[str, Any]]
    caps: dict[str, int]
    cap_policy: Literal["defer", "drop"]
    now_local: str
    sent_today: dict[str, int] = Field(description="per channel, in the recipient's local day")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, stored: StoredRecipient, now: datetime, sent: dict[str, int]) -> RecipientOut:
        row = stored.row
        return cls(
            recipient_id=row["recipient_id"], timezone=row["timezone"],
            quiet_hours=row["quiet_hours"], caps=row["caps"], cap_policy=row["cap_policy"],
            now_local=local_rendering(now, ZoneInfo(row["timezone"])), sent_today=sent,
            created_at=row["created_at"], updated_at=row["updated_at"],
        )  # fmt: skip


class RecipientPage(BaseModel):
    items: list[RecipientOut]
    next_cursor: str | None


# ------------------------------------------------------------------------------- campaigns


class StepIn(Strict):
    """One step: `wait` is `{"delay_seconds": N}` after the previous step (the first: after
    the enrollment starts) or `{"day": N, "at": "09:00"}` (day N of the enrollment, local
    time of the recipient). Conditions are checked when the step fires. `action.digest`
    collects the step into the recipient's shared digest for its key and window, and
    `action.limit` limits it per key in the workspace's shared windows (docs/digests.md,
    docs/throttling.md): such a step is decided when it is due."""

    name: str | None = Field(default=None, max_length=200)
    wait: dict[str, Any] = Field(examples=[{"day": 2, "at": "09:00"}])
    action: ActionTemplateIn
    conditions: list[ConditionIn] = Field(default_factory=list, max_length=20)

    def domain(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "wait": self.wait,
            "action": self.action.model_dump(
                include={"action_type", "target_key", "payload", "digest", "limit"},
                exclude_none=True,
            ),
            "conditions": [c.model_dump() for c in self.conditions],
        }
        if self.name is not None:
            body["name"] = self.name
        return body


class CampaignIn(Strict):
    name: str = Field(min_length=1, max_length=200)
    steps: list[StepIn] = Field(min_length=1, max_length=50)
    exit_events: list[str] = Field(
        default_factory=list, max_length=20, examples=[["email.replied", "unsubscribed"]]
    )
    cap_policy: Literal["defer", "drop"] | None = Field(
        default=None, description="overrides the recipient's cap policy for this campaign"
    )


class CampaignOut(BaseModel):
    id: UUID
    name: str
    steps: list[dict[str, Any]]
    exit_events: list[str]
    cap_policy: Literal["defer", "drop"] | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, campaign: Campaign) -> CampaignOut:
        return cls(
            id=campaign.id, name=campaign.name, steps=[s.as_json() for s in campaign.steps],
            exit_events=campaign.exit_events, cap_policy=campaign.cap_policy,  # type: ignore[arg-type]
            created_by=campaign.created_by, created_at=campaign.created_at,
            updated_at=campaign.updated_at,
        )  # fmt: skip


class CampaignPage(BaseModel):
    items: list[CampaignOut]
    next_cursor: str | None


# ----------------------------------------------------------------------------- enrollments


class EnrollIn(Strict):
    recipient_id: str = Field(min_length=1, max_length=200)
    data: dict[str, Any] = Field(default_factory=dict)
    starts_at: Instant | None = Field(
        default=None, description="when day 0 begins (default now), RFC 3339"
    )


class ExitIn(Strict):
    reason: str = Field(default="exited", min_length=1, max_length=500)


class DataIn(Strict):
    data: dict[str, Any]


class EnrollmentStepOut(BaseModel):
    step: int
    action_id: UUID
    status: str
    publish_at: datetime
    original_publish_at: datetime | None
    next_attempt_at: datetime | None
    error_code: str | None
    last_error: str | None


class EnrollmentOut(BaseModel):
    id: UUID
    campaign_id: UUID
    recipient_id: str
    data: dict[str, Any]
    status: Literal["active", "completed", "exited"]
    current_step: int
    current_action_id: UUID | None
    next_send_at: datetime | None
    exit_reason: str | None
    exit_outcome: Literal["cancelled", "sent", "in_flight", "none"] | None = Field(
        description="what became of the pending step at the exit: cancelled, sent (it was"
        " already being sent), in_flight (still being sent), none (nothing was pending)"
    )
    last_error: str | None
    starts_at: datetime
    enrolled_at: datetime
    completed_at: datetime | None
    exited_at: datetime | None
    steps: list[EnrollmentStepOut]

    @classmethod
    def of(cls, e: Enrollment, actions: list[tuple[int, Action]]) -> EnrollmentOut:
        outcome = exit_outcome(e, actions)
        return cls(
            id=e.id, campaign_id=e.campaign_id, recipient_id=e.recipient_id, data=e.data,
            status=e.status, current_step=e.current_step, current_action_id=e.current_action_id,
            next_send_at=e.next_send_at, exit_reason=e.exit_reason,
            exit_outcome=outcome,  # type: ignore[arg-type]
            last_error=e.last_error, starts_at=e.starts_at, enrolled_at=e.enrolled_at,
            completed_at=e.completed_at, exited_at=e.exited_at,
            steps=[
                EnrollmentStepOut(
                    step=i, action_id=a.id, status=a.status, publish_at=a.publish_at,
                    original_publish_at=a.original_publish_at,
                    next_attempt_at=a.next_attempt_at, error_code=a.error_code,
                    last_error=a.last_error,
                )
                for i, a in actions
            ],
        )  # fmt: skip


class EnrollmentPage(BaseModel):
    items: list[EnrollmentOut]
    next_cursor: str | None


# -------------------------------------------------------------------- changes and forecast


class ChangeOut(BaseModel):
    id: int
    action_id: UUID | None
    enrollment_id: UUID | None
    kind: ChangeKind
    actor: str = Field(description="the user who made it, or system:<what>")
    reason: str | None
    old_at: datetime | None
    new_at: datetime | None
    new_action_id: UUID | None = Field(description="a reschedule's new action")
    created_at: datetime

    @classmethod
    def of(cls, c: Change) -> ChangeOut:
        return cls(
            id=c.id, action_id=c.action_id, enrollment_id=c.enrollment_id,
            kind=c.kind,  # type: ignore[arg-type]
            actor=c.actor, reason=c.reason, old_at=c.old_at, new_at=c.new_at,
            new_action_id=c.new_action_id, created_at=c.created_at,
        )  # fmt: skip


class ChangePage(BaseModel):
    items: list[ChangeOut]
    next_cursor: str | None


AttemptOutcome = Literal["delivered", "rejected", "transient", "ambiguous", "stuck"]
AttemptResolution = Literal["delivered", "requeued", "unresolved"]


class DeliveryOut(BaseModel):
    """What the provider said of the message after it accepted it (its status callbacks),
    the highest state reached: a late or repeated callback never moves it back."""

    status: Literal["sent", "delivered", "undelivered", "bounced", "complained"] = Field(
        description="sent (handed on), delivered, undelivered, bounced (see bounce),"
        " complained (marked as spam)"
    )
    bounce: Literal["hard", "soft"] | None = Field(
        default=None, description="a bounce's kind: hard (the address is suppressed) or soft"
    )
    at: datetime | None = Field(description="the provider's time for it (else when it came)")
    detail: str | None = Field(description="the provider's short, sanitized reason")

    @classmethod
    def of(cls, a: AttemptRow) -> DeliveryOut | None:
        if a.delivery_status is None:
            return None
        return cls(status=a.delivery_status, bounce=a.delivery_bounce,  # type: ignore[arg-type]
                   at=a.delivery_at, detail=a.delivery_detail)  # fmt: skip


class AttemptOut(BaseModel):
    """One provider call, from the delivery ledger. Every field is sanitized where it is
    written (codes, the provider's message id, a short excerpt cleaned of secrets); no
    receiver's body or credential is ever stored, so members and admins see the same."""

    attempt: int
    started_at: datetime
    finished_at: datetime | None
    latency_ms: int | None
    outcome: AttemptOutcome = Field(
        description="delivered, rejected (for good), transient (provably not delivered),"
        " ambiguous (may have arrived) or stuck (no outcome reached the row)"
    )
    provider_code: str | None = Field(description="the provider's refusal code, if any")
    provider_message_id: str | None
    excerpt: str | None = Field(description="a short, sanitized excerpt of the answer")
    resolution: AttemptResolution | None = Field(
        description="what the resolver made of an ambiguous or stuck attempt"
    )
    resolved_at: datetime | None
    resolution_detail: str | None
    provider: str | None = Field(
        default=None,
        description="the provider called, for an action type with fallback providers (null:"
        " the type's own provider, for types without fallbacks and attempts recorded before"
        " providers were)",
    )
    failover_reason: FailoverReason | None = Field(
        default=None,
        description="why the call went to a fallback provider rather than the first:"
        " threshold (the first answered this row transiently too often) or circuit_open (the"
        " first's circuit was open); null when the first provider was called, or the one an"
        " earlier attempt may have reached",
    )
    delivery: DeliveryOut | None = Field(
        default=None, description="what the provider said of it later (status callbacks)"
    )

    @classmethod
    def of(cls, a: AttemptRow) -> AttemptOut:
        return cls.model_validate(
            {name: getattr(a, name) for name in cls.model_fields if name != "delivery"}
            | {"delivery": DeliveryOut.of(a)}
        )


class ActionDetailOut(ActionOut):
    changes: list[ChangeOut] = Field(description="its change log, oldest first")
    attempts: list[AttemptOut] = Field(
        default_factory=list, description="its provider calls (the delivery ledger), oldest first"
    )
    delivery: DeliveryOut | None = Field(
        default=None,
        description="what happened after `published`: the provider's later word on the"
        " message (delivered, bounced, complained, undelivered), from its status callbacks;"
        " null when it said nothing (or sends nothing back)",
    )
    digest_id: UUID | None = Field(
        default=None,
        description="the digest this action sends (GET /v1/digests/{id}: its items and window)",
    )


class ResolveOut(BaseModel):
    verdict: Literal["delivered", "requeued", "unresolved", "raced"] = Field(
        description="delivered: published with the provider's id; requeued: the provider has"
        " no such message, sent once more; unresolved: it could not tell (see detail);"
        " raced: the row changed meanwhile"
    )
    detail: str
    action: ActionOut


class BucketOut(BaseModel):
    action_type: str
    connection_id: UUID | None = Field(description="the connection it is sent through, if any")
    hour: datetime
    due: int
    limit_per_hour: int | None = Field(
        description="the most the dispatchers send of these in an hour: the lowest of the"
        " action type's and the connection's rate limits, each scaled to an hour; null"
        " when none applies"
    )
    quota_per_hour: int | None = Field(description="the same as limit_per_hour (older name)")
    over_quota: bool = Field(description="more are due in the hour than its limit sends")

    @classmethod
    def of(cls, b: Bucket) -> BucketOut:
        return cls(action_type=b.action_type, connection_id=b.connection_id, hour=b.hour,
                   due=b.due, limit_per_hour=b.limit_per_hour,
                   quota_per_hour=b.quota_per_hour, over_quota=b.over_quota)  # fmt: skip


class ForecastOut(BaseModel):
    start: datetime
    end: datetime
    hours: int
    buckets: list[BucketOut] = Field(description="queued actions due per action type and hour")
    totals: dict[str, int] = Field(description="per action type")
