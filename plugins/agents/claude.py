"""The ``claude`` agent: Claude Code in headless mode (``claude -p ... --output-format stream-json``).

Imports only the stdlib and ralph's light modules at import time, so that
loading every plugin (``ralph --help``) stays fast; the pydantic config model
lives in ``claude_config`` and is imported only when config is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ralph.api import Agent, AgentEvent, AgentInvocation, Availability, Check, ProcessSpec, hookimpl, locate_claude_cli

if TYPE_CHECKING:
    from ralph.api import PreflightContext, Settings

__all__ = ["ClaudeAgent"]

class ClaudeAgent(Agent):
    """Claude Code, run headless with stream-json output and permissions skipped."""

    name = "claude"
    description = "Claude Code CLI (claude -p, stream-json output)"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._resolved: tuple[Path | None, str, str] | None = None

    def _config_value(self, key: str, default: Any) -> Any:
        section = self.settings.section("claude") if self.settings is not None else None
        value = getattr(section, key, None) if section is not None else None
        return default if value is None else value

    def _resolution(self) -> tuple[Path | None, str, str]:
        if self._resolved is None:
            base_dir = getattr(self.settings, "project_dir", None)
            self._resolved = locate_claude_cli(self._config_value("binary", None), os.environ, base_dir)
        return self._resolved

    def resolve_binary(self) -> tuple[Path | None, str]:
        """The executable this agent runs and where it was found (see ``ralph.api.locate_claude_cli``)."""
        path, source, _ = self._resolution()
        return path, source

    def availability(self) -> Availability:
        """Available when a claude executable was found; otherwise say what was tried."""
        path, _, reason = self._resolution()
        return Availability.yes() if path is not None else Availability.no(reason)

    def preflight(self, context: PreflightContext) -> list[Check]:
        """The binary runs (``--version``), and the agent will have credentials where it runs.

        Credentials: an API key or OAuth token in the environment the agent sees,
        a logged-in credentials file in the home it sees, an ``apiKeyHelper`` in its
        settings, or cloud-provider mode (Bedrock, Vertex).  When
        ``ANTHROPIC_BASE_URL`` is set, that endpoint must answer.
        """
        from ralph_plugins.agents.claude_preflight import binary_check, credential_checks

        path, source, _ = self._resolution()
        checks = [binary_check(path, source)] if path is not None else []
        return checks + credential_checks(context.view, passthrough=self._config_value("env_passthrough", []))

    def process(self, invocation: AgentInvocation) -> ProcessSpec:
        """``claude -p PROMPT --output-format stream-json --verbose --dangerously-skip-permissions ...``."""
        path, _, reason = self._resolution()
        if path is None:
            raise RuntimeError(reason)
        argv = [
            str(path),
            "-p",
            invocation.prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
        ]
        if invocation.model:
            argv += ["--model", invocation.model]
        if invocation.hook_settings is not None:
            argv += ["--settings", str(invocation.hook_settings)]
        argv += self.tool_args(invocation)
        argv += [str(arg) for arg in self._config_value("extra_args", [])]

        # Claude Code refuses --dangerously-skip-permissions as root unless told it is sandboxed.
        env = {"IS_SANDBOX": "1"}
        for var in self._config_value("env_passthrough", []):
            if var in os.environ:
                env[var] = os.environ[var]
        env.update(invocation.env)
        return ProcessSpec(argv=argv, env=env, cwd=invocation.project_dir, program="claude")

    def tools_for(self, key: str | None) -> list[str] | None:
        """The built-in tools offered for ``key`` (a mode, or an extra call's purpose); None: the CLI's set.

        ``[tool.ralph.claude] tools`` maps keys to tool names; see
        :data:`ralph_plugins.agents.claude_config.DEFAULT_TOOLS`.
        """
        if not key:
            return None
        from .claude_config import DEFAULT_TOOLS

        table = self._config_value("tools", None) or DEFAULT_TOOLS
        names = table.get(key)
        if names is None or names == ["default"]:
            return None
        return list(names)

    def tool_args(self, invocation: AgentInvocation) -> list[str]:
        """``--tools A,B`` (the CLI refuses every other built-in tool) and ``--disallowedTools``.

        The tool set is the first of ``tools`` entries named by the invocation's mode, its purpose
        (an extra call such as ``quality``) and, for a read-only call, ``read-only``.
        """
        from .claude_config import DEFAULT_TOOLS

        table = self._config_value("tools", None) or DEFAULT_TOOLS
        keys = [invocation.mode, invocation.purpose if invocation.purpose != "iteration" else None]
        keys.append("read-only" if getattr(invocation, "read_only", False) else None)
        key = next((k for k in keys if k and k in table), None)
        args: list[str] = []
        names = self.tools_for(key)
        if names is not None:
            args += ["--tools", ",".join(names)]  # "" offers no built-in tool at all
        denied = [str(rule) for rule in self._config_value("disallowed_tools", [])]
        if denied:
            args += ["--disallowedTools", *denied]
        return args

    def parse_line(self, line: str) -> list[AgentEvent]:
        """Parse one stream-json line (see :mod:`ralph_plugins.agents.streamjson`)."""
        from ralph_plugins.agents import streamjson

        return streamjson.parse_line(line)


@hookimpl
def ralph_register_agents(register: Callable[[type[Agent]], None]) -> None:
    """Register the ``claude`` agent."""
    register(ClaudeAgent)


@hookimpl
def ralph_config_sections() -> dict[str, type]:
    """The ``[tool.ralph.claude]`` section."""
    from .claude_config import ClaudeConfig

    return {"claude": ClaudeConfig}
