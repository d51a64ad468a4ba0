"""Contract tests over the stack as CloudFormation would see it: template.yaml with its
Fn::ForEach expanded (as AWS::LanguageExtensions does) and then transformed by SAM's own
translator (aws-sam-translator), so the assertions are about the generated Lambda
functions, roles, event source mappings and alarms, not about the SAM shorthand."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from boto3.session import Session
from cfnlint.decode.cfn_yaml import load as load_yaml
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

from tickwork.platform.config import ACTION_TYPES_PARAMETER_ENV, ENV_PREFIX, Settings
from tickwork.providers import ProviderRegistry

ROOT = Path(__file__).resolve().parents[2]
LOOP = "Fn::ForEach::PerActionType"
APPLICATION_FUNCTIONS = {
    "ApiFunction",
    "TickFunction",
    "ReconcilerFunction",
    "ExpanderFunction",
    "ResolverFunction",
}
SCHEDULED = {"TickFunction", "ReconcilerFunction", "ExpanderFunction", "ResolverFunction"}
SENDERS = [
    "TickFunction",
    "ApiFunction",
    "ReconcilerFunction",
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
    metrics = {
        (a["Properties"]["Namespace"], a["Properties"]["MetricName"])
        for a in of_type(stack, "AWS::CloudWatch::Alarm").values()
    }
    assert {
        ("Tickwork", "SendFailures"),
        ("Tickwork", "TickElapsed"),
        ("Tickwork", "ReconcileElapsed"),
        ("Tickwork", "ExpanderElapsed"),
        ("Tickwork", "ResolveElapsed"),
        ("Tickwork", "RecoveredStuck"),
        ("Tickwork", "DispatchLag"),
        ("AWS/RDS", "CPUUtilization"),
        ("AWS/RDS", "FreeStorageSpace"),
        ("AWS/RDS", "FreeableMemory"),
        ("AWS/RDS", "DatabaseConnectionsCurrentlySessionPinned"),
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
    assert set(services) == {"secretsmanager", "sqs", "ssm", "s3"}
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


def test_only_the_document_and_the_console_need_no_token(stack):
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
    }
