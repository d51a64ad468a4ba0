"""What a drip step must pass when it fires (called by claim-time admission): its
enrollment is still active, and its conditions hold on the enrollment's data as it is now."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.actions.model import Claimed
from tickwork.platform.db import Connection
from tickwork.platform.sql import query
from tickwork.rules.conditions import first_failing, parse_conditions
from tickwork.sequences.model import EXITED, ROOTS, SKIPPED, context

_STEPS = query("steps_of_actions")


@dataclass(frozen=True)
class StepVerdict:
    skip: tuple[str, str] | None  # (error_code, reason) when the step must not be sent
    cap_policy: str | None  # the campaign's, overriding the recipient's


def check_steps(conn: Connection, steps: Sequence[Claimed]) -> dict[UUID, StepVerdict]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_STEPS, {"ids": [a.id for a in steps]}).fetchall()
    verdicts: dict[UUID, StepVerdict] = {}
    for row in rows:
        policy = row["cap_policy"]
        if row["status"] != "active":
            why = f"not sent: the enrollment is {row['status']}"
            verdicts[row["action_id"]] = StepVerdict((EXITED, why), policy)
            continue
        conditions = parse_conditions(row["conditions"] or [], ROOTS)
        ctx = context(
            row["enrollment_id"],
            row["campaign_id"],
            row["recipient_id"],
            row["data"],
            row["timezone"],
            int(row["step_index"]),
        )
        failing = first_failing(conditions, ctx)
        skip = (SKIPPED, f"skipped: {failing}") if failing is not None else None
        verdicts[row["action_id"]] = StepVerdict(skip, policy)
    return verdicts
