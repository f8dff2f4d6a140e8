"""``--runner auto`` with the ``bwrap`` runner: docker-sandbox first, then bwrap, then direct, each time
saying which and why; ``ralph doctor`` and pre-flight say whether bwrap can be used here and the fix.

Through the real ``ralph`` CLI (dry runs and doctor: no agent runs), with the system's bubblewrap and a
Docker engine made unreachable where docker must not be chosen.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ralph.testing.project import RalphProject, story


NO_DOCKER = "no-docker.sock"


def runner_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("runner:"))


@pytest.fixture
def no_docker(tmp_path: Path) -> dict[str, str]:
    """An environment whose Docker engine does not answer (and a key, so the agent can log in anywhere)."""
    return {"DOCKER_HOST": f"unix://{tmp_path / NO_DOCKER}", "ANTHROPIC_API_KEY": "test-key"}


def fake_bwrap(tmp_path: Path, message: str) -> str:
    """A PATH whose first ``bwrap`` fails the way a machine without user namespaces makes it fail."""
    path = tmp_path / "fakebin" / "bwrap"
    path.parent.mkdir()
    path.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\necho '{message}' >&2\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return f"{path.parent}{os.pathsep}{os.environ.get('PATH', '')}"


def test_without_docker_auto_chooses_bwrap_and_says_why(bwrap_available: None, ralph_project: RalphProject,  # noqa: F811
                                                        no_docker: dict[str, str], claude_binary: Path) -> None:
    ralph_project.write_stories([story("US-001")], verifyCommands=["git --version"])
    dry = ralph_project.run("run", "--agent", "claude", "--dry-run", env=no_docker)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    line = runner_line(dry.stdout)
    assert line.startswith("runner:  bwrap (fallback: docker-sandbox: the Docker engine does not answer"), line
    doctor = ralph_project.run("doctor", "--agent", "claude", env=no_docker)
    assert "[ok  ] runner auto: the bwrap sandbox, because docker-sandbox: the Docker engine does not answer" in doctor.stdout
    assert "[ok  ] the bwrap sandbox has what the gates run: git" in doctor.stdout
    assert "no sandbox" not in doctor.stdout


def test_bwrap_that_cannot_run_the_gates_sends_auto_to_direct_naming_the_program(
        bwrap_available: None, ralph_project: RalphProject, no_docker: dict[str, str], claude_binary: Path,  # noqa: F811
        tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001")], verifyCommands=["ralph-test-tool --check"])
    tool = tmp_path / "home" / "bin" / "ralph-test-tool"  # under the home the sandbox hides
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    env = {**no_docker, "HOME": str(tmp_path / "home"), "PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}"}
    dry = ralph_project.run("run", "--agent", "claude", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    line = runner_line(dry.stdout)
    assert line.startswith("runner:  direct (fallback: docker-sandbox: the Docker engine does not answer"), line
    assert (f"bwrap: the bwrap sandbox cannot run the gate `ralph-test-tool --check`: ralph-test-tool is {tool} here, "
            "under a path the sandbox hides; to run in the sandbox, show it read-only with [tool.ralph.bwrap] ro_binds") in line
    stopped = ralph_project.run("run", "--runner", "bwrap", "--agent", "claude", env=env)
    assert stopped.returncode == 2, stopped.stdout + stopped.stderr
    assert "pre-flight check failed (no iteration was started): the bwrap sandbox cannot run the gate" in stopped.stderr
    assert ralph_project.run_dirs() == []


def test_a_bwrap_that_cannot_make_its_sandbox_is_named_with_the_fix(ralph_project: RalphProject,
                                                                    no_docker: dict[str, str], tmp_path: Path,
                                                                    claude_binary: Path) -> None:
    ralph_project.write_stories([story("US-001")])
    env = {**no_docker, "PATH": fake_bwrap(tmp_path, "bwrap: setting up uid map: Permission denied")}
    dry = ralph_project.run("run", "--agent", "claude", "--dry-run", env=env)
    line = runner_line(dry.stdout)
    assert line.startswith("runner:  direct (fallback: docker-sandbox: the Docker engine does not answer"), line
    assert "bwrap: bubblewrap cannot make a sandbox here (bwrap: setting up uid map: Permission denied)" in line
    assert "allow unprivileged user namespaces" in line
    doctor = ralph_project.run("doctor", "--runner", "bwrap", "--agent", "claude", env=env)
    assert doctor.returncode == 1
    failure = next(line for line in doctor.stdout.splitlines() if line.startswith("[FAIL] runner bwrap"))
    assert "user namespaces" in failure, doctor.stdout
    stopped = ralph_project.run("run", "--runner", "bwrap", "--agent", "claude", env=env)
    assert stopped.returncode == 2 and "allow unprivileged user namespaces" in stopped.stderr, stopped.stderr


def test_without_bubblewrap_the_fix_is_to_install_it(tmp_path: Path) -> None:
    from ralph_plugins.runners.bwrap.probe import run_probe

    empty = tmp_path / "empty-bin"  # a PATH without bwrap
    empty.mkdir()
    saved = os.environ["PATH"]
    os.environ["PATH"] = str(empty)
    try:
        missing = run_probe()
    finally:
        os.environ["PATH"] = saved
    assert not missing.ok and "`bwrap` is not on PATH" in missing.reason and "apt-get install bubblewrap" in missing.reason


def test_with_docker_auto_still_prefers_the_docker_sandbox(bwrap_available: None, ralph_project: RalphProject,  # noqa: F811
                                                           claude_binary: Path) -> None:
    from ralph.testing.requirements import require

    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
        present = bool(client.images.list(name="ralph-sandbox"))
    except Exception:  # noqa: BLE001
        present = False
    require(present, "the Docker engine with the sandbox image is needed to see auto prefer it")
    ralph_project.write_stories([story("US-001")], verifyCommands=["git --version"])
    dry = ralph_project.run("run", "--agent", "claude", "--dry-run", env={"ANTHROPIC_API_KEY": "test-key"})
    assert runner_line(dry.stdout) == "runner:  docker-sandbox", dry.stdout + dry.stderr


def test_a_run_auto_chose_bwrap_for_says_so_first(bwrap_available: None, ralph_project: RalphProject,  # noqa: F811
                                                  no_docker: dict[str, str]) -> None:
    from ralph.testing import ReplayScript, say

    ralph_project.write_stories([story("US-001")])
    script = ReplayScript().iteration(1, say("looked around"))
    env = {**no_docker, **script.env(ralph_project.ralph_dir / "script.json")}  # in the project: the sandbox sees it
    ralph_project.commit_all("the replay script")
    result = ralph_project.run("run", "--agent", "replay", "-n", "1", env=env)
    assert result.returncode == 1, result.stdout + result.stderr  # its one iteration
    assert "sandbox: bwrap, chosen by auto because docker-sandbox: the Docker engine does not answer" in result.stderr
    assert "no sandbox" not in result.stderr
    started = ralph_project.events("run_started")[0]
    assert started["runner"] == "bwrap" and started["sandboxed"] is True
    assert started["fallback_reason"].startswith("docker-sandbox: the Docker engine does not answer")
