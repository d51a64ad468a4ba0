"""`{{ unsubscribe_url }}` in payload templates (rules, campaign steps), and the payload's
`unsubscribe` scope resolved to the action's own campaign or rule.

The link is signed for the message's recipient, which is itself rendered (`to` is usually a
template): it is known only after the render. So the payload is rendered with a stand-in
for `unsubscribe_url` (`context`), and the stand-in is replaced by the link for the rendered
recipient afterwards (`fill`). A template should use the variable as it is (in an `href`,
in text); a filter that changes it (`upper`) changes the stand-in too, and the link is lost.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, Final
from uuid import UUID

from tickwork.platform.config import Settings
from tickwork.platform.errors import InputError
from tickwork.providers.unsubscribe import asked_scope, single_recipient
from tickwork.rules.templating import RenderError
from tickwork.suppression import links

NAME: Final = "unsubscribe_url"
# Unguessable per process, so that no tenant data renders into it by chance; letters,
# digits and dashes only, so that HTML escaping and JSON leave it as it is.
_STAND_IN: Final = f"tickwork-unsubscribe-url-{secrets.token_hex(12)}"


def context(base: Mapping[str, Any]) -> dict[str, Any]:
    """The render context of a payload, with `unsubscribe_url` standing in for the link."""
    return {**base, NAME: _STAND_IN}


def _uses(value: Any) -> bool:
    if isinstance(value, str):
        return _STAND_IN in value
    if isinstance(value, Mapping):
        return any(_uses(v) for v in value.values())
    if isinstance(value, list):
        return any(_uses(v) for v in value)
    return False


def _replace(value: Any, link: str) -> Any:
    if isinstance(value, str):
        return value.replace(_STAND_IN, link)
    if isinstance(value, Mapping):
        return {k: _replace(v, link) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, link) for v in value]
    return value


def fill(
    payload: Any,
    settings: Settings,
    workspace_id: UUID,
    *,
    campaign_id: UUID | None = None,
    rule_id: UUID | None = None,
    field: str = "payload",
) -> Any:
    """The rendered payload with its `unsubscribe.scope` resolved (`campaign`, `rule`: the
    action's own) and every `unsubscribe_url` made the link for its one recipient, scoped as
    the payload asks, else to the action's campaign or rule. RenderError when the payload
    uses the link but goes to several addresses, or the stack cannot make links."""
    if not isinstance(payload, dict):
        return payload
    asked = asked_scope(payload)
    if isinstance(payload.get("unsubscribe"), dict) and asked in ("campaign", "rule"):
        # Only the two words are resolved: any other value is left as the tenant wrote it
        # (an email payload's schema checks it; another provider's payload is its own).
        resolved = links.resolve_scope(asked, campaign_id=campaign_id, rule_id=rule_id)
        payload = {**payload, "unsubscribe": {**payload["unsubscribe"], "scope": resolved}}
    if not _uses(payload):
        return payload
    address = single_recipient(payload)
    if address is None:
        raise RenderError(
            f"{field}: {{{{ unsubscribe_url }}}} is a link for one recipient: the message must"
            " go to one address (one to, no cc or bcc)",
            field=field,
        )
    own = "campaign" if campaign_id is not None else "rule"
    scope = links.resolve_scope(asked or own, campaign_id=campaign_id, rule_id=rule_id)
    try:
        link = links.url(settings, workspace_id, "email", address, scope)
    except InputError as exc:  # no link can be made here, or the address is not one
        raise RenderError(
            f"{field}: {{{{ unsubscribe_url }}}}: {exc.message}", field=field
        ) from exc
    return _replace(payload, link)
