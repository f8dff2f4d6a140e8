"""The trust boundary inside the docker sandbox, at the runner level (real Docker engine).

Git metadata mounted read-only while git still works, gate commands in the
container (never on the host), the process sweep after every exec, and the
hook socket's read-only directory (connecting still works, deleting fails).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import test_docker_sandbox as _docker

from ralph.contracts import AgentChannel
from ralph.testing.project import RalphProject

docker_client, sandbox_image, sandbox_project = _docker.docker_client, _docker.sandbox_image, _docker.sandbox_project
make_runner, run_in = _docker.make_runner, _docker.run_in

pytestmark = pytest.mark.slow


@pytest.fixture
def runner(sandbox_project: RalphProject):  # type: ignore[no-untyped-def]
    runner = make_runner(sandbox_project.path, network="none")
    runner.prepare(sandbox_project.path)
    yield runner
    runner.cleanup()


def test_git_metadata_is_read_only_and_git_still_works(runner: Any, sandbox_project: RalphProject) -> None:
    path = sandbox_project.path
    script = (
        "for f in .git/config .git/info/exclude .git/hooks/pre-commit .git/info/attributes; do "
        "  (echo x >> $f) 2>/dev/null; echo $f=$?; done; "
        "echo change > work.txt && git add work.txt; echo add=$?; "
        "git -c user.name=a -c user.email=b@c commit -qm in-sandbox; echo commit=$?; "
        "git status --porcelain; echo status=$?; "
        "git branch side && git checkout -q side && git checkout -q main; echo branch=$?; "
        "git stash list >/dev/null; echo stash=$?; "
        "git gc -q; echo gc=$?"
    )
    exclude_before = (path / ".git/info/exclude").read_text()
    outcome, lines = run_in(runner, path, ["sh", "-c", script])
    out = dict(line.split("=", 1) for line in lines if "=" in line)
    for name in (".git/config", ".git/info/exclude", ".git/hooks/pre-commit", ".git/info/attributes"):
        assert out[name] != "0", lines
    assert (path / ".git/info/exclude").read_text() == exclude_before
    for step in ("add", "commit", "status", "branch", "stash", "gc"):
        assert out[step] == "0", (step, lines)
    assert "in-sandbox" in sandbox_project.git("log", "-1", "--format=%s")


def test_gate_command_runs_in_the_container_never_on_the_host(runner: Any, sandbox_project: RalphProject, tmp_path: Path) -> None:
    canary = tmp_path / "host-canary"  # outside the project: the container has no such directory
    # a file the agent wrote, run by the gate
    (sandbox_project.path / "check.py").write_text(
        f"import os\nopen({str(canary)!r}, 'w').write('pwned')\n"
    )
    result = runner.run_command(
        f"cat /proc/1/comm; python3 check.py; echo exit=$?; cat {canary}", sandbox_project.path, 60
    )
    assert result.where == "sandbox"
    assert result.output.splitlines()[0] == "docker-init"  # PID 1 of the sandbox container ran it
    assert result.output.splitlines()[1:] == ["exit=0", "pwned"]  # the agent's code ran in there ...
    assert not canary.exists()  # ... and not on the host
    timed = runner.run_command("sleep 30", sandbox_project.path, 1)
    assert timed.timed_out and timed.exit_code != 0
    failing = runner.run_command("echo some output; exit 3", sandbox_project.path, 60)
    assert (failing.exit_code, failing.output) == (3, "some output")


def test_processes_left_by_a_gate_command_are_killed(any_user_runner: Any, sandbox_project: RalphProject) -> None:
    runner = any_user_runner
    path = sandbox_project.path
    writer = "setsid sh -c 'while :; do echo x >> gate-bg.log; sleep 0.1; done' </dev/null >/dev/null 2>&1 & echo started"
    result = runner.run_command(writer, path, 60)
    assert (result.exit_code, result.output) == (0, "started")
    size = (path / "gate-bg.log").stat().st_size if (path / "gate-bg.log").exists() else 0
    time.sleep(1.0)
    after = (path / "gate-bg.log").stat().st_size if (path / "gate-bg.log").exists() else 0
    assert after == size, "a background process of a gate command survived it"
    # a gate that kills the shell which would sweep: the separate sweep still runs
    escape = writer.replace("gate-bg.log", "gate-bg2.log") + "; kill -KILL $(ps -o ppid= -p $PPID)"
    escaped = runner.run_command(escape, path, 60)
    assert "@@" not in escaped.output and escaped.exit_code != 0  # the folded sweep never ran
    size = (path / "gate-bg2.log").stat().st_size if (path / "gate-bg2.log").exists() else 0
    time.sleep(1.0)
    assert ((path / "gate-bg2.log").stat().st_size if (path / "gate-bg2.log").exists() else 0) == size


@pytest.fixture(params=["host-user", "other-user"])
def any_user_runner(request: pytest.FixtureRequest, sandbox_project: RalphProject):  # type: ignore[no-untyped-def]
    """The sandbox as the host's uid (root here: the python sweep) and as another uid (kill -1)."""
    section: dict[str, Any] = {"network": "none"}
    if request.param == "other-user":
        import os

        os.chmod(sandbox_project.path, 0o777)
        section["user"] = "1234:1234"
    runner = make_runner(sandbox_project.path, **section)
    runner.prepare(sandbox_project.path)
    yield runner
    runner.cleanup()


def test_processes_left_by_an_exec_are_killed(any_user_runner: Any, sandbox_project: RalphProject) -> None:
    runner = any_user_runner
    path = sandbox_project.path
    writer = "setsid sh -c 'while :; do echo x >> bg.log; sleep 0.1; done' </dev/null >/dev/null 2>&1 & echo started"
    outcome, lines = run_in(runner, path, ["sh", "-c", writer])
    assert lines == ["started"]
    size = (path / "bg.log").stat().st_size if (path / "bg.log").exists() else 0
    time.sleep(1.0)
    after = (path / "bg.log").stat().st_size if (path / "bg.log").exists() else 0
    assert after == size, "a background writer survived its exec"
    # an agent that kills the shell which would sweep: the runner's own sweep exec still runs
    escape = writer.replace("bg.log", "bg2.log") + "; kill -KILL $(ps -o ppid= -p $PPID)"
    run_in(runner, path, ["sh", "-c", escape])
    size = (path / "bg2.log").stat().st_size if (path / "bg2.log").exists() else 0
    time.sleep(1.0)
    assert ((path / "bg2.log").stat().st_size if (path / "bg2.log").exists() else 0) == size
    # the container itself survives the sweep and takes the next exec
    outcome, lines = run_in(runner, path, ["sh", "-c", "ps -e -o comm="])
    assert outcome.exit_code == 0
    # the keeper, and this exec: its sweeping shell, timeout, sh, ps
    assert sorted(lines) == ["docker-init", "ps", "sh", "sh", "sleep", "timeout"]


def test_hook_socket_directory_is_read_only_and_still_answers(runner: Any, sandbox_project: RalphProject,
                                                             tmp_path: Path) -> None:
    from ralph.hooks.server import HookServer

    hook = runner.hook_command()  # the runner's own command: python3 -S, no site-packages
    server = HookServer(lambda request: {"systemMessage": "loop answered"}, token="sekrit").start()
    try:
        # the runner mounts what the channel names (never what RALPH_* strings in the env say)
        channel = runner.agent_channel(AgentChannel(
            hook_socket=Path(server.path), token="sekrit", run_dir=tmp_path, state_file=tmp_path / "state.json",
            tasks_file=sandbox_project.ralph_dir / "tasks.json", hook_command=(),
        ))
        env = channel.env()
        payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}})
        script = (
            f"echo '{payload}' | {hook}; echo; "
            'rm -f "$RALPH_HOOK_SOCKET" 2>/dev/null; echo rm=$?; '
            'mv "$RALPH_HOOK_SOCKET" /tmp/x 2>/dev/null; echo mv=$?; '
            f"echo '{payload}' | RALPH_HOOK_TOKEN=wrong {hook}; echo; "
            # a loop that does not answer: the client fails closed, without site-packages or ralph
            f"echo '{payload}' | RALPH_HOOK_SOCKET=/tmp/no-loop.sock {hook} 2>/dev/null"
        )
        outcome, lines = run_in(runner, sandbox_project.path, ["sh", "-c", script], env=env, channel=channel)
    finally:
        server.stop()
    assert json.loads(lines[0]) == {"systemMessage": "loop answered"}
    out = dict(line.split("=", 1) for line in lines if line.startswith(("rm=", "mv=")))
    assert out["rm"] != "0" and out["mv"] != "0"
    refused = json.loads(lines[-2])["hookSpecificOutput"]
    assert refused["permissionDecision"] == "deny" and "refused" in refused["permissionDecisionReason"]
    assert server.refused and "wrong run token" in server.refused[0]
    gone = json.loads(lines[-1])["hookSpecificOutput"]
    assert gone["permissionDecision"] == "deny" and "/tmp/no-loop.sock" in gone["permissionDecisionReason"]
