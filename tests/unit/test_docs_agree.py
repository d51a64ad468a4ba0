"""The docs name what the code answers: suppression sources, skip reasons, the routes that
take no token. Each page is read as a user reads it, and held to the code's own names."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_template_contract import source_template
from tickwork.api import unsubscribe
from tickwork.api.rules_models import SkippedOut
from tickwork.feedback.store import suppression_source

DOCS = Path(__file__).resolve().parents[2] / "docs"

# What each provider's callbacks suppress (tickwork.feedback: postmark, sns for SES, twilio).
CALLBACK_SUPPRESSIONS = [
    ("postmark", "hard_bounce"),
    ("postmark", "complaint"),
    ("ses", "hard_bounce"),
    ("ses", "complaint"),
    ("twilio", "stop_reply"),
]


def test_the_suppression_page_names_every_source_the_code_writes() -> None:
    page = (DOCS / "suppression.md").read_text()
    named = set(re.findall(r"`([a-z]+:[a-z]+:<connection id>|user:<subject>|link)`", page))
    written = {suppression_source(p, "<connection id>", r) for p, r in CALLBACK_SUPPRESSIONS}
    assert written | {"user:<subject>", unsubscribe.SOURCE} == named


def test_every_skip_reason_the_docs_name_is_one_the_api_answers() -> None:
    description = SkippedOut.model_fields["reason"].description or ""
    answered = set(re.findall(r"[a-z_]+", description))
    for page in ("throttling.md", "rules.md", "digests.md"):
        named = set(re.findall(r"reason `([a-z_]+)`", (DOCS / page).read_text()))
        assert named <= answered, (page, named - answered)
    # the repeat of a firing whose action was sent (the one the page once called duplicate)
    assert "`already_sent`" in (DOCS / "throttling.md").read_text()


def test_the_api_page_names_every_route_that_takes_no_token() -> None:
    template = source_template()
    public = {
        event["Properties"]["Path"]
        for resource in template["Resources"].values()
        if isinstance(resource, dict) and resource.get("Type") == "AWS::Serverless::Function"
        for event in resource["Properties"].get("Events", {}).values()
        if event["Type"] == "HttpApi"
        and event["Properties"].get("Auth", {}).get("Authorizer") == "NONE"
    }
    assert public, "the template has routes without a token"
    page = (DOCS / "api" / "index.md").read_text()
    for path in public:
        # /console and /console/{proxy+} are the console's files, named as `/console/`
        shown = "/console/" if path.startswith("/console") else path
        assert shown in page, f"{path} takes no token, and docs/api/index.md does not say so"
