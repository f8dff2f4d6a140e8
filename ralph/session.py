"""Open a project for a command: plugins loaded, config validated, settings resolved.

A ``Session`` here is the plugin host and settings of one ``ralph`` command, not an agent's
session (``ralph/loop/agents.py``).  Below the CLI: the lifecycle commands, ``ralph.testing``
and ``ralph.api`` open one too.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.plugin.manager import PluginHost
from ralph.settings import Settings

if TYPE_CHECKING:
    from ralph.errors import PluginError
    from ralph.loop.engine import Loop
    from ralph.loop.runcontext import RunOptions


@dataclass
class Session:
    """The plugin host and the settings of one command."""

    host: PluginHost
    settings: Settings

    def build_loop(self, options: RunOptions | None = None) -> Loop:
        """The loop of ``ralph run`` (with ``options``: ``--story``, ``--resume`` / ``--fresh``).  Refuses
        when a plugin failed to load: it may be a validator, gate or guard, and a check is never skipped
        silently."""
        from ralph.loop.engine import build_loop

        self.host.require_all_loaded()
        config = self.settings.config
        return build_loop(self.settings, self.host, config.runner, config.agent, config.policy, options)


def open_session(
    project_dir: Path,
    overrides: dict[str, Any] | None = None,
    host: PluginHost | None = None,
    environ: dict[str, str] | None = None,
    strict: bool = False,
    warn: bool = True,
    local_plugins: bool = False,
) -> Session:
    """Load plugins (warning about broken ones), then config with env and CLI overrides.

    Returns the plugin host and the ``Settings`` every plugin is constructed with.
    ``strict`` (``ralph run``): a plugin that did not load is an error, not a warning.
    ``warn=False`` (``ralph doctor``): no warning, the caller reports ``host.failures`` itself.
    ``local_plugins`` (``ralph run`` alone): also the project's own plugin files named in its
    config (``plugins = [...]``), read now and executed from memory (ralph/plugin/local.py);
    refused while another run is active in the project.
    """
    from ralph.config import load_config

    host = host or PluginHost(environ=environ)
    if local_plugins:
        _load_local_plugins(host, project_dir)
    if strict:
        host.require_all_loaded()
    if warn:
        for warning in host.failure_warnings():
            sys.stderr.write(warning + "\n")
    config, plugin_config, _ = load_config(project_dir, overrides, host.config_sections(), environ)
    settings = Settings(project_dir=project_dir, config=config, plugin_config=plugin_config)
    return Session(host, settings)


def where_named(exc: PluginError, settings: Settings, from_cli: dict[str, str | None]) -> PluginError:
    """``exc`` (an unknown runner, agent or policy) saying where the name was set: the environment
    variable or the config file (a name from the command line needs no pointer); else ``exc``."""
    import os

    from ralph.configfile import find_config_file
    from ralph.errors import PluginError

    message = str(exc)
    for key in ("runner", "agent", "policy"):
        value = getattr(settings.config, key)
        if not message.startswith(f"unknown {key} {value!r}") or from_cli.get(key):
            continue
        env = f"RALPH_{key.upper()}"
        source = find_config_file(settings.project_dir)[0]
        if os.environ.get(env):
            where = f"the environment variable {env}"
        elif source is not None:
            table = "[tool.ralph]" if source.name == "pyproject.toml" else "the top level"
            where = f"{source} ({key} = {value!r} in {table})"
        else:
            continue
        return PluginError(f"{message} (set by {where}): fix it there or pass --{key}")
    return exc


def _load_local_plugins(host: PluginHost, project_dir: Path) -> None:
    """The project's local plugins into ``host``, unless a run is active (its agent may be writing them)."""
    from ralph.plugin import local

    _, names = local.configured(project_dir)
    if not names:
        return
    from ralph.errors import LockedError
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock

    if ProjectLock(git_dir(project_dir)).is_held():
        raise LockedError(
            f"another `ralph run` is active in this project, and its agent may be changing the local plugins "
            f"({', '.join(names)}): they are read only when no run is active; wait for it to finish"
        )
    host.add_local(local.read(project_dir))
