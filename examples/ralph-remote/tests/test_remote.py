"""Tests of the ralph-remote runner, written the way a plugin author would (fixtures from ralph.testing).

The agent host runs "elsewhere": under bubblewrap, with this machine's programs read-only but an empty
directory over the temporary directory, so it sees neither the project, nor the loop's run directory,
nor the loop's hook socket.  Everything between the loop and the agent goes over the host's
stdin/stdout, as it would over ``ssh``.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from ralph.api import AgentChannel
from ralph.testing import RalphProject, settings_for, story
from ralph.testing.model_server import IterationScript, Turn, tool
from ralph.testing.requirements import require
from ralph.testing.scripting import approve_turns, implement_turns

from ralph_remote.plugin import RemoteRunner, translate


def elsewhere(tmp_path: Path, home: Path) -> list[str]:
    """The agent host's command, as if on another machine (see the module docstring)."""
    bwrap = shutil.which("bwrap")
    require(bwrap is not None, "bubblewrap is not installed (apt-get install bubblewrap)")
    hidden = {tempfile.gettempdir(), str(tmp_path)}
    import ralph.api
    import ralph_remote

    # this Python and the code it runs stay visible where they lie under a hidden path (a checkout in /tmp)
    needed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
                                            Path(ralph.api.__file__).parent.parent.parent, Path(ralph_remote.__file__).parent.parent)}
    shown = sorted(p for p in needed if any(p == h or p.startswith(h.rstrip("/") + "/") for h in hidden)
                   and not p.startswith(str(tmp_path)))
    command = [str(bwrap), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
               *(arg for path in sorted(hidden) for arg in ("--tmpfs", path)),
               *(arg for path in shown for arg in ("--ro-bind", path, path)), "--dir", str(home), "--die-with-parent",
               "--", sys.executable, "-I", "-m", "ralph_remote.host"]
    works = subprocess.run([*command[: command.index("--")], "--", "true"], capture_output=True, text=True)
    require(works.returncode == 0, f"bubblewrap cannot make a sandbox here: {works.stderr.strip()}")
    return command


def configure(project: RalphProject, command: list[str]) -> None:
    project.path.joinpath("ralph.toml").write_text(f"[remote]\ncommand = {json.dumps(command)}\n", encoding="utf-8")
    project.commit_all("the agent runs elsewhere")


def survivors(marker: str) -> int:
    """Processes whose command line holds ``marker``, as this machine's /proc shows them."""
    def cmdline(pid: str) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""
    return sum(marker.encode() in cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit())


def bash(command: str) -> Turn:
    return Turn([tool("Bash", {"command": command, "description": "step"})])


@pytest.mark.real_claude
def test_a_story_is_implemented_and_approved_on_the_agent_host(
        ralph_project: RalphProject, tmp_path: Path, scripted_model: Any, claude_binary: Path,
        claude_agent_env: Any) -> None:
    env = claude_agent_env("http://placeholder")  # the agent host inherits this (its HOME is made there)
    configure(ralph_project, elsewhere(tmp_path, Path(env["HOME"])))
    project = ralph_project.path
    # the gate commands must run where the agent runs: there, the project's path does not exist
    ralph_project.write_stories([story("US-001", "Greeting file")], verifyCommands=["test -f greet.txt",
                                                                                   f"test ! -e {project}"])
    marker = "ralph-remote-survivor-" + secrets.token_hex(4)
    daemon = f"setsid {shlex.quote(sys.executable)} -c 'import time; time.sleep(900)' {marker} </dev/null >/dev/null 2>&1 &"
    count = ("import os\nm = 'ralph-remote-' + " + repr(marker.removeprefix("ralph-remote-")) + "\n"
             "def line(p):\n    try: return open(f'/proc/{p}/cmdline', 'rb').read()\n    except OSError: return b''\n"
             "print('survivors running:', sum(m.encode() in line(p) for p in os.listdir('/proc') if p.isdigit()))")
    script = IterationScript({
        1: [bash(f"test -e {shlex.quote(str(project))}; echo project-test-exit-$?"),
            bash("git push origin HEAD:main"),  # a guard denies it: the denial comes back through the relay
            bash(daemon), bash(f"{shlex.quote(sys.executable)} -c {shlex.quote(count)}"),
            *implement_turns("US-001", "greet.txt", "hello")],
        2: approve_turns("US-001", 1),
    })
    server = scripted_model(script)
    result = ralph_project.run("run", "--runner", "remote", "--agent", "claude", "--timeout", "120",
                               env=claude_agent_env(server.url), timeout=600)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    final = ralph_project.story("US-001")
    assert (final["passes"], final["reviewStatus"]) == (True, "approved")
    assert (project / "greet.txt").read_text() == "hello"  # the agent's work came back, checked
    assert "feat: [US-001] - implement" in ralph_project.git("log", "--format=%s")
    texts = [request.text for request in server.requests]
    assert any("project-test-exit-1" in text for text in texts)  # the agent does not see the project
    # the guard's denial reached the model, through the host's relay and this runner
    denials = [e for e in ralph_project.events("hook") if e.get("event") == "PreToolUse"
               and e["output"].get("hookSpecificOutput", {}).get("permissionDecision") == "deny"]
    assert denials and "git-push" in json.dumps(denials[0]["output"])
    assert any("git-push" in text for text in texts[1:])
    # the gates ran on the agent host (there the project's path does not exist)
    gates = [e for e in ralph_project.events("gate") if e.get("gate") == "tests"]
    assert gates and all(e["passed"] for e in gates) and {e.get("where") for e in gates} == {"remote"}
    # the agent's daemon was running in its iteration, and nothing of it is left
    assert any("survivors running: 1" in text for text in texts)
    assert survivors(marker) == 0
    assert ralph_project.events("run_started")[0]["runner"] == "remote"
    assert script.unscripted == 0


class FakeLoop(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A stand-in for the loop's hook socket: records each request, answers with the paths it was given."""

    daemon_threads = True

    def __init__(self, path: Path) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request = json.loads(self.rfile.readline())
                outer.requests.append(request)
                if "ask" in request:
                    output: dict[str, Any] = {"ok": True, "message": "the story waits for a person"}
                else:
                    output = {"systemMessage": f"checked in {request['payload']['cwd']}"}
                self.wfile.write(json.dumps({"output": output, "nonce": request.get("nonce")}).encode() + b"\n")

        super().__init__(str(path), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_hook_calls_on_the_host_reach_the_loop_with_their_token_and_fail_closed_without_it(
        ralph_project: RalphProject, tmp_path: Path) -> None:
    """The channel as the host sees it; the agent's hook client there asks the host's relay, the runner
    carries the call to the loop's socket (paths translated both ways, the token as the client sent it),
    ``ralph ask`` too; once the loop does not answer, the call is denied on the agent's side."""
    from ralph.api.hooks import hook_client_path

    (tmp_path / "loop").mkdir()
    loop_socket = tmp_path / "loop" / "hook.sock"
    fake = FakeLoop(loop_socket)
    runner = RemoteRunner(settings_for(ralph_project.path))  # the default command: the host on this machine
    try:
        runner.prepare(ralph_project.path)
        loop = AgentChannel(hook_socket=loop_socket, token="the-run-token", run_dir=tmp_path / "run",
                            state_file=tmp_path / "run" / "state.json", tasks_file=ralph_project.tasks_path,
                            hook_command=("python3", str(hook_client_path())), loader_env={"PYTHONPATH": "/x"})
        there = runner.agent_channel(loop)
        checkout, private = Path(runner._hello["checkout"]), Path(runner._hello["private"])
        assert there.tasks_file == checkout / "ralph" / "tasks.json" and there.run_dir == private
        assert there.hook_socket == Path(runner._hello["hook_socket"]) and there.hook_socket.parent.parent == private
        assert there.token == "the-run-token" and there.loader_env == {} and there.config_home is None

        def hook_client(*args: str, payload: dict[str, Any] | None = None) -> Any:
            # the command line the agent's settings hold: it names the host's relay process (--loop=)
            return subprocess.run([*shlex.split(there.hook_command_line()), *args], input=json.dumps(payload or {}), capture_output=True,
                                  text=True, env={**there.hook_env(), "PATH": os.environ["PATH"]}, timeout=120)

        payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                   "session_id": "s", "cwd": str(checkout / "src")}
        answered = json.loads(hook_client(payload=payload).stdout)
        assert fake.requests[0]["token"] == "the-run-token"
        assert fake.requests[0]["payload"]["cwd"] == str(ralph_project.path / "src")  # the loop judges the project's paths
        assert answered == {"systemMessage": f"checked in {checkout / 'src'}"}  # and the agent reads its own
        asked = hook_client("ask", "Which greeting?")
        assert (asked.returncode, asked.stdout.strip()) == (0, "the story waits for a person")
        assert fake.requests[1] == {"token": "the-run-token", "ask": {"question": "Which greeting?"}}
        fake.shutdown()
        fake.server_close()
        loop_socket.unlink()
        denied = hook_client(payload=payload)
        assert json.loads(denied.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny", denied.stderr
    finally:
        runner.cleanup()
    assert not checkout.parent.exists()  # the host removed its checkout when the connection closed


def test_an_agent_host_that_does_not_start_is_named_with_the_fix(ralph_project: RalphProject) -> None:
    ralph_project.write_stories([story("US-001", "Greeting file")])
    configure(ralph_project, [sys.executable, "-c", "import sys; sys.stderr.write('ralph-remote is not installed here\\n')"])
    result = ralph_project.run("run", "--runner", "remote", "--agent", "claude", "-n", "1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "runner 'remote': the agent host did not answer" in result.stderr
    assert "ralph-remote is not installed here" in result.stderr and "python -m ralph_remote.host" in result.stderr
    configure(ralph_project, ["no-such-agent-host-command"])
    result = ralph_project.run("run", "--runner", "remote", "--dry-run")
    assert result.returncode == 2
    assert "the agent host's command 'no-such-agent-host-command' is not on PATH ([tool.ralph.remote] command)" in result.stderr


def test_gate_commands_run_on_the_host_in_a_copy_of_a_directory_the_loop_made(ralph_project: RalphProject,
                                                                             tmp_path: Path) -> None:
    runner = RemoteRunner(settings_for(ralph_project.path))
    tree = tmp_path / "trusted-tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "check.txt").write_text("trusted\n")
    try:
        runner.prepare(ralph_project.path)
        runner.agent_channel(AgentChannel(tmp_path / "s", "t", tmp_path / "run", tmp_path / "run" / "state.json",
                                          ralph_project.tasks_path, ("true",)))
        in_project = runner.run_command("pwd; ls ralph", ralph_project.path, 60)
        assert in_project.exit_code == 0 and in_project.where == "remote"
        assert in_project.output.splitlines()[0] == str(ralph_project.path)  # the checkout's path, said as the project's
        assert "tasks.json" in in_project.output
        in_tree = runner.run_command("pwd; cat tests/check.txt", tree, 60)
        assert in_tree.output.splitlines() == [str(tree), "trusted"]
        timed_out = runner.run_command("sleep 30", ralph_project.path, 1)
        assert timed_out.timed_out
    finally:
        runner.cleanup()


def test_paths_are_translated_in_one_pass() -> None:
    """A replacement is never replaced again, and a longer path wins over one it contains."""
    paths = {"/host/checkout": "/home/me/project", "/home/me/project": "/elsewhere", "/host": "/nowhere"}
    request = {"payload": {"cwd": "/host/checkout/src", "tool_input": {"command": "cat /home/me/project/x /host/y"}}, "n": 3}
    assert translate(request, paths) == {"payload": {"cwd": "/home/me/project/src",
                                                     "tool_input": {"command": "cat /elsewhere/x /nowhere/y"}}, "n": 3}
