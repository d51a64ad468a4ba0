"""MkDocs hook: the HTTP API reference, made from the OpenAPI document the API serves.

At every build this asks the API package for its document (`tickwork.api.openapi_document`,
the text `GET /v1/openapi.json` answers), puts it in the site as `api/openapi.json` and
renders it to Markdown: `api/reference/index.md` (every operation at a glance), a page per
group of resources and `api/reference/schemas.md` (every body). None of it is written by
hand, so the reference cannot drift from the code; a route under a path no group names
fails the build (add it to GROUPS)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from mkdocs.structure.files import File

from tickwork.api import openapi_document

# Pages of the reference: (file, title, the first path segments after /v1 it holds, the
# page that explains them).
GROUPS: list[tuple[str, str, tuple[str, ...], str]] = [
    ("actions", "Actions and the calendar", ("actions", "calendar"), "../../concepts.md"),
    ("recurring", "Recurring schedules", ("recurring",), "../../recurring.md"),
    ("intents", "Schedule intents", ("things",), "../../intents.md"),
    ("rules", "Rules, events and entities", ("rules", "events", "entities"), "../../rules.md"),
    ("digests", "Digests", ("digests",), "../../digests.md"),
    ("sequences", "Campaigns, enrollments and recipients",
     ("campaigns", "enrollments", "recipients"), "../../sequences.md"),
    ("connections", "Connections", ("connections",), "../../providers.md"),
    ("suppressions", "Suppression list", ("suppressions",), "../../suppression.md"),
    ("events", "Outcome events", ("event-endpoints",), "../../events.md"),
    ("workspace", "Workspace, stats, forecast and changes",
     ("workspace", "stats", "forecast", "changes"), "../index.md"),
    ("operations", "Operations", ("operations",), "../../operations.md"),
]  # fmt: skip
METHODS = ("get", "post", "put", "patch", "delete")
BASE = "api/reference"


def openapi_text() -> str:

    return openapi_document()


# ---------------------------------------------------------------------------- rendering


def cell(text: Any) -> str:
    """Text for one table cell: on one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def link(name: str, here: str) -> str:
    target = "" if here == "schemas" else "schemas.md"
    return f"[{name}]({target}#{name.lower()})"


def type_of(schema: dict[str, Any], here: str) -> str:
    """A schema's type in a few words: `string (date-time) or null`, `array of [Step](...)`."""
    if "$ref" in schema:
        return link(schema["$ref"].rsplit("/", 1)[1], here)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            kinds = dict.fromkeys(type_of(s, here) for s in schema[key])
            return (" and " if key == "allOf" else " or ").join(kinds)
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}), here)}"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"object of {type_of(extra, here)}" if isinstance(extra, dict) else "object"
    if kind == "string" and "format" in schema:
        return f"string ({schema['format']})"
    return str(kind) if kind else "any JSON"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _length(part: dict[str, Any]) -> str | None:
    if "minLength" not in part and "maxLength" not in part:
        return None
    low, high = part.get("minLength", 0), part.get("maxLength")
    if high is None:
        return f"at least {low} characters"
    return f"{low}-{high} characters" if low else f"at most {high} characters"


def _range(part: dict[str, Any]) -> str | None:
    low, high = part.get("minimum"), part.get("maximum")
    if low is not None and high is not None:
        return f"{_number(low)} to {_number(high)}"
    if low is not None:
        return f"at least {_number(low)}"
    return None if high is None else f"at most {_number(high)}"


def constraints(schema: dict[str, Any]) -> list[str]:
    """What a value must be beyond its type, from the schema and the schemas it unites."""
    found: list[str | None] = []
    for part in [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]:
        found += [_length(part), _range(part)]
        for key, words in (("exclusiveMinimum", "over"), ("exclusiveMaximum", "under")):
            if key in part:
                found.append(f"{words} {_number(part[key])}")
        if "minItems" in part:
            found.append(f"at least {part['minItems']} items")
        if "maxItems" in part:
            found.append(f"at most {part['maxItems']} items")
        if "pattern" in part:
            found.append(f"matches `{part['pattern']}`")
    return list(dict.fromkeys(f for f in found if f))


def about(schema: dict[str, Any], required: bool = False) -> str:
    """The description cell: the words, the constraints, the default, an example."""
    words = [schema.get("description", "")]
    words.extend(constraints(schema))
    if "default" in schema and not required:
        words.append(f"default `{json.dumps(schema['default'])}`")
    if schema.get("examples"):
        words.append(f"e.g. `{json.dumps(schema['examples'][0])}`")
    return cell("; ".join(w for w in words if w))


def fields(schema: dict[str, Any], here: str) -> list[str]:
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties:
        return [f"Any JSON object ({type_of(schema, here)})."]
    required = set(schema.get("required", []))
    lines = ["| field | type | required | meaning |", "|---|---|---|---|"]
    for name, field in properties.items():
        lines.append(
            f"| `{name}` | {cell(type_of(field, here))} | {'yes' if name in required else ''}"
            f" | {about(field, name in required)} |"
        )
    if schema.get("additionalProperties") is False:
        lines.append("")
        lines.append("Other fields are refused (422).")
    return lines


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return name, document["components"]["schemas"][name]
    return None, schema


def operation(document: dict[str, Any], method: str, path: str, op: dict[str, Any]) -> list[str]:
    here = "operations"
    lines = [f"## `{method.upper()} {path}`", "", cell(op.get("summary", "")), ""]
    if op.get("description"):
        lines += [op["description"], ""]
    if op.get("security") == []:
        lines += ["No token needed.", ""]
    parameters = op.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
        for p in parameters:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {cell(type_of(p.get('schema', {}), here))} |"
                f" {'yes' if p.get('required') else ''} |"
                f" {about(p.get('schema', {}) | {'description': p.get('description', '')})} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        schema = body.get("content", {}).get("application/json", {}).get("schema", {})
        name, resolved = resolve(document, schema)
        needed = "required" if body.get("required") else "optional"
        title = link(name, here) if name else type_of(schema, here)
        lines += [f"**Request body** ({needed}, JSON): {title}", ""]
        if resolved.get("description"):
            lines += [cell(resolved["description"]), ""]
        lines += [*fields(resolved, here), ""]
    lines += ["| answer | when | body |", "|---|---|---|"]
    for status in sorted(op.get("responses", {})):
        response = op["responses"][status]
        schema = response.get("content", {}).get("application/json", {}).get("schema")
        shown = type_of(schema, here) if schema else ""
        lines.append(f"| {status} | {cell(response.get('description', ''))} | {cell(shown)} |")
    return [*lines, ""]


def operations(document: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, Any]]]:
    for path in sorted(document["paths"]):
        item = document["paths"][path]
        for method in METHODS:
            if method in item:
                yield method, path, item[method]


def group_of(path: str) -> str:
    segment = path.removeprefix("/v1/").split("/", 1)[0]
    for page, _, segments, _ in GROUPS:
        if segment in segments:
            return page
    raise ValueError(
        f"the route {path} is under /v1/{segment}, which no page of the API reference holds:"
        " add it to GROUPS in docs/hooks/openapi.py"
    )


HEADER = (
    "*Generated at every build from the OpenAPI document the API serves at"
    " `GET /v1/openapi.json` ([this build's copy](../openapi.json)); edit the routes, not"
    " this page.*"
)


def render(document: dict[str, Any]) -> dict[str, str]:
    """Markdown pages by path under docs/: the overview, a page per group, the schemas."""
    pages: dict[str, list[str]] = {
        page: [f"# {title}", "", HEADER, "", f"What these do and why: [{title}]({explained}).", ""]
        for page, title, _, explained in GROUPS
    }
    overview = [
        "# Every operation",
        "",
        HEADER,
        "",
        f"{document['info'].get('description', '')}",
        "",
        "| operation | what | page |",
        "|---|---|---|",
    ]
    titles = {page: title for page, title, _, _ in GROUPS}
    for method, path, op in operations(document):
        page = group_of(path)
        pages[page] += operation(document, method, path, op)
        overview.append(
            f"| `{method.upper()} {path}` | {cell(op.get('summary', ''))} |"
            f" [{titles[page]}]({page}.md) |"
        )
    schemas = ["# Schemas", "", HEADER, ""]
    for name in sorted(document["components"]["schemas"]):
        schema = document["components"]["schemas"][name]
        schemas += [f"## {name}", ""]
        if schema.get("description"):
            schemas += [cell(schema["description"]), ""]
        if "enum" in schema or "properties" not in schema:
            schemas += [type_of(schema, "schemas"), ""]
        else:
            schemas += [*fields(schema, "schemas"), ""]
    out = {f"{BASE}/{page}.md": "\n".join(lines) + "\n" for page, lines in pages.items()}
    out[f"{BASE}/index.md"] = "\n".join(overview) + "\n"
    out[f"{BASE}/schemas.md"] = "\n".join(schemas) + "\n"
    return out


# ------------------------------------------------------------------------- the MkDocs hook


def on_files(files: Any, config: Any) -> Any:

    text = openapi_text()
    files.append(File.generated(config, "api/openapi.json", content=text))
    for path, content in render(json.loads(text)).items():
        files.append(File.generated(config, path, content=content))
    return files
