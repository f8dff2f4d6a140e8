"""`ralph demo` on a fresh project: the full review cycle, with both agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ralph.testing.project import GIT_IDENTITY


def run_demo(tmp_path, agent: str, *, directory: bool = True) -> subprocess.CompletedProcess[str]:
    """``ralph demo --agent AGENT`` in ``tmp_path / "demo"`` (or, ``directory=False``, in a temporary
    directory it makes under ``tmp_path / "tmp"``)."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, **GIT_IDENTITY, "RALPH_STATE_DIR": str(tmp_path / "state"), "TMPDIR": str(tmp_path / "tmp")}
    where = ["--dir", str(tmp_path / "demo")] if directory else []
    return subprocess.run(
        [sys.executable, "-P", "-m", "ralph.cli.main", "demo", "--agent", agent, *where],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def assert_full_cycle(tmp_path, result) -> None:
    assert result.returncode == 0, result.stderr
    project = tmp_path / "demo"
    story = json.loads((project / "ralph" / "tasks.json").read_text())["userStories"][0]
    assert (story["passes"], story["reviewStatus"], story["reviewCount"]) == (True, "approved", 2)
    log = subprocess.run(["git", "log", "--format=%s"], cwd=project, capture_output=True, text=True).stdout.split("\n")
    assert log[:4] == [
        "review: [US-001] - approved",
        "fix: [US-001] - address review feedback",
        "review: [US-001] - changes requested",
        "feat: [US-001] - greet() says hello",
    ]
    assert 'return f"Hello, {name}!"' in (project / "greet.py").read_text()
    assert "SCRIPTED" in result.stdout or "scripted" in result.stdout


def test_demo_with_replay_agent(tmp_path) -> None:
    result = run_demo(tmp_path, "replay")
    assert_full_cycle(tmp_path, result)
    assert "replay agent acts out" in result.stdout


@pytest.mark.real_claude
def test_demo_with_real_claude(tmp_path, claude_binary) -> None:
    result = run_demo(tmp_path, "claude")
    assert_full_cycle(tmp_path, result)
    assert "real Claude Code CLI" in result.stdout


@pytest.mark.real_codex
def test_demo_with_real_codex(tmp_path, codex_binary) -> None:
    result = run_demo(tmp_path, "codex")
    assert_full_cycle(tmp_path, result)
    assert "real Codex CLI" in result.stdout


@pytest.mark.parametrize("agent", ["replay", pytest.param("codex", marks=pytest.mark.real_codex)])
def test_demo_without_dir_keeps_only_the_project(tmp_path, agent, request) -> None:
    """Without ``--dir`` the demo keeps its temporary directory for the user to look around: the
    project, and not the scripted CLI's home or the replay script (the Codex CLI's home was kept)."""
    if agent == "codex":
        request.getfixturevalue("codex_binary")
    result = run_demo(tmp_path, agent, directory=False)
    assert result.returncode == 0, result.stderr
    [work] = (tmp_path / "tmp").glob("ralph-demo-*")
    assert sorted(p.name for p in work.iterdir()) == ["greeting"]
    assert f"rm -rf {work}" in result.stdout


def test_demo_refuses_a_non_empty_directory(tmp_path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "mine.txt").write_text("keep me")
    result = run_demo(tmp_path, "replay")
    assert result.returncode == 2
    assert "is not empty" in result.stderr
    assert (tmp_path / "demo" / "mine.txt").read_text() == "keep me"
