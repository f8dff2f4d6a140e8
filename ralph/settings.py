"""The resolved settings of one ralph invocation (config file + env + flags)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ralph.config import RalphConfig


@dataclass
class Settings:
    """What every plugin is constructed with.

    ``config`` is the validated ``[tool.ralph]`` table with env and CLI
    overrides applied; ``plugin_config`` maps a plugin's section name to its own
    validated pydantic model (see the ``ralph_config_sections`` hook).
    """

    project_dir: Path
    config: RalphConfig
    plugin_config: dict[str, Any] = field(default_factory=dict)

    @property
    def ralph_dir(self) -> Path:
        """The ralph directory (prd.md, the task list, progress.txt, prompt.md), absolute."""
        path = Path(self.config.ralph_dir)
        return path if path.is_absolute() else self.project_dir / path

    def section(self, name: str) -> Any:
        """The validated config model of plugin section ``name``."""
        return self.plugin_config.get(name)


def section_or_default(settings: Settings | None, name: str, model: Callable[[], Any]) -> Any:
    """Plugin section ``name`` of ``settings``, or ``model()`` (the section's defaults) where there
    is none: the section is not configured, or the plugin was made without settings (in a test)."""
    section = settings.section(name) if settings is not None else None
    return model() if section is None else section
