"""The ``claude`` agent: Claude Code in headless mode (``claude -p ... --output-format stream-json``).

Imports only the stdlib and ralph's light modules at import time, so that
loading every plugin (``ralph --help``) stays fast; the pydantic config model
lives in ``claude_config`` and is imported only when config is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from ralph.api import CLAUDE_CLI, AgentEvent, AgentInvocation, Check, CliAgent, ProcessSpec, hookimpl, locate_claude_cli

if TYPE_CHECKING:
    from ralph.api import Agent, PreflightContext

__all__ = ["ClaudeAgent"]


class ClaudeAgent(CliAgent):
    """Claude Code, run headless with stream-json output and permissions skipped."""

    name = "claude"
    description = "Claude Code CLI (claude -p, stream-json output)"
    cli = CLAUDE_CLI

    def locate(
        self, configured: str | None, environ: Mapping[str, str], base_dir: Path | None
    ) -> tuple[Path | None, str, str]:
        """Find Claude Code (see ``ralph.api.locate_claude_cli``)."""
        return locate_claude_cli(configured, environ, base_dir)

    def preflight(self, context: PreflightContext) -> list[Check]:
        """The binary runs (``--version``), and the agent will have credentials where it runs.

        Credentials: an API key or OAuth token in the environment the agent sees,
        a logged-in credentials file in the home it sees, an ``apiKeyHelper`` in its
        settings, or cloud-provider mode (Bedrock, Vertex).  When
        ``ANTHROPIC_BASE_URL`` is set, that endpoint must answer.
        """
        from ralph_plugins.agents.claude_preflight import binary_check, credential_checks

        path, source = self.resolve_binary()
        checks = [binary_check(path, source)] if path is not None else []
        return checks + credential_checks(context.view, passthrough=self.config_value("env_passthrough", []))

    def process(self, invocation: AgentInvocation) -> ProcessSpec:
        """``claude -p PROMPT --output-format stream-json --verbose --dangerously-skip-permissions ...``."""
        argv = [
            str(self.executable()),
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
        argv += [str(arg) for arg in self.config_value("extra_args", [])]

        # Claude Code refuses --dangerously-skip-permissions as root unless told it is sandboxed.
        env = {"IS_SANDBOX": "1", **self.passthrough_env(self.config_value("env_passthrough", [])), **invocation.env}
        return ProcessSpec(argv=argv, env=env, cwd=invocation.project_dir, program="claude")

    def tools_for(self, key: str | None) -> list[str] | None:
        """The built-in tools offered for ``key`` (a mode, or an extra call's purpose); None: the CLI's set.

        ``[tool.ralph.claude] tools`` maps keys to tool names; see
        :data:`ralph_plugins.agents.claude_config.DEFAULT_TOOLS`.
        """
        if not key:
            return None
        from .claude_config import DEFAULT_TOOLS

        table = self.config_value("tools", None) or DEFAULT_TOOLS
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

        table = self.config_value("tools", None) or DEFAULT_TOOLS
        keys = [invocation.mode, invocation.purpose if invocation.purpose != "iteration" else None]
        keys.append("read-only" if getattr(invocation, "read_only", False) else None)
        key = next((k for k in keys if k and k in table), None)
        args: list[str] = []
        names = self.tools_for(key)
        if names is not None:
            args += ["--tools", ",".join(names)]  # "" offers no built-in tool at all
        denied = [str(rule) for rule in self.config_value("disallowed_tools", [])]
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
