"""The direct runner's defense in depth: no process outlives a run, the agent's git cannot push.

Real processes and real git; the commands are the agent's (what a script it wrote would do).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from ralph.contracts import ProcessSpec
from ralph.process import descendants, run_shell
from ralph.testing.project import GIT_IDENTITY, process_alive
from ralph_plugins.runners.direct import DirectRunner, agent_environment

WRITER = (
    "import os, sys, time\n"
    "if os.fork():\n"                       # double fork ...
    "    while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
    "    sys.exit(0)\n"
    "os.setsid()\n"                         # ... in a new session
    "if os.fork(): os._exit(0)\n"
    "open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
    "while True:\n"
    "    open(sys.argv[1], 'a').write('x')\n"
    "    time.sleep(0.05)\n"
)


def _grows(path: Path, seconds: float = 0.6) -> bool:
    before = path.stat().st_size if path.exists() else 0
    time.sleep(seconds)
    return (path.stat().st_size if path.exists() else 0) != before


def test_direct_runner_kills_what_the_agent_left_behind(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    log, pidfile = tmp_path / "bg.log", tmp_path / "pid"
    for launcher in (["nohup"], []):  # the writer itself double-forks and calls setsid()
        pidfile.unlink(missing_ok=True)
        argv = [*launcher, sys.executable, str(script), str(log), str(pidfile)]
        runner = DirectRunner(None)  # type: ignore[arg-type]
        runner.prepare(tmp_path)
        outcome = runner.run(ProcessSpec(argv, {}, tmp_path), lambda line: None, 30, threading.Event())
        assert outcome.exit_code == 0
        pid = int(pidfile.read_text())
        assert pid in runner.swept, launcher
        assert not process_alive(pid)
        assert not _grows(log)


def test_gate_commands_on_the_host_do_not_leave_processes(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    log, pidfile = tmp_path / "bg.log", tmp_path / "pid"
    before = descendants()
    code, output, timed_out = run_shell(f"{sys.executable} {script} {log} {pidfile}; echo done", tmp_path, 30)
    assert (code, output.strip(), timed_out) == (0, "done", False)
    assert not process_alive(int(pidfile.read_text()))
    assert descendants() == before
    assert not _grows(log)


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY, **(env or {})})


def test_agent_git_environment_cannot_push(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q", "-b", "main")
    _git(project, "commit", "-q", "--allow-empty", "-m", "one")
    _git(project, "remote", "add", "origin", str(remote))
    _git(project, "remote", "add", "byurl", f"file://{remote}")
    assert _git(project, "push", "-q", "origin", "main").returncode == 0
    tip = _git(remote, "rev-parse", "main").stdout.strip()
    _git(project, "commit", "-q", "--allow-empty", "-m", "two")

    env = agent_environment({"SSH_AUTH_SOCK": "/tmp/agent.sock", "PATH": "/usr/bin:/bin"}, project)
    assert "SSH_AUTH_SOCK" not in env and env["GIT_TERMINAL_PROMPT"] == "0"
    # a path that starts with any ASCII character is rewritten too: `@up`, `+up` ... linked to the remote
    odd = ["@up", "+up", "=up", "%up", ",up", ":up", "[up", "!up", " up"]
    for name in odd:
        (project / name).symlink_to(remote)
    for target in ("origin", "byurl", str(remote), f"file://{remote}", "../remote.git", *odd):
        pushed = _git(project, "push", "--force", target, "HEAD:main", env=env)
        assert pushed.returncode != 0, target
        assert "ralph-direct-mode-blocks-git-push" in pushed.stderr, pushed.stderr
    assert _git(remote, "rev-parse", "main").stdout.strip() == tip
    # fetching still works
    assert _git(project, "fetch", "-q", "origin", env=env).returncode == 0
