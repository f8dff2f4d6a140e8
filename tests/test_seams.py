"""The seams between agents and runners stay closed: they meet only through the typed channel.

- No plugin (ralph's own, or an example package) names the channel's ``RALPH_*`` variables: the hook
  socket, token, run directory, state and task files are :class:`~ralph.contracts.AgentChannel` fields
  (``spec.channel``, ``invocation.channel``).  Only the hook client reads them, from its environment.
- A runner reads no ``RALPH_*`` key of an environment it was handed (``spec.env``).
- An agent's or runner's own variables (``RALPH_CODEX_BASE_URL``) are named by that plugin alone.
- No agent or runner imports another one's modules, and only the claude agent renders Claude Code's
  settings format (``claude_settings``); the core renders no agent's format.

Each exception is listed with its reason, and must still be needed (a stale one fails too).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ralph.contracts import CHANNEL_ENV

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = (ROOT / "plugins" / "agents", ROOT / "plugins" / "runners")
SHARED = {
    "plugins/agents/jsonlines.py": "the agents' bounded JSON-lines parsing, shared on purpose",
    "plugins/agents/streamjson.py": "Claude Code's stream-json, which the replay agent writes on purpose",
}
KNOWN_IMPORTS = {
    ("ray", "docker"): 'agent_runs = "docker-sandbox": the ray actor runs the agent through the docker-sandbox '
                       "runner (its Runner methods and its config section), never through its files or variables",
}
KNOWN_VARIABLES = {
    ("bwrap", "RALPH_CODEX_BASE_URL"): "the same in the bwrap sandbox's allowlist (and its environment allowlist); "
                                       "it goes when the bwrap runner lets channel.model_upstream through instead",
}
RALPH_NAME = re.compile(r"\bRALPH_[A-Z0-9_]+\b")


def unit_of(path: Path) -> str | None:
    """The agent or runner a file belongs to: ``claude_home.py`` -> ``claude``, ``docker/engine.py`` and
    ``docker_sandbox.py`` -> ``docker``, ``ray_cluster/*`` -> ``ray``; an example package by its name."""
    rel = path.relative_to(ROOT)
    if rel.as_posix() in SHARED or (path.name == "__init__.py" and path.parent in FAMILIES):
        return None
    if rel.parts[0] == "examples":
        return rel.parts[2] if len(rel.parts) > 3 and rel.parts[3:4] != ("tests",) and rel.parts[2] != "tests" else None
    first = rel.parts[2] if len(rel.parts) > 3 else rel.stem
    return first.split("_")[0]


def plugin_files() -> list[Path]:
    examples = [p for p in (ROOT / "examples").glob("*/*/*.py") if p.parent.name != "tests"]
    return sorted([*(p for family in FAMILIES for p in family.rglob("*.py")), *examples])


def strings(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every string constant in ``path`` that is not a docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def imported_units(path: Path) -> list[tuple[int, str]]:
    """(line, unit) of every agent or runner module ``path`` imports (relative or ``ralph_plugins.*``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = path.parents[node.level - 1]
            package = base.joinpath(*node.module.split(".")) if node.module else base
        elif (node.module or "").startswith(("ralph_plugins.agents", "ralph_plugins.runners")):
            package = ROOT / "plugins" / Path(*(node.module or "").split(".")[1:])
        else:
            continue
        for alias in node.names:  # ``from .docker import engine`` is docker/engine.py, ``from .claude import x`` claude.py
            module = _module_file(package / alias.name) or _module_file(package)
            unit = unit_of(module) if module is not None and any(f in module.parents for f in FAMILIES) else None
            if unit is not None:
                found.append((node.lineno, unit))
    return found


def _module_file(target: Path) -> Path | None:
    return next((c for c in (target.with_suffix(".py"), target / "__init__.py") if c.is_file()), None)


def test_no_plugin_names_the_channels_environment_variables() -> None:
    offending = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in plugin_files()
                 for line, value in strings(path) for name in RALPH_NAME.findall(value) if name in CHANNEL_ENV]
    assert offending == [], "use the AgentChannel fields (spec.channel, invocation.channel):\n" + "\n".join(offending)


def test_no_runner_reads_ralph_variables_from_the_environment_it_was_handed() -> None:
    offending = []
    for path in plugin_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            key = None
            if isinstance(node, ast.Subscript) and _is_env(node.value):
                key = node.slice
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and _is_env(node.func.value) and node.args:
                key = node.args[0]
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("RALPH_"):
                if (unit_of(path), key.value) not in KNOWN_VARIABLES:
                    offending.append(f"{path.relative_to(ROOT)}:{node.lineno}: {key.value}")
    assert offending == [], "a runner reads the channel, not spec.env:\n" + "\n".join(offending)


def _is_env(node: ast.expr) -> bool:
    """``env`` or ``<anything>.env`` (``spec.env``, ``invocation.env``), not ``os.environ``."""
    return (isinstance(node, ast.Name) and node.id == "env") or (isinstance(node, ast.Attribute) and node.attr == "env")


def test_a_plugins_own_variables_are_named_by_that_plugin_alone() -> None:
    # the core's own settings (RALPH_STATE_DIR ...); ralph.testing, the scripted models (ralph.scripted) and the
    # demo set plugins' variables on purpose
    core = {name for path in (ROOT / "ralph").rglob("*.py")
            if not {"testing", "scripted"} & set(path.parts) and path.name != "demo.py"
            for name in RALPH_NAME.findall(path.read_text(encoding="utf-8"))}
    named: dict[str, dict[str, list[str]]] = {}
    for path in plugin_files():
        unit = unit_of(path)
        for line, value in strings(path):
            for name in set(RALPH_NAME.findall(value)) - core:
                named.setdefault(name, {}).setdefault(str(unit), []).append(f"{path.relative_to(ROOT)}:{line}")
    shared = {name: units for name, units in named.items() if len(units) > 1}
    offending = [f"{name}: {unit} at {', '.join(places)}" for name, units in sorted(shared.items())
                 for unit, places in sorted(units.items()) if (unit, name) not in KNOWN_VARIABLES
                 and not all((other, name) in KNOWN_VARIABLES for other in units if other != unit)]
    stale = [f"{pair}" for pair in KNOWN_VARIABLES if pair[1] not in shared or pair[0] not in shared[pair[1]]]
    assert offending == [], "another plugin's variable (its configuration is its own; share data through the " \
                            "channel):\n" + "\n".join(offending)
    assert stale == [], "no longer needed, remove from KNOWN_VARIABLES: " + ", ".join(stale)


def test_no_agent_or_runner_imports_another_ones_modules() -> None:
    seen: set[tuple[str, str]] = set()
    offending = []
    for path in plugin_files():
        unit = unit_of(path)
        for line, other in imported_units(path):
            if unit is not None and other != unit:
                seen.add((unit, other))
                if (unit, other) not in KNOWN_IMPORTS:
                    offending.append(f"{path.relative_to(ROOT)}:{line}: imports {other}'s module")
    assert offending == [], "agents and runners meet through ralph.api's contracts only:\n" + "\n".join(offending)
    assert set(KNOWN_IMPORTS) <= seen, "no longer needed, remove from KNOWN_IMPORTS: " + str(set(KNOWN_IMPORTS) - seen)


def test_only_the_claude_agent_renders_claude_codes_settings() -> None:
    offending = [f"{path.relative_to(ROOT)}:{line}" for path in plugin_files() if unit_of(path) != "claude"
                 for line, value in strings(path) if "claude-settings" in value]
    for path in plugin_files():
        if unit_of(path) == "claude":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.ImportFrom) else []
            if "claude_settings" in names or (isinstance(node, ast.Attribute) and node.attr == "claude_settings"):
                offending.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    core = [path.relative_to(ROOT).as_posix() for path in (ROOT / "ralph").rglob("*.py")
            if "claude_settings" in path.read_text(encoding="utf-8")]
    assert offending == [], "Claude Code's settings are the claude agent's format:\n" + "\n".join(offending)
    assert sorted(core) == ["ralph/api/hooks.py", "ralph/hooks/wiring.py"], "the core renders no agent's format: " + str(core)


def test_the_units_are_what_the_names_say() -> None:
    """The rule that groups files into agents and runners, on the files it must group."""
    assert unit_of(ROOT / "plugins/agents/claude_home.py") == "claude"
    assert unit_of(ROOT / "plugins/runners/docker/engine.py") == unit_of(ROOT / "plugins/runners/docker_sandbox.py") == "docker"
    assert unit_of(ROOT / "plugins/runners/ray_cluster/actor.py") == "ray"
    assert unit_of(ROOT / "plugins/agents/streamjson.py") is None
    assert unit_of(ROOT / "examples/ralph-remote/ralph_remote/plugin.py") == "ralph_remote"
    assert ("ray", "docker") in {(unit_of(p), u) for p in plugin_files() for _, u in imported_units(p)}
