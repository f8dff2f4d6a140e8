"""The ``codex`` agent: the OpenAI Codex CLI, run non-interactively (``codex exec --json``).

What ralph passes, all from outside the project (the agent cannot edit it):

* ``CODEX_HOME`` = a fresh private directory the loop makes in the run directory
  for every process (inside ralph's container: a directory on the container's
  tmpfs, since the run directory is mounted read-only there and Codex writes its
  session files into its home); a user's ``auth.json`` is linked in so a
  ``codex login`` keeps working, nothing else of theirs;
* ralph's hooks on every event it answers, as ``-c hooks.<Event>=[...]``
  overrides, with ``--dangerously-bypass-hook-trust`` (Codex skips hooks it was
  not told to trust, and ralph wrote these itself);
* a model provider for ``[tool.ralph.codex] base_url`` (or ``$RALPH_CODEX_BASE_URL``)
  speaking the Responses API;
* Codex's own ``workspace-write`` sandbox in direct mode, with the repository's
  git directory added as a writable root (the agent commits), and Codex's sandbox
  helper kept where no sandboxed command can write it
  (:mod:`ralph_plugins.agents.codex_sandbox`); inside ralph's container Codex's
  sandbox is off and the container is the boundary.

The prompt goes on stdin (``codex exec ... -``).  Output parsing lives in
:mod:`ralph_plugins.agents.codex_events`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ralph.api import AgentEvent, AgentInvocation, ProcessSpec, hookimpl
from ralph.api.agents import CODEX_CLI, CliAgent

from .codex_sandbox import helper_placement

if TYPE_CHECKING:
    from ralph.api import Agent, AgentView

__all__ = ["BASE_URL_ENV", "BINARY_ENV_VAR", "CodexAgent", "bundled_binary", "channel_hooks", "resolve_binary", "toml_value"]

BINARY_ENV_VAR = CODEX_CLI.env_var
BASE_URL_ENV = "RALPH_CODEX_BASE_URL"
DIALECT_ENV = "RALPH_HOOK_DIALECT"
PROVIDER_ID = "ralph"
HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")


def bundled_binary() -> Path | None:
    """The CLI inside an installed openai-codex-cli-bin wheel (``codex_cli_bin/bin/codex``)."""
    return CODEX_CLI.bundled()


def _resolve(configured: str | None, environ: Mapping[str, str], base_dir: Path | None) -> tuple[Path | None, str, str]:
    return CODEX_CLI.locate(configured, environ, base_dir, bundled=lambda: bundled_binary())


def resolve_binary(
    configured: str | None = None, environ: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> tuple[Path | None, str]:
    """Find the codex executable: ``(path or None, source)``.

    Order: ``configured``, ``$RALPH_CODEX_BINARY``, ``codex`` on PATH, the CLI in
    the openai-codex-cli-bin wheel.  ``source`` is ``config``, ``env``, ``path``,
    ``openai-codex-cli-bin`` or ``none``.
    """
    path, source, _ = _resolve(configured, os.environ if environ is None else environ, base_dir)
    return path, source


def toml_value(value: Any) -> str:
    """``value`` as an inline TOML value (what ``codex -c key=value`` parses)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot express {type(value).__name__} in TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def channel_hooks(invocation: AgentInvocation) -> dict[str, str]:
    """Event -> command: the channel's hook client (wrapped to fail closed) on every event Codex runs
    hooks for; none without a channel (the loop always gives one)."""
    channel = getattr(invocation, "channel", None)
    if channel is None:
        return {}
    from ralph.api.hooks import hook_command_for

    command = hook_command_for(channel)
    return {event: command for event in HOOK_EVENTS}


def _git_dirs(project_dir: Path) -> list[str]:
    """The repository's git directories (a worktree has two), for Codex's writable roots."""
    found: list[str] = []
    for flag in ("--git-dir", "--git-common-dir"):
        from ralph.api.process import git  # hardened, after the git metadata check

        result = git(project_dir, "rev-parse", "--path-format=absolute", flag, check=False)
        value = result.stdout.strip()
        if result.returncode == 0 and value and value not in found:
            found.append(value)
    return found


class CodexAgent(CliAgent):
    """The OpenAI Codex CLI, run with ``codex exec --json`` and ralph's hooks."""

    name = "codex"
    description = "OpenAI Codex CLI (codex exec --json)"
    cli = CODEX_CLI
    uses_channel = True

    def preflight(self, context: Any) -> list[Any]:
        """The binary runs, a key or a ``codex login`` exists, a configured endpoint answers, and (on
        this machine, where Codex's own sandbox is used) that sandbox starts a command."""
        from ralph_plugins.agents.codex_preflight import codex_checks, sandbox_check

        path, source = self.resolve_binary()
        if path is None:
            return []
        base_url = self.config_value("base_url", None) or os.environ.get(BASE_URL_ENV) or None
        key_env = self.config_value("api_key_env", "OPENAI_API_KEY")
        checks = codex_checks(path, source, key_env, base_url, context.view)
        if checks[0].ok and not getattr(context.runner, "isolates", False):
            check = sandbox_check(path, str(self.config_value("sandbox", "workspace-write")), context.project_dir)
            if check is not None:
                checks.append(check)
        return checks

    def default_model(self) -> str | None:
        """``[tool.ralph.codex] model``: used when no per-mode model or ``--model`` applies."""
        return self.config_value("model", None)

    def model_upstream(self) -> str | None:
        """The configured Responses endpoint (``base_url`` / ``$RALPH_CODEX_BASE_URL``), which the loop's
        meter can stand in front of; None (not metered) when Codex uses its own provider and login."""
        return self.config_value("base_url", None) or os.environ.get(BASE_URL_ENV) or None

    def _overrides(self, invocation: AgentInvocation, sandboxed: bool) -> list[tuple[str, Any]]:
        overrides: list[tuple[str, Any]] = []
        # the loop's meter when it runs (it forwards to the configured endpoint), else that endpoint
        channel = getattr(invocation, "channel", None)
        base_url = getattr(channel, "model_endpoint", None) or self.model_upstream()
        if base_url:
            retries = int(self.config_value("retries", 1))
            overrides.append(("model_provider", PROVIDER_ID))
            overrides.append((
                f"model_providers.{PROVIDER_ID}",
                {
                    "name": "ralph-configured endpoint",
                    "base_url": base_url,
                    "wire_api": "responses",
                    "env_key": self.config_value("api_key_env", "OPENAI_API_KEY"),
                    "request_max_retries": retries,
                    "stream_max_retries": retries,
                },
            ))
        for event, command in channel_hooks(invocation).items():
            overrides.append((f"hooks.{event}", [{"hooks": [{"type": "command", "command": command, "timeout": 60}]}]))
        writable = not sandboxed and not getattr(invocation, "read_only", False)
        if writable and self.config_value("sandbox", "workspace-write") == "workspace-write":
            overrides.append(("sandbox_workspace_write.writable_roots", _git_dirs(invocation.project_dir)))
        overrides.extend((str(k), v) for k, v in dict(self.config_value("config", {})).items())
        return overrides

    def _sandbox_mode(self, invocation: AgentInvocation) -> str:
        """Codex's ``--sandbox`` in direct mode: ``read-only`` for a reviewer, else ``[tool.ralph.codex] sandbox``."""
        if getattr(invocation, "read_only", False):
            return "read-only"
        return str(self.config_value("sandbox", "workspace-write"))

    def process(self, invocation: AgentInvocation) -> ProcessSpec:
        """``codex exec --json [sandbox flags] [-m MODEL] -c ... -`` with the prompt on stdin."""
        sandboxed = bool(getattr(invocation, "sandboxed", False))
        argv = [str(self.executable()), "exec", "--json", "--color", "never", "-C", str(invocation.project_dir)]
        if sandboxed:
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        else:  # a reviewer gets read-only: Codex's own sandbox stops every write
            argv += ["-s", self._sandbox_mode(invocation)]
        hooks = channel_hooks(invocation)
        if hooks:
            argv.append("--dangerously-bypass-hook-trust")
        model = invocation.model or self.default_model()
        if model:
            argv += ["-m", model]
        for key, value in self._overrides(invocation, sandboxed):
            argv += ["-c", f"{key}={toml_value(value)}"]
        env = {DIALECT_ENV: "codex"}
        home = getattr(getattr(invocation, "channel", None), "config_home", None)
        if home:
            env["CODEX_HOME"] = str(home)  # the loop's fresh home for this process (login_files)
        elif not sandboxed:
            env["CODEX_HOME"] = str(self._private_home(invocation.run_dir))
        # in ralph's container Codex keeps its state in ~/.codex on the container's tmpfs home
        # (the run directory is mounted read-only there)
        env.update(self.passthrough_env(("OPENAI_API_KEY", self.config_value("api_key_env", "OPENAI_API_KEY"), BASE_URL_ENV)))
        env.update(self.passthrough_env(self.config_value("env_passthrough", [])))
        env.update(invocation.env)
        argv += [str(arg) for arg in self.config_value("extra_args", [])]
        if not sandboxed and "CODEX_HOME" in env and Path(env["CODEX_HOME"]).is_dir():
            # after the person's overrides: Codex's sandbox helper must stay out of the sandbox's reach
            placement = helper_placement(Path(env["CODEX_HOME"]), {**os.environ, **env}, self._sandbox_mode(invocation))
            env.update(placement.env)
            for key, value in placement.overrides:
                argv += ["-c", f"{key}={toml_value(value)}"]
        argv.append("-")  # the prompt comes on stdin: no argv length limit, not visible in ps
        return ProcessSpec(argv=argv, env=env, cwd=invocation.project_dir, stdin=invocation.prompt, program="codex",
                           channel=getattr(invocation, "channel", None))

    def login_files(self, view: AgentView) -> dict[str, Path | bytes]:
        """The person's ``auth.json`` (``$CODEX_HOME`` or ``~/.codex`` where the agent runs), for the
        run-owned ``CODEX_HOME`` the loop makes for every process: their ``config.toml`` (MCP
        servers, hooks, notify commands) is not read, and what the agent writes there never
        reaches the next session."""
        configured = view.env.get("CODEX_HOME")
        directory = Path(configured).expanduser() if configured else (view.home / ".codex" if view.home else None)
        auth = directory / "auth.json" if directory is not None else None
        return {"auth.json": auth} if auth is not None and auth.is_file() else {}

    def _private_home(self, run_dir: Path) -> Path:
        """``<run dir>/codex-home``: Codex's state for this run, with the user's login copied in."""
        home = run_dir / "codex-home"
        if not home.is_dir():
            home.mkdir(parents=True, exist_ok=True)
            os.chmod(home, 0o700)
            user_home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
            auth = user_home / "auth.json"
            if auth.is_file() and user_home.resolve() != home.resolve():
                shutil.copyfile(auth, home / "auth.json")
                os.chmod(home / "auth.json", 0o600)
        return home

    def parse_line(self, line: str) -> list[AgentEvent]:
        """Parse one ``codex exec --json`` line (see :mod:`ralph_plugins.agents.codex_events`)."""
        from ralph_plugins.agents import codex_events

        return codex_events.parse_line(line)


@hookimpl
def ralph_register_agents(register: Callable[[type[Agent]], None]) -> None:
    """Register the ``codex`` agent."""
    register(CodexAgent)


@hookimpl
def ralph_config_sections() -> dict[str, type]:
    """The ``[tool.ralph.codex]`` section."""
    from .codex_config import CodexConfig

    return {"codex": CodexConfig}
