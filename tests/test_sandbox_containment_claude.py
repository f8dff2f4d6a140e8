"""Processes the agent starts in a sandbox cannot outlive their container or sandbox: through the real CLI.

The direct-mode version of this attack (``test_containment_claude.py``) is a fork-chain daemon that
waits for the agent's CLI to end, then rewrites the next review's "changes requested" into an
approval.  In a sandbox the daemon lives where the agent works, on its own checkout: if it survived
into the review's container or sandbox, its rewrite would come back with the review's work and the
wrong code would be approved.  Here the agent (and, in the second case, a gate command) starts it
from inside the sandbox; the run must end with the reviewer's verdict standing, exit 1 at ``-n 2``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, Turn, tool
from ralph.testing.project import RalphProject, story

import test_review_integrity_claude as _loop
from test_containment_claude import FLIPPER, LAUNCH_FROM_GATE, bash, rejecting_review
from test_loop_claude import implement

run_loop = _loop.run_loop
docker_client, gateway, sandbox_image, sandbox_project = (
    _loop.docker_client, _loop.gateway, _loop.sandbox_image, _loop.sandbox_project)

pytestmark = [pytest.mark.real_claude, pytest.mark.slow]

SANDBOXES = [pytest.param("docker-sandbox", id="sandbox"), "bwrap"]


def write(path: Path, content: str) -> Turn:
    return Turn([tool("Write", {"file_path": str(path), "content": content})])


def assert_the_verdict_stands(project: RalphProject, result: Any) -> None:
    assert result.returncode == 1, result.stdout + result.stderr  # -n 2 reached, the story not approved
    final = project.story("US-001")
    assert (final["reviewStatus"], final["passes"]) == ("changes_requested", False), final
    assert [e["mode"] for e in project.events("iteration_started")] == ["implement", "review"]


@pytest.mark.parametrize("runner", SANDBOXES)
def test_a_daemon_the_agent_starts_in_the_sandbox_cannot_rewrite_the_next_verdict(
        run_loop: Any, ralph_project: RalphProject, runner: str) -> None:
    project = ralph_project
    project.write_stories([story("US-001", "Greeting file")])
    (project.path / ".gitignore").write_text("/.daemon/\n")
    project.commit_all("ignore the daemon's files")
    flipper = project.path / ".daemon" / "flip.py"
    script = IterationScript({
        1: [write(flipper, FLIPPER),
            bash("python3 .daemon/flip.py .daemon/canary .daemon/stop claude && echo daemon started"),
            *implement("US-001", "hello.txt", "helo")],
        2: rejecting_review(),
    })
    result = run_loop(runner, script, "-n", "2")

    assert_the_verdict_stands(project, result)


@pytest.mark.parametrize("runner", SANDBOXES)
def test_a_daemon_a_gate_command_starts_in_the_sandbox_cannot_rewrite_the_next_verdict(
        run_loop: Any, ralph_project: RalphProject, runner: str) -> None:
    project = ralph_project
    project.write_stories([story("US-001", "Greeting file")], verifyCommands=["python3 check.py"])
    flipper = "flip.py"
    check = LAUNCH_FROM_GATE.format(flipper=flipper, canary="/tmp/canary", stop="/tmp/stop")
    script = IterationScript({
        1: [write(project.path / "flip.py", FLIPPER), write(project.path / "check.py", check),
            *implement("US-001", "hello.txt", "helo")],
        2: rejecting_review(),
    })
    result = run_loop(runner, script, "-n", "2")

    gates = project.events("gate")
    assert gates and all(g["passed"] and "checks pass" in g["output"] and g["where"] == "sandbox" for g in gates), gates
    assert_the_verdict_stands(project, result)
