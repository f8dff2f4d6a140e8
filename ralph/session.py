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
    from ralph.loop.engine import Loop


@dataclass
class Session:
    """The plugin host and the settings of one command."""

    host: PluginHost
    settings: Settings

    def build_loop(self) -> Loop:
        """The loop of ``ralph run``.  Refuses when a plugin failed to load: it may be a
        validator, gate or guard, and a check is never skipped silently."""
        from ralph.loop.engine import build_loop

        self.host.require_all_loaded()
        config = self.settings.config
        return build_loop(self.settings, self.host, config.runner, config.agent, config.policy)


def open_session(
    project_dir: Path,
    overrides: dict[str, Any] | None = None,
    host: PluginHost | None = None,
    environ: dict[str, str] | None = None,
    strict: bool = False,
    warn: bool = True,
) -> Session:
    """Load plugins (warning about broken ones), then config with env and CLI overrides.

    Returns the plugin host and the ``Settings`` every plugin is constructed with.
    ``strict`` (``ralph run``): a plugin that did not load is an error, not a warning.
    ``warn=False`` (``ralph doctor``): no warning, the caller reports ``host.failures`` itself.
    """
    from ralph.config import load_config

    host = host or PluginHost(environ=environ)
    if strict:
        host.require_all_loaded()
    if warn:
        for warning in host.failure_warnings():
            sys.stderr.write(warning + "\n")
    config, plugin_config, _ = load_config(project_dir, overrides, host.config_sections(), environ)
    settings = Settings(project_dir=project_dir, config=config, plugin_config=plugin_config)
    return Session(host, settings)
