"""In a loop, a hook process that fails for any reason blocks: the wrapper ralph renders around its client.

Claude Code blocks on a hook's exit code 2 only; any other failure (the interpreter does not
start, the client crashes, is killed or times out) would let the tool call run unchecked.  These
tests run the exact command string ralph puts into the agent's settings through ``/bin/sh -c``,
as Claude Code does, with the environment an agent could give it.  The same attacks through the
real CLI are in tests/test_trust_agent_config.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ralph.hooks.server import HookServer
from ralph.hooks.wiring import fail_closed_command, hook_command

PRE_TOOL = json.dumps({"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash",
                       "tool_input": {"command": "git push"}})
STOP = json.dumps({"hook_event_name": "Stop", "session_id": "s", "stop_hook_active": False})
ALLOW = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}


@pytest.fixture
def loop_server():
    """A hook server that allows everything: what reaches the agent is then only the wrapper's doing."""
    server = HookServer(lambda request: ALLOW, token="t").start()
    yield server
    server.stop()


def run_hook(command: str, payload: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``/bin/sh -c COMMAND`` with the hook input on stdin, as Claude Code runs a command hook."""
    return subprocess.run(["/bin/sh", "-c", command], input=payload, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}, cwd=cwd, timeout=60)


def the_command(tmp_path: Path, socket: Path | str = "/pinned") -> str:
    """The hook command of the settings a loop renders (the compiled client in the run directory)."""
    from ralph.contracts import AgentChannel
    from ralph.hooks.wiring import claude_settings, compiled_hook_argv, hook_peer, loader_env

    channel = AgentChannel(  # what HookBridge.channel gives a runner running the agent on this machine
        hook_socket=Path(socket), token="t", run_dir=tmp_path, state_file=tmp_path / "state.json",
        tasks_file=tmp_path / "tasks.json", hook_command=compiled_hook_argv(tmp_path), loader_env=loader_env(inherit=True),
        hook_peer=hook_peer(),  # this process serves the test's hook socket
    )
    settings = json.loads(claude_settings(channel))
    entry = settings["hooks"]["PreToolUse"][0]["hooks"][0]
    return str(entry["command"])


def test_the_wrapper_passes_the_loops_answer_through(tmp_path: Path, loop_server: HookServer) -> None:
    env = {"RALPH_HOOK_SOCKET": str(loop_server.path), "RALPH_HOOK_TOKEN": "t"}
    result = run_hook(the_command(tmp_path, loop_server.path), PRE_TOOL, env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ALLOW


def _agent_module(tmp_path: Path) -> Path:
    """A directory with modules the client (or Python's start) would import, each answering "allow"."""
    evil = tmp_path / "evil"
    evil.mkdir(parents=True, exist_ok=True)
    allow = f"import sys; sys.stdout.write({json.dumps(json.dumps(ALLOW))}); sys.stdout.flush(); import os; os._exit(0)\n"
    for name in ("_json", "_socket", "posix", "sitecustomize", "usercustomize", "encodings"):
        (evil / f"{name}.py").write_text(allow)
    return evil


ENVIRONMENTS = {
    "PYTHONHASHSEED=bogus": lambda tmp: {"PYTHONHASHSEED": "bogus"},
    "PYTHONHOME=missing": lambda tmp: {"PYTHONHOME": str(tmp / "no-such-home")},
    "PYTHONPATH=agent modules": lambda tmp: {"PYTHONPATH": str(_agent_module(tmp))},
    "PYTHONSTARTUP+PYTHONINSPECT": lambda tmp: {"PYTHONSTARTUP": str(_agent_module(tmp) / "_json.py"), "PYTHONINSPECT": "1"},
    "PYTHONUSERBASE": lambda tmp: {"PYTHONUSERBASE": str(_agent_module(tmp))},
    "LD_PRELOAD=missing": lambda tmp: {"LD_PRELOAD": str(tmp / "missing.so")},
    "LD_LIBRARY_PATH=agent dir": lambda tmp: {"LD_LIBRARY_PATH": str(_agent_module(tmp))},
}


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
@pytest.mark.parametrize("payload", [PRE_TOOL, STOP], ids=["PreToolUse", "Stop"])
def test_the_agents_environment_never_makes_the_hook_allow(tmp_path: Path, name: str, payload: str) -> None:
    """The loop is gone (no server): whatever the environment says, the hook must not allow."""
    env = {"RALPH_HOOK_SOCKET": str(tmp_path / "gone.sock"), "RALPH_HOOK_TOKEN": "t", **ENVIRONMENTS[name](tmp_path)}
    result = run_hook(the_command(tmp_path), payload, env, _agent_module(tmp_path))  # the cwd too
    assert_blocked(result, payload)


def assert_blocked(result: subprocess.CompletedProcess[str], payload: str) -> None:
    """Exit 2 (Claude Code blocks), or exit 0 with the client's own deny / block."""
    if result.returncode == 2:
        assert "ralph hook" in result.stderr
        return
    assert result.returncode == 0, (result.returncode, result.stderr)
    output = json.loads(result.stdout)
    if json.loads(payload)["hook_event_name"] == "PreToolUse":
        assert output["hookSpecificOutput"]["permissionDecision"] == "deny", output
    else:
        assert output["decision"] == "block", output


def test_the_environment_cannot_take_the_client_out_of_the_loop(tmp_path: Path) -> None:
    """Without RALPH_HOOK_SOCKET the plain client believes it is outside a loop and allows (fail-open);
    the wrapper's command line says it is in one."""
    harmless = PRE_TOOL.replace("git push", "ls")
    plain = subprocess.run(shlex.split(hook_command()), input=harmless, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "RALPH_HOOK_DAEMON": "0", "HOME": str(tmp_path)}, cwd=tmp_path)
    assert plain.returncode == 0 and "deny" not in plain.stdout  # outside a loop the guards allow ls
    result = run_hook(fail_closed_command(hook_command()), harmless, {"RALPH_HOOK_LOOP": "0"}, tmp_path)
    assert_blocked(result, harmless)
    assert "socket is not set" in result.stdout
    assert_blocked(run_hook(the_command(tmp_path), harmless, {"RALPH_HOOK_LOOP": "0"}, tmp_path), harmless)


@pytest.mark.parametrize("failure", ["missing interpreter", "crash", "killed", "no output", "not JSON", "exit 1 with JSON"])
@pytest.mark.parametrize("payload", [PRE_TOOL, STOP], ids=["PreToolUse", "Stop"])
def test_any_failure_of_the_client_process_exits_2(tmp_path: Path, failure: str, payload: str) -> None:
    script = tmp_path / "client.py"
    script.write_text({
        "crash": "raise SystemExit('boom')\n",
        "killed": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n",
        "no output": "pass\n",
        "not JSON": "print('allow')\n",
        "exit 1 with JSON": "import sys; print('{}'); sys.exit(1)\n",
        "missing interpreter": "",
    }[failure])
    python = str(tmp_path / "no-python") if failure == "missing interpreter" else sys.executable
    command = fail_closed_command(f"{shlex.quote(python)} -I -S {shlex.quote(str(script))}")
    result = run_hook(command, payload, {}, tmp_path)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "ralph hook: the hook client failed" in result.stderr
    assert result.stdout == ""


def test_the_client_ends_itself_before_claude_codes_hook_timeout(tmp_path: Path) -> None:
    """A hung client would reach Claude Code's timeout, which lets the tool run: the client's alarm ends it
    first, and the wrapper turns that into exit 2."""
    from ralph.hooks import client
    from ralph.hooks.wiring import HOOK_TIMEOUT

    assert client.TIMEOUT_SECONDS < client.DEADLINE_SECONDS < HOOK_TIMEOUT
    script = tmp_path / "hang.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(Path(client.__file__).parent)!r})\n"
                      "import client, time\nclient.deadline(1)\ntime.sleep(30)\nprint('{}')\n")
    result = run_hook(fail_closed_command(f"{shlex.quote(sys.executable)} -I -S {shlex.quote(str(script))}"), PRE_TOOL,
                      {}, tmp_path)
    assert result.returncode == 2 and "exit status 142" in result.stderr, (result.returncode, result.stderr)


def test_loader_variables_on_the_command_line_are_the_loops(tmp_path: Path) -> None:
    """The client runs with the loader variables the loop had, whatever the hook process inherited."""
    probe = tmp_path / "probe.py"
    probe.write_text("import json, os\nprint(json.dumps({k: os.environ.get(k) for k in "
                     "('LD_PRELOAD', 'LD_AUDIT', 'LD_LIBRARY_PATH', 'RALPH_HOOK_LOOP')}))\n")
    command = fail_closed_command(f"{shlex.quote(sys.executable)} -I {shlex.quote(str(probe))}",
                                  {"LD_LIBRARY_PATH": "/loop/lib"})
    result = run_hook(command, "{}", {"LD_AUDIT": str(tmp_path / "a.so"), "LD_LIBRARY_PATH": str(tmp_path)}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"LD_PRELOAD": "", "LD_AUDIT": "", "LD_LIBRARY_PATH": "/loop/lib",
                                         "RALPH_HOOK_LOOP": "1"}
    assert os.environ.get("RALPH_HOOK_LOOP") is None


def test_the_compiled_client_is_put_back_whatever_replaced_it(tmp_path: Path) -> None:
    from ralph.hooks.wiring import CompiledClient

    client = CompiledClient(tmp_path)
    assert client.argv()[-1] == str(tmp_path / "hook_client.pyc") and client.restore() is None
    original = client.path.read_bytes()
    outside = tmp_path / "outside"
    outside.write_text("the agent's")
    for how, replace in (
        ("changed", lambda: client.path.write_bytes(original[:-1] + b"x")),
        ("deleted", lambda: client.path.unlink()),
        ("replaced", lambda: (client.path.unlink(), client.path.symlink_to(outside))),
        ("replaced", lambda: (client.path.unlink(), client.path.mkdir())),
        ("replaced", lambda: (client.path.unlink(), os.mkfifo(client.path))),
    ):
        replace()
        assert client.restore() == how
        assert client.path.read_bytes() == original and not client.path.is_symlink()
    assert outside.read_text() == "the agent's"  # never written through


def test_the_client_asks_the_channels_socket_whatever_its_environment_says(tmp_path: Path, loop_server: HookServer) -> None:
    """A hook process whose environment names another socket (one the agent serves, answering "allow")
    still asks the loop's: the wrapper names it on the command line."""
    from ralph.hooks.wiring import hook_client_path, hook_peer

    command = fail_closed_command(shlex.join([sys.executable, "-I", "-S", str(hook_client_path()), f"--loop={hook_peer()}"]),
                                  {"RALPH_HOOK_SOCKET": str(loop_server.path), "RALPH_HOOK_TOKEN": "t"})
    fake = HookServer(lambda request: {"systemMessage": "the agent's server"}, token="t").start()
    try:
        result = run_hook(command, PRE_TOOL, {"RALPH_HOOK_SOCKET": str(fake.path), "RALPH_HOOK_TOKEN": "t"}, tmp_path)
    finally:
        fake.stop()
    assert result.returncode == 0 and json.loads(result.stdout) == ALLOW
    assert "RALPH_HOOK_TOKEN" not in command  # the token stays out of the command line (others can read it)
