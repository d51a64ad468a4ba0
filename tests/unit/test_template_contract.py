"""Contract tests over the stack as CloudFormation would see it: template.yaml with its
Fn::ForEach expanded (as AWS::LanguageExtensions does) and then transformed by SAM's own
translator (aws-sam-translator), so the assertions are about the generated Lambda
functions, roles, event source mappings and alarms, not about the SAM shorthand."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from boto3.session import Session
from cfnlint.decode.cfn_yaml import load as load_yaml
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

from tickwork.api.callbacks import callback_secret_ref
from tickwork.connections.secrets import PROVIDER_TAG, SecretsManagerStore
from tickwork.platform.config import ACTION_TYPES_PARAMETER_ENV, ENV_PREFIX, Settings
from tickwork.providers import ProviderRegistry
from tickwork.providers.unsubscribe import PROVIDERS as UNSUBSCRIBE_PROVIDERS
from tickwork.suppression import links

ROOT = Path(__file__).resolve().parents[2]
LOOP = "Fn::ForEach::PerActionType"
APPLICATION_FUNCTIONS = {
    "ApiFunction",
    "PublicFunction",
    "TickFunction",
    "ReconcilerFunction",
    "DripsFunction",
    "RollupFunction",
    "ExpanderFunction",
    "ResolverFunction",
    "RetentionFunction",
}
SCHEDULED = {
    "TickFunction",
    "ReconcilerFunction",
    "DripsFunction",
    "RollupFunction",
    "ExpanderFunction",
    "ResolverFunction",
    "RetentionFunction",
}
# Each cron alone, so a failure in one is not a failure of the others: its own function,
# schedule, log group, "not running" alarm (on the elapsed metric it emits) and errors alarm.
CRON_FUNCTIONS = {
    "TickFunction": ("functions/tick/", "TickElapsed"),
    "ReconcilerFunction": ("functions/reconciler/", "ReconcileElapsed"),
    "DripsFunction": ("functions/drips/", "DripsElapsed"),
    "RollupFunction": ("functions/rollup/", "RollupElapsed"),
    "ExpanderFunction": ("functions/expander/", "ExpanderElapsed"),
    "ResolverFunction": ("functions/resolver/", "ResolveElapsed"),
    "RetentionFunction": ("functions/retention/", "RetentionElapsed"),
}
SENDERS = [
    "TickFunction",
    "ApiFunction",
    "ReconcilerFunction",
    "DripsFunction",
    "ExpanderFunction",
    "ResolverFunction",
]
# What every function's code reads (tickwork.config.Settings, tickwork.observability).
REQUIRED_ENV = {
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "TICKWORK_DATABASE_SECRET_ARN",
    "TICKWORK_DATABASE_HOST",
    "TICKWORK_ACTION_TYPES_PARAMETER",
    "TICKWORK_QUEUE_URL_PREFIX",
}


def _substitute(node: Any, var: str, value: str) -> Any:
    if isinstance(node, dict):
        if node == {"Ref": var}:
            return value
        return {_substitute(k, var, value): _substitute(v, var, value) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(item, var, value) for item in node]
    if isinstance(node, str):
        return node.replace("${" + var + "}", value)
    return node


def _resolve_literal_subs(node: Any, logical_ids: set[str]) -> Any:
    """What LanguageExtensions leaves for CloudFormation, made plain for the assertions:
    GetAtt [Sub "X", attr] -> GetAtt [X, attr], and Sub "${X}" of a resource -> Ref X."""
    if isinstance(node, dict):
        if set(node) == {"Fn::GetAtt"} and isinstance(node["Fn::GetAtt"][0], dict):
            name = node["Fn::GetAtt"][0]["Fn::Sub"]
            assert "${" not in name
            return {"Fn::GetAtt": [name, node["Fn::GetAtt"][1]]}
        if set(node) == {"Fn::Sub"} and isinstance(node["Fn::Sub"], str):
            whole = re.fullmatch(r"\$\{(\w+)\}", node["Fn::Sub"])
            if whole and whole.group(1) in logical_ids:
                return {"Ref": whole.group(1)}
        return {k: _resolve_literal_subs(v, logical_ids) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_literal_subs(item, logical_ids) for item in node]
    return node


def _resolve_lookups(node: Any, mappings: dict[str, Any]) -> Any:
    """Fn::FindInMap with literal keys (and a DefaultValue), and Fn::Select of a literal
    index, resolved as LanguageExtensions resolves them once Fn::ForEach has put the type's
    name in."""
    if isinstance(node, dict):
        node = {k: _resolve_lookups(v, mappings) for k, v in node.items()}
        lookup = node.get("Fn::FindInMap")
        if set(node) == {"Fn::FindInMap"} and all(isinstance(k, str) for k in lookup[:3]):
            default = lookup[3]["DefaultValue"] if len(lookup) > 3 else None
            return mappings[lookup[0]].get(lookup[1], {}).get(lookup[2], default)
        selected = node.get("Fn::Select")
        if set(node) == {"Fn::Select"} and isinstance(selected[0], (str, int)):
            return selected[1][int(selected[0])]
        return node
    if isinstance(node, list):
        return [_resolve_lookups(item, mappings) for item in node]
    return node


def source_template() -> dict[str, Any]:
    return json.loads(json.dumps(load_yaml(str(ROOT / "template.yaml"))))


def action_type_list(template: dict[str, Any]) -> list[str]:
    var, names, _ = template["Resources"][LOOP]
    assert var == "ActionType"
    assert isinstance(names, list), "the action types must be a literal list (SAM CLI 1.170)"
    return names


def expand_for_each(template: dict[str, Any]) -> dict[str, Any]:
    resources = dict(template["Resources"])
    var, names, body = resources.pop(LOOP)
    for name in names:
        for key, resource in body.items():
            expanded = _substitute(resource, var, name)
            text = json.dumps(expanded)
            assert "${" + var + "}" not in text
            assert "&{" not in text
            resources[key.replace("${" + var + "}", name)] = expanded
    assert not any(key.startswith("Fn::ForEach") for key in resources)
    resources = _resolve_lookups(resources, template["Mappings"])
    return {**template, "Resources": _resolve_literal_subs(resources, set(resources))}


@pytest.fixture(scope="module")
def source() -> dict[str, Any]:
    return source_template()


@pytest.fixture(scope="module")
def stack(source) -> dict[str, Any]:
    expanded = expand_for_each(source)
    # LanguageExtensions is applied above; the SecretsManager transform only expands the
    # hosted rotation functions, which CloudFormation builds itself.
    expanded["Transform"] = "AWS::Serverless-2016-10-31"
    # As `sam package` leaves it: local code paths become uploaded artifacts.
    for name, resource in expanded["Resources"].items():
        for key in ("CodeUri", "ContentUri"):
            if key in resource.get("Properties", {}):
                resource["Properties"][key] = f"s3://tickwork-artifacts/{name}.zip"
    # No AWS call: a region for the pseudo parameters, no IAM lookup of managed policies.
    translator = Translator(None, Parser(), boto_session=Session(region_name="us-east-1"))
    transformed = translator.translate(expanded, {}, get_managed_policy_map=lambda: {})
    return transformed["Resources"]


@pytest.fixture(scope="module")
def types(source) -> list[str]:
    return action_type_list(source)


def of_type(stack: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in stack.items() if r["Type"] == kind}


def refs(node: Any) -> set[str]:
    """Logical ids a node refers to (Ref, GetAtt, Sub)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                found.add(value)
            elif key == "Fn::GetAtt":
                found.add(value[0] if isinstance(value, list) else value.split(".")[0])
            elif key == "Fn::Sub":
                text = value if isinstance(value, str) else value[0]
                found |= {m.split(".")[0] for m in re.findall(r"\$\{([\w.:]+)\}", text)}
                found |= refs(value)
            else:
                found |= refs(value)
    elif isinstance(node, list):
        for item in node:
            found |= refs(item)
    return found


def depends_on(resource: dict[str, Any]) -> set[str]:
    value = resource.get("DependsOn", [])
    return {value} if isinstance(value, str) else set(value)


# --------------------------------------------------------------------- the migration


def test_every_application_function_waits_for_the_schema(stack, types):
    functions = of_type(stack, "AWS::Lambda::Function")
    expected = APPLICATION_FUNCTIONS | {f"{t}Dispatcher" for t in types} | {"MigrateFunction"}
    assert set(functions) == expected
    for name, function in functions.items():
        if name == "MigrateFunction":
            assert "SchemaMigration" not in depends_on(function)
        else:
            assert "SchemaMigration" in depends_on(function), name


def test_the_migration_starts_after_every_queue_so_a_typo_fails_at_once(stack, types):
    queues = {f"{t}Queue" for t in types}
    assert queues <= set(of_type(stack, "AWS::SQS::Queue"))
    assert queues <= depends_on(stack["SchemaMigration"])


def test_the_migration_answers_within_its_service_timeout(stack):
    migration = stack["SchemaMigration"]["Properties"]
    function = stack["MigrateFunction"]["Properties"]
    assert refs(migration["ServiceToken"]) == {"MigrateFunction"}
    assert function["Timeout"] < migration["ServiceTimeout"] < 3600
    # SAM names each layer version TickworkLayer<content hash>: a new hash, a new version.
    (layer,) = refs(migration["LayerVersion"])
    assert layer.startswith("TickworkLayer")
    assert stack[layer]["Type"] == "AWS::Lambda::LayerVersion"
    # The migration reruns (and revalidates) when the action types change.
    assert refs(migration["ActionTypes"]) == {"ActionTypesParameter"}
    # It waits for the S3 endpoint its answer goes through, when the stack makes one.
    assert "S3Endpoint" in refs(migration["Endpoints"])
    # Migrations go to the instance, not the proxy (the advisory lock would pin).
    env = function["Environment"]["Variables"]
    assert refs(env["TICKWORK_DATABASE_HOST"]) == {"Database"}
    assert env["TICKWORK_DATABASE_HOST"]["Fn::GetAtt"][1] == "Endpoint.Address"
    assert refs(env["TICKWORK_API_DATABASE_SECRET_ARN"]) == {"ApiDatabaseSecret"}


# ------------------------------------------------------------------- per action type


def test_every_listed_action_type_has_its_queue_dlq_dispatcher_and_alarms(stack, types):
    assert types, "at least one action type"
    mappings = of_type(stack, "AWS::Lambda::EventSourceMapping")
    for t in types:
        queue = stack[f"{t}Queue"]["Properties"]
        assert queue["QueueName"] == {"Fn::Sub": f"tickwork-${{Stage}}-{t}"}
        assert refs(queue["RedrivePolicy"]["deadLetterTargetArn"]) == {f"{t}DeadLetterQueue"}
        assert stack[f"{t}DeadLetterQueue"]["Type"] == "AWS::SQS::Queue"
        # Visibility covers six dispatcher timeouts, as Lambda advises.
        dispatcher = stack[f"{t}Dispatcher"]["Properties"]
        assert queue["VisibilityTimeout"] >= 6 * dispatcher["Timeout"]
        (mapping,) = [
            m["Properties"]
            for m in mappings.values()
            if refs(m["Properties"]["FunctionName"]) == {f"{t}Dispatcher"}
        ]
        assert refs(mapping["EventSourceArn"]) == {f"{t}Queue"}
        assert refs(mapping["ScalingConfig"]["MaximumConcurrency"]) == {"DispatcherConcurrency"}
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        dlq_alarm = stack[f"{t}DeadLettersAlarm"]["Properties"]
        assert refs(dlq_alarm["Dimensions"]) == {f"{t}DeadLetterQueue"}
        age_alarm = stack[f"{t}QueueAgeAlarm"]["Properties"]
        assert age_alarm["MetricName"] == "ApproximateAgeOfOldestMessage"
        assert refs(age_alarm["Dimensions"]) == {f"{t}Queue"}
        unreachable = stack[f"{t}UnreachableAlarm"]["Properties"]
        read = {m["MetricStat"]["Metric"]["MetricName"] for m in unreachable["Metrics"][:-1]}
        assert read == {"Requeued", "Reverted", "Published"}
        assert all(
            m["MetricStat"]["Metric"]["Dimensions"][1] == {"Name": "action_type", "Value": t}
            for m in unreachable["Metrics"][:-1]
        )
        for alarm in ("DispatcherErrorsAlarm", "DispatcherThrottlesAlarm"):
            assert refs(stack[f"{t}{alarm}"]["Properties"]["Dimensions"]) == {f"{t}Dispatcher"}
        lag = stack[f"{t}DispatchLagAlarm"]["Properties"]
        assert {"Name": "action_type", "Value": t} in lag["Dimensions"]
        assert lag["ExtendedStatistic"] == "p99"


def test_every_sender_may_send_to_every_queue(stack, types):
    for t in types:
        policy = stack[f"{t}SendPolicy"]["Properties"]
        roles = {next(iter(refs(role))) for role in policy["Roles"]}
        assert roles == {f"{f}Role" for f in SENDERS} | {f"{t}DispatcherRole"}
        (statement,) = policy["PolicyDocument"]["Statement"]
        assert statement["Action"] == "sqs:SendMessage"
        assert refs(statement["Resource"]) == {f"{t}Queue"}


def test_the_api_may_read_every_queue_and_redrive_its_dead_letters(stack, types):
    # GET /v1/operations reads each queue's and its DLQ's depths (the queue URLs come from
    # TICKWORK_QUEUE_URL_PREFIX, as every function's); POST /v1/operations/redrive starts a
    # message move task from the DLQ to the queue (it may send there: the SendPolicy).
    assert (
        "TICKWORK_QUEUE_URL_PREFIX"
        in stack["ApiFunction"]["Properties"]["Environment"]["Variables"]
    )
    for t in types:
        policy = stack[f"{t}OperationsPolicy"]["Properties"]
        assert [next(iter(refs(role))) for role in policy["Roles"]] == ["ApiFunctionRole"]
        allowed: dict[str, set[str]] = {}
        for statement in policy["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"]
            for resource in refs(statement["Resource"]):
                allowed.setdefault(resource, set()).update(
                    [actions] if isinstance(actions, str) else actions
                )
        assert allowed == {
            f"{t}Queue": {"sqs:GetQueueAttributes"},
            f"{t}DeadLetterQueue": {
                "sqs:GetQueueAttributes", "sqs:StartMessageMoveTask",
                "sqs:ListMessageMoveTasks", "sqs:ReceiveMessage", "sqs:DeleteMessage",
            },
        }  # fmt: skip


def test_queue_urls_follow_the_naming_convention(stack, types):
    prefix = stack["TickFunction"]["Properties"]["Environment"]["Variables"]
    template = prefix["TICKWORK_QUEUE_URL_PREFIX"]["Fn::Sub"]
    assert template.endswith("/${AWS::AccountId}/tickwork-${Stage}-")
    settings = Settings.model_validate(
        {
            "action_types": {t: {"provider": "log"} for t in types},
            "queue_url_prefix": "https://sqs.us-east-1.amazonaws.com/1/tickwork-prod-",
        }
    )
    for t in types:
        queue_name = stack[f"{t}Queue"]["Properties"]["QueueName"]["Fn::Sub"]
        url = settings.queue_url(t)
        assert url is not None
        assert url.rsplit("/", 1)[-1] == queue_name.replace("${Stage}", "prod")


def test_the_default_action_types_are_deliverable_and_deployed(source, types):
    default = json.loads(source["Parameters"]["ActionTypes"]["Default"])
    settings = Settings.model_validate({"action_types": default})
    assert set(settings.action_types) <= set(types)
    registry = ProviderRegistry(settings)
    for name in settings.action_types:
        registry.for_action_type(name)  # raises if the type could never send


# ----------------------------------------------------------------------- environment


def test_every_variable_the_code_reads_is_set(stack):
    known = {ENV_PREFIX + field.upper() for field in Settings.model_fields}
    known.add(ACTION_TYPES_PARAMETER_ENV)
    for name, function in of_type(stack, "AWS::Lambda::Function").items():
        env = function["Properties"]["Environment"]["Variables"]
        assert set(env) >= REQUIRED_ENV, (name, REQUIRED_ENV - set(env))
        for variable in env:
            if variable.startswith(ENV_PREFIX):
                assert variable in known, f"{name} sets {variable}, which nothing reads"
        # Settings parse what the template sets (placeholders for what CloudFormation fills).
        plain = {
            k: v if isinstance(v, str) else "resolved-by-cloudformation"
            for k, v in env.items()
            if k != ACTION_TYPES_PARAMETER_ENV
        }
        plain.update(TICKWORK_DISPATCH_ENABLED="true", TICKWORK_PAUSED_ACTION_TYPES="")
        # The console's sign-in endpoints are parameters whose pattern admits https only.
        for url in ("TICKWORK_CONSOLE_AUTHORIZE_URL", "TICKWORK_CONSOLE_TOKEN_URL"):
            if url in plain:
                plain[url] = "https://auth.example.com/oauth2"
        # So is the public URL of the API (the base of unsubscribe links).
        if "TICKWORK_PUBLIC_API_URL" in plain:
            plain["TICKWORK_PUBLIC_API_URL"] = "https://api.example.com"
        # And the tick's interval, a Number parameter of allowed values.
        plain["TICKWORK_TICK_INTERVAL_SECONDS"] = "60"
        # And the retention, a Number parameter within the setting's own bounds.
        retention = stack_parameter_bounds("RetentionDays")
        assert (retention["MinValue"], retention["MaxValue"]) == (
            Settings.model_fields["retention_days"].metadata[0].ge,
            Settings.model_fields["retention_days"].metadata[1].le,
        )
        plain["TICKWORK_RETENTION_DAYS"] = str(retention["Default"])
        Settings.from_env(plain)


def test_the_api_logs_in_with_its_own_secret_only(stack):
    api = stack["ApiFunction"]["Properties"]
    env = api["Environment"]["Variables"]
    assert refs(env["TICKWORK_DATABASE_SECRET_ARN"]) == {"ApiDatabaseSecret"}
    role = stack["ApiFunctionRole"]["Properties"]
    granted = refs(role["Policies"])
    assert "ApiDatabaseSecret" in granted
    assert "DatabaseSecret" not in granted
    # The proxy accepts both logins.
    auth = stack["DatabaseProxy"]["Properties"]["Auth"]
    assert {next(iter(refs(a["SecretArn"]))) for a in auth} == {
        "DatabaseSecret",
        "ApiDatabaseSecret",
    }


# ------------------------------------------------------------------------ operations


def test_every_alarm_reaches_a_topic_cloudwatch_can_publish_to(stack):
    alarms = of_type(stack, "AWS::CloudWatch::Alarm")
    assert len(alarms) >= 20
    for name, alarm in alarms.items():
        props = alarm["Properties"]
        assert refs(props["AlarmActions"]) == {"AlarmTopic"}, name
        assert refs(props["OKActions"]) == {"AlarmTopic"}, name
    topic = stack["AlarmTopic"]["Properties"]
    assert refs(topic["KmsMasterKeyId"]) == {"AlarmKey"}
    key = stack["AlarmKey"]["Properties"]
    cloudwatch = [
        s
        for s in key["KeyPolicy"]["Statement"]
        if s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
    ]
    assert cloudwatch
    assert {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(cloudwatch[0]["Action"])
    (policy,) = [
        p["Properties"]
        for p in of_type(stack, "AWS::SNS::TopicPolicy").values()
        if refs(p["Properties"]["Topics"]) == {"AlarmTopic"}
    ]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert statement["Action"] == "sns:Publish"


def test_the_listed_alarms_exist(stack):
    metrics = set()
    for alarm in of_type(stack, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if "Metrics" in props:  # metric math: every metric it reads
            metrics |= {
                (m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"])
                for m in props["Metrics"]
                if "MetricStat" in m
            }
        else:
            metrics.add((props["Namespace"], props["MetricName"]))
    assert {
        ("Tickwork", "SendFailures"),
        ("Tickwork", "TickElapsed"),
        ("Tickwork", "ReconcileElapsed"),
        ("Tickwork", "ExpanderElapsed"),
        ("Tickwork", "ResolveElapsed"),
        ("Tickwork", "RetentionElapsed"),
        ("Tickwork", "RecoveredStuck"),
        ("Tickwork", "DispatchLag"),
        ("AWS/RDS", "CPUUtilization"),
        ("AWS/RDS", "FreeStorageSpace"),
        ("AWS/RDS", "FreeableMemory"),
        ("AWS/RDS", "DatabaseConnectionsCurrentlySessionPinned"),
        ("AWS/RDS", "CPUCreditBalance"),
        ("AWS/RDS", "DatabaseConnections"),
        ("AWS/RDS", "MaxDatabaseConnectionsAllowed"),
        ("AWS/ApiGateway", "5xx"),
        ("AWS/Lambda", "Throttles"),
    } <= metrics


def test_every_function_logs_json_to_a_group_with_retention(stack):
    groups = of_type(stack, "AWS::Logs::LogGroup")
    for name, function in of_type(stack, "AWS::Lambda::Function").items():
        logging = function["Properties"]["LoggingConfig"]
        assert logging["LogFormat"] == "JSON", name
        (group,) = refs(logging["LogGroup"])
        assert group in groups, name
        assert refs(groups[group]["Properties"]["RetentionInDays"]) == {"LogRetentionDays"}


def test_scheduled_invocations_are_not_retried(stack):
    configs = {
        next(iter(refs(c["Properties"]["FunctionName"]))): c["Properties"]
        for c in of_type(stack, "AWS::Lambda::EventInvokeConfig").values()
    }
    for name in SCHEDULED | {"MigrateFunction"}:
        assert configs[name]["MaximumRetryAttempts"] == 0, name
    for rule in of_type(stack, "AWS::Events::Rule").values():
        for target in rule["Properties"]["Targets"]:
            assert target["RetryPolicy"]["MaximumRetryAttempts"] == 0


def test_the_dashboard_covers_the_api_and_every_type(stack):
    body = json.dumps(stack["Dashboard"]["Properties"]["DashboardBody"])
    assert "AWS/ApiGateway" in body
    assert "Latency" in body
    # Per-type rows by SEARCH over the action_type dimension, so new types appear by themselves.
    assert "action_type" in body
    assert "Published" in body
    assert "Failed" in body


def dashboard_widgets(stack: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's widgets, its `!Sub` placeholders filled with their own names."""
    body = stack["Dashboard"]["Properties"]["DashboardBody"]
    text = body["Fn::Sub"] if isinstance(body, dict) else body
    widgets: list[dict[str, Any]] = json.loads(re.sub(r"\$\{([^}]+)\}", r"\1", text))["widgets"]
    return widgets


def test_the_dashboard_has_a_widget_per_scheduled_lambda_run(stack):
    widgets = dashboard_widgets(stack)
    lines = {
        w["properties"]["title"]: {
            tuple(m[:4]) for m in w["properties"]["metrics"] if isinstance(m[0], str)
        }
        for w in widgets
    }
    # The drip advance and the stats rollup: what each run did, its Lambda's errors, its time
    [drips] = [t for t in lines if t.startswith("Drip advance")]
    assert {("Tickwork", "SequencesAdvanced", "service", "tickwork"),
            ("Tickwork", "SequencesErrors", "service", "tickwork"),
            ("Tickwork", "DripsElapsed", "service", "tickwork"),
            ("AWS/Lambda", "Errors", "FunctionName", "DripsFunction")} <= lines[drips]  # fmt: skip
    [rollup] = [t for t in lines if t.startswith("Stats rollup")]
    assert {("Tickwork", "RollupGroups", "service", "tickwork"),
            ("Tickwork", "RollupElapsed", "service", "tickwork"),
            ("AWS/Lambda", "Errors", "FunctionName", "RollupFunction")
            } <= lines[rollup]  # fmt: skip
    # No two widgets share a cell of the grid
    cells = [
        (x, y)
        for w in widgets
        for x in range(w["x"], w["x"] + w["width"])
        for y in range(w["y"], w["y"] + w["height"])
    ]
    assert len(cells) == len(set(cells))
    assert all(w["x"] + w["width"] <= 24 for w in widgets)


# ------------------------------------------------------------------ database, network


def test_the_proxy_never_waits_longer_than_the_api(stack):
    pool = stack["DatabaseProxyTargets"]["Properties"]["ConnectionPoolConfigurationInfo"]
    api = stack["ApiFunction"]["Properties"]
    assert pool["ConnectionBorrowTimeout"] < api["Timeout"]
    assert refs(api["ReservedConcurrentExecutions"]) == {"ApiConcurrency"}


def test_database_settings(stack, source):
    db = stack["Database"]
    props = db["Properties"]
    assert re.fullmatch(r"\d+", source["Parameters"]["DatabaseEngineVersion"]["Default"])
    assert refs(props["EngineVersion"]) == {"DatabaseEngineVersion"}
    assert props["AutoMinorVersionUpgrade"] is True
    assert refs(props["MaxAllocatedStorage"]) == {"DatabaseMaxAllocatedStorage"}
    assert set(props["EnableCloudwatchLogsExports"]) >= {"postgresql"}
    assert "Fn::If" in props["DeletionProtection"]
    assert refs(props["DBParameterGroupName"]) == {"DatabaseParameters"}
    for secret in ("DatabaseSecret", "ApiDatabaseSecret"):
        assert stack[secret]["DeletionPolicy"] == "Retain"
        template = json.loads(
            stack[secret]["Properties"]["GenerateSecretString"]["SecretStringTemplate"]
        )
        assert template["dbname"] == "tickwork"
    rotations = of_type(stack, "AWS::SecretsManager::RotationSchedule")
    assert {next(iter(refs(r["Properties"]["SecretId"]))) for r in rotations.values()} == {
        "DatabaseSecret",
        "ApiDatabaseSecret",
    }


def test_networking_without_nat_reaches_what_it_needs(stack):
    endpoints = {
        name: r["Properties"] for name, r in of_type(stack, "AWS::EC2::VPCEndpoint").items()
    }
    services = {p["ServiceName"]["Fn::Sub"].rsplit(".", 1)[-1]: p for p in endpoints.values()}
    # (logs: the migration sets the retention of the groups RDS and the rotations make)
    assert set(services) == {"secretsmanager", "sqs", "ssm", "s3", "logs"}
    assert services["s3"]["VpcEndpointType"] == "Gateway"
    ingress = stack["EndpointSecurityGroup"]["Properties"]["SecurityGroupIngress"]
    sources = {next(iter(refs(rule["SourceSecurityGroupId"]))) for rule in ingress}
    assert sources == {"FunctionSecurityGroup", "DatabaseSecurityGroup"}  # functions, proxy
    assert all(rule["FromPort"] == 443 for rule in ingress)


# ------------------------------------------------------------------ packaging, config


def test_one_samconfig_at_the_root_names_every_required_parameter(source):
    assert not (ROOT / "infra" / "samconfig.toml").exists()
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    deploy = config["default"]["deploy"]["parameters"]
    build = config["default"]["build"]["parameters"]
    assert deploy["region"]
    assert "CAPABILITY_IAM" in deploy["capabilities"]
    assert "CAPABILITY_AUTO_EXPAND" in deploy["capabilities"]
    assert build["build_in_source"] is True
    assert build["language_extensions"] is True
    named = {item.split("=", 1)[0] for item in deploy["parameter_overrides"]}
    required = {n for n, p in source["Parameters"].items() if "Default" not in p}
    assert required <= named


def test_the_layer_lock_pins_every_runtime_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = (ROOT / "infra" / "layer-requirements.txt").read_text()
    pinned = {
        m.group(1).lower().replace("_", "-")
        for m in re.finditer(r"^([A-Za-z0-9_.-]+)==\S+ \\$", lock, re.MULTILINE)
    }
    assert lock.count("--hash=sha256:") == len(pinned)
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")
        if name in {"boto3"}:  # the Lambda runtime provides it
            assert name not in pinned
            continue
        assert name in pinned, name


def test_only_the_document_the_console_unsubscribe_and_callbacks_need_no_token(stack):
    [api] = of_type(stack, "AWS::ApiGatewayV2::Api").values()
    security = {
        f"{method.upper()} {path}": operation["security"]
        for path, methods in api["Properties"]["Body"]["paths"].items()
        for method, operation in methods.items()
    }
    assert security == {
        "X-AMAZON-APIGATEWAY-ANY-METHOD /v1/{proxy+}": [{"JwtAuthorizer": []}],
        "GET /v1/openapi.json": [{"NONE": []}],
        "GET /console": [{"NONE": []}],
        "GET /console/{proxy+}": [{"NONE": []}],
        # one-click unsubscribe: the signed token in the path is the authority
        "GET /v1/unsubscribe/{token}": [{"NONE": []}],
        "POST /v1/unsubscribe/{token}": [{"NONE": []}],
        # Providers' status callbacks: verified the provider's way (docs/feedback.md).
        "POST /v1/callbacks/{connection_id}": [{"NONE": []}],
    }


def served_by_function(operation: dict[str, Any]) -> set[str]:
    """The function a route's integration invokes (its ARN, less the pseudo parameters)."""
    uri = operation["x-amazon-apigateway-integration"]["uri"]
    return {name for name in refs(uri) if not name.startswith("AWS::")}


def test_the_routes_without_a_token_are_served_apart_from_the_api(stack):
    [api] = of_type(stack, "AWS::ApiGatewayV2::Api").values()
    served_by = {
        f"{method.upper()} {path}": served_by_function(operation)
        for path, methods in api["Properties"]["Body"]["paths"].items()
        for method, operation in methods.items()
    }
    public = {route for route, by in served_by.items() if by == {"PublicFunction"}}
    assert public == {
        "GET /console", "GET /console/{proxy+}", "GET /v1/unsubscribe/{token}",
        "POST /v1/unsubscribe/{token}", "POST /v1/callbacks/{connection_id}",
    }  # fmt: skip
    # The API's own: every route behind the JWT, and its document.
    assert set(served_by) - public == {
        "X-AMAZON-APIGATEWAY-ANY-METHOD /v1/{proxy+}",
        "GET /v1/openapi.json",
    }
    assert all(served_by[route] == {"ApiFunction"} for route in set(served_by) - public)
    # It logs in as the API does (row-level security), never as the owner.
    public_function = stack["PublicFunction"]["Properties"]
    assert refs(public_function["Environment"]["Variables"]["TICKWORK_DATABASE_SECRET_ARN"]) == {
        "ApiDatabaseSecret"
    }


# ---------------------------------------------------------------------- the crons


def test_each_cron_is_its_own_function_with_schedule_log_group_and_alarms(source, stack):
    alarms = of_type(stack, "AWS::CloudWatch::Alarm").values()
    rules = of_type(stack, "AWS::Events::Rule").values()
    groups = of_type(stack, "AWS::Logs::LogGroup")
    code_uris = set()
    for name, (code_uri, elapsed) in CRON_FUNCTIONS.items():
        function = source["Resources"][name]
        code_uris.add(function["Properties"]["CodeUri"])
        assert function["Properties"]["CodeUri"] == code_uri, name
        # its schedule invokes it alone
        targets = [t for r in rules for t in r["Properties"]["Targets"] if refs(t["Arn"]) == {name}]
        assert len(targets) == 1, name
        (group,) = refs(stack[name]["Properties"]["LoggingConfig"]["LogGroup"])
        assert groups[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
        # an alarm when it stops completing, one when its Lambda fails
        assert any(
            a["Properties"]["MetricName"] == elapsed
            and a["Properties"]["Statistic"] == "SampleCount"
            and a["Properties"]["TreatMissingData"] == "breaching"
            for a in alarms
        ), name
        assert any(
            a["Properties"]["Namespace"] == "AWS/Lambda"
            and a["Properties"]["MetricName"] == "Errors"
            and name in refs(a["Properties"]["Dimensions"])
            for a in alarms
        ), name
    assert len(code_uris) == len(CRON_FUNCTIONS)


def test_the_tick_interval_drives_its_schedule_its_alarm_and_every_functions_look_ahead(
    source, stack
):
    parameter = source["Parameters"]["TickIntervalSeconds"]
    assert parameter["Default"] == "60"
    schedules = source["Mappings"]["TickSchedules"]
    assert {int(k) for k in schedules} == {int(v) for v in parameter["AllowedValues"]}
    assert schedules["60"]["Expression"] == "rate(1 minute)"
    for seconds, entry in schedules.items():
        minutes = int(seconds) // 60
        unit = "minute" if minutes == 1 else "minutes"
        assert entry["Expression"] == f"rate({minutes} {unit})"
        # several intervals without a completed tick before "not running" fires
        assert entry["AlarmPeriod"] >= 2 * int(seconds)
        assert entry["AlarmPeriod"] % 60 == 0
        # the look-ahead that follows it stays within SQS's longest delay
        assert Settings(tick_interval_seconds=int(seconds)).lookahead_seconds <= 900
    tick = source["Resources"]["TickFunction"]["Properties"]
    (event,) = tick["Events"].values()
    lookup = {"Fn::FindInMap": ["TickSchedules", {"Ref": "TickIntervalSeconds"}, "Expression"]}
    assert event["Properties"]["Schedule"] == lookup
    alarm = source["Resources"]["TickNotRunningAlarm"]["Properties"]
    assert alarm["Period"]["Fn::FindInMap"][2] == "AlarmPeriod"
    # The API enqueues rows due inside the look-ahead at creation: every function must agree
    env = source["Globals"]["Function"]["Environment"]["Variables"]
    assert env[ENV_PREFIX + "TICK_INTERVAL_SECONDS"] == {"Ref": "TickIntervalSeconds"}
    assert Settings.from_env({ENV_PREFIX + "TICK_INTERVAL_SECONDS": "300"}).lookahead_seconds == 600


# ------------------------------------------------- a stack that tells someone, least privilege


def _rule_value(node: Any, parameters: dict[str, str]) -> Any:
    """Evaluates a Rules assertion (Ref, Fn::Equals, Fn::Not, Fn::Or, Fn::And, Fn::Join,
    Fn::Contains) over parameter values, as CloudFormation does before it creates anything."""
    if isinstance(node, dict):
        ((key, value),) = node.items()
        if key == "Ref":
            return parameters[value]
        args = [_rule_value(v, parameters) for v in value] if isinstance(value, list) else value
        if key == "Fn::Equals":
            return args[0] == args[1]
        if key == "Fn::Not":
            return not args[0]
        if key == "Fn::Or":
            return any(args)
        if key == "Fn::And":
            return all(args)
        if key == "Fn::Join":
            return args[1]  # one comma-delimited parameter, already a string here
        if key == "Fn::Contains":  # a comma-delimited parameter holds a string
            return args[1] in args[0].split(",")
        raise AssertionError(f"no evaluator for {key}")
    return node


def deploy_refusals(template: dict[str, Any], given: dict[str, str]) -> list[str]:
    """The AssertDescriptions CloudFormation would answer a deploy with these parameters."""
    parameters = {n: str(p.get("Default", "")) for n, p in template["Parameters"].items()}
    parameters |= {"PrivateRouteTableIds": "rtb-a,rtb-b"} | given
    for name, value in given.items():
        pattern = template["Parameters"][name].get("AllowedPattern")
        if pattern and not re.fullmatch(pattern, value):
            return [f"{name} does not match {pattern}"]
    refusals = []
    for rule in template.get("Rules", {}).values():
        if "RuleCondition" in rule and not _rule_value(rule["RuleCondition"], parameters):
            continue
        refusals += [
            a["AssertDescription"]
            for a in rule["Assertions"]
            if not _rule_value(a["Assert"], parameters)
        ]
    return refusals


def alarm_destination_problems(template: dict[str, Any]) -> list[str]:
    """What lets a stack deploy with alarms that reach no one, or refuse a stated choice."""
    problems = []
    if not deploy_refusals(template, {}):
        problems.append("a deploy with no alarm destination is accepted")
    for accepted in (
        {"AlarmEmail": "ops@example.com"},
        {"AlarmEmail": "none"},
        {"AlarmHttpsEndpoint": "https://events.pagerduty.com/integration/abc/enqueue"},
    ):
        if deploy_refusals(template, accepted):
            problems.append(f"{accepted} is refused")
    resources = template["Resources"]
    subscriptions = {
        r["Properties"]["Protocol"]: r
        for r in resources.values()
        if isinstance(r, dict)
        and r["Type"] == "AWS::SNS::Subscription"
        and refs(r["Properties"]["TopicArn"]) == {"AlarmTopic"}
    }
    if set(subscriptions) != {"email", "https"}:
        problems.append(f"alarm topic subscriptions are {sorted(subscriptions)}")
    email_condition = template["Conditions"].get(subscriptions.get("email", {}).get("Condition"))
    if email_condition is None or _rule_value(email_condition, {"AlarmEmail": "none"}):
        problems.append("AlarmEmail=none subscribes an address called none")
    return problems


def test_alarms_need_a_destination_unless_the_operator_says_none(source):
    assert alarm_destination_problems(source) == []
    assert deploy_refusals(source, {"AlarmEmail": "not-an-address"})


def test_the_alarm_destination_check_catches_a_template_without_one(source):
    without_rule = json.loads(json.dumps(source))
    del without_rule["Rules"]["AlarmsReachSomeone"]
    assert "a deploy with no alarm destination is accepted" in alarm_destination_problems(
        without_rule
    )
    without_https = json.loads(json.dumps(source))
    del without_https["Resources"]["AlarmHttpsSubscription"]
    assert alarm_destination_problems(without_https)


# A secret under the stack's name, as the grant's ARN names it (`-??????`: the six
# characters Secrets Manager appends to a name).
STACK_SECRET = re.compile(
    r"arn:\$\{AWS::Partition\}:secretsmanager:\$\{AWS::Region\}:\$\{AWS::AccountId\}"
    r":secret:\$\{AWS::StackName\}/([\w*/]+?)(?:-\?{6})?"
)
SECRET_WRITES = {"secretsmanager:CreateSecret", "secretsmanager:PutSecretValue"}
SECRET_WRITES |= {"secretsmanager:DeleteSecret", "secretsmanager:UpdateSecret"}
SECRET_WRITES |= {"secretsmanager:TagResource"}
TAG_CONDITION = "secretsmanager:ResourceTag/"


def _secret_statements(stack: dict[str, Any], role: str) -> list[dict[str, Any]]:
    documents = [p["PolicyDocument"] for p in stack[role]["Properties"].get("Policies", [])]
    documents += [
        p["Properties"]["PolicyDocument"]
        for p in of_type(stack, "AWS::IAM::Policy").values()
        if role in refs(p["Properties"]["Roles"])
    ]
    statements = [s for d in documents for s in d["Statement"]]
    return [
        s
        for s in statements
        if any(
            a.startswith("secretsmanager:") or a == "*"
            for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        )
    ]


def _grant(resource: Any, condition: dict[str, Any], named: set[str]) -> str:
    """One grant as docs/deploy.md names it: a secret of the stack by its logical id, or
    `<stack>/<pattern>` with the tag it must carry; `?` and the resource when it is neither."""
    by_reference = isinstance(resource, dict) and not isinstance(resource.get("Fn::Sub"), str)
    if by_reference and refs(resource) & named:
        (secret,) = refs(resource) & named
        return secret
    text = resource.get("Fn::Sub") if isinstance(resource, dict) else resource
    found = STACK_SECRET.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        return "? " + json.dumps(resource)
    grant = f"<stack>/{found.group(1)}"
    for test, pairs in condition.items():
        for key, value in pairs.items():
            if test != "StringEquals" or not key.startswith(TAG_CONDITION):
                return "? " + json.dumps(condition)
            grant += f" tagged {key[len(TAG_CONDITION) :]}={value}"
    return grant


def secret_grants(stack: dict[str, Any]) -> tuple[dict[str, set[str]], set[str]]:
    """What each function may read in Secrets Manager, and the functions that may write."""
    named = set(of_type(stack, "AWS::SecretsManager::Secret"))
    reads: dict[str, set[str]] = {}
    writers: set[str] = set()
    for name, function in of_type(stack, "AWS::Lambda::Function").items():
        (role,) = refs(function["Properties"]["Role"])
        reads[name] = set()
        for statement in _secret_statements(stack, role):
            actions = set(_listed(statement["Action"]))
            if actions & SECRET_WRITES:
                writers.add(name)
            for resource in _listed(statement["Resource"]):
                reads[name].add(_grant(resource, statement.get("Condition", {}), named))
    return reads, writers


def documented_grants() -> dict[str, set[str]]:
    """docs/deploy.md's table "What each function may read": the functions in code spans in
    its first column, the secrets in code spans in its second (a `tickwork:provider=...`
    span is the tag the secret before it must carry)."""
    guide = (ROOT / "docs" / "deploy.md").read_text()
    section = guide.split("### What each function may read", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "the table of what each function may read"
    documented: dict[str, set[str]] = {}
    for row in rows:
        functions, secrets = row.strip("|").split("|")[:2]
        grants: list[str] = []
        for span in re.findall(r"`([^`]+)`", secrets):
            if span.startswith("tickwork:provider="):
                grants[-1] += f" tagged {span}"
            else:
                grants.append(span)
        for function in re.findall(r"`([^`]+)`", functions):
            assert function not in documented, f"{function} is in two rows"
            documented[function] = set(grants)
    return documented


def secret_grant_problems(stack: dict[str, Any], documented: dict[str, set[str]]) -> list[str]:
    """Grants on Secrets Manager other than the guide says, or outside this stack."""
    reads, writers = secret_grants(stack)
    problems = [f"{name} may write secrets" for name in sorted(writers - {"ApiFunction"})]
    for name, found in sorted(reads.items()):
        problems += [f"{name} may use secrets {g[2:]}" for g in sorted(found) if g[0] == "?"]
        grants = {g for g in found if g[0] != "?"}
        if grants != documented.get(name):
            problems.append(f"{name} reads {sorted(grants)}, the guide says {documented.get(name)}")
    return problems


def test_each_function_reads_what_the_deploy_guide_says_and_only_in_this_stack(stack, types):
    assert {f"{t}Dispatcher" for t in types} >= {"logDispatcher", "webhookDispatcher"}
    documented = documented_grants()
    assert set(documented) == set(of_type(stack, "AWS::Lambda::Function"))
    assert secret_grant_problems(stack, documented) == []


def test_the_public_routes_cannot_read_other_connections_credentials(stack):
    reads, _ = secret_grants(stack)
    assert reads["PublicFunction"] == {
        "ApiDatabaseSecret",
        "UnsubscribeKeySecret",
        "<stack>/connections/*/callback",
        "<stack>/connections/* tagged tickwork:provider=twilio",
    }
    # What the grants' ARNs match, for the names the code gives the secrets: a connection's
    # callback secret outright, its credentials only with the tag the API puts on them.
    store = SecretsManagerStore("tickwork-prod", 60)
    connection = uuid4()
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:{}-AbCdEf"
    callback = secret.format(callback_secret_ref(store, connection))
    credentials = secret.format(store.ref(str(connection)))
    role = next(iter(refs(stack["PublicFunction"]["Properties"]["Role"])))
    matching: dict[str, list[dict[str, Any]]] = {callback: [], credentials: []}
    for statement in _secret_statements(stack, role):
        for resource in _listed(statement["Resource"]):
            text = resource.get("Fn::Sub") if isinstance(resource, dict) else None
            if not isinstance(text, str):
                continue
            pattern = text.replace("${AWS::Partition}", "aws").replace(
                "${AWS::Region}", "us-east-1"
            )
            pattern = pattern.replace("${AWS::AccountId}", "123456789012")
            pattern = pattern.replace("${AWS::StackName}", "tickwork-prod")
            for arn, found in matching.items():
                if fnmatch.fnmatchcase(arn, pattern):
                    found.append(statement.get("Condition", {}))
    assert {} in matching[callback]
    tagged = {"StringEquals": {f"{TAG_CONDITION}{PROVIDER_TAG}": "twilio"}}
    assert matching[credentials] == [tagged]


def test_the_unsubscribe_key_is_read_where_links_are_made_or_verified(source, stack, types):
    # Links are signed by the API and the drip advance (templates' {{ unsubscribe_url }}) and
    # by the dispatchers whose provider puts them in email headers; verified by the public
    # routes. The reconciler only checks that they can be made.
    default = json.loads(source["Parameters"]["ActionTypes"]["Default"])
    signing_types = {t for t, c in default.items() if c["provider"] in UNSUBSCRIBE_PROVIDERS}
    assert signing_types == {"email", "ses"}
    expected = {"ApiFunction", "PublicFunction", "DripsFunction"}
    expected |= {f"{t}Dispatcher" for t in signing_types}
    reads, _ = secret_grants(stack)
    readers = {name for name, grants in reads.items() if "UnsubscribeKeySecret" in grants}
    assert readers == expected
    for name, function in of_type(stack, "AWS::Lambda::Function").items():
        variables = function["Properties"]["Environment"]["Variables"]
        named = refs(variables.get("TICKWORK_UNSUBSCRIBE_KEY_SECRET_ARN", ""))
        assert named == ({"UnsubscribeKeySecret"} if name in expected else set()), name
        if name in expected and name.endswith("Dispatcher"):
            assert "UnsubscribeKeyReadPolicy" in depends_on(function), name
    reconciler = stack["ReconcilerFunction"]["Properties"]["Environment"]["Variables"]
    own = {k: v for k, v in reconciler.items() if k.startswith("TICKWORK_UNSUBSCRIBE")}
    assert own == {"TICKWORK_UNSUBSCRIBE_LINKS_ELSEWHERE": "true"}
    settings = Settings.from_env({**own, "TICKWORK_PUBLIC_API_URL": "https://a.example"})
    assert settings.unsubscribe_key is None
    assert links.configured(settings)  # a row asking for a link is scheduled
    with pytest.raises(links.UnsubscribeUnavailableError):  # and it signs none itself
        links.url(settings, uuid4(), "email", "ann@example.com", "all")


def _with_statement(stack: dict[str, Any], role: str, resource: Any) -> dict[str, Any]:
    mutated = json.loads(json.dumps(stack))
    mutated[role]["Properties"].setdefault("Policies", []).append(
        {
            "PolicyName": "extra",
            "PolicyDocument": {
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": "secretsmanager:GetSecretValue",
                        "Resource": resource,
                    }
                ]
            },
        }
    )
    return mutated


def test_the_secret_check_catches_wide_or_foreign_grants(stack):
    documented = documented_grants()
    everything = _with_statement(stack, "emailDispatcherRole", "*")
    assert 'emailDispatcher may use secrets "*"' in secret_grant_problems(everything, documented)
    arn = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:"
    unscoped = {"Fn::Sub": arn + "tickwork/webhooks/*"}
    mutated = _with_statement(stack, "ResolverFunctionRole", unscoped)
    assert secret_grant_problems(mutated, documented)
    another_types = {"Fn::Sub": arn + "${AWS::StackName}/webhooks/*"}
    assert secret_grant_problems(
        _with_statement(stack, "logDispatcherRole", another_types), documented
    ) == [
        "logDispatcher reads ['<stack>/webhooks/*', 'DatabaseSecret'],"
        " the guide says {'DatabaseSecret'}"
    ]
    # The public routes reading every connection's credentials, untagged
    every_connection = {"Fn::Sub": arn + "${AWS::StackName}/connections/*"}
    mutated = _with_statement(stack, "PublicFunctionRole", every_connection)
    assert [p for p in secret_grant_problems(mutated, documented) if "PublicFunction" in p]
    # and a guide that says less than the template grants
    fewer = {**documented, "DripsFunction": {"DatabaseSecret"}}
    assert secret_grant_problems(stack, fewer) == [
        "DripsFunction reads ['DatabaseSecret', 'UnsubscribeKeySecret'],"
        " the guide says {'DatabaseSecret'}"
    ]


def log_problems(stack: dict[str, Any]) -> list[str]:
    """Logs that never expire, and an API without access logs."""
    problems = []
    groups = of_type(stack, "AWS::Logs::LogGroup")
    for name, group in groups.items():
        if refs(group["Properties"].get("RetentionInDays")) != {"LogRetentionDays"}:
            problems.append(f"{name} has no retention")
    (stage,) = of_type(stack, "AWS::ApiGatewayV2::Stage").values()
    access = stage["Properties"].get("AccessLogSettings")
    if access is None:
        problems.append("the API stage writes no access log")
    else:
        if not refs(access["DestinationArn"]) <= set(groups) or not refs(access["DestinationArn"]):
            problems.append("the API's access log goes to a group the stack does not keep")
        fields = json.loads(access["Format"])
        if not {"requestId", "route", "status", "sub"} <= set(fields):
            problems.append(f"the access log lacks fields: {sorted(fields)}")
        if re.search(r"header|body|querystring|authorization", access["Format"], re.I):
            problems.append("the access log may record tokens or bodies")
    # Groups AWS services make for the stack: the migration gives them the retention.
    migration = stack["SchemaMigration"]["Properties"]
    kept = {
        g["Fn::Sub"].replace("${Database}", "<db>").replace("${Stage}", "<stage>")
        for g in migration.get("LogGroups", [])
    }
    if refs(migration.get("LogRetentionDays")) != {"LogRetentionDays"}:
        problems.append("the migration is not given LogRetentionDays")
    exported = stack["Database"]["Properties"].get("EnableCloudwatchLogsExports", [])
    made = {f"/aws/rds/instance/<db>/{kind}" for kind in exported}
    for schedule in of_type(stack, "AWS::SecretsManager::RotationSchedule").values():
        lambda_name = schedule["Properties"]["HostedRotationLambda"]["RotationLambdaName"]
        made.add("/aws/lambda/" + lambda_name["Fn::Sub"].replace("${Stage}", "<stage>"))
    problems += [f"{g} never expires" for g in sorted(made - kept)]
    return problems


def test_every_log_expires_and_the_api_logs_each_request(stack):
    assert log_problems(stack) == []
    migrate_role = stack[next(iter(refs(stack["MigrateFunction"]["Properties"]["Role"])))]
    policies = migrate_role["Properties"]["Policies"]
    statements = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    assert any("logs:PutRetentionPolicy" in s["Action"] for s in statements)


def test_the_log_check_catches_a_missing_access_log_or_retention(stack):
    def mutated(change: Any) -> list[str]:
        copy = json.loads(json.dumps(stack))
        change(copy)
        return log_problems(copy)

    (stage,) = of_type(stack, "AWS::ApiGatewayV2::Stage")
    assert mutated(lambda s: s[stage]["Properties"].pop("AccessLogSettings")) == [
        "the API stage writes no access log"
    ]
    assert mutated(lambda s: s["TickLogGroup"]["Properties"].pop("RetentionInDays")) == [
        "TickLogGroup has no retention"
    ]
    assert mutated(lambda s: s["SchemaMigration"]["Properties"]["LogGroups"].pop()) == [
        "/aws/lambda/tickwork-<stage>-rotate-api never expires"
    ]


def test_the_deploy_guide_states_the_reserved_concurrency_and_every_guided_question(stack):
    reserved = {
        name: f["Properties"]["ReservedConcurrentExecutions"]
        for name, f in of_type(stack, "AWS::Lambda::Function").items()
        if "ReservedConcurrentExecutions" in f["Properties"]
    }
    assert refs(reserved.pop("ApiFunction")) == {"ApiConcurrency"}
    guide = (ROOT / "docs" / "deploy.md").read_text()
    assert f"the stack reserves `ApiConcurrency` + {sum(reserved.values())} (" in guide
    # sam deploy --guided asks this of each function with a route outside the JWT authorizer.
    [api] = of_type(stack, "AWS::ApiGatewayV2::Api").values()
    without_token = {
        next(iter(served_by_function(operation)))
        for methods in api["Properties"]["Body"]["paths"].values()
        for operation in methods.values()
        if operation["security"] == [{"NONE": []}]
    }
    assert without_token == {"ApiFunction", "PublicFunction"}
    readme = (ROOT / "README.md").read_text()
    for function in without_token:
        assert f"{function} has no authentication. Is this okay? [y/N]: y" in guide
    assert "ApiFunction has no authentication. Is this okay? [y/N]" in readme
    assert "PublicFunction" in readme


def _guide_section(title: str) -> str:
    guide = (ROOT / "docs" / "deploy.md").read_text()
    return guide.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_parameter_table_names_every_parameter_with_its_default(source):
    parameters = source["Parameters"]
    rows = [line for line in _guide_section("Parameters").splitlines() if line.startswith("| `")]
    documented: list[str] = []
    for row in rows:
        names_cell, default_cell = row.strip("|").split("|")[:2]
        names = re.findall(r"`(\w+)`", names_cell)
        documented += names
        defaults = [d.strip() for d in default_cell.split(" / ")]
        if len(defaults) != len(names):
            defaults = [default_cell.strip()] * len(names)
        for name, shown in zip(names, defaults, strict=True):
            assert name in parameters, f"the guide lists {name}, which the template does not take"
            default = parameters[name].get("Default")
            if default is None:
                assert shown.startswith("(required"), (name, shown)
            elif default == "":
                assert shown in {"", "empty"} or shown.startswith("empty ("), (name, shown)
            elif re.fullmatch(r"`[^`]*`|\d+", shown):
                assert shown.strip("`") == str(default), (name, shown, default)
    assert sorted(documented) == sorted(parameters)


def test_the_guided_transcript_asks_every_parameter_in_order_with_what_it_offers(source):
    transcript = _guide_section("From a clean clone")
    asked = re.findall(r"^Parameter (\w+) \[(.*)\]:", transcript, re.MULTILINE)
    assert [name for name, _ in asked] == list(source["Parameters"])
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    saved = dict(
        item.split("=", 1)
        for item in config["default"]["deploy"]["parameters"]["parameter_overrides"]
    )
    for name, offered in asked:
        assert offered == saved.get(name, str(source["Parameters"][name].get("Default", ""))), name


def test_a_deploy_that_keeps_a_placeholder_stops_before_anything_is_made(source):
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    overrides = config["default"]["deploy"]["parameters"]["parameter_overrides"]
    placeholders = dict(item.split("=", 1) for item in overrides if "REPLACE_ME" in item)
    # Parameters of AWS types are refused by CloudFormation itself (no such VPC or subnet).
    checked = {
        name: value
        for name, value in placeholders.items()
        if not source["Parameters"][name]["Type"].startswith(("AWS::", "List<AWS::"))
    }
    assert set(checked) == {"JwtIssuer", "JwtAudience", "AlarmEmail", "PrivateRouteTableIds"}
    for name, value in checked.items():
        refusals = deploy_refusals(source, {name: value})
        assert any(name in refusal for refusal in refusals), (name, refusals)
    # while real answers pass
    real = {"JwtIssuer": "https://issuer.example.com/", "JwtAudience": "client",
            "AlarmEmail": "ops@example.com"}  # fmt: skip
    assert deploy_refusals(source, real) == []


def test_without_a_public_url_the_deploy_says_what_is_off_and_the_url_to_give(source):
    output = source["Outputs"]["PublicApiUrlMissing"]
    condition = source["Conditions"][output["Condition"]]
    assert _rule_value(condition, {"PublicApiUrl": ""})
    assert not _rule_value(condition, {"PublicApiUrl": "https://api.example.com"})
    # Its value is the stack's own API URL, the one to give.
    assert output["Value"] == source["Outputs"]["ApiUrl"]["Value"]
    assert "unsubscribe" in output["Description"]
    assert "SMS" in output["Description"]


def test_the_retention_archives_to_the_stacks_private_bucket_only(stack):
    bucket = stack["ArchiveBucket"]
    assert bucket["DeletionPolicy"] == "Retain"
    props = bucket["Properties"]
    assert all(props["PublicAccessBlockConfiguration"].values())
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    function = stack["RetentionFunction"]["Properties"]
    variables = function["Environment"]["Variables"]
    assert refs(variables["TICKWORK_ARCHIVE_BUCKET"]) == {"ArchiveBucket"}
    settings = Settings.from_env({"TICKWORK_ARCHIVE_BUCKET": "b"})
    # what it may do in S3: objects under the archive prefix of that bucket, nothing else
    role = stack["RetentionFunctionRole"]["Properties"]
    s3 = [
        statement
        for policy in role.get("Policies", [])
        for statement in policy["PolicyDocument"]["Statement"]
        if any(str(a).startswith("s3:") for a in _listed(statement["Action"]))
    ]
    assert len(s3) == 1
    assert set(_listed(s3[0]["Action"])) == {"s3:PutObject", "s3:GetObject", "s3:DeleteObject"}
    assert s3[0]["Resource"] == {"Fn::Sub": "${ArchiveBucket.Arn}/" + settings.archive_prefix + "*"}
    # no other function may touch the archive
    for name, resource in of_type(stack, "AWS::IAM::Role").items():
        if name != "RetentionFunctionRole":
            assert "ArchiveBucket" not in json.dumps(resource), name
    # the stack's retention reaches every function (the API shows it, the function uses it)
    assert stack_globals_retention(stack)


def stack_parameter_bounds(name: str) -> dict[str, Any]:
    parameter: dict[str, Any] = source_template()["Parameters"][name]
    return parameter


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else [value]


def stack_globals_retention(stack) -> bool:
    return all(
        refs(f["Properties"]["Environment"]["Variables"].get("TICKWORK_RETENTION_DAYS", {}))
        == {"RetentionDays"}
        for name, f in of_type(stack, "AWS::Lambda::Function").items()
        if name in APPLICATION_FUNCTIONS
    )
