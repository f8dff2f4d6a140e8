"""The base of agents that run a command-line program (Claude Code, Codex, a third party's CLI).

:class:`CliAgent` does what every such agent repeats: read its ``[tool.ralph.<section>]``
config, find the executable once (through an :class:`~ralph.claude_cli.AgentCli`), say
whether it is available, and copy allowed environment variables into the process.  A
subclass still builds the command line (:meth:`~ralph.contracts.Agent.process`) and parses
the output (:meth:`~ralph.contracts.Agent.parse_line`).  Public as ``ralph.api.agents.CliAgent``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping

from ralph.claude_cli import AgentCli, path_outside
from ralph.contracts import Agent, Availability

if TYPE_CHECKING:
    from ralph.settings import Settings

__all__ = ["CliAgent"]


class CliAgent(Agent):
    """An agent that runs the executable :attr:`cli` describes.

    Set :attr:`cli` (where to look: the ``binary`` key of its config section, an environment
    variable, PATH, a wheel) and implement ``process`` and ``parse_line``; use
    :meth:`executable` for ``argv[0]``, :meth:`config_value` for the section's keys and
    :meth:`passthrough_env` for variables the agent may see.
    """

    cli: ClassVar[AgentCli]
    """The CLI this agent runs; ``cli.section`` names its config section."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._resolved: tuple[Path | None, str, str] | None = None

    def config_value(self, key: str, default: Any) -> Any:
        """``key`` of this agent's config section, or ``default`` when unset (or no section)."""
        section = self.settings.section(self.cli.section) if self.settings is not None else None
        value = getattr(section, key, None) if section is not None else None
        return default if value is None else value

    def locate(
        self, configured: str | None, environ: Mapping[str, str], base_dir: Path | None
    ) -> tuple[Path | None, str, str]:
        """Find the executable: ``(path or None, source, reason when not found)`` (``AgentCli.locate``)."""
        return self.cli.locate(configured, environ, base_dir)

    def resolution(self) -> tuple[Path | None, str, str]:
        """:meth:`locate` for the configured ``binary`` (relative to the project), found once.

        Never a program inside the project (the agent writes it): PATH entries inside the project
        (and relative ones) are skipped, and a configured or found executable inside it is refused
        with the reason (``AgentCli.refusal``).
        """
        if self._resolved is None:
            base_dir = getattr(self.settings, "project_dir", None)
            environ: Mapping[str, str] = os.environ
            if base_dir is not None:
                environ = {**os.environ, "PATH": path_outside(os.environ.get("PATH", os.defpath), base_dir)}
            path, source, reason = self.locate(self.config_value("binary", None), environ, base_dir)
            refused = self.cli.refusal(path, source, Path(base_dir)) if path is not None and base_dir is not None else None
            self._resolved = (None, source, refused) if refused else (path, source, reason)
        return self._resolved

    def resolve_binary(self) -> tuple[Path | None, str]:
        """The executable this agent runs and where it was found (``config``, ``env``, ``path`` ...)."""
        path, source, _ = self.resolution()
        return path, source

    def availability(self) -> Availability:
        """Available when the executable was found; otherwise say what was tried."""
        path, _, reason = self.resolution()
        return Availability.yes() if path is not None else Availability.no(reason)

    def executable(self) -> Path:
        """The executable to put in ``argv[0]``; raises ``RuntimeError`` (what was tried) when there is none."""
        path, _, reason = self.resolution()
        if path is None:
            raise RuntimeError(reason)
        return path

    def passthrough_env(self, names: Iterable[str]) -> dict[str, str]:
        """The variables of ``names`` set in ralph's environment, for the agent process's ``env``."""
        return {name: os.environ[name] for name in names if name in os.environ}
