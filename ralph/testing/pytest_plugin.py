"""pytest fixtures for ralph and for plugin authors (enable with ``pytest_plugins = ["ralph.testing"]``).

- ``ralph_project``: a temporary git project with ``ralph init`` done
  (:class:`ralph.testing.project.RalphProject`).
- ``scripted_model``: start a :class:`ScriptedModelServer` with a responder;
  stopped after the test.
- ``claude_binary``: the real Claude Code CLI, or a skip (a failure under CI=true).
- ``claude_agent_env``: the environment that points the real CLI at a server.
- ``scripted_responses``: start a :class:`ScriptedResponsesServer` (the OpenAI
  Responses API the Codex CLI speaks) with a responder; stopped after the test.
- ``codex_binary``: the real Codex CLI, or a skip (a failure under CI=true).
- ``codex_agent_env``: the environment that points the real Codex CLI at a server.
- ``ralph_cli``: invoke ``ralph`` in-process with click's CliRunner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ralph.testing.project import RalphProject, make_project


@pytest.fixture
def ralph_project(tmp_path: Path) -> RalphProject:
    """A git repository with ``ralph init`` done and committed."""
    return make_project(tmp_path)


@pytest.fixture
def scripted_model() -> Iterator[Callable[[Any], Any]]:
    """Factory: ``server = scripted_model(responder, cache=False)`` starts a scripted model server."""
    from ralph.testing.model_server import ScriptedModelServer

    servers: list[ScriptedModelServer] = []

    def start(responder: Any, **options: Any) -> ScriptedModelServer:
        server = ScriptedModelServer(responder, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def claude_binary() -> Path:
    """The real Claude Code CLI (skip, or fail under CI=true, when there is none)."""
    from ralph.testing.requirements import require
    from ralph.claude_cli import resolve_binary

    binary, source = resolve_binary()
    require(binary is not None, "the real Claude Code CLI was not found (pip install claude-agent-sdk)")
    assert binary is not None
    return binary


@pytest.fixture
def claude_agent_env(tmp_path: Path) -> Callable[[str], dict[str, str]]:
    """Factory: ``env = claude_agent_env(server.url)`` for running the real CLI offline."""
    from ralph.testing.model_server import claude_env

    def make(url: str) -> dict[str, str]:
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        # hook helpers started by hooks outside a loop should not outlive the test for long
        return {**claude_env(url, home), "RALPH_HOOK_DAEMON_IDLE": "5"}

    return make


@pytest.fixture
def scripted_responses() -> Iterator[Callable[[Any], Any]]:
    """Factory: ``server = scripted_responses(responder)`` starts a scripted Responses API server."""
    from ralph.testing.responses_server import ScriptedResponsesServer

    servers: list[ScriptedResponsesServer] = []

    def start(responder: Any) -> ScriptedResponsesServer:
        server = ScriptedResponsesServer(responder).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def codex_binary() -> Path:
    """The real Codex CLI (skip, or fail under CI=true, when there is none)."""
    from ralph.testing.requirements import require
    from ralph_plugins.agents.codex import resolve_binary

    binary, _ = resolve_binary()
    require(binary is not None, "the real Codex CLI was not found (pip install openai-codex-cli-bin)")
    assert binary is not None
    return binary


@pytest.fixture
def codex_agent_env(tmp_path: Path) -> Callable[[str], dict[str, str]]:
    """Factory: ``env = codex_agent_env(server.url)`` for running the real Codex CLI offline."""
    from ralph.testing.responses_server import codex_env

    def make(url: str) -> dict[str, str]:
        home = tmp_path / "codex-user-home"
        home.mkdir(exist_ok=True)
        return {**codex_env(url, home), "RALPH_HOOK_DAEMON_IDLE": "5"}

    return make


@pytest.fixture
def ralph_cli() -> Callable[..., Any]:
    """``result = ralph_cli("run", "--dry-run", env={...})`` through click's CliRunner."""
    from click.testing import CliRunner

    from ralph.cli.main import cli

    def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)

    return invoke
