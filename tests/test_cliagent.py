"""``ralph.api.agents.CliAgent``: the base a third-party agent that runs a CLI builds on (as claude and codex do)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ralph.api import AgentEvent, AgentInvocation, ProcessSpec
from ralph.api.agents import AgentCli, CliAgent

TOOL_CLI = AgentCli("mytool", "mytool", "MYTOOL_BINARY", "no_such_mytool_wheel", "bin", "mytool-bin")


class _Settings:
    def __init__(self, project_dir: Path, **section: Any) -> None:
        self.project_dir = project_dir
        self._section = SimpleNamespace(**section) if section else None

    def section(self, name: str) -> Any:
        return self._section if name == "mytool" else None


class MyAgent(CliAgent):
    """What docs/plugins.md shows a third party writing."""

    name = "mytool"
    cli = TOOL_CLI

    def process(self, invocation: AgentInvocation) -> ProcessSpec:
        """``mytool --prompt PROMPT``."""
        argv = [str(self.executable()), "--prompt", invocation.prompt]
        env = {**self.passthrough_env(self.config_value("env_passthrough", [])), **invocation.env}
        return ProcessSpec(argv=argv, env=env, cwd=invocation.project_dir, program="mytool")

    def parse_line(self, line: str) -> list[AgentEvent]:
        """Each line is text."""
        return [AgentEvent("text", text=line.rstrip("\n"))]


def _tool(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\necho "ran with $*"\n')
    path.chmod(0o755)
    return path


def _invocation(project: Path, prompt: str = "hello") -> AgentInvocation:
    return AgentInvocation(prompt=prompt, project_dir=project, run_dir=project / "run", iteration=1, env={"X": "1"})


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MYTOOL_BINARY", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))


def test_configured_binary_runs_and_one_inside_the_project_is_refused(tmp_path: Path, clean_env: None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _tool(tmp_path / "tools" / "mytool")
    monkeypatch.setenv("SHARED_TOKEN", "t0k")
    agent = MyAgent(_Settings(tmp_path / "project", binary=str(tool), env_passthrough=["SHARED_TOKEN", "UNSET_ONE"]))
    assert agent.availability().ok
    assert agent.resolve_binary() == (tool, "config")
    spec = agent.process(_invocation(tmp_path))
    assert spec.argv == [str(tool), "--prompt", "hello"]
    assert spec.env == {"SHARED_TOKEN": "t0k", "X": "1"}
    done = subprocess.run(spec.argv, capture_output=True, text=True, check=True)
    assert agent.parse_line(done.stdout)[0].text == "ran with --prompt hello"
    # relative to the project, or absolute but inside it: the agent could have written it
    for value in ("tools/mytool", str(tool)):
        inside = MyAgent(_Settings(tmp_path, binary=value)).availability()
        assert not inside.ok and "is inside the project" in inside.reason and "[tool.ralph.mytool] binary" in inside.reason


def test_env_var_then_path(tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from_env = _tool(tmp_path / "env" / "mytool")
    on_path = _tool(tmp_path / "path" / "mytool")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert MyAgent(_Settings(tmp_path / "project")).resolve_binary() == (on_path, "path")
    monkeypatch.setenv("MYTOOL_BINARY", str(from_env))
    assert MyAgent(_Settings(tmp_path / "project")).resolve_binary() == (from_env, "env")


def test_missing_cli_says_what_was_tried_and_process_refuses(tmp_path: Path, clean_env: None) -> None:
    agent = MyAgent(_Settings(tmp_path))
    availability = agent.availability()
    assert not availability.ok
    for tried in ("[tool.ralph.mytool] binary", "MYTOOL_BINARY", "PATH", "pip install mytool-bin"):
        assert tried in availability.reason
    assert agent.resolve_binary() == (None, "none")
    with pytest.raises(RuntimeError) as raised:
        agent.process(_invocation(tmp_path))
    assert str(raised.value) == availability.reason
    bad = MyAgent(_Settings(tmp_path, binary="/no/such/mytool")).availability()
    assert not bad.ok and "/no/such/mytool" in bad.reason


def test_config_values_default_and_the_binary_is_found_once(tmp_path: Path, clean_env: None) -> None:
    tool = _tool(tmp_path / "mytool")
    agent = MyAgent(_Settings(tmp_path / "project", binary=str(tool), model=None))
    assert agent.config_value("model", "m1") == "m1"  # unset (None) keys take the default
    assert agent.config_value("absent", 3) == 3
    assert MyAgent(_Settings(tmp_path)).config_value("binary", "d") == "d"  # no section at all
    assert agent.resolve_binary() == (tool, "config")
    tool.unlink()
    assert agent.resolve_binary() == (tool, "config") and agent.availability().ok
    assert not MyAgent(_Settings(tmp_path / "project", binary=str(tool))).availability().ok


def test_path_entries_inside_the_project_are_skipped(tmp_path: Path, clean_env: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    planted = _tool(project / "node_modules" / ".bin" / "mytool")
    outside = _tool(tmp_path / "usr-bin" / "mytool")
    monkeypatch.setenv("PATH", f"{planted.parent}:.:{outside.parent}")
    monkeypatch.chdir(project / "node_modules" / ".bin")  # "." would find it too
    assert MyAgent(_Settings(project)).resolve_binary() == (outside, "path")
    monkeypatch.setenv("PATH", f"{planted.parent}")
    refused = MyAgent(_Settings(project)).availability()
    assert not refused.ok and "not found" in refused.reason  # only inside the project: not found, never run
    link = tmp_path / "elsewhere" / "mytool"
    link.parent.mkdir()
    link.symlink_to(planted)  # outside the project, pointing into it
    monkeypatch.setenv("MYTOOL_BINARY", str(link))
    refused = MyAgent(_Settings(project)).availability()
    assert not refused.ok and "is inside the project" in refused.reason and "MYTOOL_BINARY" in refused.reason


def test_doctor_warns_when_ralph_itself_lives_inside_the_project(tmp_path: Path) -> None:
    import ralph
    from ralph.loop.preflight import installed_inside

    assert installed_inside(tmp_path) is None
    warning = installed_inside(Path(ralph.__file__).parents[1])  # this checkout, as a project
    assert warning is not None and warning.ok is None and "ralph runs from inside the project" in warning.what
