"""The core's layout: its modules import each other in layers (issue 11: ``gating``, ``loop`` and
``runreport`` once imported each other).

For cycles only module-level imports count: an import inside a function (kept lazy so ``ralph --help``
and hook calls stay cheap) or under ``TYPE_CHECKING`` does not tie the modules' loading together.
Which layer may use which counts every import, lazy ones included: ``ralph.lifecycle.doctor`` once
opened its session through ``ralph.cli.session`` inside a function, and the cycle check missed it; the
loop once took its cycle check, loop-folder detection and store choice from ``ralph.lifecycle`` the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "ralph"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, modules: set[str]) -> set[str]:
    """Core modules ``path`` imports when it is loaded (not in functions, not for type checking)."""
    return _imports(path, modules, ast.parse(path.read_text(encoding="utf-8")).body)


def _all_imports(path: Path, modules: set[str]) -> set[str]:
    """Core modules ``path`` imports anywhere: in functions and under ``TYPE_CHECKING`` too."""
    return _imports(path, modules, ast.walk(ast.parse(path.read_text(encoding="utf-8"))))


def _imports(path: Path, modules: set[str], nodes: Iterable[ast.AST]) -> set[str]:
    """The core modules the import statements among ``nodes`` (of ``path``) name."""
    name = _module_name(path)
    found = set()
    for node in nodes:
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


# Outside ralph/cli, what may import the CLI: the ``python -m ralph`` entry point, and ralph.testing's
# ``ralph_cli`` fixture, which drives the CLI as a user does (it sits above it).
CLI_USERS = {"ralph.__main__", "ralph.testing.pytest_plugin"}


def _uses_of_the_cli(graph: dict[str, set[str]]) -> list[str]:
    """``module -> ralph.cli...`` for every module outside ``ralph.cli`` that imports it and may not."""
    return sorted(
        f"{module} -> {other}"
        for module, others in graph.items()
        if module != "ralph.cli" and not module.startswith("ralph.cli.") and module not in CLI_USERS
        for other in others
        if other == "ralph.cli" or other.startswith("ralph.cli.")
    )


def test_nothing_below_the_cli_imports_it_even_lazily() -> None:
    paths = sorted(CORE.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _all_imports(path, modules) for path in paths}
    lazy = sum(len(graph[name] - _top_level_imports(path, modules)) for path, name in zip(paths, graph))
    assert lazy > 50, "no function-level imports found: is the walk broken?"
    assert graph["ralph.__main__"] >= {"ralph.cli.main"}, "the parser misses what the entry point imports"
    assert _uses_of_the_cli(graph) == [], "move what these need out of ralph/cli (as ralph/session.py was)"


def test_a_lazy_import_of_the_cli_is_found() -> None:
    """The check above can fail: an import inside a function, relative or absolute, is reported."""
    source = (
        "def diagnose():\n    from ralph.cli.common import project_option\n\n"
        "def status():\n    from ..cli import main\n"
    )
    path = CORE / "lifecycle" / "doctor.py"
    modules = {"ralph.cli", "ralph.cli.common", "ralph.cli.main", "ralph.lifecycle", "ralph.lifecycle.doctor"}
    tree = ast.parse(source)
    assert _imports(path, modules, tree.body) == set(), "the cycle check's view: no import at all"
    graph = {"ralph.lifecycle.doctor": _imports(path, modules, ast.walk(tree))}
    assert _uses_of_the_cli(graph) == [
        "ralph.lifecycle.doctor -> ralph.cli",
        "ralph.lifecycle.doctor -> ralph.cli.common",
        "ralph.lifecycle.doctor -> ralph.cli.main",
    ]


def _uses_of_the_lifecycle_by_the_loop(graph: dict[str, set[str]]) -> list[str]:
    """``module -> ralph.lifecycle...`` for every module under ``ralph.loop`` that imports the layer above it."""
    return sorted(
        f"{module} -> {other}"
        for module, others in graph.items()
        if module == "ralph.loop" or module.startswith("ralph.loop.")
        for other in others
        if other == "ralph.lifecycle" or other.startswith("ralph.lifecycle.")
    )


def test_the_loop_does_not_import_the_lifecycle_layer_even_lazily() -> None:
    """``ralph/lifecycle/`` (parallel runs loops) sits above ``ralph/loop/``, never below it."""
    paths = sorted(CORE.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _all_imports(path, modules) for path in paths}
    assert "ralph.loop.engine" in graph and "ralph.lifecycle.parallel" in graph, "the layers moved: update this test"
    assert "ralph.loop.lock" in graph["ralph.lifecycle.parallel"], "the parser misses parallel's lazy loop import"
    assert _uses_of_the_lifecycle_by_the_loop(graph) == [], "move what the loop needs out of ralph/lifecycle"


def test_a_lazy_import_of_the_lifecycle_by_the_loop_is_found() -> None:
    """The check above can fail: function-level, relative and ``TYPE_CHECKING`` imports are reported."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ralph.lifecycle.init import InitResult\n\n"
        "def check():\n    from ..lifecycle.plan import find_cycles\n\n"
        "def other():\n    import ralph.lifecycle\n"
    )
    path = CORE / "loop" / "engine.py"
    modules = {"ralph.loop", "ralph.loop.engine", "ralph.lifecycle", "ralph.lifecycle.init", "ralph.lifecycle.plan"}
    tree = ast.parse(source)
    assert _imports(path, modules, tree.body) == set(), "the cycle check's view: no load-time import"
    graph = {"ralph.loop.engine": _imports(path, modules, ast.walk(tree)), "ralph.lifecycle.parallel": {"ralph.loop"}}
    assert _uses_of_the_lifecycle_by_the_loop(graph) == [
        "ralph.loop.engine -> ralph.lifecycle",
        "ralph.loop.engine -> ralph.lifecycle.init",
        "ralph.loop.engine -> ralph.lifecycle.plan",
    ]


def test_a_cycle_is_found() -> None:
    """The check above can fail: a two-module cycle and a longer one are reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert _cycles(graph) == [["a", "b"], ["c", "d", "e"]]
