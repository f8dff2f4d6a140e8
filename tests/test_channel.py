"""The loop <-> agent <-> runner channel as typed data (issue 23 item 1).

The loop builds an :class:`~ralph.contracts.AgentChannel` for this machine, the runner remaps it
through ``Runner.agent_channel`` (one method), and each agent renders its own format from it as
files on the ``ProcessSpec``; no plugin parses another plugin's format or reads ``RALPH_*``
strings back.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest

from ralph.config import RalphConfig
from ralph.contracts import CHANNEL_ENV, AgentChannel, AgentInvocation, ProcessSpec, Runner
from ralph.hooks.wiring import hook_command_for
from ralph.settings import Settings
from ralph_plugins.agents.claude import ClaudeAgent
from ralph_plugins.agents.claude_config import ClaudeConfig
from ralph_plugins.agents.codex import CodexAgent


def channel(tmp_path: Path, **changes: Any) -> AgentChannel:
    base = AgentChannel(
        hook_socket=tmp_path / "sock" / "hook.sock",
        token="tok",
        run_dir=tmp_path / "run",
        state_file=tmp_path / "run" / "state.json",
        tasks_file=tmp_path / "project" / "ralph" / "tasks.json",
        hook_command=("/usr/bin/python3", "-S", "-P", "/opt/client.py"),
        loader_env={"PYTHONPATH": ""},
    )
    return dataclasses.replace(base, **changes)


def fake_binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_channel_as_environment_and_hook_env(tmp_path: Path) -> None:
    ch = channel(tmp_path)
    env = ch.env()
    assert list(env) == list(CHANNEL_ENV)
    assert env["RALPH_HOOK_SOCKET"] == str(tmp_path / "sock" / "hook.sock") and env["RALPH_HOOK_TOKEN"] == "tok"
    assert env["RALPH_TASKS_FILE"] == str(ch.tasks_file) and env["RALPH_STATE_FILE"] == str(ch.state_file)
    assert ch.hook_env() == {"PYTHONPATH": "", **env}
    assert shlex.split(ch.hook_command_line()) == list(ch.hook_command)


def test_remap_moves_only_paths_under_the_old_root(tmp_path: Path) -> None:
    ch = channel(tmp_path, config_home=tmp_path / "run" / "claude-home")
    moved = ch.remap(tmp_path / "run", Path("/node/private"))
    assert moved.run_dir == Path("/node/private") and moved.state_file == Path("/node/private/state.json")
    assert moved.config_home == Path("/node/private/claude-home")
    assert moved.tasks_file == ch.tasks_file and moved.hook_socket == ch.hook_socket  # not under run/
    assert moved.token == "tok" and moved.hook_command == ch.hook_command


def test_claude_renders_its_settings_from_the_channel(tmp_path: Path) -> None:
    binary = fake_binary(tmp_path / "bin" / "claude")  # outside the project: ralph runs nothing from inside it
    (tmp_path / "project").mkdir()
    agent = ClaudeAgent(Settings(tmp_path / "project", RalphConfig(), {"claude": ClaudeConfig(binary=str(binary))}))
    ch = channel(tmp_path, model_endpoint="http://127.0.0.1:9/", config_home=tmp_path / "cfg")
    spec = agent.process(AgentInvocation("p", tmp_path, tmp_path / "run", 1, env=ch.env(), channel=ch))
    settings_path = tmp_path / "run" / "claude-settings.json"
    assert spec.argv[spec.argv.index("--settings") + 1] == str(settings_path)
    rendered = json.loads(spec.files[settings_path])
    command = rendered["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert command == hook_command_for(ch) and ch.hook_command_line() in command  # inside the fail-closed wrapper
    # the hook process's variables, and the meter pinned over any project setting of the base URL
    assert rendered["env"] == {**ch.hook_env(), "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}
    assert rendered["disableAllHooks"] is False
    assert spec.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/" and spec.env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "cfg")
    assert spec.channel == ch
    assert not settings_path.exists()  # data on the spec: the runner writes it where the agent runs


def test_codex_renders_hooks_endpoint_and_home_from_the_channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RALPH_CODEX_BINARY", str(fake_binary(tmp_path / "codex")))
    monkeypatch.delenv("RALPH_CODEX_BASE_URL", raising=False)

    class _Settings:
        project_dir = None

        def section(self, name: str) -> None:
            return None

    ch = channel(tmp_path, model_endpoint="http://127.0.0.1:7/v1", config_home=tmp_path / "codex-home")
    spec = CodexAgent(_Settings()).process(  # type: ignore[arg-type]
        AgentInvocation("do", tmp_path, tmp_path / "run", 1, sandboxed=True, channel=ch)
    )
    overrides = [spec.argv[i + 1] for i, a in enumerate(spec.argv) if a == "-c"]
    quoted = json.dumps(hook_command_for(ch))
    assert f'hooks.PreToolUse=[{{hooks = [{{type = "command", command = {quoted}, timeout = 60}}]}}]' in overrides
    assert any('base_url = "http://127.0.0.1:7/v1"' in o for o in overrides)
    assert spec.env["CODEX_HOME"] == str(tmp_path / "codex-home")
    assert spec.files == {}  # no Claude settings file for codex


class _OldRunner(Runner):
    name = "old"

    def availability(self) -> Any:
        raise NotImplementedError

    def run(self, spec: ProcessSpec, on_line: Any, timeout: Any, cancel: Any) -> Any:
        raise NotImplementedError

    def hook_command(self) -> str | None:
        return "python3 -S /elsewhere/client.py"


def test_default_agent_channel_honours_the_older_hook_command(tmp_path: Path) -> None:
    ch = channel(tmp_path)
    assert _OldRunner(None).agent_channel(ch).hook_command == ("python3", "-S", "/elsewhere/client.py")  # type: ignore[arg-type]


def test_docker_runner_remaps_the_channel_for_the_container(tmp_path: Path) -> None:
    from ralph.hooks.wiring import PINNED_ENV
    from ralph_plugins.runners.docker.naming import HOOK_ARGV, reachable_endpoint
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    runner = DockerSandboxRunner(Settings(tmp_path, RalphConfig(), {}))
    runner._gateway = lambda: "172.17.0.1"  # type: ignore[method-assign]
    ch = runner.agent_channel(channel(tmp_path, model_endpoint="http://127.0.0.1:8123/v1", loader_env={"PYTHONPATH": "/x"}))
    assert ch.hook_command == HOOK_ARGV
    assert ch.loader_env == {name: "" for name in PINNED_ENV}
    assert ch.model_endpoint == "http://172.17.0.1:8123/v1"
    assert reachable_endpoint("https://api.example.com/v1", "g") == "https://api.example.com/v1"


def test_run_process_writes_the_spec_files_first(tmp_path: Path) -> None:
    from ralph.process import run_process

    target = tmp_path / "run" / "settings.json"
    lines: list[str] = []
    spec = ProcessSpec(["cat", str(target)], {}, tmp_path, files={target: '{"a": 1}\n'})
    outcome = run_process(spec, lines.append, 30, threading.Event())
    assert outcome.exit_code == 0 and lines == ['{"a": 1}']
    assert oct(target.stat().st_mode)[-3:] == "600"


OLD_AGENT = """
from ralph.api import Agent, Availability, ProcessSpec, hookimpl

RALPH_API = "2"


class OldAgent(Agent):
    name = "old"

    def availability(self):
        return Availability.yes()

    def process(self, invocation):
        return ProcessSpec(["true"], dict(invocation.env), invocation.project_dir)

    def parse_line(self, line):
        return []


@hookimpl
def ralph_register_agents(register):
    register(OldAgent)
"""


def test_an_agent_that_does_not_render_the_channel_is_refused_before_iteration_1(
        ralph_project: Any, fake_dists: Any) -> None:
    """The loop writes no Claude settings file for another agent: one that does not wire ralph's hooks
    from the channel (``uses_channel``) would run unguarded, so ``ralph run`` refuses it, saying how to fix it."""
    from ralph.testing import story

    fake_dists.add({"old-agent": "ralph_fake_old_agent"}, {"ralph_fake_old_agent": OLD_AGENT})
    ralph_project.write_stories([story("US-001")])
    result = ralph_project.run("run", "--agent", "old", "--runner", "direct", "--skip-review", "-n", "1",
                               env={"PYTHONPATH": str(fake_dists.root), "RALPH_PREFLIGHT": "0"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "agent 'old' cannot run in a loop: it does not wire ralph's hooks from the loop's channel" in result.stderr
    assert "set uses_channel = True" in result.stderr
    assert ralph_project.events("iteration_started") == []


def test_the_loop_adds_only_the_channel_to_an_agents_spec(ralph_project: Any, tmp_path: Path) -> None:
    """A channel-aware agent's spec keeps exactly the files it rendered; the loop adds the channel the
    runner remapped (what the runner reads), with the agent's own model upstream when it is not metered;
    an agent without ``uses_channel`` gets no invocation."""
    from ralph.contracts import Agent, AgentEvent, Availability
    from ralph.errors import UnavailableError
    from ralph.loop.agents import LoopAgents

    class NewAgent(Agent):
        name = "new"
        uses_channel = True

        def availability(self) -> Availability:
            return Availability.yes()

        def process(self, invocation: AgentInvocation) -> ProcessSpec:
            return ProcessSpec(["true"], dict(invocation.env), invocation.project_dir)

        def parse_line(self, line: str) -> list[AgentEvent]:
            return []

        def model_upstream(self) -> str | None:
            return "https://models.example:8443"

    class OldAgent(NewAgent):
        name = "old"
        uses_channel = False

    class Bridge:
        run_dir = tmp_path / "run"

        def channel(self, tasks_file: Path, iteration: int | None = None) -> AgentChannel:
            return channel(tmp_path, tasks_file=tasks_file)

    settings = Settings(ralph_project.path, RalphConfig(), {})
    from types import SimpleNamespace

    runner = _OldRunner(settings)
    context = SimpleNamespace(settings=settings, config=settings.config, host=object(), runner=runner,
                              tasks_path=ralph_project.ralph_dir / "tasks.json", cancel=threading.Event(),
                              emit=lambda *a, **k: None, clock=SimpleNamespace(iteration_timeout=lambda: 10.0),
                              meter=None)
    agents = LoopAgents(context, NewAgent(settings), OldAgent(settings))  # type: ignore[arg-type]
    agents.channel = Bridge()  # type: ignore[assignment]
    invocation = agents._invocation(agents.agent, None, None, prompt="p", iteration=1)
    spec = agents._process(agents.agent, invocation)
    assert spec.files == {}
    assert spec.channel is not None and spec.channel.hook_command == ("python3", "-S", "/elsewhere/client.py")
    # unmetered, the channel says where the agent's model calls go (a runner filtering the network lets them through)
    assert spec.channel.model_endpoint is None and spec.channel.model_upstream == "https://models.example:8443"
    metered = agents._invocation(agents.agent, "http://127.0.0.1:9/meter", None, prompt="p", iteration=1).channel
    assert metered is not None and (metered.model_endpoint, metered.model_upstream) == ("http://127.0.0.1:9/meter", None)
    with pytest.raises(UnavailableError, match="agent 'old' cannot run in a loop"):
        agents._invocation(agents.review_agent, None, None, prompt="p", iteration=2)
