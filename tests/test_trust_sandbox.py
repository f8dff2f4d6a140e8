"""The trust boundary inside the docker sandbox, at the runner level (real Docker engine).

The agent's own checkout (its .git changes never reach the project's), gate commands in a
container (never on the host), every container removed with its processes when its command
ends, and the hook socket's read-only directory (connecting still works, deleting fails).
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


def test_the_agent_works_on_its_own_checkout_and_git_works_there(runner: Any, sandbox_project: RalphProject) -> None:
    path = sandbox_project.path
    git_files = {name: (path / ".git" / name).read_bytes() for name in ("config", "info/exclude")}
    script = (
        "echo '[core]' >> .git/config; echo '\tfsmonitor = sh -c \"touch /tmp/fsmonitor-ran\"' >> .git/config; "
        "printf '#!/bin/sh\\ntouch hook-ran\\n' > .git/hooks/post-commit; chmod +x .git/hooks/post-commit; "
        "echo x >> .git/info/exclude; "
        "echo change > work.txt && git add work.txt; echo add=$?; "
        "git -c user.name=a -c user.email=b@c commit -qm in-sandbox; echo commit=$?; "
        "git status --porcelain >/dev/null; echo status=$?; "
        "git branch side && git checkout -q side && git checkout -q main; echo branch=$?; "
        "git gc -q; echo gc=$?"
    )
    outcome, lines = run_in(runner, path, ["sh", "-c", script])
    out = dict(line.split("=", 1) for line in lines if "=" in line)
    for step in ("add", "commit", "status", "branch", "gc"):
        assert out[step] == "0", (step, lines)
    # the commit came back as git objects; the project's .git config, hooks and info are as they were
    assert "in-sandbox" in sandbox_project.git("log", "-1", "--format=%s")
    assert {name: (path / ".git" / name).read_bytes() for name in git_files} == git_files
    assert not (path / ".git/hooks/post-commit").exists()
    assert "side" not in sandbox_project.git("branch", "--list")  # only the run's branch travels back
    # the next container's checkout has the loop's .git config again: what the agent configured never runs
    _, again = run_in(runner, path, ["sh", "-c", "cat .git/config; ls .git/hooks; git log -1 --format=%s"])
    assert "fsmonitor" not in "\n".join(again) and "post-commit" not in again and again[-1] == "in-sandbox"


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


def test_processes_left_by_a_gate_command_are_killed(any_user_runner: Any, sandbox_project: RalphProject,
                                                    tmp_path: Path) -> None:
    runner = any_user_runner
    outside = tmp_path / "gate-dir"  # a directory the loop made: mounted read-write at its own path
    outside.mkdir()
    outside.chmod(0o777)
    log = outside / "gate-bg.log"
    writer = (f"setsid sh -c 'while :; do echo x >> {log}; sleep 0.1; done' </dev/null >/dev/null 2>&1 & "
              "sleep 0.5; echo started")
    result = runner.run_command(writer, outside, 60)
    assert (result.exit_code, result.output) == (0, "started")
    size = log.stat().st_size
    assert size > 0
    time.sleep(1.0)
    assert log.stat().st_size == size, "a background process of a gate command survived it"


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


def test_processes_left_by_an_agent_run_are_killed(any_user_runner: Any, sandbox_project: RalphProject,
                                                  docker_client: Any) -> None:
    runner = any_user_runner
    path = sandbox_project.path
    daemon = ("setsid python3 -c 'import time; time.sleep(300)' </dev/null >/dev/null 2>&1 & "
              "nohup python3 -c 'import time; time.sleep(300)' </dev/null >/dev/null 2>&1 & echo started")
    outcome, lines = run_in(runner, path, ["sh", "-c", daemon])
    assert lines == ["started"]
    # the container went with the run, and every process in it
    assert [c for c in _docker.containers_of(docker_client, path)
            if c.labels.get("ralph.role") == "agent" and c.status == "running"] == []
    # the next agent process is in a fresh container: nothing of the last one runs there
    outcome, lines = run_in(runner, path, ["ps", "-e", "-o", "comm="])
    assert outcome.exit_code == 0
    assert sorted(lines) == ["docker-init", "ps", "timeout"]


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
