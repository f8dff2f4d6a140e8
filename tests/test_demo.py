"""`ralph demo` on a fresh project: the full review cycle, with both agents."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ralph.testing.project import GIT_IDENTITY


def run_demo(tmp_path, agent: str) -> subprocess.CompletedProcess[str]:
    env = {**__import__("os").environ, **GIT_IDENTITY, "RALPH_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run(
        [sys.executable, "-P", "-m", "ralph.cli.main", "demo", "--agent", agent, "--dir", str(tmp_path / "demo")],
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


def test_demo_refuses_a_non_empty_directory(tmp_path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "mine.txt").write_text("keep me")
    result = run_demo(tmp_path, "replay")
    assert result.returncode == 2
    assert "is not empty" in result.stderr
    assert (tmp_path / "demo" / "mine.txt").read_text() == "keep me"
