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


def test_a_hook_call_outside_a_loop_loads_the_guards_without_their_config_models(tmp_path: Path) -> None:
    """The config sections' models import pydantic; a hook call reads no config, so it never imports them (the
    guards still answer), and a host built that way still gives every section when asked."""
    probe = (
        "import json, sys\n"
        "from ralph.hooks.answers import handle_without_loop\n"
        "payload = {'hook_event_name': 'PreToolUse', 'tool_name': 'Bash', 'tool_input': {'command': 'git push'},\n"
        "           'session_id': 's', 'cwd': sys.argv[1]}\n"
        "out = handle_without_loop(payload, {'HOME': sys.argv[1], 'CLAUDE_PROJECT_DIR': sys.argv[1]})\n"
        "print(json.dumps([out, 'pydantic' in sys.modules]))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RALPH_STATE_DIR": str(tmp_path / "state"),
           "RALPH_DISABLE_PLUGIN_AUTOLOAD": "1"}
    result = subprocess.run([sys.executable, "-P", "-c", probe, str(tmp_path)], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    out, imported = json.loads(result.stdout)
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny" and "[git-push]" in out["hookSpecificOutput"][
        "permissionDecisionReason"]
    assert imported is False, "a hook call outside a loop imported pydantic"
    lazy = PluginHost(environ={"RALPH_DISABLE_PLUGIN_AUTOLOAD": "1"}, sections=False)
    eager = PluginHost(environ={"RALPH_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert lazy.config_sections() == eager.config_sections() and "claude" in lazy.config_sections()


def test_the_hook_helper_keeps_its_plugins_per_switch_and_loads_a_newly_installed_guard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ralph.hooks.answers import handle_without_loop
    from ralph.hooks.daemon import Hosts

    hosts = Hosts()
    env = {"HOME": str(tmp_path), "CLAUDE_PROJECT_DIR": str(tmp_path)}
    monkeypatch.setenv("RALPH_STATE_DIR", str(tmp_path / "state"))
    first = hosts.get(env)
    assert hosts.get(dict(env)) is first, "the same switches and plugins load the plugins again"
    assert hosts.get({**env, "RALPH_DISABLE_PLUGINS": "dangerous-commands"}) is not first
    payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "make fireworks"},
               "session_id": "s", "cwd": str(tmp_path)}
    assert handle_without_loop(payload, env, hosts.get(env)) == {}
    # a guard plugin installed while the helper runs: a distribution on sys.path with a `ralph` entry point
    site = tmp_path / "site"
    (site / "fireworks_guard-1.0.dist-info").mkdir(parents=True)
    (site / "fireworks_guard-1.0.dist-info" / "entry_points.txt").write_text(
        "[ralph]\nfireworks = fireworks_guard\n")
    (site / "fireworks_guard.py").write_text("raise ImportError('half written')\n")
    monkeypatch.syspath_prepend(str(site))
    broken = hosts.get(env)
    assert broken is not first and [info.name for info in broken.failures] == ["fireworks"]
    assert hosts.get(env) is not broken, "a host with a plugin that failed to load was kept"
    (site / "fireworks_guard.py").write_text(  # the plugin fixed: the next call loads it
        "from ralph.api import Denial, hookimpl\n\n\n"
        "@hookimpl\n"
        "def ralph_pre_tool_use(event):\n"
        "    if 'fireworks' in str(event.tool_input.get('command')):\n"
        "        return [Denial('fireworks', 'no fireworks: light a candle instead')]\n"
        "    return []\n")
    answer_now = handle_without_loop(payload, env, hosts.get(env))
    assert "[fireworks] no fireworks" in answer_now["hookSpecificOutput"]["permissionDecisionReason"]
    assert hosts.get(env) is hosts.get(env)
    sys.modules.pop("fireworks_guard", None)


def test_the_hook_helper_answers_before_it_looks_for_changed_code_and_exits_when_it_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper stats every file of ralph to see whether it changed; it does so after the answer went out,
    and stops when it did."""
    import threading

    from ralph.hooks import daemon
    from ralph.hooks.client import ask_loop

    received = threading.Event()
    order: list[str] = []
    stamps = iter([1.0, 2.0])

    def code_stamp() -> float:
        if order:  # the look after an answer: wait until the caller has it (or give up)
            received.wait(30)
            order.append("looked" + (" after the answer" if received.is_set() else " before the answer"))
        else:
            order.append("started")
        return next(stamps)

    monkeypatch.setattr(daemon, "_code_stamp", code_stamp)
    monkeypatch.setenv("RALPH_STATE_DIR", str(tmp_path / "state"))
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    socket_path = runtime / "helper.sock"
    helper = threading.Thread(target=daemon.serve, args=(socket_path, 600.0), daemon=True)
    helper.start()
    while not socket_path.exists() and helper.is_alive():
        received.wait(0.05)
    payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git push"},
               "session_id": "s", "cwd": str(tmp_path)}
    answer = ask_loop(str(socket_path), {"payload": payload, "env": {"HOME": str(tmp_path),
                                                                    "CLAUDE_PROJECT_DIR": str(tmp_path)}})
    received.set()
    helper.join(60)
    assert answer["output"]["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert order == ["started", "looked after the answer"]
    assert not helper.is_alive(), "the helper kept serving after ralph's code changed"
    assert not socket_path.exists()
