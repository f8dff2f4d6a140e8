"""The hook answer logic: output formats the CLI honours, the Stop block limit, fail-open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ralph.contracts import Violation
from ralph.hooks.answers import STOP_BLOCK_LIMIT, HookContext, answer
from ralph.plugin.manager import PluginHost
from ralph.hooks.sessionstore import MemorySession


def context(tmp_path: Path, violations: list[Violation] | None) -> HookContext:
    checks = None if violations is None else (lambda: list(violations))
    return HookContext(PluginHost(environ={}), tmp_path, MemorySession(), tmp_path, None, checks)


def test_stop_blocks_with_the_checks_then_lets_the_loop_have_the_last_word(tmp_path: Path) -> None:
    ctx = context(tmp_path, [Violation("git-clean", "There are uncommitted changes: x.txt")])
    first = answer({"hook_event_name": "Stop", "stop_hook_active": False}, ctx, {})
    assert first["decision"] == "block" and "[git-clean] There are uncommitted changes: x.txt" in first["reason"]
    outputs = [answer({"hook_event_name": "Stop", "stop_hook_active": True}, ctx, {}) for _ in range(STOP_BLOCK_LIMIT)]
    assert [o.get("decision") for o in outputs] == ["block"] * (STOP_BLOCK_LIMIT - 1) + [None]
    assert "the loop will validate" in outputs[-1]["systemMessage"]


def test_stop_without_checks_or_violations_allows(tmp_path: Path) -> None:
    assert answer({"hook_event_name": "Stop"}, context(tmp_path, None), {}) == {}
    assert answer({"hook_event_name": "Stop"}, context(tmp_path, []), {}) == {}


def test_pretooluse_denial_format(tmp_path: Path) -> None:
    payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git push"},
               "session_id": "s", "cwd": str(tmp_path)}
    output = answer(payload, context(tmp_path, None), {})
    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse" and specific["permissionDecision"] == "deny"
    assert "[git-push]" in specific["permissionDecisionReason"]


def test_client_fails_closed_when_the_loop_is_gone(tmp_path: Path) -> None:
    client = Path(__file__).resolve().parent.parent / "ralph" / "hooks" / "client.py"
    env = {"RALPH_HOOK_SOCKET": str(tmp_path / "no-such.sock"), "RALPH_HOOK_TOKEN": "t", "PATH": "/usr/bin:/bin"}
    outputs = {}
    for event in ("PreToolUse", "Stop", "PostToolUse"):
        result = subprocess.run(
            [sys.executable, "-S", "-P", str(client)],
            input=json.dumps({"hook_event_name": event, "tool_name": "Bash", "tool_input": {"command": "ls"}}),
            capture_output=True, text=True, env=env,
        )
        assert result.returncode == 0
        outputs[event] = json.loads(result.stdout)
    pre = outputs["PreToolUse"]["hookSpecificOutput"]
    assert pre["permissionDecision"] == "deny" and "loop" in pre["permissionDecisionReason"]
    assert "gone" in pre["permissionDecisionReason"]
    assert outputs["Stop"]["decision"] == "block" and "gone" in outputs["Stop"]["reason"]
    assert outputs["PostToolUse"] == {}


def test_client_is_fail_open_outside_a_loop(tmp_path: Path) -> None:
    client = Path(__file__).resolve().parent.parent / "ralph" / "hooks" / "client.py"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RALPH_HOOK_DAEMON": "0",
           "RALPH_STATE_DIR": "/dev/null/not-a-directory", "CLAUDE_PROJECT_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-S", "-P", str(client)],
        input=json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                          "session_id": "s", "cwd": str(tmp_path)}),
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0
    assert json.loads(result.stdout) == {}
    assert "action allowed" in result.stderr


def test_client_answers_in_process_without_a_loop(tmp_path: Path) -> None:
    client = Path(__file__).resolve().parent.parent / "ralph" / "hooks" / "client.py"
    payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git push --force"},
               "session_id": "s", "cwd": str(tmp_path)}
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RALPH_STATE_DIR": str(tmp_path / "state"),
           "CLAUDE_PROJECT_DIR": str(tmp_path), "RALPH_HOOK_DAEMON": "0"}
    result = subprocess.run([sys.executable, "-S", "-P", str(client)], input=json.dumps(payload),
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


@pytest.mark.real_claude
def test_exported_bundle_passes_claude_plugin_validate(tmp_path: Path, claude_binary: Path) -> None:
    from ralph.hooks.bundle import export_bundle

    export_bundle(tmp_path / "bundle")
    for target in (tmp_path / "bundle" / "ralph", tmp_path / "bundle"):
        result = subprocess.run([str(claude_binary), "plugin", "validate", "."], cwd=target, capture_output=True,
                                text=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Validation passed" in result.stdout


def test_outside_a_loop_the_hook_helper_answers_later_calls_and_exits_when_idle(tmp_path: Path) -> None:
    import time

    client = Path(__file__).resolve().parent.parent / "ralph" / "hooks" / "client.py"
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RALPH_STATE_DIR": str(tmp_path / "state"),
           "CLAUDE_PROJECT_DIR": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime), "RALPH_HOOK_DAEMON_IDLE": "3"}
    push = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git push"},
            "session_id": "s", "cwd": str(tmp_path)}

    def call(payload: dict) -> dict:
        result = subprocess.run([sys.executable, "-S", "-P", str(client)], input=json.dumps(payload),
                                capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    first = call(push)  # in-process; starts the helper
    sockets = list((runtime / f"ralph-hooks-{os.getuid()}").glob("*.sock"))
    deadline = time.monotonic() + 20
    while not sockets and time.monotonic() < deadline:
        time.sleep(0.1)
        sockets = list((runtime / f"ralph-hooks-{os.getuid()}").glob("*.sock"))
    assert len(sockets) == 1, "the hook helper did not start"
    second = call(push)  # answered by the helper
    assert first == second and second["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert call({**push, "tool_input": {"command": "git status"}}) == {}
    deadline = time.monotonic() + 20
    while sockets[0].exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sockets[0].exists(), "the idle helper did not exit"
