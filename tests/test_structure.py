"""The package's shape: no import cycle under bake/, and no class or function past its size limit.

Both walk the source with ``ast``, so imports under TYPE_CHECKING and inside
functions count as much as those at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "bake"
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        if rel.parts[1] == "_vendor":
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The bake modules ``name`` imports anywhere in its source.

    ``from bake.fetch import options`` names the submodule; ``from bake.fetch import X`` for anything
    else names the package. A submodule does not count as importing its package (as import-linter).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
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

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_cycle_finder(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(graph) == expected


def test_the_walk_sees_type_checking_and_function_local_imports() -> None:
    # cli imports the fetch package only inside a function; progress imports options only for typing.
    assert "bake.fetch" in GRAPH["bake.cli"]
    assert "bake.fetch.options" in GRAPH["bake.fetch.progress"]


def test_no_module_under_bake_imports_one_that_imports_it_back() -> None:
    assert _cycles(GRAPH) == []


def _oversized() -> list[str]:
    found = []
    limits = {ast.ClassDef: MAX_CLASS_LINES, ast.FunctionDef: MAX_FUNCTION_LINES}
    limits[ast.AsyncFunctionDef] = MAX_FUNCTION_LINES
    for path in MODULES.values():
        rel = path.relative_to(ROOT.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            limit = limits.get(type(node))
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                found.append(f"{rel}:{node.name}")
    return sorted(found)


def test_no_class_over_250_lines_and_no_function_over_60() -> None:
    assert _oversized() == []
