"""The core's layout: its modules import each other in layers (issue 11: ``gating``, ``loop`` and
``runreport`` once imported each other).

Only module-level imports count: an import inside a function (kept lazy so ``ralph --help`` and
hook calls stay cheap) or under ``TYPE_CHECKING`` does not tie the modules' loading together.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "ralph"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, modules: set[str]) -> set[str]:
    """Core modules ``path`` imports when it is loaded (not in functions, not for type checking)."""
    name = _module_name(path)
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


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
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_core_modules_import_each_other_in_layers() -> None:
    paths = sorted(CORE.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _top_level_imports(path, modules) for path in paths}
    assert sum(len(edges) for edges in graph.values()) > 50, "the import graph looks empty: is the parser broken?"
    assert _cycles(graph) == [], "modules that import each other at load time (make one import lazy, or split)"


def test_a_cycle_is_found() -> None:
    """The check above can fail: a two-module cycle and a longer one are reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert _cycles(graph) == [["a", "b"], ["c", "d", "e"]]
