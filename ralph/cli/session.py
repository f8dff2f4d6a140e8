"""Open a session: plugins loaded, config validated, settings resolved."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph.plugin.manager import PluginHost
from ralph.settings import Settings


@dataclass
class Session:
    """The plugin host and the settings of one command."""

    host: PluginHost
    settings: Settings

    def build_loop(self):  # type: ignore[no-untyped-def]
        from ralph.loop.engine import build_loop

        config = self.settings.config
        return build_loop(self.settings, self.host, config.runner, config.agent, config.policy)


def open_session(
    project_dir: Path,
    overrides: dict[str, Any] | None = None,
    host: PluginHost | None = None,
    environ: dict[str, str] | None = None,
) -> Session:
    """Load plugins (warning about broken ones), then config with env and CLI overrides."""
    from ralph.config import load_config

    host = host or PluginHost(environ=environ)
    for failure in host.failures:
        sys.stderr.write(
            f"ralph: warning: plugin {failure.name!r} ({failure.distribution}) failed to load and is skipped: "
            f"{failure.error}\n"
        )
    config, plugin_config, source = load_config(project_dir, overrides, host.config_sections(), environ)
    settings = Settings(project_dir=project_dir, config=config, plugin_config=plugin_config, config_source=source)
    return Session(host, settings)
