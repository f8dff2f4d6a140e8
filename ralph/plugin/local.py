"""Project-local plugins: a plugin file in the project, named in its config (as pytest has
``conftest.py`` and tox ``toxfile.py``)::

    [tool.ralph]
    plugins = ["ralph_local.py"]

Who wrote the file decides whether it may run in the loop's process, so:

- only ``ralph run`` loads them (``--dry-run`` too), and only when no run is active in the project
  (during a run the agent may be changing the file);
- the bytes are read once at the start, without following a link (:mod:`ralph.safeio`), and
  executed from memory: the file is never imported by path, so no later version, ``__pycache__``
  file or sibling module of the project is ever used (the project is not put on ``sys.path``);
- during the run the file is protected: what the agent changes (or adds as a new ``plugins``
  entry) is undone after the iteration and reported (``protected_file_restored``), so the next run
  loads the person's version again (ralph/loop/trustedcopy.py);
- ``ralph doctor`` never executes one: it reports whether it exists and compiles.

A local plugin implements hooks (validators, guards, monitors, reporters, prompt context,
pre-flight checks) and may register gates.  Runners, agents, policies, task stores, fleet
engines and config sections must come from an installed plugin: the other commands (``ralph
doctor``, ``plan``, ``status``) need them and do not load local plugins.
"""

from __future__ import annotations

import hashlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ralph.errors import ConfigError

CONFIG_KEY = "plugins"
"""The config key listing local plugin files (``[tool.ralph] plugins = [...]``)."""

NOT_LOCAL = {
    "ralph_register_runners": "a runner",
    "ralph_register_agents": "an agent",
    "ralph_register_policies": "a policy",
    "ralph_register_task_stores": "a task store",
    "ralph_register_fleet_engines": "a fleet engine",
    "ralph_config_sections": "a config section",
}
"""Hooks a local plugin may not implement, and what they would add."""

_executed: dict[Path, bytes] = {}
"""Every local plugin file this process executed, with the bytes it executed."""


@dataclass(frozen=True)
class LocalPlugin:
    """One local plugin file as read at the start: its name (as the config writes it), path and bytes."""

    name: str
    path: Path
    source: bytes
    config_file: Path

    @property
    def digest(self) -> str:
        """The first 12 hex digits of the file's sha256 (shown by ``ralph doctor`` and the run's events)."""
        return hashlib.sha256(self.source).hexdigest()[:12]

    def describe_source(self) -> str:
        """``local, pyproject.toml``: where the plugin comes from (the distribution column of ``ralph plugins``)."""
        return f"local, {self.config_file.name}"


def configured(project_dir: Path) -> tuple[Path | None, list[str]]:
    """The config file and the local plugin names it lists (``[]`` when none); a ConfigError names
    what is wrong with the list (not a list of strings, a path leaving the project, not a ``.py`` file)."""
    from ralph.configfile import find_config_file, table_prefix

    source, table = find_config_file(project_dir)
    value = table.get(CONFIG_KEY, [])
    where = f"{source}: `{table_prefix(source)}{CONFIG_KEY}`"
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where} must be a list of file names, e.g. {CONFIG_KEY} = [\"ralph_local.py\"]")
    for item in value:
        rel = PurePosixPath(item)
        if rel.is_absolute() or ".." in rel.parts or not item.endswith(".py") or item.startswith("~"):
            raise ConfigError(f"{where}: {item!r} must be a .py file inside the project, as a relative path "
                              "(e.g. \"ralph_local.py\" or \"tools/ralph_plugin.py\")")
    return source, list(dict.fromkeys(value))


def paths(project_dir: Path, names: list[str]) -> list[Path]:
    """The absolute paths of local plugin files ``names``."""
    return [project_dir / name for name in names]


def read(project_dir: Path) -> list[LocalPlugin]:
    """Read every configured local plugin file once (no link followed); ConfigError when one is
    missing, is not a regular file, or a link is on the way."""
    from ralph import safeio

    source, names = configured(project_dir)
    plugins = []
    for name, path in zip(names, paths(project_dir, names)):
        try:
            data = safeio.read_bytes(path, project_dir)
        except FileNotFoundError:
            raise ConfigError(f"{source}: local plugin {name!r} does not exist ({path}): create it, or take it out "
                              f"of `{CONFIG_KEY}`") from None
        except OSError as exc:
            raise ConfigError(f"{source}: local plugin {name!r} cannot be read safely: {exc}") from None
        assert source is not None  # a plugin was named, so a config file was found
        plugins.append(LocalPlugin(name, path, data, source))
    return plugins


def module_of(plugin: LocalPlugin) -> types.ModuleType:
    """Execute ``plugin``'s bytes (as read at the start) as a new module; exceptions propagate."""
    code = compile(plugin.source, str(plugin.path), "exec", dont_inherit=True)
    name = f"ralph_local_plugin_{plugin.digest}_{''.join(c if c.isalnum() else '_' for c in plugin.path.stem)}"
    module = types.ModuleType(name, f"ralph local plugin {plugin.name}")
    module.__file__ = str(plugin.path)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    _executed[plugin.path] = plugin.source
    try:
        exec(code, module.__dict__)  # noqa: S102 - the person's file, read once at the start (module docstring)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def executed() -> dict[Path, bytes]:
    """The local plugin files this process executed and the bytes it executed (the run's trusted copy)."""
    return dict(_executed)


def not_local(module: object) -> str | None:
    """Why ``module`` cannot be a local plugin (it implements a hook only installed plugins may), or None."""
    found = [what for hook, what in NOT_LOCAL.items() if getattr(getattr(module, hook, None), "ralph_impl", None) is not None]
    if not found:
        return None
    return (f"adds {', '.join(found)}, which only an installed plugin may: the other commands (ralph doctor, plan, "
            "status) need it and do not load local plugins; package it (docs/plugins.md, \"The package\")")


def compile_check(project_dir: Path) -> list[tuple[str, str | None, str]]:
    """For ``ralph doctor``: each configured local plugin's name, what is wrong with it (None: it
    compiles) and its digest.  Compiles only: nothing in the file is executed."""
    results: list[tuple[str, str | None, str]] = []
    for plugin in read(project_dir):
        try:
            compile(plugin.source, str(plugin.path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            results.append((plugin.name, f"{type(exc).__name__}: {exc}", plugin.digest))
            continue
        results.append((plugin.name, None, plugin.digest))
    return results
