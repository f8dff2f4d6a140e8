"""The loop's hook channel: a private socket, a per-run token on every request, refusals reported."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from ralph.hooks.client import ask_loop
from ralph.hooks.server import HookServer

CLIENT = Path(__file__).resolve().parent.parent / "ralph" / "hooks" / "client.py"


def test_socket_directory_and_socket_are_private() -> None:
    server = HookServer(lambda request: {}, token="t").start()
    try:
        assert stat.S_IMODE(server.directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(server.path.stat().st_mode) == 0o600
    finally:
        server.stop()
    assert not server.directory.exists()


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
            result = subprocess.run([sys.executable, "-S", "-P", str(CLIENT)], input=payload, capture_output=True,
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
        result = subprocess.run([sys.executable, "-S", "-P", str(CLIENT)], input=payload, capture_output=True,
                                text=True, env=env)
    finally:
        server.stop()
    output = json.loads(result.stdout)["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny" and "validator crashed" in output["permissionDecisionReason"]
