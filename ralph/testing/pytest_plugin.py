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


def _servers(server_class: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """A factory starting ``server_class(responder, **options)`` servers, all stopped afterwards."""
    servers: list[Any] = []

    def start(responder: Any, **options: Any) -> Any:
        server = server_class(responder, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _found(binary: Path | None, missing: str) -> Path:
    """``binary``, or a skip (a failure under CI=true) saying ``missing``."""
    from ralph.testing.requirements import require

    require(binary is not None, missing)
    assert binary is not None
    return binary


def _agent_env(home: Path, env: Callable[[str, Path], dict[str, str]]) -> Callable[[str], dict[str, str]]:
    """A factory: ``env(url, home)`` with a fresh ``home``, for running a real agent CLI offline."""

    def make(url: str) -> dict[str, str]:
        home.mkdir(exist_ok=True)
        # hook helpers started by hooks outside a loop should not outlive the test for long
        return {**env(url, home), "RALPH_HOOK_DAEMON_IDLE": "5"}

    return make


@pytest.fixture
def scripted_model() -> Iterator[Callable[..., Any]]:
    """Factory: ``server = scripted_model(responder, cache=False)`` starts a scripted model server."""
    from ralph.testing.model_server import ScriptedModelServer

    yield from _servers(ScriptedModelServer)


@pytest.fixture
def claude_binary() -> Path:
    """The real Claude Code CLI (skip, or fail under CI=true, when there is none)."""
    from ralph.claude_cli import resolve_binary

    return _found(resolve_binary()[0], "the real Claude Code CLI was not found (pip install claude-agent-sdk)")


@pytest.fixture
def claude_agent_env(tmp_path: Path) -> Callable[[str], dict[str, str]]:
    """Factory: ``env = claude_agent_env(server.url)`` for running the real CLI offline."""
    from ralph.testing.model_server import claude_env

    return _agent_env(tmp_path / "home", claude_env)


@pytest.fixture
def scripted_responses() -> Iterator[Callable[..., Any]]:
    """Factory: ``server = scripted_responses(responder)`` starts a scripted Responses API server."""
    from ralph.testing.responses_server import ScriptedResponsesServer

    yield from _servers(ScriptedResponsesServer)


@pytest.fixture
def codex_binary() -> Path:
    """The real Codex CLI (skip, or fail under CI=true, when there is none)."""
    from ralph.claude_cli import CODEX_CLI

    return _found(CODEX_CLI.locate()[0], "the real Codex CLI was not found (pip install openai-codex-cli-bin)")


@pytest.fixture
def codex_agent_env(tmp_path: Path) -> Callable[[str], dict[str, str]]:
    """Factory: ``env = codex_agent_env(server.url)`` for running the real Codex CLI offline."""
    from ralph.testing.responses_server import codex_env

    return _agent_env(tmp_path / "codex-user-home", codex_env)


@pytest.fixture
def ralph_cli() -> Callable[..., Any]:
    """``result = ralph_cli("run", "--dry-run", env={...})`` through click's CliRunner."""
    from click.testing import CliRunner

    from ralph.cli.main import cli

    def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)

    return invoke
