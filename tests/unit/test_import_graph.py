"""The import graph, read from the source with imports inside functions included: no circle,
and no arrow that runs up a layer. The layers are the ones import-linter holds in CI
(`[tool.importlinter]` in pyproject.toml); this test reads the same list, so the two cannot
drift, and it also sees what import-linter does not: imports inside functions."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"tickwork": ROOT / "layers" / "tickwork", "tools": ROOT / "tools"}


def layer_contract() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layers] = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.replace("|", ":").split(":")] for layer in layers]


def modules() -> dict[str, Path]:
    found = {}
    for package, directory in PACKAGES.items():
        for path in directory.rglob("*.py"):
            if "tests" in path.relative_to(directory).parts:
                continue
            parts = [package, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from a import b` imports the module a.b when there is one, else names of a.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for name in targets:
            target = name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                yield target, node.lineno


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: {t for t, _ in imported(m, p, known)} for m, p in known.items()}


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    for rank, members in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in members):
            return rank
    return None


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_module_of_the_package_has_a_layer():
    layers = layer_contract()
    homeless = [
        m
        for m in modules()
        if m not in ("tickwork", "tickwork.__init__") and layer_of(m, layers) is None
    ]
    assert homeless == [], f"add these to a layer in [tool.importlinter]: {homeless}"


def test_the_import_graph_has_no_circle():
    assert circles(graph()) == []


def test_no_import_runs_up_a_layer():
    layers = layer_contract()
    known = modules()
    upward = []
    for module, path in known.items():
        source = layer_of(module, layers)
        for target, line in imported(module, path, known):
            target_layer = layer_of(target, layers)
            if source is not None and target_layer is not None and target_layer < source:
                upward.append(f"{path.relative_to(ROOT)}:{line} {module} -> {target}")
    assert upward == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_the_circle_finder_finds_circles(edges, expected):
    assert circles(edges) == expected


def test_an_import_inside_a_function_counts(tmp_path):
    # Given a module that imports another only inside a function
    (tmp_path / "low.py").write_text("def f():\n    from pkg import high\n")
    known = {"pkg.low": tmp_path / "low.py", "pkg.high": tmp_path / "high.py"}
    # Then the graph has that arrow
    assert list(imported("pkg.low", tmp_path / "low.py", known)) == [("pkg.high", 2)]
