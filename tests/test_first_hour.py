"""Issue 12, "the first hour of a new user": one test (or more) per numbered item, each through
the CLI as a user types it (a real ``ralph`` process in a real git repository, the replay agent
as a real subprocess).  The README's quick start itself is run by tests/test_quickstart.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import GIT_IDENTITY, RalphProject, ralph_command, story

IMPLEMENT = [
    {"write": {"path": "a.txt", "content": "a"}},
    {"set": {"story": "US-001", "fields": {"reviewStatus": "needs_review"}}},
    {"commit": "feat: [US-001] - a"},
    {"say": "implemented"},
]
APPROVE = [
    {"set": {"story": "US-001", "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": 1, "notes": "ok"}}},
    {"commit": "review: [US-001] - approved"},
    {"say": "approved <promise>COMPLETE</promise>"},
]


def replay(tmp_path: Path, iterations: dict[int, list[dict[str, Any]]]) -> dict[str, str]:
    """The environment that makes ``--agent replay`` act out ``iterations``."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {str(k): v for k, v in iterations.items()}}))
    return {"RALPH_REPLAY_SCRIPT": str(script)}


def run(project: RalphProject, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return project.run("run", "--runner", "direct", "--agent", "replay", *args, env=env)


def ralph_in(cwd: Path, state: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ralph ARGS`` as a process in ``cwd`` (any directory, not only a RalphProject)."""
    return subprocess.run(
        [*ralph_command(), *args],
        cwd=cwd,
        env={**os.environ, **GIT_IDENTITY, "RALPH_STATE_DIR": str(state), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([story("US-001")])
    return ralph_project


# -- item 9: python -m ralph, docker a regular dependency ------------------------------------


def test_item9_python_dash_m_ralph_works(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-P", "-m", "ralph", "--version"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ralph, version")


def test_item9_docker_sdk_is_a_regular_dependency_imported_lazily() -> None:
    from importlib.metadata import requires

    required = [r for r in requires("ralph-trustloop") or [] if "extra ==" not in r]
    assert any(r.replace(" ", "").startswith("docker>=") for r in required), required
    code = "import sys; from ralph.cli import cli; import ralph_plugins.runners.docker_sandbox; print('docker' in sys.modules)"
    result = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


# -- item 12: running again after a normal end, state keyed by repository ----------------------


def test_item12_run_after_iterations_ran_out_just_continues(project: RalphProject, tmp_path: Path) -> None:
    first = run(project, replay(tmp_path, {1: IMPLEMENT}), "-n", "1")
    assert first.returncode == 1, first.stderr
    assert "max iterations (1) reached" in first.stdout
    # the next run continues (no --resume/--fresh question) and completes the story
    second = run(project, replay(tmp_path, {1: APPROVE}))
    assert second.returncode == 0, second.stderr
    assert "continuing with the story state the previous run left for 1 story" in second.stderr


def test_item12_changed_task_list_after_a_run_still_asks(project: RalphProject, tmp_path: Path) -> None:
    assert run(project, replay(tmp_path, {1: IMPLEMENT}), "-n", "1").returncode == 1
    project.write_stories([story("US-001"), story("US-002")])
    again = run(project, replay(tmp_path, {1: APPROVE}))
    assert again.returncode == 2
    assert "the task list changed since that run ended" in again.stderr
    assert "--resume" in again.stderr and "--fresh" in again.stderr


def test_item12_new_repository_at_the_same_path_starts_clean(project: RalphProject, tmp_path: Path) -> None:
    import shutil

    assert run(project, replay(tmp_path, {1: IMPLEMENT}), "-n", "1").returncode == 1
    # a crash leaves state without an end marker: make it look like one, then replace the repository
    shutil.rmtree(project.path / ".git")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project.path, check=True)
    project.write_stories([story("US-001")])  # commits: a new root commit
    result = run(project, replay(tmp_path, {1: IMPLEMENT, 2: APPROVE}))
    assert result.returncode == 0, result.stderr
    assert "continuing" not in result.stderr
    assert len(project.run_dirs()) == 1  # the old project's runs are not this repository's


# -- item 13: clear errors instead of tracebacks ----------------------------------------------------


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p.write_bytes(b'\xff\xfe{"project": 1}'), "is not UTF-8 text"),
        (lambda p: (p.unlink(), p.mkdir()), "is a directory, not a task-list file"),
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
    ],
    ids=["not-utf8", "directory", "deeply-nested"],
)
@pytest.mark.parametrize("command", [("run", "--dry-run"), ("run",), ("plan", "--check")], ids=" ".join)
def test_item13_unreadable_task_list_is_a_one_line_error(project, tmp_path, make, expected, command) -> None:
    make(project.tasks_path)
    before = project.tasks_path.read_bytes() if project.tasks_path.is_file() else None
    result = project.run(*command, "--agent", "replay", env=replay(tmp_path, {})) if command[0] == "run" else project.run(*command)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr
    assert str(project.tasks_path) in result.stderr
    if before is not None:
        assert project.tasks_path.read_bytes() == before


@pytest.mark.parametrize("where", ["file", "unwritable", "impossible"])
def test_item13_bad_state_dir_is_a_clear_error(project, tmp_path, where) -> None:
    if where == "file":
        state = tmp_path / "a-file"
        state.write_text("")
    elif where == "unwritable":
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere: an unwritable directory cannot be made")
        state = tmp_path / "ro"
        state.mkdir()
        state.chmod(0o500)
    else:
        state = Path("/proc/self/no-such-state-dir")
    result = run(project, {**replay(tmp_path, {1: IMPLEMENT}), "RALPH_STATE_DIR": str(state)})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"cannot use {state} as ralph's state directory ($RALPH_STATE_DIR)" in result.stderr
