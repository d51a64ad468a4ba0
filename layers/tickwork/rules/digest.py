"""An event rule with a `digest`: its firings are items of one action per (rule, recipient,
target, key) and window, through tickwork.digests, instead of one action each; a `shared`
digest is the recipient's for the key and window, joined by every rule and drip step that
names them.

The target, recipient and key are rendered from the event that fires; the payload is
rendered again on every item, from the latest event's context with the digest's `items`,
`count`, `first`, `last` and `digest`. The digest's first action is a ledger entry of
its rule like any other (its idempotency key is `digest:<id>`; a shared digest's belongs to
no rule); a later item makes no new action and is reported as skipped with reason
`digested`.

A rule's per-key `limit` counts the digests it opens, not their items: a firing that would
open a new digest when its key already had `count` in the window is dropped
(`rate_limited`), one that joins an open digest makes no message and is always collected.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from tickwork.actions.model import NewAction
from tickwork.digests.model import SHARED_ACTION_SOURCE, Item, item_key
from tickwork.digests.store import Collect, add_item, shared
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query
from tickwork.recipients.policy import zone_for
from tickwork.rules import unsubscribe_url
from tickwork.rules.conditions import first_failing
from tickwork.rules.metering import RenderBudget
from tickwork.rules.model import SOURCE, Failed, Fired, Skipped
from tickwork.rules.produce import Firing, record_failure, take_key
from tickwork.rules.templating import RenderError

_INSERT_LEDGER = query("insert_rule_action")


class _NoRoom(Exception):
    """The firing would open a digest and its key had its limit's count of them."""


def collect_firing(
    conn: Connection,
    workspace_id: UUID,
    firing: Firing,
    event_id: str | None,
    settings: Settings,
    now: datetime,
    created_by: str | None,
    workspace_zone: str,
    budget: RenderBudget | None = None,
) -> Fired | Skipped | Failed:
    """Add one firing of a digest rule to its digest; never raises for the rule's own
    problems (a condition, a template, a value the action type refuses). `event_id`: the
    event's own id, which makes a second delivery a duplicate (else its content does)."""
    compiled, rule = firing.rule, firing.rule.rule
    assert compiled.digest is not None
    why_not = first_failing(compiled.conditions, firing.context)
    if why_not is not None:
        return Skipped(rule.id, "conditions", why_not)
    try:
        # The group is rendered from this event; the payload from this event's context and
        # every item of the digest (`compose`).
        target = str(compiled.target.render(firing.context, budget))
        recipient = (
            compiled.recipient.render(firing.context, budget) if compiled.recipient else None
        )

        limit = compiled.limit
        limit_key = (
            str(compiled.limit_key.render(firing.context, budget) if compiled.limit_key
                else recipient)
            if limit is not None else ""
        )  # fmt: skip
        spec = compiled.digest
        source = SHARED_ACTION_SOURCE if spec.shared else SOURCE

        def compose(view: dict[str, Any]) -> NewAction:
            payload = unsubscribe_url.fill(
                compiled.payload.render(unsubscribe_url.context(firing.context | view), budget),
                settings, workspace_id, rule_id=rule.id,
            )  # fmt: skip
            return NewAction(
                action_type=rule.action_type, target_key=target, publish_at=now,
                payload=payload, source=source, created_by=created_by, recipient_id=recipient,
                transactional=rule.transactional,
            )  # fmt: skip

        key = str(compiled.digest_key.render(firing.context, budget)) if compiled.digest_key else ""
        timezone, _ = zone_for(conn, workspace_id, given=None, recipient_id=recipient,
                               workspace_zone=workspace_zone)  # fmt: skip
        event = firing.context.get("event", {})
        data: dict[str, Any] = {
            "context": firing.context.get("context"), "event": event, "source": "rule",
        }  # fmt: skip
        own_key = item_key(event_id, event | {"context": firing.context.get("context")})
        if spec.shared:
            # Other rules collect the same event into the same digest: the item is this
            # rule's firing of it.
            collect = shared(workspace_id, rule.action_type, spec.window, target, key,
                             recipient, timezone, rule.transactional)  # fmt: skip
            data["rule"] = firing.context.get("rule")
            own_key = item_key(f"rule:{rule.id}:{own_key}", None)
        else:
            collect = Collect(
                workspace_id, SOURCE, rule.id, spec.window, target, key[:200],
                recipient, timezone, rule.transactional,
            )  # fmt: skip
        item = Item(
            own_key, data,
            datetime.fromisoformat(event["occurred_at"]) if "occurred_at" in event else now,
        )  # fmt: skip
        with conn.transaction():
            added = add_item(conn, collect, item, compose, settings, now)
            # The limit counts digests: one more only when this firing opens one.
            if (
                added.outcome == "opened"
                and limit is not None
                and not take_key(conn, workspace_id, rule.id, limit, limit_key, now)
            ):
                raise _NoRoom  # fmt: skip
            if added.outcome == "opened" and not spec.shared:
                assert added.action_id is not None
                conn.execute(
                    _INSERT_LEDGER,
                    {"action_id": added.action_id, "workspace_id": workspace_id,
                     "rule_id": rule.id, "kind": "event",
                     "idempotency_key": f"digest:{added.digest_id}",
                     "entity_type": None, "entity_id": None, "reference": None,
                     "reference_at": None, "context": Jsonb(firing.context)},
                )  # fmt: skip
    except _NoRoom:
        assert limit is not None
        return Skipped(rule.id, "rate_limited",
                       f"its key had {limit.words()} digests (the excess is dropped)")  # fmt: skip
    except RenderError as exc:
        record_failure(conn, rule, exc.message)
        return Failed(rule.id, rule.name, exc.field, exc.message)
    except InputError as exc:
        field = str(exc.details.get("field") or "action")
        message = f"the rendered action was refused: {exc.message}"
        record_failure(conn, rule, message)
        return Failed(rule.id, rule.name, field, message)
    if added.outcome == "opened":
        assert added.action_id is not None
        assert added.publish_at is not None
        return Fired(rule.id, added.action_id, added.publish_at, f"digest:{added.digest_id}")
    if added.outcome == "duplicate":
        return Skipped(rule.id, "duplicate", f"already in digest {added.digest_id}",
                       added.action_id)  # fmt: skip
    return Skipped(
        rule.id,
        "digested",
        f"added to digest {added.digest_id} ({added.count} items)",
        added.action_id,
    )
