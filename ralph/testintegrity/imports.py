"""The project modules the story-start test configuration loads into pytest, found by reading it (:mod:`ast`).

pytest registers every ``conftest.py`` and every module named in ``pytest_plugins`` (or ``-p NAME``) as a
plugin: their hooks and fixtures decide the run.  A plugin's names are whatever its module holds, so a
module a conftest or a plugin takes names from is as much test configuration as the conftest is:

- a module named in ``pytest_plugins`` / ``-p`` (followed into, since its own ``pytest_plugins`` load too);
- a module star-imported (``from helpers.fixtures import *``): every name it defines, hooks included;
- a module a hook (``from helpers import pytest_configure``) or a fixture is imported from by name;
- the ``__init__.py`` of each package on the way (importing ``helpers.checks`` runs ``helpers/__init__.py``).

Transitively, from the story-start versions (what the agent writes later cannot take a file out).  A plain
``import calc`` or ``from calc import add`` (no hook, no fixture) is the code under test, not configuration.
Modules are looked for where pytest's default import mode finds them: the project's root, ``src/``, the
importing file's folder and the first folder above it that is not a package; relative imports from the
importing file's package.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

Reader = Callable[[list[str]], dict[str, str]]
"""``read(paths)``: the story-start text of those of ``paths`` that are text files."""


def loaded_modules(names: set[str], configs: dict[str, str], options: dict[str, list[str]], read: Reader) -> list[str]:
    """The story-start files (of ``names``) pytest loads through the test configuration (see the module's docstring).

    ``configs``: path -> text of the story-start ``conftest.py`` files; ``options``: path of an ini-style or
    TOML config -> the module names its ``-p`` options load.
    """
    found: list[str] = []
    pending: list[str] = []

    def add(files: list[str]) -> None:
        for path in files:
            if path not in found:
                found.append(path)
                if path.endswith(".py"):
                    pending.append(path)

    for path, modules in sorted(options.items()):
        for module in modules:
            add(resolve(names, module, 0, path))
    texts = dict(configs)
    for path in sorted(p for p in configs if p.rsplit("/", 1)[-1] == "conftest.py"):
        _follow(names, path, configs[path], add, read)
    while pending:
        batch, pending[:] = list(pending), []
        texts.update(read([p for p in batch if p not in texts]))
        for path in batch:
            if path in texts:
                _follow(names, path, texts[path], add, read)
    return found


def _follow(names: set[str], path: str, source: str, add: Callable[[list[str]], None], read: Reader) -> None:
    """Add what the module ``path`` (text ``source``) loads as plugins or takes hooks and fixtures from."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None or not any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in targets):
                continue
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    add(resolve(names, value.value, 0, path))
        elif isinstance(node, ast.ImportFrom):
            files = resolve(names, node.module or "", node.level, path)
            if not files:
                continue
            taken = [alias.name for alias in node.names]
            if "*" in taken or any(name.startswith("pytest_") for name in taken):
                add(files)
                continue
            if any(_defines_fixture(text, set(taken)) for text in read(files).values()):
                add(files)


def _defines_fixture(source: str, wanted: set[str]) -> bool:
    """Does the module define one of ``wanted`` as a fixture (a function under a ``...fixture`` decorator)?"""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in wanted:
            for decorator in node.decorator_list:
                if "fixture" in ast.unparse(decorator):
                    return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in wanted for t in node.targets):
            if "fixture" in ast.unparse(node.value):
                return True
    return False


def resolve(names: set[str], module: str, level: int, importer: str) -> list[str]:
    """The files of ``module`` among ``names``: the ``__init__.py`` of its packages first, the module itself last
    (empty when it is not the project's)."""
    folder = importer.rsplit("/", 1)[0] if "/" in importer else ""
    parts = [p for p in module.split(".") if p]
    if level:
        base = folder.split("/") if folder else []
        if level - 1 > len(base):
            return []
        base = base[:len(base) - (level - 1)]
        roots = ["/".join(base) + "/" if base else ""]
    else:
        roots = list(dict.fromkeys(["", "src/", f"{folder}/" if folder else "", _rootdir(names, folder)]))
    found: list[str] = []
    for root in roots:
        if not parts:
            if level and f"{root}__init__.py" in names:
                found.append(f"{root}__init__.py")
            continue
        stem = root + "/".join(parts)
        module_file = next((c for c in (f"{stem}.py", f"{stem}/__init__.py") if c in names), None)
        if module_file is None:
            continue
        for depth in range(1, len(parts)):
            package = f"{root}{'/'.join(parts[:depth])}/__init__.py"
            if package in names and package not in found:
                found.append(package)
        if module_file not in found:
            found.append(module_file)
    return found


def _rootdir(names: set[str], folder: str) -> str:
    """The folder pytest's default import mode puts on ``sys.path`` for a file in ``folder``: the first one
    up from it that is no package (has no ``__init__.py``)."""
    parts = folder.split("/") if folder else []
    while parts and "/".join(parts) + "/__init__.py" in names:
        parts.pop()
    return "/".join(parts) + "/" if parts else ""
