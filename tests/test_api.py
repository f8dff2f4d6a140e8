"""Meta-tests of the public plugin API (``ralph.api``) and of the core/plugin boundary."""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import ralph.api

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "plugins"
CORE = ROOT / "ralph"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement in ``path`` (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = ".".join(_package_of(path).split(".")[: len(_package_of(path).split(".")) - node.level + 1])
                module = f"{package}.{node.module}" if node.module else package
            else:
                module = node.module or ""
            found.append((node.lineno, module))
    return found


def _package_of(path: Path) -> str:
    """The dotted package a file under plugins/ or ralph/ belongs to (``ralph_plugins.runners``)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts[:-1])
    if parts and parts[0] == "plugins":
        parts[0] = "ralph_plugins"
    return ".".join(parts)


def _plugin_family(module: str) -> str:
    """``ralph_plugins.runners.docker.engine`` -> ``ralph_plugins.runners``."""
    return ".".join(module.split(".")[:2])


def test_default_plugins_import_ralph_only_through_ralph_api() -> None:
    offending = []
    for path in sorted(PLUGINS.rglob("*.py")):
        own_family = _plugin_family(_package_of(path) + ".x")
        for line, module in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line}: {module}"
            if module == "ralph" or module.startswith("ralph."):
                if module != "ralph.api" and not module.startswith("ralph.api."):
                    offending.append(where)
            elif module.startswith("ralph_plugins"):
                if _plugin_family(module) != own_family:
                    offending.append(where + " (another plugin's internals)")
    assert offending == [], "plugins must import ralph only through ralph.api:\n" + "\n".join(offending)




def test_plugins_import_only_the_names_in_all() -> None:
    """``ralph.api`` holds more than it exports (its lazy table, typing imports): only ``__all__`` is public."""
    offending = []
    for path in sorted([*PLUGINS.rglob("*.py"), *(ROOT / "examples").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("ralph.api"):
                module = importlib.import_module(node.module or "")
                submodules = {m.__name__.rpartition(".")[2] for m in _api_modules()[1:]} if node.module == "ralph.api" else set()
                public = set(module.__all__) | submodules
                offending += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}"
                              for alias in node.names if alias.name not in public]
    assert offending == [], "not public (add it to __all__, with a docstring):\n" + "\n".join(offending)

def test_the_example_packages_use_only_the_public_surface() -> None:
    """A third-party package (``examples/``) imports ``ralph.api``, and in its tests ``ralph.testing``."""
    offending = []
    for path in sorted((ROOT / "examples").rglob("*.py")):
        in_tests = "tests" in path.relative_to(ROOT).parts
        allowed = ("ralph.api", "ralph.testing") if in_tests else ("ralph.api",)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for module in names:
                top = module.split(".")[0]
                if top == "ralph_plugins" or (top == "ralph" and not any(
                        module == a or module.startswith(a + ".") for a in allowed)):
                    offending.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module}")
    assert any((ROOT / "examples").rglob("pyproject.toml"))
    assert offending == [], "examples must use only ralph's public surface:\n" + "\n".join(offending)


def test_the_example_runner_is_a_short_module_on_run_process() -> None:
    """What docs/plugins.md and CONTRIBUTING.md promise of examples/ralph-nice: a runner in at most
    40 lines, all process handling left to ``run_process``."""
    path = ROOT / "examples" / "ralph-nice" / "ralph_nice" / "plugin.py"
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 40
    tree = ast.parse(source)
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "run_process" in called
    assert not {"subprocess", "signal", "os"} & {module.split(".")[0] for _, module in _imports(path)}


MISUSE = """
from ralph.api import ProcessSpec, Violation
from ralph.api.process import run_process

def wrong(spec: ProcessSpec) -> None:
    run_process(spec, print, timeout="soon")
    Violation("check", 3)
"""


def test_a_plugin_author_type_checks_against_ralph_api_with_mypy_strict(tmp_path: Path) -> None:
    """The example package passes ``mypy --strict`` against ralph.api as shipped (py.typed), and the
    API is really typed: misuse is reported rather than hidden behind ``Any``."""
    import shutil

    package = tmp_path / "ralph_nice"
    shutil.copytree(ROOT / "examples" / "ralph-nice" / "ralph_nice", package)
    (tmp_path / "misuse.py").write_text(MISUSE)

    def mypy(*targets: str) -> subprocess.CompletedProcess[str]:
        # MYPYPATH stands in for site-packages: an editable install is an import hook mypy cannot follow
        return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--python-version", "3.11", "--follow-imports=silent",
                               "--cache-dir", str(tmp_path / ".mypy_cache"), *targets],
                              cwd=tmp_path, env={**os.environ, "MYPYPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)

    clean = mypy("ralph_nice")
    assert clean.returncode == 0, clean.stdout
    misuse = mypy("misuse.py")
    assert misuse.returncode == 1
    assert 'Argument "timeout" to "run_process" has incompatible type "str"' in misuse.stdout
    assert 'Argument 2 to "Violation" has incompatible type "int"' in misuse.stdout

# ralph.testing's fixtures for the real CLIs of ralph's own default agents (claude_binary,
# codex_binary) find them the way those agents do; they are test helpers, imported by no command.
CORE_MAY_IMPORT_PLUGINS: set[str] = set()


def test_no_command_imports_ralph_testing() -> None:
    """``ralph.testing`` is for tests (its pytest plugin, its fixtures): ``ralph demo`` and every other
    command reach the scripted models through the core package ``ralph.scripted``."""
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted([*CORE.rglob("*.py"), *PLUGINS.rglob("*.py")])
        if "testing" not in path.relative_to(CORE if path.is_relative_to(CORE) else PLUGINS).parts
        for line, module in _imports(path)
        if module == "ralph.testing" or module.startswith("ralph.testing.")
    ]
    assert offending == []
    code = "import sys, ralph.lifecycle.demo; print(sorted(m for m in sys.modules if m.startswith('ralph.testing')))"
    assert subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_core_imports_no_default_plugin() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted(CORE.rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in CORE_MAY_IMPORT_PLUGINS
        for line, module in _imports(path)
        if module == "ralph_plugins" or module.startswith("ralph_plugins.")
    ]
    assert offending == [], "the core must not import default plugins:\n" + "\n".join(offending)


def _own_doc(obj: object) -> str | None:
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    if isinstance(obj, type) and doc.startswith(f"{obj.__name__}("):  # dataclass's generated signature
        return None
    return doc


def _attribute_docstrings(path: Path) -> set[str]:
    """Top-level names assigned in ``path`` and followed by a string literal (attribute docstrings)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    body = tree.body
    for node, following in zip(body, body[1:]):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _api_modules() -> list[types.ModuleType]:
    """``ralph.api`` and its submodules (``ralph.api.fleet``, ``.hooks``, ``.workspace`` ...)."""
    found = [ralph.api]
    for info in pkgutil.iter_modules(ralph.api.__path__, "ralph.api."):
        found.append(importlib.import_module(info.name))
    return found


def test_every_public_name_is_documented() -> None:
    modules = _api_modules()
    assert {m.__name__ for m in modules} >= {"ralph.api", "ralph.api.fleet", "ralph.api.hooks", "ralph.api.workspace"}
    missing = _undocumented_names(modules)
    assert missing == [], "public names without a docstring:\n" + "\n".join(missing)


def _testing_modules() -> list[types.ModuleType]:
    """``ralph.testing`` and the submodules a plugin author imports (``.model_server``, ``.scripting`` ...);
    the fixtures of ``ralph.testing.pytest_plugin`` are checked on their own."""
    import ralph.testing

    found = [ralph.testing]
    for info in pkgutil.iter_modules(ralph.testing.__path__, "ralph.testing."):
        if info.name != "ralph.testing.pytest_plugin":
            found.append(importlib.import_module(info.name))
    return found


def test_every_public_name_of_ralph_testing_is_documented() -> None:
    """A plugin author's test API is public too: every name in ``ralph.testing.__all__`` and its
    submodules' ``__all__`` (and their classes' public methods), and every fixture, has a docstring."""
    modules = _testing_modules()
    assert {"RalphProject", "ReplayScript", "story", "settings_for", "require"} <= set(modules[0].__all__)
    assert [m.__name__ for m in modules if not hasattr(m, "__all__")] == [], "give these modules an __all__"
    missing = _undocumented_names(modules)
    fixtures = ast.parse((CORE / "testing" / "pytest_plugin.py").read_text(encoding="utf-8"))
    public = [node for node in fixtures.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
    assert {node.name for node in public} >= {"ralph_project", "scripted_model", "codex_binary"}
    missing += [f"fixture {node.name}" for node in public if not ast.get_docstring(node)]
    assert missing == [], "public names without a docstring:\n" + "\n".join(missing)


def _undocumented_names(modules: list[types.ModuleType]) -> list[str]:
    """The modules, names in their ``__all__`` and public methods of those classes that have no docstring."""
    documented_constants: set[str] = set()
    for path in CORE.rglob("*.py"):
        documented_constants |= _attribute_docstrings(path)
    missing = []
    for module in modules:
        if _own_doc(module) is None:
            missing.append(module.__name__)
        for name in module.__all__:
            obj = getattr(module, name)
            where = f"{module.__name__}.{name}"
            if inspect.isclass(obj) or inspect.isfunction(obj):
                if _own_doc(obj) is None:
                    missing.append(where)
                if inspect.isclass(obj):
                    missing += [f"{where}.{m}" for m in _undocumented_members(obj)]
            elif name not in documented_constants:
                missing.append(f"{where} (a constant or alias: give it an attribute docstring where it is defined)")
    return missing


def _undocumented_members(cls: type) -> list[str]:
    out = []
    if issubclass(cls, enum.Enum):
        return [member.name for member in cls if not (member.__doc__ or "").strip() or member.__doc__ == cls.__doc__]
    for attr, value in vars(cls).items():
        if attr.startswith("_"):
            continue
        function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if inspect.isfunction(function) and not (function.__doc__ or "").strip():
            out.append(attr)
    return out


def test_all_names_resolve_and_star_import_works() -> None:
    namespace: dict[str, object] = {}
    exec("from ralph.api import *", namespace)  # noqa: S102 - the import a plugin author may write
    assert set(ralph.api.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ralph.api.nope  # noqa: B018



LAZY_NAMES = """
import importlib, json, pkgutil, ralph.api
found = {}
for name in ["ralph.api", *(i.name for i in pkgutil.iter_modules(ralph.api.__path__, "ralph.api."))]:
    module = importlib.import_module(name)
    found[name] = sorted(set(module.__all__) - set(vars(module)))
print(json.dumps(found))
"""


def test_type_checkers_see_every_lazily_loaded_name() -> None:
    """Names loaded on first use (PEP 562) are also imported under ``TYPE_CHECKING``: without
    that a plugin author's type checker sees them as ``Any`` (module ``__getattr__``)."""
    lazy = json.loads(subprocess.run([sys.executable, "-P", "-c", LAZY_NAMES], capture_output=True, text=True,
                                     check=True).stdout)
    assert sum(len(names) for names in lazy.values()) > 30
    untyped = []
    for module, names in lazy.items():
        path = CORE / Path(*module.split(".")[1:]) / "__init__.py" if module == "ralph.api" else \
            CORE / Path(*module.split(".")[1:]).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typed = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for statement in node.body
            if isinstance(statement, ast.ImportFrom)
            for alias in statement.names
        }
        untyped += [f"{module}.{name}" for name in names if name not in typed]
    assert untyped == []


CORE_API_LIMIT = 45
"""``ralph.api`` holds what every plugin kind needs; what serves one kind goes in a submodule."""


def test_ralph_api_stays_small() -> None:
    assert len(ralph.api.__all__) <= CORE_API_LIMIT, (
        f"ralph.api exports {len(ralph.api.__all__)} names: put what one plugin kind needs in its submodule")
    assert len(set(ralph.api.__all__)) == len(ralph.api.__all__)


def _submodule_users() -> dict[str, set[str]]:
    """``ralph.api.<sub>`` -> the names plugins, the examples and the benchmarks import from it."""
    used: dict[str, set[str]] = {}
    for path in [*PLUGINS.rglob("*.py"), *(ROOT / "examples").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("ralph.api."):
                used.setdefault(node.module or "", set()).update(alias.name for alias in node.names)
    return used


def test_every_submodule_name_is_importable_and_used_or_documented() -> None:
    """A public name earns its place: a plugin or an example uses it, or the docs tell authors of it."""
    used = _submodule_users()
    docs = " ".join(path.read_text(encoding="utf-8") for path in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md",
                                                                   *(ROOT / "examples").glob("*/README.md")])
    blocks = re.findall(r"```.*?```", docs, re.S)
    spans = re.findall(r"`[^`\n]+`", re.sub(r"```.*?```", "", docs, flags=re.S))
    documented = set(re.findall(r"\w+", " ".join(blocks + spans)))
    idle = []
    for module in _api_modules()[1:]:
        assert module.__all__, module.__name__
        for name in module.__all__:
            getattr(module, name)
            if name not in used.get(module.__name__, set()) and name not in documented:
                idle.append(f"{module.__name__}.{name}")
    assert idle == [], "public names no plugin or example uses and no doc names (drop or document them):\n" + "\n".join(idle)


@pytest.mark.parametrize("module", ["ralph.api", *sorted(info.name for info in pkgutil.iter_modules(
    ralph.api.__path__, "ralph.api."))])
def test_importing_an_api_module_alone_makes_no_import_cycle(module: str) -> None:
    """Each module first in a fresh interpreter, then every name of its ``__all__`` (the lazy ones load
    their modules then): a cycle would show as a partially initialised module."""
    code = f"import importlib; m = importlib.import_module({module!r}); [getattr(m, n) for n in m.__all__]"
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_importing_ralph_api_does_not_import_pydantic() -> None:
    code = "import sys, ralph.api; print(sorted(m for m in sys.modules if m.split('.')[0] in {'pydantic', 'click', 'docker'}))"
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_py_typed_ships_with_the_package() -> None:
    assert (CORE / "py.typed").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^ralph = \[.*"py\.typed"', pyproject, re.M), "py.typed must be package data of ralph"


def test_every_python_package_is_in_the_distribution() -> None:
    """An editable install finds any subpackage; a wheel holds only the listed ones (``ralph.api``
    was once missing, so ``pip install ralph-trustloop`` had no plugin API)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = set()
    for name, directory in setuptools["package-dir"].items():
        for init in (ROOT / directory).rglob("__init__.py"):
            on_disk.add(".".join([name, *init.parent.relative_to(ROOT / directory).parts]))
    assert {"ralph", "ralph.api", "ralph_plugins"} <= on_disk
    assert sorted(on_disk - listed) == [], "add these to [tool.setuptools] packages in pyproject.toml"


def _kind_literals(node: ast.expr) -> list[str]:
    """The kind strings an ``emit`` argument can be: a literal, both branches of
    ``"a" if x else "b"``, or the first argument of ``LoopEvent("kind", ...)``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _kind_literals(node.body) + _kind_literals(node.orelse)
    if isinstance(node, ast.Call) and node.args:
        return _kind_literals(node.args[0])
    return []


def _emitted_kinds() -> dict[str, str]:
    kinds = {}
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit" and node.args:
                for kind in _kind_literals(node.args[0]):
                    kinds[kind] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return kinds


def test_every_emitted_event_kind_is_an_event_kind_member() -> None:
    members = {kind.value for kind in ralph.api.EventKind}
    emitted = _emitted_kinds()
    assert len(emitted) > 20, emitted
    unknown = {kind: where for kind, where in emitted.items() if kind not in members}
    assert unknown == {}, "add these kinds to ralph/events.py (EventKind) with their payload documented"



# Where loop events are read: the default reporters, and the commands that read a run's event log.
EVENT_READERS = [*sorted((PLUGINS / "reporters").glob("*.py")),
                 *(CORE / "lifecycle" / name for name in ("follow.py", "report.py", "status.py"))]


def _kind_comparisons(path: Path) -> list[tuple[int, str]]:
    """(line, string) for each string an event's kind is compared with, and each ``on_<kind>``
    handler; ``kind`` inside ``on_agent_event`` is an agent event's type, not a loop event's."""
    found = []

    def is_kind(node: ast.expr) -> bool:
        return ((isinstance(node, ast.Name) and node.id == "kind") or (isinstance(node, ast.Attribute) and node.attr == "kind")
                or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"))

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef):
            if node.name == "on_agent_event":
                return
            if node.name.startswith("on_"):
                found.append((node.lineno, node.name[3:]))
        if isinstance(node, ast.Compare) and is_kind(node.left):
            for other in node.comparators:
                values = other.elts if isinstance(other, (ast.Tuple, ast.Set, ast.List)) else [other]
                found.extend((node.lineno, v.value) for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_every_event_kind_a_reader_expects_is_an_event_kind_member() -> None:
    """A reporter handler or event-log reader waiting for a misspelled kind would wait silently."""
    members = {kind.value for kind in ralph.api.EventKind}
    expected = {f"{path.relative_to(ROOT)}:{line}: {kind}": kind for path in EVENT_READERS for line, kind in _kind_comparisons(path)}
    assert len(expected) > 30, expected
    assert sorted(where for where, kind in expected.items() if kind not in members) == []

def test_event_kinds_are_strings_and_documented() -> None:
    kind = ralph.api.EventKind.RUN_STARTED
    assert kind == "run_started" and f"{kind}" == "run_started" and ralph.api.EventKind("run_started") is kind
    for member in ralph.api.EventKind:
        assert "Payload" in member.doc, member



def test_a_loop_event_carries_an_event_kind_member() -> None:
    event = ralph.api.LoopEvent("gate_failed", {"story": "US-001"})
    assert event.kind is ralph.api.EventKind.GATE_FAILED and event.kind == "gate_failed"
    assert json.dumps({"kind": event.kind}) == '{"kind": "gate_failed"}'  # the event log's form is unchanged
    newer = ralph.api.LoopEvent("from_a_newer_ralph")  # read back from a newer ralph's event log
    assert type(newer.kind) is str and newer.kind == "from_a_newer_ralph"

def test_event_kinds_are_listed_in_the_plugin_docs() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", ROOT / "docs" / "generate_hooks_md.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert text == module.render_events(text), "docs/plugins.md's event table is stale: run python docs/generate_hooks_md.py"
    missing = [kind.value for kind in ralph.api.EventKind if f"`{kind.value}`" not in text]
    assert missing == []
