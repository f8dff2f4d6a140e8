"""The ``claude`` agent: Claude Code in headless mode (``claude -p ... --output-format stream-json``).

Imports only the stdlib and ralph's light modules at import time, so that
loading every plugin (``ralph --help``) stays fast; the pydantic config model
lives in ``claude_config`` and is imported only when config is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from ralph.api import AgentEvent, AgentInvocation, Check, ProcessSpec, hookimpl
from ralph.api.agents import CLAUDE_CLI, CliAgent, locate_claude_cli

if TYPE_CHECKING:
    from ralph.api import Agent, AgentView, PreflightContext

__all__ = ["ANTHROPIC_API", "SETTINGS_FILE", "ClaudeAgent", "config_home", "model_endpoint"]

SETTINGS_FILE = "claude-settings.json"
"""The ``--settings`` file the agent renders from the channel, in the channel's run directory."""

ANTHROPIC_API = "https://api.anthropic.com"
CLOUD_PROVIDER_ENV = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


def config_home(invocation: AgentInvocation) -> Path | None:
    """The run-owned config home the loop made for this process (``CLAUDE_CONFIG_DIR``), or None."""
    home = getattr(getattr(invocation, "channel", None), "config_home", None)
    return Path(home) if home else None


def model_endpoint(invocation: AgentInvocation) -> str | None:
    """The loop-owned model endpoint for this process (the run's meter), or None."""
    channel = getattr(invocation, "channel", None)
    endpoint = getattr(channel, "model_endpoint", None)
    return str(endpoint) if endpoint else None


def pin_endpoint(settings_text: str, endpoint: str | None) -> str:
    """The loop's ``--settings`` (JSON text) with ``ANTHROPIC_BASE_URL`` pinned to the loop's meter: a
    project's settings ``env`` (which the agent can write) then cannot route the CLI around it."""
    if not endpoint:
        return settings_text
    import json

    data = json.loads(settings_text)
    data.setdefault("env", {})["ANTHROPIC_BASE_URL"] = endpoint
    return json.dumps(data, indent=2) + "\n"


class ClaudeAgent(CliAgent):
    """Claude Code, run headless with stream-json output and permissions skipped."""

    name = "claude"
    description = "Claude Code CLI (claude -p, stream-json output)"
    cli = CLAUDE_CLI
    uses_channel = True
    _key_helper: str | None = None
    """The person's ``apiKeyHelper`` ("" when none), read with the login once per run."""

    def locate(
        self, configured: str | None, environ: Mapping[str, str], base_dir: Path | None
    ) -> tuple[Path | None, str, str]:
        """Find Claude Code (see ``ralph.api.agents.locate_claude_cli``)."""
        return locate_claude_cli(configured, environ, base_dir)

    def preflight(self, context: PreflightContext) -> list[Check]:
        """The binary runs (``--version``), and the agent will have credentials where it runs.

        Credentials: an API key or OAuth token in the environment the agent sees,
        a logged-in credentials file in the home it sees, an ``apiKeyHelper`` in its
        settings, or cloud-provider mode (Bedrock, Vertex).  When
        ``ANTHROPIC_BASE_URL`` is set, that endpoint must answer.  An API key beside a
        subscription login warns (``api_billing``: or refuses): the run would bill the API.
        """
        from ralph_plugins.agents.claude_preflight import billing_check, binary_check, credential_checks

        path, source = self.resolve_binary()
        passthrough = self.config_value("env_passthrough", [])
        checks = [binary_check(path, source)] if path is not None else []
        checks += credential_checks(context.view, passthrough=passthrough)
        billing = billing_check(context.view, passthrough, getattr(context.settings.config, "api_billing", "warn"))
        return [*checks, *([billing] if billing is not None else []), self.scope_check(context)]

    def credential_check(self, view: AgentView) -> Check:
        """Whether Claude Code can log in where ``view`` shows it (``--runner auto`` asks before it
        chooses the sandbox): a key or token in its environment, a login in the home it sees ..."""
        from ralph_plugins.agents.claude_preflight import login_check

        return login_check(view, passthrough=self.config_value("env_passthrough", []))

    def scope_check(self, context: PreflightContext) -> Check:
        """What the CLI will read in a loop besides ralph's settings (informative; ``ralph doctor`` shows it)."""
        sources = [s for s in self.config_value("setting_sources", ["project", "local"]) if s != "user"]
        servers = sorted(self.config_value("mcp_servers", {}))
        home = ("a run-owned config dir per session holding only your login" if not context.runner.isolates
                else f"its own config dir on {context.view.where}")
        return Check(True, f"Claude Code in a loop reads {home}; settings: ralph's + "
                           f"{', '.join(sources) or 'no other'}; MCP servers: {', '.join(servers) or 'none'} "
                           "(never your user settings, hooks or MCP servers, nor the project's .mcp.json)")

    def model_upstream(self) -> str | None:
        """Where Claude Code would send its model calls: ``ANTHROPIC_BASE_URL`` or Anthropic's API.

        None (not metered) when the CLI talks to a cloud provider (Bedrock, Vertex, Foundry) or
        through a Unix socket: those do not take a base URL the loop can put its meter behind.
        """
        import os

        environ = {**os.environ, **self.passthrough_env(self.config_value("env_passthrough", []))}
        if any(environ.get(name, "").strip() not in ("", "0", "false") for name in CLOUD_PROVIDER_ENV):
            return None
        if environ.get("ANTHROPIC_UNIX_SOCKET"):
            return None
        return environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_API

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
        files: dict[Path, str] = {}
        channel = invocation.channel
        if channel is not None:  # rendered from the channel, written by the runner where the agent runs
            from ralph.api.hooks import claude_settings

            settings = channel.run_dir / SETTINGS_FILE
            files[settings] = pin_endpoint(self.with_login(claude_settings(channel)), model_endpoint(invocation))
            argv += ["--settings", str(settings)]
            argv += self.scope_args()  # a loop's session: only the loop's configuration
        argv += self.tool_args(invocation)
        argv += [str(arg) for arg in self.config_value("extra_args", [])]

        # Claude Code refuses --dangerously-skip-permissions as root unless told it is sandboxed.
        env = {"IS_SANDBOX": "1", **self.passthrough_env(self.config_value("env_passthrough", [])), **invocation.env}
        endpoint = model_endpoint(invocation)
        if endpoint:
            env["ANTHROPIC_BASE_URL"] = endpoint  # the loop's meter, which forwards to model_upstream()
        home = config_home(invocation)
        if home is not None:
            env["CLAUDE_CONFIG_DIR"] = str(home)  # the person's ~/.claude is neither read nor written
        return ProcessSpec(argv=argv, env=env, cwd=invocation.project_dir, program="claude", files=files,
                           channel=channel)

    def login_files(self, view: AgentView) -> dict[str, Path | bytes]:
        """The person's Claude Code login for the run-owned config home (``.credentials.json``), and
        the ``apiKeyHelper`` of their user settings, read once (see :mod:`.claude_home`)."""
        from .claude_home import key_helper, login_files

        if self._key_helper is None:
            self._key_helper = key_helper(view) or ""
        return login_files(view)

    def with_login(self, settings_text: str) -> str:
        """The loop's settings (JSON text) with the person's ``apiKeyHelper`` added when they log in that
        way (Claude Code reads one ``--settings`` and, in a loop, no user settings)."""
        if not self._key_helper:
            return settings_text
        import json

        data = json.loads(settings_text)
        data["apiKeyHelper"] = self._key_helper
        return json.dumps(data, indent=2) + "\n"

    def scope_args(self) -> list[str]:
        """The configuration the CLI reads besides ralph's settings: ``--setting-sources`` (never the
        person's user settings) and ``--strict-mcp-config`` with ``[tool.ralph.claude] mcp_servers``
        (see :mod:`ralph_plugins.agents.claude_home`)."""
        from .claude_home import mcp_args, source_args

        return source_args(list(self.config_value("setting_sources", ["project", "local"]))) + mcp_args(
            self.config_value("mcp_servers", {}))

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
