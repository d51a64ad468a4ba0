"""/v1/forecast: queued actions due per action type and hour, against configured quotas."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork import forecast
from tickwork.api.models import responses
from tickwork.api.scope import scope
from tickwork.api.sequences_models import BucketOut, ForecastOut

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]


@router.get(
    "/v1/forecast",
    summary="What is due per action type and hour over the next hours",
    responses=responses(200, ForecastOut, "buckets by hour (UTC) and action type"),
)
def get_forecast(
    workspace: WorkspaceHeader,
    hours: Annotated[int, Query(ge=1, le=forecast.MAX_HOURS)] = 24,
) -> ForecastOut:
    request = scope(router)
    buckets = forecast.forecast(
        request.conn, request.caller.workspace_id, hours, request.runtime.settings, request.now
    )
    totals: dict[str, int] = {}
    for b in buckets:
        totals[b.action_type] = totals.get(b.action_type, 0) + b.due
    return ForecastOut(
        start=request.now, end=request.now + timedelta(hours=hours), hours=hours,
        buckets=[BucketOut.of(b) for b in buckets], totals=totals,
    )  # fmt: skip
