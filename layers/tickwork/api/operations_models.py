"""Bodies of /v1/operations (admins): the operations view and dead-letter redrive."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from tickwork import operations
from tickwork.api.models import Strict
from tickwork.operations import FinishedStatus, WarningCode
from tickwork.platform.queues.admin import QueueSource, RedriveMethod


class BucketOut(BaseModel):
    start: datetime = Field(description="the bucket's start (UTC); it lasts `bucket_seconds`")
    due: int = Field(description="rows whose publish_at falls in the bucket (not those"
                     " cancelled before it)")  # fmt: skip
    published: int = Field(description="rows published in the bucket")
    failed: int = Field(description="rows failed in the bucket")
    backlog: int = Field(
        description="at the bucket's end (now, for the last): rows whose due time had passed"
        " and that had not finished"
    )
    lag_sample: int = Field(description="rows published or failed in the bucket")
    lag_p50_ms: float | None = Field(
        description="median of finished_at - publish_at over those rows, ms; null without any"
    )
    lag_p99_ms: float | None = Field(description="99th percentile of the same, ms")

    @classmethod
    def of(cls, bucket: operations.Bucket) -> BucketOut:
        return cls(
            start=bucket.start, due=bucket.due, published=bucket.published,
            failed=bucket.failed, backlog=bucket.backlog, lag_sample=bucket.lag_sample,
            lag_p50_ms=bucket.lag_p50_ms, lag_p99_ms=bucket.lag_p99_ms,
        )  # fmt: skip


class SeriesOut(BaseModel):
    action_type: str
    backlog_at_start: int = Field(description="the backlog at the window's start")
    buckets: list[BucketOut] = Field(description="oldest first; the last is the current one")


class OutcomeOut(BaseModel):
    action_type: str
    status: FinishedStatus
    error_code: str | None
    count: int


class QueueOut(BaseModel):
    action_type: str
    visible: int | None = Field(description="messages waiting to be received")
    in_flight: int | None = Field(description="messages received and not yet deleted")
    delayed: int | None = Field(description="messages not yet due (DelaySeconds)")
    dead_letters: int | None = Field(description="messages in the dead-letter queue")
    error: str | None = Field(description="why the depths cannot be read (then all null)")


class QueuesOut(BaseModel):
    source: QueueSource | None = Field(
        description="SQS (AWS) or the local runtime's in-process queues; null: unreachable"
    )
    stack_wide: bool = Field(
        default=True,
        description="the queues are the stack's, shared by every workspace: their numbers"
        " are not this workspace's alone",
    )
    by_action_type: list[QueueOut]


class SwitchesOut(BaseModel):
    dispatch_enabled: bool = Field(description="the kill switch (TICKWORK_DISPATCH_ENABLED)")
    paused_action_types: list[str] = Field(description="TICKWORK_PAUSED_ACTION_TYPES")


class ClockOut(BaseModel):
    database: datetime = Field(description="the database's clock_timestamp()")
    function: datetime = Field(description="this function's clock at the same moment")
    skew_seconds: float = Field(description="database - function; positive: database ahead")
    tolerance_seconds: float = Field(description="TICKWORK_CLOCK_SKEW_TOLERANCE_SECONDS")


class WarningOut(BaseModel):
    code: WarningCode
    message: str = Field(description="what is wrong and what to do, in plain words")
    action_type: str | None = Field(description="the action type it is about, if one")


class OperationsOut(BaseModel):
    generated_at: datetime = Field(description="the database's now(): the window's end")
    hours: int
    bucket_seconds: int = Field(
        description="600 up to 6 hours, 1800 up to 24, 3600 beyond; buckets are aligned to"
        " the clock (UTC)"
    )
    start: datetime = Field(description="the first bucket's start")
    end: datetime = Field(description="the window's end (generated_at)")
    series: list[SeriesOut] = Field(description="per action type: this workspace's rows")
    outcomes: list[OutcomeOut] = Field(
        description="this workspace's rows finished in the window, by type, status and code"
    )
    queues: QueuesOut
    switches: SwitchesOut
    clock: ClockOut
    warnings: list[WarningOut]

    @classmethod
    def of(cls, found: operations.Operations, tolerance: float) -> OperationsOut:
        return cls(
            generated_at=found.generated_at,
            hours=found.hours,
            bucket_seconds=found.bucket_seconds,
            start=found.start,
            end=found.generated_at,
            series=[
                SeriesOut(
                    action_type=s.action_type,
                    backlog_at_start=s.backlog_at_start,
                    buckets=[BucketOut.of(b) for b in s.buckets],
                )
                for s in found.series
            ],
            outcomes=[
                OutcomeOut(
                    action_type=o.action_type,
                    status=o.status,
                    error_code=o.error_code,
                    count=o.count,
                )
                for o in found.outcomes
            ],
            queues=QueuesOut(
                source=found.queues_source,
                by_action_type=[
                    QueueOut(
                        action_type=q.action_type,
                        visible=q.depth.visible if q.depth else None,
                        in_flight=q.depth.in_flight if q.depth else None,
                        delayed=q.depth.delayed if q.depth else None,
                        dead_letters=q.depth.dead_letters if q.depth else None,
                        error=q.error,
                    )
                    for q in found.queues
                ],
            ),
            switches=SwitchesOut(
                dispatch_enabled=found.dispatch_enabled,
                paused_action_types=found.paused_action_types,
            ),
            clock=ClockOut(
                database=found.clock.database,
                function=found.clock.function,
                skew_seconds=round(found.clock.skew_seconds, 4),
                tolerance_seconds=tolerance,
            ),
            warnings=[
                WarningOut(code=w.code, message=w.message, action_type=w.action_type)
                for w in found.warnings
            ],
        )


class RedriveIn(Strict):
    action_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="one action type's dead-letter queue; absent: every type's",
        examples=["webhook"],
    )


class RedrivenOut(BaseModel):
    action_type: str
    method: RedriveMethod | None = Field(
        description="move_task: SQS started a message move task (it moves them in the"
        " background); by_hand: moved here (an endpoint without move tasks); in_process: the"
        " local runtime's queues; none: nothing was waiting; null: it failed (`error`)"
    )
    moved: int = Field(
        description="messages moved, or for move_task how many were waiting when it started"
    )
    task_handle: str | None = Field(description="the SQS move task's handle (move_task)")
    error: str | None = Field(description="why this queue's dead letters were not moved")


class RedriveOut(BaseModel):
    source: QueueSource | None
    redriven: list[RedrivenOut]
