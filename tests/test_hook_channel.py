"""The loop's hook channel: a private socket, a per-run token on every request, refusals reported."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ralph.hooks.client import ask_loop
from ralph.hooks.server import HookServer
from ralph.hooks.wiring import hook_peer

CLIENT = Path(__file__).resolve().parent.parent / "ralph" / "hooks" / "client.py"
LOOP = f"--loop={hook_peer()}"
"""The client's argument naming the process that answers: this one (the tests' servers run here)."""


def test_socket_directory_and_socket_are_private() -> None:
    server = HookServer(lambda request: {}, token="t").start()
    try:
        assert stat.S_IMODE(server.directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(server.path.stat().st_mode) == 0o600
    finally:
        server.stop()
    assert not server.directory.exists()


def test_a_socket_at_a_given_path_appears_only_once_it_listens(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that waits for the path (the hook helper's callers do) must never find a socket that
    is bound but not yet listening: it would be refused, answer in-process and start a second helper."""
    import socketserver

    path = tmp_path / "helper.sock"
    seen_at_listen: list[bool] = []
    activate = socketserver.UnixStreamServer.server_activate

    def listen(self: socketserver.UnixStreamServer) -> None:
        seen_at_listen.append(path.exists())
        activate(self)

    monkeypatch.setattr(socketserver.UnixStreamServer, "server_activate", listen)
    server = HookServer(lambda request: {"systemMessage": "here"}, path=path).start()
    try:
        assert seen_at_listen == [False]
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert ask_loop(str(path), {"payload": {}}) == {"output": {"systemMessage": "here"}}
        assert sorted(entry.name for entry in tmp_path.iterdir()) == ["helper.sock"]  # no staging name left
    finally:
        server.stop()
    assert not path.exists()


def test_a_server_that_loses_the_race_for_a_path_gives_up_and_leaves_the_winner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ralph.hooks import server as server_module

    path = tmp_path / "helper.sock"
    winner = HookServer(lambda request: {"systemMessage": "winner"}, path=path).start()
    try:
        monkeypatch.setattr(server_module, "_remove_stale_socket", lambda _path: None)  # both saw no live socket
        with pytest.raises(OSError, match="already answers"):
            HookServer(lambda request: {"systemMessage": "loser"}, path=path)
        assert ask_loop(str(path), {"payload": {}}) == {"output": {"systemMessage": "winner"}}
        assert sorted(entry.name for entry in tmp_path.iterdir()) == ["helper.sock"]
    finally:
        winner.stop()


def test_requests_without_or_with_a_wrong_token_are_refused_and_reported() -> None:
    seen: list[dict] = []
    reported: list[str] = []

    def respond(request: dict) -> dict:
        seen.append(request)
        return {"systemMessage": "answered"}

    server = HookServer(respond, token="right", on_refused=reported.append).start()
    forged = {"payload": {"hook_event_name": "PostToolUse", "tool_name": "Bash"}}
    try:
        assert "refused" in ask_loop(str(server.path), forged)
        assert "refused" in ask_loop(str(server.path), {**forged, "token": "wrong"})
        assert ask_loop(str(server.path), {**forged, "token": "right"}) == {"output": {"systemMessage": "answered"}}
    finally:
        server.stop()
    assert len(seen) == 1  # the refused requests never reached the loop's answer
    assert len(reported) == 2 and "no run token on a PostToolUse request" in reported[0]
    assert "wrong run token" in reported[1]


def test_client_sends_the_token_and_fails_closed_on_refusal(tmp_path: Path) -> None:
    server = HookServer(lambda request: {"systemMessage": "ok"}, token="right").start()
    payload = json.dumps({"hook_event_name": "Stop", "stop_hook_active": False})
    try:
        outputs = []
        for token in ("right", "wrong"):
            env = {"RALPH_HOOK_SOCKET": str(server.path), "RALPH_HOOK_TOKEN": token, "PATH": "/usr/bin:/bin"}
            result = subprocess.run([sys.executable, "-S", "-P", str(CLIENT), LOOP], input=payload, capture_output=True,
                                    text=True, env=env)
            outputs.append(json.loads(result.stdout))
    finally:
        server.stop()
    assert outputs[0] == {"systemMessage": "ok"}
    assert outputs[1]["decision"] == "block" and "refused" in outputs[1]["reason"]


def test_loop_errors_fail_closed_too() -> None:
    def broken(request: dict) -> dict:
        raise RuntimeError("validator crashed")

    server = HookServer(broken, token="t").start()
    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}})
    try:
        env = {"RALPH_HOOK_SOCKET": str(server.path), "RALPH_HOOK_TOKEN": "t", "PATH": "/usr/bin:/bin"}
        result = subprocess.run([sys.executable, "-S", "-P", str(CLIENT), LOOP], input=payload, capture_output=True,
                                text=True, env=env)
    finally:
        server.stop()
    output = json.loads(result.stdout)["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny" and "validator crashed" in output["permissionDecisionReason"]


@pytest.mark.parametrize("kind", ["server", "relay"])
def test_an_answer_to_a_caller_that_is_gone_is_dropped_quietly(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The loop stops the agent (say, a guard raised) while its hook client waits for the answer:
    writing the answer meets a closed socket, which is no error worth a traceback on the console."""
    arrived, release, answered = threading.Event(), threading.Event(), threading.Event()

    def respond(request: dict) -> dict:
        arrived.set()
        release.wait(30)
        threading.Timer(0.5, answered.set).start()  # the handler writes right after this returns
        return {"output": {"systemMessage": "too late"}} if kind == "relay" else {"systemMessage": "too late"}

    from ralph.hooks.relay import HookRelay

    channel = HookServer(respond, token="t").start() if kind == "server" else HookRelay(respond).start()
    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}})
    env = {"RALPH_HOOK_SOCKET": str(channel.path), "RALPH_HOOK_TOKEN": "t", "PATH": "/usr/bin:/bin"}
    client = subprocess.Popen([sys.executable, "-S", "-P", str(CLIENT), LOOP], stdin=subprocess.PIPE, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        assert client.stdin is not None
        client.stdin.write(payload)
        client.stdin.close()
        assert arrived.wait(30)
        client.kill()
        client.wait(30)
        release.set()
        assert answered.wait(30)
        handlers = [t for t in threading.enumerate() if "process_request" in t.name]
        for thread in handlers:
            thread.join(30)
    finally:
        release.set()
        channel.stop()
    assert "Traceback" not in capsys.readouterr().err


def _client_module(block_json_accelerator: bool) -> dict:
    """The client's namespace, loaded as a plain file (as the hook process does), optionally where
    ``import _json`` fails."""
    import runpy

    saved = sys.modules.get("_json")
    if block_json_accelerator:
        sys.modules["_json"] = None  # type: ignore[assignment]  # makes `import _json` raise ImportError
    try:
        return runpy.run_path(str(CLIENT), run_name="ralph_hook_client_under_test")
    finally:
        if block_json_accelerator:
            if saved is None:
                sys.modules.pop("_json", None)
            else:
                sys.modules["_json"] = saved


@pytest.mark.parametrize("accelerated", [True, False])
def test_the_clients_json_reads_and_writes_what_json_does(accelerated: bool) -> None:
    client = _client_module(block_json_accelerator=not accelerated)
    dumps, loads = client["dumps"], client["loads"]
    assert (dumps is json.dumps) is (not accelerated)
    values = [
        {},
        {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                "permissionDecisionReason": "[git-push] no\n\"quoted\" \\ tab\t é ✓ \U0001f600 \x00\x1f"}},
        {"a": [1, -2, 3.5, 1e300, True, False, None, [], [[{}]]], "": "", "nested": {"k": {"k": ["v"]}}},
        {"command": "cat > f <<'EOF'\nx = $(date)\nEOF\n" * 40},
    ]
    for value in values:
        assert dumps(value) == json.dumps(value)
        assert loads(json.dumps(value)) == value
        assert loads(" \n\t" + json.dumps(value, indent=2) + "\r\n") == value
    for text in ['{"a": NaN, "b": -Infinity}', '"\\ud83d\\ude00 \\u00e9"', "[1, 2.0, -0]", "123", "null"]:
        assert repr(loads(text)) == repr(json.loads(text))
    for bad in ["", "   ", "{", '{"a": 1} x', '{"a": 1}{}', "{'a': 1}", '{"a": "\x01"}', '[1,]', "\ufeff{}"]:
        with pytest.raises(ValueError):
            loads(bad)
    with pytest.raises(TypeError):
        dumps({"a": object()})


def test_in_a_loop_the_client_imports_neither_json_nor_socket_nor_os(tmp_path: Path) -> None:
    """The hook process starts for every tool call: in a loop it loads only the C parts it needs."""
    server = HookServer(lambda request: {"systemMessage": request["payload"]["tool_input"]["command"]},
                        token="t").start()
    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls é"}})
    try:
        env = {"RALPH_HOOK_SOCKET": str(server.path), "RALPH_HOOK_TOKEN": "t", "PATH": "/usr/bin:/bin"}
        result = subprocess.run([sys.executable, "-X", "importtime", "-S", "-P", str(CLIENT), LOOP], input=payload,
                                capture_output=True, text=True, env=env)
    finally:
        server.stop()
    assert json.loads(result.stdout) == {"systemMessage": "ls é"}
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "_json" in imported and "_socket" in imported  # the parser did see the imports
    assert not imported & {"json", "json.decoder", "re", "enum", "socket", "selectors", "os", "site"}, sorted(imported)


def test_the_compiled_client_answers_as_the_source_does(tmp_path: Path) -> None:
    import shlex

    from ralph.hooks.wiring import compiled_hook_command, hook_command

    command = compiled_hook_command(tmp_path)
    assert (tmp_path / "hook_client.pyc").is_file()
    assert shlex.split(command) == [sys.executable, "-I", "-S", str(tmp_path / "hook_client.pyc")]
    server = HookServer(lambda request: {"systemMessage": "answered"}, token="right").start()
    payload = json.dumps({"hook_event_name": "Stop", "stop_hook_active": False})
    try:
        outputs = []
        for token in ("right", "wrong"):
            env = {"RALPH_HOOK_SOCKET": str(server.path), "RALPH_HOOK_TOKEN": token, "PATH": "/usr/bin:/bin"}
            result = subprocess.run([*shlex.split(command), LOOP], input=payload, capture_output=True, text=True,
                                    env=env)
            outputs.append(json.loads(result.stdout))
    finally:
        server.stop()
    assert outputs[0] == {"systemMessage": "answered"}
    assert outputs[1]["decision"] == "block" and "refused" in outputs[1]["reason"]
    # where the run directory cannot take it: the source, as before
    (tmp_path / "a-file").write_text("")
    assert compiled_hook_command(tmp_path / "a-file" / "dir") == hook_command()


def test_in_a_loop_the_client_exits_without_the_interpreters_teardown_its_output_and_status_intact(
        tmp_path: Path) -> None:
    """Only the client ran: it ends with ``posix._exit`` once its output is flushed (``-v`` shows the teardown's
    ``# cleanup`` lines when it runs); its answer, a block and exit 2 come out as before."""
    server = HookServer(lambda request: {"systemMessage": request["payload"]["tool_input"]["command"]},
                        token="t").start()
    env = {"RALPH_HOOK_SOCKET": str(server.path), "RALPH_HOOK_TOKEN": "t", "PATH": "/usr/bin:/bin"}

    def run(text: str, environ: dict[str, str] = env) -> subprocess.CompletedProcess[str]:
        loop = [LOOP] if "RALPH_HOOK_SOCKET" in environ else []
        return subprocess.run([sys.executable, "-v", "-I", "-S", str(CLIENT), *loop], input=text,
                              capture_output=True, text=True, env=environ)

    try:
        answered = run(json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                                   "tool_input": {"command": "ls é"}}))
        refused = run(json.dumps({"hook_event_name": "Stop"}), {**env, "RALPH_HOOK_TOKEN": "wrong"})
        unreadable = run("[1, 2]")
    finally:
        server.stop()
    assert answered.returncode == 0 and json.loads(answered.stdout) == {"systemMessage": "ls é"}
    assert refused.returncode == 0 and json.loads(refused.stdout)["decision"] == "block"
    assert "refused" in refused.stderr
    assert unreadable.returncode == 2 and unreadable.stdout == ""
    assert "ralph hook: the hook input is not a JSON object" in unreadable.stderr
    for result in (answered, refused, unreadable):
        assert "# cleanup" not in result.stderr
    # outside a loop ralph and its plugins ran in the process: their exit handlers run, as always
    alone = run(json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                            "cwd": str(tmp_path)}),
                {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RALPH_HOOK_DAEMON": "0",
                 "RALPH_STATE_DIR": str(tmp_path / "state"), "CLAUDE_PROJECT_DIR": str(tmp_path)})
    assert alone.returncode == 0 and json.loads(alone.stdout) == {}
    assert "# cleanup" in alone.stderr
